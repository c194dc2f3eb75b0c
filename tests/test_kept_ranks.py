"""The rank table sorted once and kept beside the bytecode (app/context/kept_ranks.py).

Merging a new piece over it must give the rank table's own ranks (and so the encoder's counts);
a second process reads it instead of sorting or building the dict; and a kept file that is not
the one this table and this machine would write is never believed: it is sorted again and
replaced. Each test keeps its file under its own ``sys.pycache_prefix``, never the checkout's.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.context import kept_ranks, tokens
from app.context.kept_ranks import SortedRanks
from app.context.tokens import PieceCounts, encoder


@pytest.fixture(scope="module")
def sorted_table() -> SortedRanks:
    words = tokens.cl100k_table()
    assert words is not None, "the bundled table was not found or its hash differs"
    return kept_ranks.sort_ranks(words)


@pytest.fixture(scope="module")
def ranks_by_token() -> dict[bytes, int]:
    words = tokens.cl100k_table()
    assert words is not None
    return {base64.b64decode(token): rank for rank, token in enumerate(words[::2])}


@pytest.fixture
def kept_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sorted_table: SortedRanks) -> Iterator[list[int]]:
    """The kept file under this test's folder, bytecode written; yields how often the table was sorted
    (the module's sorted table stands in for a sort: the same table, without its cost each time)."""
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pycache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    sorts: list[int] = []

    def sort(words: list[bytes]) -> SortedRanks:
        sorts.append(len(words))
        return sorted_table

    monkeypatch.setattr(kept_ranks, "sort_ranks", sort)
    yield sorts
    tokens.use_rank_loader(None)


def test_every_token_has_its_rank_and_nothing_else_has_one(sorted_table: SortedRanks,
                                                            ranks_by_token: dict[bytes, int]) -> None:
    assert len(ranks_by_token) == 100_256
    # every tenth token (all of them take a second), and the first and last in the sorted order
    checked = [*list(ranks_by_token)[::10], min(ranks_by_token), max(ranks_by_token)]
    assert all(sorted_table(token) == ranks_by_token[token] for token in checked)
    # before the first token, after the last, between two, and a token with a byte more
    for not_a_token in (b"", b"\xff" * 200, b"hello wor" + b"\x00", max(ranks_by_token) + b"\x00"):
        assert not_a_token not in ranks_by_token and sorted_table(not_a_token) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=12))
def test_any_bytes_rank_as_in_the_table(sorted_table: SortedRanks, ranks_by_token: dict[bytes, int],
                                        data: bytes) -> None:
    for end in range(1, len(data) + 1):
        assert sorted_table(data[:end]) == ranks_by_token.get(data[:end])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([chr(i) for i in range(32, 127)] + [" ", "\n", "'s", "123", "the", "ing", "://",
                                                                    "/tmp/pytest-of-root/", "__init__"]),
                min_size=1, max_size=40).map("".join))
def test_merging_over_the_sorted_table_counts_as_the_encoder_does(sorted_table: SortedRanks, text: str) -> None:
    for piece in tokens._ascii_split()(text):
        assert tokens._bpe_count(piece.encode("ascii"), sorted_table) == len(encoder().encode_ordinary(piece)), piece


def test_a_second_load_reads_the_kept_table_and_sorts_nothing(kept_here: list[int],
                                                               ranks_by_token: dict[bytes, int]) -> None:
    first = kept_ranks.load()
    assert kept_here == [200_512] and Path(kept_ranks.cache_path()).is_file()
    second = kept_ranks.load()
    assert kept_here == [200_512], "sorted again though the kept table was there"
    assert isinstance(second, SortedRanks) and second is not first
    assert all(second(token) == rank for token, rank in list(ranks_by_token.items())[::97])


def test_a_process_merging_over_the_kept_table_builds_no_dict_and_counts_the_same(kept_here: list[int]) -> None:
    text = "an entirely new sentence about /tmp/pytest-of-root/popen-gw1/test_zqxjv0/work"
    kept_ranks.load()  # kept by an earlier process
    tokens._ranks_by_base64.cache_clear()
    kept_ranks.merge_over_kept_ranks()
    assert PieceCounts().count_new(text) == len(encoder().encode(text))
    assert tokens._ranks_by_base64.cache_info().currsize == 0 and kept_here == [200_512]


def _tampered(body: bytes) -> bytes:
    """The body with one byte of its blob changed and its digest left as it was."""
    return body[:-1] + bytes([body[-1] ^ 1])


def _consistent_but_wrong(body: bytes) -> bytes:
    """A body whose digest matches what follows it, with offsets that do not fit its blob."""
    payload = body[32:] + b"extra"
    return hashlib.sha256(payload).digest() + payload


@pytest.mark.parametrize("spoil", [
    pytest.param(lambda header, body: b"tidegauge sorted cl100k ranks 1 another table\n" + body, id="another-table"),
    pytest.param(lambda header, body: header + body[: len(body) // 2], id="cut-short"),
    pytest.param(lambda header, body: header + _tampered(body), id="changed-under-its-digest"),
    pytest.param(lambda header, body: header + _consistent_but_wrong(body), id="offsets-past-its-tokens"),
    pytest.param(lambda header, body: header + b"\x00" * 40, id="no-table"),
    pytest.param(lambda header, body: header + body + b"\x00" * kept_ranks.MAX_BYTES, id="oversized"),
])
def test_a_kept_file_that_is_not_what_we_wrote_is_sorted_again_and_replaced(
        kept_here: list[int], ranks_by_token: dict[bytes, int],
        spoil: Callable[[bytes, bytes], bytes]) -> None:
    kept_ranks.load()
    path = Path(kept_ranks.cache_path())
    good = path.read_bytes()
    header = good[: good.index(b"\n") + 1]
    path.write_bytes(spoil(header, good[len(header):]))

    table = kept_ranks.load()

    assert kept_here == [200_512, 200_512], "a spoilt file was believed"
    assert table is not None and all(table(token) == rank for token, rank in list(ranks_by_token.items())[::89])
    assert path.read_bytes() == good


def test_nothing_is_kept_or_sorted_where_python_writes_no_bytecode(kept_here: list[int],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert kept_ranks.load() is None
    assert kept_here == [] and not Path(kept_ranks.cache_path()).exists()
    kept_ranks.merge_over_kept_ranks()  # the dict, as before
    assert PieceCounts().count_new("fresh words here") == len(encoder().encode("fresh words here"))


def test_a_bundled_table_that_is_not_the_one_we_know_is_not_merged_over(kept_here: list[int],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    kept_ranks.load()  # a good table kept for the table we know
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    assert kept_ranks.load() is None and kept_here == [200_512]
    tokens._ranks_by_base64.cache_clear()
    kept_ranks.merge_over_kept_ranks()
    try:
        assert PieceCounts().count_new("hello world") is None  # the encoder's loader and its checks count
    finally:
        tokens._ranks_by_base64.cache_clear()

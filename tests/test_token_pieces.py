"""Counting ASCII text from pieces counted in earlier runs (app.context.token_pieces.remember_pieces_in).

Loading the cl100k encoder is most of what a one-turn headless run spends on counting. cl100k
splits a text with its pattern and encodes each piece alone, so a text whose pieces were all
counted before is counted from them: the same figure, without the encoder. These tests hold
the split equal to tiktoken's, the figures equal to the encoder's, and the kept file to what
we wrote.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import regex  # type: ignore[import-untyped]  # tiktoken's own dependency; the oracle for the split
from fake_llm_server import openai_text
from hypothesis import given, settings
from hypothesis import strategies as st

from app.context import token_pieces, tokens
from app.context.tokens import CL100K_PATTERN, CL100K_SHA256, count_tokens, encoder

# Every ASCII character, with the pattern's interesting runs (contractions, CRLF, digits) more often.
ASCII = st.lists(st.sampled_from([chr(i) for i in range(128)] + [" ", "  ", "'s", "'LL", "\r\n", "42", "ab"]),
                 max_size=40).map("".join)
SPLIT = regex.compile(CL100K_PATTERN)


@pytest.fixture
def pieces(tmp_path: Path):
    path = tmp_path / "token-pieces.json"
    token_pieces.remember_pieces_in(path)
    yield path
    token_pieces.remember_pieces_in(None)


@settings(max_examples=400, deadline=None)
@given(ASCII)
def test_ascii_text_is_split_as_tiktoken_splits_it(text: str) -> None:
    assert tokens._ascii_split()(text) == SPLIT.findall(text)


@settings(max_examples=200, deadline=None)
@given(learnt=ASCII, counted=ASCII)
def test_a_text_counted_from_known_pieces_has_the_encoders_count(learnt: str, counted: str) -> None:
    table = tokens.PieceCounts()
    table.learn(learnt)
    table.learn(counted)
    assert table.count(counted) == len(encoder().encode(counted, disallowed_special=()))
    # any other text: the table gives the encoder's figure, or none (a piece it never counted)
    for other in (learnt + counted, counted + " zqxjvkw"):
        figure = table.count(other)
        assert figure is None or figure == len(encoder().encode(other, disallowed_special=()))
    assert table.count("zqxjvkw") is None


SECOND_RUN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from app.context import token_pieces, tokens
    token_pieces.remember_pieces_in(Path(sys.argv[1]))
    texts = json.loads(sys.argv[2])
    counts = [tokens.count_tokens(t) for t in texts]
    print(json.dumps({"encoder_loaded": "tiktoken" in sys.modules, "counts": counts}))
""")


def _run(path: Path, texts: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", SECOND_RUN, str(path), json.dumps(texts)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_ascii_text_is_counted_without_the_encoder_in_a_first_run_and_kept_for_the_next(tmp_path: Path) -> None:
    path = tmp_path / "token-pieces.json"
    texts = ["You are tidegauge, a coding agent.\n  Work in /home/ann/project.", "hi", "Don't stop: 1234567 items!!\n"]
    first = _run(path, texts)  # new pieces merged over the rank table, learnt, saved when it exits
    assert not first["encoder_loaded"] and path.exists() and oct(path.stat().st_mode & 0o777) == "0o600"
    assert json.loads(path.read_text())["pieces"][" tidegauge"] == len(encoder().encode(" tidegauge"))
    second = _run(path, texts)
    assert not second["encoder_loaded"]
    exact = [len(encoder().encode(t, disallowed_special=())) for t in texts]
    assert first["counts"] == second["counts"] == exact
    third = _run(path, texts + ["hi zqxjvkw"])  # one new piece: merged too
    assert not third["encoder_loaded"] and third["counts"][-1] == len(encoder().encode("hi zqxjvkw"))
    assert " zqxjvkw" in json.loads(path.read_text())["pieces"]  # and it is known from then on


def _run_in_this_process(path: Path, texts: list[str]) -> dict[str, Any]:
    """What ``_run`` reports, from a run's start made here: the encoder unloaded (a new process has
    none), the pieces in ``path``. Whether the encoder loads is decided by whether it is loaded
    (``_count_tokens``), not by the interpreter; the save at a process's exit still needs ``_run``."""
    before = tokens.use_pieces(None)
    tokens.encoder.cache_clear()
    try:
        token_pieces.remember_pieces_in(path)
        counts = [count_tokens(text) for text in texts]
        return {"encoder_loaded": tokens.encoder.cache_info().currsize != 0, "counts": counts}
    finally:
        token_pieces.remember_pieces_in(None)
        tokens.use_pieces(before)


def test_text_that_is_not_ascii_or_has_a_long_piece_is_counted_by_the_encoder(tmp_path: Path) -> None:
    path = tmp_path / "token-pieces.json"
    texts = ["caf\u00e9 au lait", "x" * (tokens.MERGE_MAX_CHARS + 1), " " * 5000 + "end"]
    counted = [_run_in_this_process(path, [text]) for text in texts]
    assert all(run["encoder_loaded"] for run in counted)
    assert [run["counts"][0] for run in counted] == [len(encoder().encode(t)) for t in texts]


# Pieces the merge must get right: digits, contractions, runs of spaces and punctuation, CRLF.
PIECES = st.lists(st.sampled_from([chr(i) for i in range(128)] + [" ", "    ", "'s", "'ve", "\r\n", "123", "the",
                                                                   "ing", "://", "==", "__init__", "tidegauge"]),
                  min_size=1, max_size=60).map("".join)


@settings(max_examples=600, deadline=None)
@given(PIECES)
def test_merging_over_the_rank_table_counts_each_piece_as_the_encoder_does(text: str) -> None:
    ranks = tokens._ranks_by_base64()
    assert ranks is not None
    for piece in tokens._ascii_split()(text):
        assert tokens._bpe_count(piece.encode("ascii"), lambda part: ranks.get(base64.b64encode(part))) == \
            len(encoder().encode_ordinary(piece)), piece


def test_the_real_prompt_and_tools_merge_to_the_encoder_s_figure() -> None:
    """The words a first request sends (the system prompt's source and the tools' own text), all
    of them pieces never seen: the same figure as the encoder's."""
    from app.tools.registry import default_registry

    texts = [spec.description for spec in default_registry().specs()]
    for source in (Path(tokens.__file__).read_text(), Path(tokens.__file__).with_name("core.py").read_text()):
        texts += [source[at:at + tokens.LEARN_MAX_CHARS] for at in range(0, len(source), tokens.LEARN_MAX_CHARS)]
    assert len(texts) > 8
    for text in (t for t in texts if t.isascii()):
        assert tokens.PieceCounts().count_new(text) == len(encoder().encode(text, disallowed_special=()))


def test_a_session_that_merged_its_budget_of_new_pieces_loads_the_encoder(monkeypatch, pieces: Path) -> None:
    """Merging in Python is for a run's first few thousand words; a long session with ever new
    tool output goes to the encoder, which is cheaper from then on."""
    table = tokens.PieceCounts()
    monkeypatch.setattr(tokens, "_merged_chars", 0)
    assert table.count_new("some fresh words") == len(encoder().encode("some fresh words"))
    assert tokens._merged_chars == len("some fresh words")
    monkeypatch.setattr(tokens, "_merged_chars", tokens.MERGE_BUDGET_CHARS)
    assert table.count_new("other quite new words") is None


def test_loading_the_encoder_lets_the_merge_table_go() -> None:
    assert tokens._ranks_by_base64() is not None and tokens._ranks_by_base64.cache_info().currsize == 1
    assert tokens._merge_ranks() is not None and tokens._merge_ranks.cache_info().currsize == 1
    tokens.encoder.__wrapped__()
    assert tokens._ranks_by_base64.cache_info().currsize == 0 and tokens._merge_ranks.cache_info().currsize == 0


def test_a_rank_table_not_matching_its_hash_is_not_merged_over(monkeypatch, pieces: Path) -> None:
    """A rank table on disk that is not the one we know (edited by anything that can write the
    site-packages) gives no figure of its own: the encoder's loader and its checks count."""
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    tokens._ranks_by_base64.cache_clear()
    tokens._merge_ranks.cache_clear()
    try:
        assert tokens.PieceCounts().count_new("hello world") is None
        assert count_tokens("hello zqxjvkw world") == len(encoder().encode("hello zqxjvkw world"))
    finally:
        tokens._ranks_by_base64.cache_clear()
        tokens._merge_ranks.cache_clear()


@pytest.mark.parametrize("kept", [
    {"encoder": "0" * 64, "pieces": {"hi": 7}},  # another encoder's file
    {"encoder": CL100K_SHA256, "pieces": {"hi": 7}},  # more tokens than characters: not a count
    {"encoder": CL100K_SHA256, "pieces": {"hi": 0}},
    {"encoder": CL100K_SHA256, "pieces": {"hi": True}},
    {"encoder": CL100K_SHA256, "pieces": {"h\u00e9": 1}},  # not ASCII: never a piece of ours
    {"encoder": CL100K_SHA256, "pieces": ["hi"]},
    "not an object",
])
def test_a_kept_file_that_is_not_what_we_wrote_is_not_believed(pieces: Path, kept: Any) -> None:
    pieces.write_text(json.dumps(kept))
    pieces.chmod(0o600)  # ours by owner and mode: what is refused here is the content
    assert token_pieces.KeptPieces(pieces).counts == {}
    token_pieces.remember_pieces_in(pieces)
    assert count_tokens("hi hi hi") == len(encoder().encode("hi hi hi"))


# Words cl100k counts as several tokens each: a file saying 1 for each would undercount them.
POISON_TEXTS = ["Zqxjvkwplm frobnicated quuxbazzle the xylophonists' antidisestablishmentarianism.",
                "Pneumonoultramicroscopic zzyzx qwfpgjluy 31415926"]


def _counted_in_this_process(path: Path, texts: list[str]) -> list[int]:
    """What a run that keeps its pieces in ``path`` counts: the file read as a run's start reads it
    (remember_pieces_in), here. Where a figure is all a test checks, a process of its own showed
    nothing more; whether the encoder was loaded still needs one (``_run``)."""
    before = tokens.use_pieces(None)
    try:
        token_pieces.remember_pieces_in(path)
        return [count_tokens(text) for text in texts]
    finally:
        token_pieces.remember_pieces_in(None)
        tokens.use_pieces(before)


def _poison(path: Path) -> None:
    pieces = {piece: 1 for text in POISON_TEXTS for piece in tokens._ascii_split()(text)}
    path.write_text(json.dumps({"encoder": CL100K_SHA256, "pieces": pieces}))


def test_a_poisoned_pieces_file_not_ours_does_not_change_the_figures(tmp_path: Path) -> None:
    path = tmp_path / "token-pieces.json"
    _poison(path)
    path.chmod(0o644)  # written by something else: group and world may read it
    exact = [len(encoder().encode(t, disallowed_special=())) for t in POISON_TEXTS]
    assert sum(exact) > len([p for t in POISON_TEXTS for p in tokens._ascii_split()(t)])  # the poison undercounts

    said = token_pieces.remember_pieces_in(path)  # one line, for the session's start
    token_pieces.remember_pieces_in(None)
    assert said is not None and "not tidegauge's own file" in said and "0644" in said and str(path) in said
    assert _counted_in_this_process(path, POISON_TEXTS) == exact


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_pieces_file_another_user_owns_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "token-pieces.json"
    _poison(path)
    path.chmod(0o600)
    os.chown(path, 4242, 4242)
    assert _counted_in_this_process(path, POISON_TEXTS) == [len(encoder().encode(t)) for t in POISON_TEXTS]


def test_a_poisoned_file_of_ours_is_dropped_once_a_sample_is_counted_again(tmp_path: Path) -> None:
    path = tmp_path / "token-pieces.json"
    _poison(path)
    path.chmod(0o600)  # as if written by a command run as the user
    table = token_pieces.KeptPieces(path)
    table.learn("hello there")  # the kept counts are checked first
    table.save()
    assert "Zqxjvkwplm" not in table.counts
    assert _counted_in_this_process(path, POISON_TEXTS) == [len(encoder().encode(t)) for t in POISON_TEXTS]


def test_a_poisoned_file_of_ours_adds_nothing_to_a_figure_counted_with_new_pieces(tmp_path: Path) -> None:
    """A text mixing poisoned pieces and new ones is counted without the encoder: the sample is
    counted again before any kept count is added in, and the poison dropped."""
    path = tmp_path / "token-pieces.json"
    _poison(path)
    path.chmod(0o600)
    text = POISON_TEXTS[0] + " and some brandnewwords"
    run = _run_in_this_process(path, [text])
    assert not run["encoder_loaded"] and run["counts"] == [len(encoder().encode(text))]
    assert json.loads(path.read_text())["pieces"][" brandnewwords"] > 0
    kept = json.loads(path.read_text())["pieces"]
    assert kept["Zqxjvkwplm"] == len(encoder().encode("Zqxjvkwplm")) > 1  # dropped, then learnt right


def test_an_oversized_or_linked_file_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    big = tmp_path / "token-pieces.json"
    big.write_text(json.dumps({"encoder": CL100K_SHA256, "pieces": {"hi": 2}}) + " " * token_pieces.PIECES_MAX_BYTES)
    assert token_pieces.KeptPieces(big).counts == {}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("precious")
    link = tmp_path / "linked.json"
    link.symlink_to(elsewhere)
    table = token_pieces.KeptPieces(link)
    table.learn("hello there")
    table.save()
    assert elsewhere.read_text() == "precious" and not link.is_symlink()
    assert json.loads(link.read_text())["pieces"]["hello"] == 1


def test_the_real_program_shows_the_same_figures_with_and_without_the_kept_pieces(fake_llm, tmp_path) -> None:
    """Two identical runs: the first counts with the encoder and keeps the pieces, the second
    counts from them. Every context figure the gauge got is the same."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": "sk-test-fake-key-0123456789"})
    (tmp_path / "work").mkdir()
    figures = []
    for _ in range(2):
        fake_llm.enqueue(openai_text("The answer is 42."))
        proc = subprocess.run([sys.executable, "-m", "app", "-p", "what is the answer?", "--provider", "openai",
                               "--model", "gpt-4o", "--base-url", fake_llm.base_url("openai"),
                               "--output-format", "stream-json"], cwd=tmp_path / "work", env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        figures.append([(e["exact_tokens"], e["estimated_tokens"], e["breakdown"]) for e in events
                        if e["type"] == "context"])
    assert figures[0] and figures[0] == figures[1]
    assert (tmp_path / "data" / "token-pieces.json").exists()


def test_no_piece_of_a_key_is_kept(pieces: Path) -> None:
    """The pieces file outlives sessions: a text holding a registered secret teaches it nothing."""
    from app.kernel.redact import clear_secrets, register_secret

    secret = "sk-live-Qwertzuiopasdfghjkl-Mnbvcxyqwerty"
    register_secret(secret)
    try:
        text = f"export OPENAI_API_KEY={secret}\nthen run the tests"
        assert count_tokens(text) == len(encoder().encode(text))
        assert count_tokens("then run the tests") == len(encoder().encode("then run the tests"))
        token_pieces.remember_pieces_in(None)  # saves what was learnt
        kept = pieces.read_text()
        assert "Qwertzuiopasdfghjkl" not in kept and "Mnbvcxyqwerty" not in kept
        assert '" tests"' in kept  # the other text was learnt from
    finally:
        clear_secrets()


def test_a_text_counted_again_in_another_data_directory_is_learnt_there_too() -> None:
    """Counts are remembered within a process (a turn counts the same texts again and again),
    but not past a change of table: a session in another data directory (the dashboard's
    sessions, in-process runs) learns the pieces of a text counted before into its own file."""
    text = "Remembered counts: quokkas and wombats"
    first, second = tokens.PieceCounts(), tokens.PieceCounts()
    before = tokens.use_pieces(first)
    try:
        counted = count_tokens(text)
        assert count_tokens(text) == counted == len(encoder().encode(text))
        assert " quokkas" in first.counts
        tokens.use_pieces(second)
        assert count_tokens(text) == counted
        assert " quokkas" in second.counts and " wombats" in second.counts
    finally:
        tokens.use_pieces(before)


def _encoder_passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the loaded encoder is asked to count from now on."""
    enc = encoder()
    passes: list[str] = []
    real = enc.encode

    def encode(text: str, **kwargs: Any) -> list[int]:
        passes.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(enc, "encode", encode)
    return passes


def test_what_the_encoder_counted_is_not_counted_again_in_another_data_directory(monkeypatch) -> None:
    """A process that runs sessions in several data directories (in-process runs) counts the same
    prompt and tools in each: the encoder's count holds under any table, and the new table still
    learns the text's pieces, as counting it again would have taught it."""
    text = "Counted once per process: numbats and bilbies"
    big = "a long tool result, counted when it is fitted and again in the request\n" * 400
    exact = {t: len(encoder().encode(t, disallowed_special=())) for t in (text, big)}
    first, second = tokens.PieceCounts(), tokens.PieceCounts()
    before = tokens.use_pieces(first)
    try:
        passes = _encoder_passes(monkeypatch)
        assert count_tokens(text) == exact[text] and passes == [text] and " numbats" in first.counts
        assert count_tokens(big) == count_tokens(big) == exact[big] and passes.count(big) == 1
        tokens.use_pieces(second)
        assert count_tokens(text) == exact[text] and count_tokens(big) == exact[big]
        assert passes == [text, big]
        assert " numbats" in second.counts and " bilbies" in second.counts
    finally:
        tokens.use_pieces(before)


def test_a_count_a_table_made_is_not_believed_under_another_table() -> None:
    """A table's counts are only as true as the table (a poisoned one passes its sample now and
    then): under the next table, a text it counted is counted again."""
    text = "Zqxjvkwplm and quokkas"
    poisoned = tokens.PieceCounts({piece: 1 for piece in tokens._ascii_split()(text)})
    poisoned.checked = True  # as if its sample had happened to pass
    before = tokens.use_pieces(poisoned)
    tokens.encoder.cache_clear()  # a run that has not loaded the encoder counts from the table
    try:
        undercount = count_tokens(text)
        assert undercount == len(tokens._ascii_split()(text)) < len(encoder().encode(text, disallowed_special=()))
        tokens.use_pieces(tokens.PieceCounts())
        assert count_tokens(text) == len(encoder().encode(text, disallowed_special=()))
    finally:
        tokens.use_pieces(before)


def test_a_hostile_flood_of_new_words_never_grows_the_encoders_memo_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository's file of endless distinct words, read into table after table (a new data
    directory each): the process-wide memo of the encoder's piece counts stays within its bound,
    and a piece too long to be kept in a table is not kept there either."""
    monkeypatch.setattr(tokens, "PIECES_MAX", 300)
    monkeypatch.setattr(tokens, "_encoder_piece_counts", {})
    encoder()  # loaded: pieces are counted by the encoder, the path the memo keeps
    words = iter(f"w{n:06d}x" for n in range(10_000))
    for _ in range(5):
        table = tokens.PieceCounts()
        table.learn(" ".join(next(words) for _ in range(400)))
        assert len(table.counts) == 300
    assert len(tokens._encoder_piece_counts) == 300
    long_piece = "z" * (tokens.PIECE_MAX_CHARS + 1)
    assert tokens._piece_count(long_piece) == len(encoder().encode_ordinary(long_piece))
    assert long_piece not in tokens._encoder_piece_counts

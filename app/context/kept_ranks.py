"""The cl100k rank table sorted for merging, kept beside tidegauge's bytecode.

A run in a new data directory counts the words of its first request (the system prompt, the
tools' text) by merging their pieces over the bundled rank table (``tokens._bpe_count``): a few
hundred pieces, under a thousand lookups. As a dict keyed by base64 the table is 100,000 entries
made again in every such process, 30–45 ms of a headless run's ~0.5 s (every test's process is
in a new data directory). Sorted once by the tokens' bytes and kept in one file, it is read in
about a millisecond and searched by bisection: the same ranks, a few microseconds a lookup.

Trust: the file is made from the bundled table after its SHA-256 was checked
(``tokens.cl100k_table``), and kept where Python keeps this package's bytecode
(``app/system/kept_files.py``): whoever can write it can write the ``.pyc`` files beside it. It
is read only if its header names that hash, the installed table's size and modification time,
and this machine's byte order and integer size, and it is used only if its body matches the
SHA-256 it carries and its offsets fit the tokens it holds; anything else is sorted again and
replaced. Where Python writes no bytecode nothing is kept or sorted: the dict as before.
"""

from __future__ import annotations

import hashlib
import os
import sys
from array import array
from binascii import a2b_base64
from itertools import accumulate

from app.context import tokens
from app.context.tokens import RankOf
from app.system.kept_files import can_keep, path_beside_bytecode, read_kept, write_kept

FILE_STEM = "cl100k-sorted-ranks"
# The sorted table is ~1.4 MB; anything far larger is not a file of ours.
MAX_BYTES = 4 * 1024 * 1024
_DIGEST_BYTES = 32
_COUNT_BYTES = 4
_INT = "I"  # offsets and ranks: below 2**32 (the table is ~1 MB, 100,000 ranks)


class SortedRanks:
    """cl100k's tokens sorted by their bytes (one blob, the offset where each starts) and each
    token's rank: ``ranks(token)`` is the rank, None for bytes that are no token."""

    __slots__ = ("_blob", "_offsets", "_ranks", "_count")

    def __init__(self, blob: bytes, offsets: array[int], ranks: array[int]) -> None:
        self._blob, self._offsets, self._ranks, self._count = blob, offsets, ranks, len(ranks)

    def __call__(self, token: bytes) -> int | None:
        blob, offsets = self._blob, self._offsets
        low, high = 0, self._count
        while low < high:
            middle = (low + high) // 2
            if blob[offsets[middle]:offsets[middle + 1]] < token:
                low = middle + 1
            else:
                high = middle
        if low < self._count and blob[offsets[low]:offsets[low + 1]] == token:
            return self._ranks[low]
        return None

    def to_bytes(self) -> bytes:
        """The file's body: the SHA-256 of what follows, the count, the offsets, the ranks, the blob."""
        payload = (self._count.to_bytes(_COUNT_BYTES, sys.byteorder) + self._offsets.tobytes()
                   + self._ranks.tobytes() + self._blob)
        return hashlib.sha256(payload).digest() + payload

    @classmethod
    def from_bytes(cls, body: bytes) -> SortedRanks | None:
        """The table ``to_bytes`` wrote, or None for anything else (cut short, changed, inconsistent)."""
        view = memoryview(body)
        payload = view[_DIGEST_BYTES:]
        if len(body) < _DIGEST_BYTES + _COUNT_BYTES or hashlib.sha256(payload).digest() != body[:_DIGEST_BYTES]:
            return None
        count = int.from_bytes(payload[:_COUNT_BYTES], sys.byteorder)
        size = array(_INT).itemsize
        offsets_end = _COUNT_BYTES + size * (count + 1)
        ranks_end = offsets_end + size * count
        if len(payload) < ranks_end:
            return None
        offsets, ranks = array(_INT), array(_INT)
        offsets.frombytes(payload[_COUNT_BYTES:offsets_end])
        ranks.frombytes(payload[offsets_end:ranks_end])
        blob = bytes(payload[ranks_end:])
        if offsets[0] != 0 or offsets[-1] != len(blob):
            return None
        return cls(blob, offsets, ranks)


def sort_ranks(words: list[bytes]) -> SortedRanks:
    """The table from the bundled file's words (base64 token, rank, ...; a token's rank is its line)."""
    table = list(map(a2b_base64, words[::2]))
    order = sorted(range(len(table)), key=table.__getitem__)
    in_order = [table[rank] for rank in order]
    return SortedRanks(b"".join(in_order), array(_INT, accumulate(map(len, in_order), initial=0)), array(_INT, order))


def cache_path() -> str:
    """Where the sorted table is kept: this package's bytecode folder, named for this interpreter."""
    return path_beside_bytecode(os.path.dirname(os.path.abspath(__file__)), FILE_STEM, "bin")


def _header() -> bytes | None:
    """What a kept table must start with to be read: the table it was sorted from, this machine."""
    path = tokens.cl100k_path()
    try:
        info = os.stat(path) if path is not None else None
    except OSError:
        return None
    if info is None:
        return None
    return (f"tidegauge sorted cl100k ranks 1 {tokens.CL100K_SHA256} {info.st_size}-{info.st_mtime_ns} "
            f"{sys.byteorder} {array(_INT).itemsize}\n").encode("ascii")


def load() -> RankOf | None:
    """The sorted table: the kept one, else sorted now and kept. None where it cannot be kept (no
    bytecode written, a read-only installation) or the bundled table is not the one we know:
    ``tokens`` then merges over its dict, or leaves counting to the encoder."""
    header = _header()
    if header is None:
        return None
    path = cache_path()
    body = read_kept(path, header, MAX_BYTES)
    if body is not None and (kept := SortedRanks.from_bytes(body)) is not None:
        return kept
    if not can_keep(path):
        return None
    words = tokens.cl100k_table()
    if words is None:
        return None
    table = sort_ranks(words)
    write_kept(path, header + table.to_bytes())
    return table


def merge_over_kept_ranks() -> None:
    """From now on, this process merges over the sorted table (loaded at the first merge)."""
    tokens.use_rank_loader(load)

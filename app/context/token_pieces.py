"""The token pieces kept between runs: ``<data_dir>/token-pieces.json``.

``app.context.tokens`` counts ASCII text from a table of BPE pieces the encoder counted before
(``PieceCounts``), in memory. This module is the I/O around it, run by the service side (the
runtime, at start and at exit): the table read from one file of ours (0600, this user's, never
through a symlink) for this encoder file (its SHA-256), and written back when the process ends.
A file that is not ours, or holds an entry that could not be a count, is dropped whole
(``problem`` says so).
"""

from __future__ import annotations

import atexit
from pathlib import Path

from app.context import tokens
from app.context.tokens import CL100K_SHA256, PieceCounts, plausible_pieces
from app.kernel.private_files import read_kept_json, write_kept_json

PIECES_MAX_BYTES = 1 << 20


class KeptPieces(PieceCounts):
    """A ``PieceCounts`` read from ``path`` and written back to it by ``save``."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.problem: str | None = None
        refused: list[str] = []
        kept = read_kept_json(path, PIECES_MAX_BYTES, ours=True, refused=refused)
        pieces = kept.get("pieces") if kept.get("encoder") == CL100K_SHA256 else None
        if refused:
            self.problem = f"{refused[0]}; token counts are not taken from it"
        elif isinstance(pieces, dict) and plausible_pieces(pieces):
            self.counts = pieces
        elif pieces is not None:
            self.problem = f"{path} holds counts that cannot be cl100k's; not used, written anew"
            self.changed = True

    def save(self) -> None:
        if self.changed:
            self.changed = False
            write_kept_json(self.path, {"encoder": CL100K_SHA256, "pieces": self.counts})


def remember_pieces_in(path: Path | None) -> str | None:
    """Count from (and add to) the pieces kept in ``path``; saved when the process exits.
    None: the encoder counts everything, nothing is kept. Returns the one line saying why the
    kept file was dropped (not ours, implausible counts), or None."""
    table = KeptPieces(path) if path is not None else None
    before = tokens.use_pieces(table)
    if isinstance(before, KeptPieces):
        before.save()
    if table is not None:
        atexit.unregister(_save_pieces)
        atexit.register(_save_pieces)
    return table.problem if table is not None else None


def _save_pieces() -> None:
    table = tokens.use_pieces(None)
    if isinstance(table, KeptPieces):
        table.save()
    tokens.use_pieces(table)

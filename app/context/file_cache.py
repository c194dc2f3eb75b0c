"""File-read cache: what read_file returned, so an unchanged re-read costs a line, not a file.

Two jobs, both pure bookkeeping (the tools do the I/O):
- an LRU of read_file results keyed by (resolved path, offset, limit). Reading
  the same unchanged range again returns a short stub, but only while the
  earlier result is still in the context (not compacted or cleared); a file
  that changed comes back fresh with a note and, when small, a unified diff.
- the read-state edit_file checks: a file may be edited only if it was read
  (or written) in this session and has not changed on disk since.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MAX_DIFF_CHARS = 4_000
# Diffing is skipped above this (the diff would not be small anyway).
_MAX_DIFFABLE_CHARS = 2_000_000
_MAX_READ_STATES = 10_000
_LINE_NUMBER = re.compile(r"^ *\d+\t", re.MULTILINE)
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", re.MULTILINE)

CacheKey = tuple[str, int, int]


@dataclass
class FileReadEntry:
    """One read_file result as the model saw it."""

    path: str
    offset: int
    limit: int
    mtime_ns: int
    size: int
    sha256: str  # of the bytes of the lines read
    content: str
    call_id: str
    first_line: int
    last_line: int
    nbytes: int  # what this entry costs in the cache's byte budget

    @property
    def stat(self) -> tuple[int, int, str]:
        return (self.mtime_ns, self.size, self.sha256)


def _plain(content: str) -> list[str]:
    """read_file output without its line-number prefixes (so insertions diff cleanly)."""
    return _LINE_NUMBER.sub("", content).splitlines()


def unified_diff(old_content: str, new_content: str, first_line: int = 1) -> str:
    """Unified diff of two read_file outputs of a range starting at ``first_line`` ('' when equal)."""
    lines = difflib.unified_diff(
        _plain(old_content), _plain(new_content), "before", "now", n=1, lineterm=""
    )
    diff = "\n".join(lines)
    if first_line == 1:
        return diff
    # difflib counts from the range's first line; the model needs file line numbers.
    return _HUNK_HEADER.sub(
        lambda m: f"@@ -{int(m[1]) + first_line - 1}{m[2]} +{int(m[3]) + first_line - 1}{m[4]} @@",
        diff,
    )


class FileReadCache:
    def __init__(self, max_entries: int = 100, max_bytes: int = 25 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[CacheKey, FileReadEntry] = OrderedDict()
        self._bytes = 0
        self._read_state: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def get(self, path: str | Path, offset: int, limit: int) -> FileReadEntry | None:
        entry = self._entries.get((str(path), offset, limit))
        if entry is not None:
            self._entries.move_to_end((str(path), offset, limit))
        return entry

    def record_read(
        self,
        *,
        path: str | Path,
        offset: int,
        limit: int,
        mtime_ns: int,
        size: int,
        sha256: str,
        content: str,
        first_line: int,
        last_line: int,
        call_id: str,
        result_in_context: Callable[[str], bool],
    ) -> str:
        """Remember a read and return what the model should see for it.

        That is a stub when the same range is unchanged and its earlier result
        is still in the context; else ``content``, led by a change note (and a
        small diff) when the file changed since it was last read.
        """
        path = str(path)
        key = (path, offset, limit)
        previous = self.get(path, offset, limit)
        if (
            previous is not None
            and previous.stat == (mtime_ns, size, sha256)
            and result_in_context(previous.call_id)
        ):
            return (
                f"File unchanged since read_file call {previous.call_id} above "
                f"(lines {previous.first_line}-{previous.last_line}); its content is still in "
                "the context. Re-read only if you need it again after a compaction."
            )
        note = self._change_note(path, previous, mtime_ns, size, sha256, content)
        self._store(
            FileReadEntry(
                path=path,
                offset=offset,
                limit=limit,
                mtime_ns=mtime_ns,
                size=size,
                sha256=sha256,
                content=content,
                call_id=call_id,
                first_line=first_line,
                last_line=last_line,
                nbytes=len(content.encode("utf-8", errors="replace")) + len(path) + 200,
            ),
            key,
        )
        return note + content

    def _change_note(
        self,
        path: str,
        previous: FileReadEntry | None,
        mtime_ns: int,
        size: int,
        sha256: str,
        content: str,
    ) -> str:
        if previous is None:
            # Another range of the same file may have been read before.
            previous = next(
                (e for e in reversed(self._entries.values()) if e.path == path), None
            )
            if previous is None or (previous.mtime_ns, previous.size) == (mtime_ns, size):
                return ""
            return (
                f"[Note: {path} changed on disk since read_file call {previous.call_id}.]\n"
            )
        if previous.stat == (mtime_ns, size, sha256):
            return ""  # unchanged, but the earlier result has left the context
        head = f"[Note: {path} changed on disk since read_file call {previous.call_id}"
        if previous.sha256 == sha256:
            return f"{head}; lines {previous.first_line}-{previous.last_line} are the same.]\n"
        if max(len(previous.content), len(content)) <= _MAX_DIFFABLE_CHARS:
            diff = unified_diff(previous.content, content, previous.first_line)
            if len(diff) < MAX_DIFF_CHARS:
                return f"{head}. Diff of this range, before -> now:]\n{diff}\n[Current content:]\n"
        return f"{head}; the diff is too large to show. Current content follows.]\n"

    def _store(self, entry: FileReadEntry, key: CacheKey) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        if entry.nbytes > self.max_bytes:
            return  # would evict everything else and still not fit
        self._entries[key] = entry
        self._bytes += entry.nbytes
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes

    def invalidate(self, path: str | Path) -> None:
        """Forget the cached results for one file (its read-state stays)."""
        path = str(path)
        for key in [k for k in self._entries if k[0] == path]:
            self._bytes -= self._entries.pop(key).nbytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
        self._read_state.clear()

    # --- read-state for edit_file -------------------------------------------------

    def mark_read(self, path: str | Path, mtime_ns: int, size: int) -> None:
        """The model has seen this version of the file (read it, wrote it, or edited it)."""
        path = str(path)
        self._read_state[path] = (mtime_ns, size)
        self._read_state.move_to_end(path)
        while len(self._read_state) > _MAX_READ_STATES:
            self._read_state.popitem(last=False)

    def check_editable(
        self, path: str | Path, mtime_ns: int | None = None, size: int | None = None
    ) -> str | None:
        """None when ``path`` may be edited, else the reason (for the model)."""
        path = str(path)
        state = self._read_state.get(path)
        if state is None:
            return (
                f"{path} has not been read in this session; read it first with read_file, "
                "then edit it."
            )
        if mtime_ns is None or size is None:
            try:
                st = os.stat(path)
            except OSError:
                return f"{path} no longer exists; check with list_files."
            mtime_ns, size = st.st_mtime_ns, st.st_size
        if (mtime_ns, size) != state:
            return (
                f"{path} changed on disk since you last read it; read it first with read_file "
                "to see its current content, then edit it."
            )
        return None

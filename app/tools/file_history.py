"""Before-images of the files write_file and edit_file change, so a rewind can put them back.

For each turn (known by the id of the user message that started it) and each file, the content
before the turn's first change is kept, once: its bytes under their SHA-256 in
``<session>/file-history/``, or "did not exist". Every later write records the hash of what
tidegauge wrote, so a restore can tell a file changed since by something else (the user, an
editor, run_bash) and leave it alone unless told to overwrite it. A file over
``MAX_BEFORE_IMAGE`` bytes is recorded as not restorable, and named as such.

Everything under the session folder is opened through ``app.kernel.private_files``. The index is
the session's own file, yet a restore trusts none of its paths: a path must be relative, without
``..``, and is walked from the workspace by the file tools' race-free walk with
``allow_outside`` off, so neither a planted index line nor a symlink in the workspace can make a
restore write outside it; a blob name must be a SHA-256 and its bytes must hash to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Collection

from app.kernel.private_files import make_private_dir, open_private, open_private_fd, open_private_read, read_private
from app.tools.base import ToolContext, ToolInputError
from app.tools.workspace import locate, open_file_for_reading, open_file_for_writing

MAX_BEFORE_IMAGE = 10 * 1024 * 1024  # bytes: a bigger file is named as not restorable
FOLDER_NAME = "file-history"
_INDEX = "index.jsonl"
_HASH = re.compile(r"[0-9a-f]{64}")
_MAX_INDEX_BYTES = 64 * 1024 * 1024


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class BeforeImage:
    """A file about to be written: where (relative to the workspace) and, on the turn's first change
    to it, the index entry of what it held."""

    path: str
    entry: dict[str, Any] | None


@dataclass
class RestorePlan:
    """What putting the files back to before the given turns would do."""

    files: list[str] = field(default_factory=list)  # restorable, relative to the workspace
    changed_since: list[str] = field(default_factory=list)  # of those, changed since tidegauge wrote them
    not_restorable: list[str] = field(default_factory=list)  # over the bound or unreadable: no copy kept


@dataclass
class Restored:
    restored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # changed since by something else: left alone
    not_restorable: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each: what could not be done and why


def safe_relative(path: object) -> str | None:
    """``path`` as a relative path inside the workspace, or None when it is not one (absolute, ``..``,
    empty, a NUL): an index line names a file; it never picks where a restore writes."""
    if not isinstance(path, str) or not path or "\0" in path or path.startswith("/"):
        return None
    parts = PurePosixPath(path).parts
    if not parts or any(part in ("..", "") for part in parts):
        return None
    return str(PurePosixPath(*parts))


class FileHistory:
    """One session's before-images. ``turn`` is set by the agent at the start of each turn."""

    def __init__(self, session_folder: Path, workspace: Path) -> None:
        self.folder = session_folder / FOLDER_NAME
        self.workspace = workspace
        self.turn = ""
        self._lock = threading.Lock()
        self._kept: set[tuple[str, str]] = set()  # (turn, path) whose before-image is recorded

    # ---- recording (from the file tools, in their worker thread) ----

    def _relative(self, raw: str, ctx: ToolContext) -> str | None:
        """Where ``raw`` leads, relative to the workspace (None: outside it, not recorded)."""
        root = Path(os.path.realpath(self.workspace))
        try:
            located = locate(raw, ctx)
            real = located.real
            located.close()
        except (FileNotFoundError, NotADirectoryError):
            real = Path(os.path.normpath(root / raw))  # its folders are made by the write
        except (OSError, ToolInputError):
            return None
        try:
            return safe_relative(real.relative_to(root).as_posix())
        except ValueError:
            return None

    def before_write(self, raw: str, ctx: ToolContext) -> BeforeImage | None:
        """The file's content before this turn's first change to it (None: outside the workspace, or
        kept already this turn); recorded by ``wrote`` once the write is done."""
        if not self.turn:
            return None
        path = self._relative(raw, ctx)
        if path is None:
            return None
        entry: dict[str, Any] | None = None
        if (self.turn, path) not in self._kept:
            entry = {"kind": "before", "turn": self.turn, "path": path, "existed": True}
            try:
                opened = open_file_for_reading(raw, ctx)
            except FileNotFoundError:
                entry["existed"] = False
            except (OSError, ToolInputError):
                entry["too_large"] = True  # not readable as a regular file: no copy, named as such
            else:
                with os.fdopen(opened.fd, "rb") as f:
                    data = f.read(MAX_BEFORE_IMAGE + 1)
                if len(data) > MAX_BEFORE_IMAGE:
                    entry["too_large"] = True
                else:
                    entry["blob"] = self._keep_blob(data)
        return BeforeImage(path, entry)

    def wrote(self, before: BeforeImage | None, data: bytes) -> None:
        """tidegauge wrote ``data`` over ``before``: its before-image (the turn's first change) and what
        a later restore expects to find there are recorded. A write that failed records nothing."""
        if before is None or not self.turn:
            return
        if before.entry is not None and (self.turn, before.path) not in self._kept:
            self._append(before.entry)
            self._kept.add((self.turn, before.path))
        self._append({"kind": "wrote", "turn": self.turn, "path": before.path, "sha": _sha(data)})

    def _keep_blob(self, data: bytes) -> str:
        digest = _sha(data)
        target = self.folder / digest
        if not target.exists():
            with open_private(target) as f:
                f.write(data)
        return digest

    def _append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "surrogateescape")
        with self._lock:
            make_private_dir(self.folder)
            fd = open_private_fd(self.folder / _INDEX, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    # ---- reading back ----

    def _entries(self) -> list[dict[str, Any]]:
        try:
            raw = read_private(self.folder / _INDEX, _MAX_INDEX_BYTES)
        except OSError:
            return []
        entries: list[dict[str, Any]] = []
        for line in raw.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if isinstance(entry, dict) and safe_relative(entry.get("path")) == entry.get("path"):
                entries.append(entry)
        return entries

    def _fold(self, turns: Collection[str], entries: list[dict[str, Any]] | None = None,
              ) -> tuple[dict[str, dict[str, Any]], dict[str, str | None]]:
        """(path -> its first before-image in ``turns``, path -> the hash tidegauge last left there)."""
        wanted = set(turns)
        first: dict[str, dict[str, Any]] = {}
        expected: dict[str, str | None] = {}
        for entry in self._entries() if entries is None else entries:
            path = entry["path"]
            if entry.get("kind") == "before" and entry.get("turn") in wanted and path not in first:
                first[path] = entry
            elif entry.get("kind") in ("wrote", "restored"):
                sha = entry.get("sha")
                expected[path] = sha if isinstance(sha, str) else None
        return first, expected

    def _context(self) -> ToolContext:
        return ToolContext(workspace=self.workspace, tool_results_dir=self.folder, allow_outside=False)

    def _current(self, path: str) -> str | None:
        """The hash of what the file holds now (None: it does not exist)."""
        try:
            opened = open_file_for_reading(path, self._context())
        except (FileNotFoundError, NotADirectoryError):
            return None
        with os.fdopen(opened.fd, "rb") as f:
            return _sha(f.read())

    def plan(self, turns: Collection[str]) -> RestorePlan:
        """The files changed in ``turns`` and what a restore would do with each."""
        return self.plans([turns])[0]

    def plans(self, turn_sets: list[Collection[str]]) -> list[RestorePlan]:
        """``plan`` for each set of turns (a rewind list: one per message), the index read once and
        each file hashed at most once."""
        entries = self._entries()
        current: dict[str, str | None | bool] = {}  # path -> its hash now (False: unreadable)
        out: list[RestorePlan] = []
        for turns in turn_sets:
            first, expected = self._fold(turns, entries)
            plan = RestorePlan()
            for path, entry in sorted(first.items()):
                if entry.get("too_large") or (entry.get("existed") and not _HASH.fullmatch(str(entry.get("blob")))):
                    plan.not_restorable.append(path)
                    continue
                plan.files.append(path)
                if path not in current:
                    try:
                        current[path] = self._current(path)
                    except (OSError, ToolInputError):
                        current[path] = False
                if current[path] is False or current[path] != expected.get(path):
                    plan.changed_since.append(path)
            out.append(plan)
        return out

    def restore(self, turns: Collection[str], *, overwrite_changed: bool = False) -> Restored:
        """Put each file changed in ``turns`` back as it was before the first of them changed it."""
        plan = self.plan(turns)
        first, _expected = self._fold(turns)
        done = Restored(not_restorable=list(plan.not_restorable))
        for path in plan.files:
            if path in plan.changed_since and not overwrite_changed:
                done.skipped.append(path)
                continue
            entry = first[path]
            try:
                sha = self._put_back(path, entry)
            except (OSError, ToolInputError, ValueError) as err:
                done.problems.append(f"{path}: not restored ({' '.join(str(err).split())[:200]})")
                continue
            self._append({"kind": "restored", "turn": "", "path": path, "sha": sha})
            done.restored.append(path)
        return done

    def _put_back(self, path: str, entry: dict[str, Any]) -> str | None:
        ctx = self._context()
        if not entry.get("existed"):
            try:
                located = locate(path, ctx)
            except (FileNotFoundError, NotADirectoryError):
                return None
            try:
                os.unlink(located.name, dir_fd=located.dir_fd)
            except FileNotFoundError:
                pass
            finally:
                located.close()
            return None
        blob = str(entry.get("blob"))
        if not _HASH.fullmatch(blob):
            raise ValueError("its copy has no valid name")
        with open_private_read(self.folder / blob) as f:
            data = f.read(MAX_BEFORE_IMAGE + 1)
        if _sha(data) != blob:
            raise ValueError("its copy does not match its hash")
        opened = open_file_for_writing(path, ctx)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(opened.fd, view):]
        finally:
            os.close(opened.fd)
        return blob

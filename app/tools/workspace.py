"""What the tools share: the workspace boundary, blocking work that can be cancelled, names.

The boundary cannot be raced: a path is never resolved first and opened
later. It is walked one component at a time, each opened relative to the
directory descriptor of the one before with ``O_NOFOLLOW``, so a directory
swapped for a symlink between two steps makes the open fail instead of
following it. Symlinks are expanded here, by reading them and checking
where they lead, and ``..`` pops our own stack of descriptors, so nothing
the filesystem does between two calls can move the walk outside the root.
With ``--allow-outside`` the root is ``/``: the same walk, no boundary.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import stat
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from app.tools.base import ToolContext, ToolInputError

# The character limit the registry will apply to the call now running (0: none).
# Tools that must bound their memory (run_bash) size their buffers by it, so a
# call with truncation off still returns its whole output when it reasonably can.
output_limit: ContextVar[int] = ContextVar("output_limit", default=40_000)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO or a device must never wait for the other end.
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_MAX_SYMLINKS = 40  # as the kernel's ELOOP limit
# After a lost race (the file changed kind between check and open) the walk starts over.
_RACE_RETRIES = 5


# --- names that are not UTF-8 ------------------------------------------------------------


_ESCAPED_BYTE = re.compile(r"\\x([0-9a-fA-F]{2})")


def shown_name(name: str) -> str:
    """A file name as text the model and JSON can carry: bytes that are not UTF-8 as ``\\xe9``.

    (os functions give such bytes back as lone surrogates, which no JSON encoder
    or terminal accepts.)
    """
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _unescaped(name: str) -> str | None:
    """The on-disk name for a shown name with ``\\xNN`` escapes, or None if it has none."""
    if "\\x" not in name:
        return None
    raw = _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m[1], 16)) if int(m[1], 16) >= 0x80 else chr(int(m[1], 16)), name)
    return raw if raw != name else None


# --- blocking work that stops when its task is cancelled ----------------------------------

T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside blocking work once its task was cancelled (nobody waits for the result)."""


@dataclass
class CancelFlag:
    event: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        if self.event.is_set():
            raise Cancelled


async def run_blocking(work: Callable[[CancelFlag], T]) -> T:
    """Run ``work`` in a daemon thread; cancelling the caller returns at once.

    The thread gets a flag it checks between blocks and stops soon after; a
    thread stuck in the kernel (a hung network filesystem) cannot hold up the
    turn, the executor or the interpreter's exit, because it is its own daemon.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    flag = CancelFlag()

    def deliver(ok: bool, value: object) -> None:
        if done.done():
            return
        if ok:
            done.set_result(value)  # type: ignore[arg-type]
        else:
            done.set_exception(value)  # type: ignore[arg-type]

    def body() -> None:
        try:
            result: object = work(flag)
            ok = True
        except BaseException as exc:  # handed to the awaiting task
            result, ok = exc, False
        try:
            loop.call_soon_threadsafe(deliver, ok, result)
        except RuntimeError:
            pass  # the loop is gone: nobody is waiting

    threading.Thread(target=body, name="tidegauge-tool-io", daemon=True).start()
    try:
        return await done
    except asyncio.CancelledError:
        flag.event.set()
        raise


# --- the race-free walk ----------------------------------------------------------------


def _outside_message(raw: str, where: str, root: Path) -> str:
    return (
        f"Refused: {shown_name(raw)!r} leads to {shown_name(where)}, which is outside the workspace "
        f"{shown_name(str(root))}. File tools only work inside the workspace (the directory "
        "tidegauge was started in; symlinks are followed before checking). Use a path inside "
        "the workspace. If the user wants files outside it, they can restart tidegauge with "
        "--allow-outside."
    )


@dataclass
class Located:
    """Where a path led: the open directory that holds it and its name in there.

    ``name`` is "" when the path is that directory itself. ``real`` is the
    path with every symlink expanded (a cache key and a name for messages).
    """

    dir_fd: int
    name: str
    real: Path
    shown: str  # relative to the workspace when inside it, escaped for JSON

    def close(self) -> None:
        os.close(self.dir_fd)


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


class _Walk:
    """One walk from the root; owns the descriptors on its stack until ``finish``."""

    def __init__(self, raw: str, ctx: ToolContext, *, create_dirs: bool) -> None:
        if not isinstance(raw, str) or not raw.strip():
            raise ToolInputError("path must be a non-empty string, relative to the workspace.")
        if "\0" in raw:
            raise ToolInputError("path contains a NUL character; give a plain file path.")
        self.raw = raw
        self.create_dirs = create_dirs
        self.workspace = Path(os.path.realpath(ctx.workspace))
        self.jailed = not ctx.allow_outside
        self.root = self.workspace if self.jailed else Path("/")
        expanded = os.path.expanduser(raw) if raw.startswith("~") else raw
        if os.path.isabs(expanded):
            parts = self._inside_root(expanded, [str(ctx.workspace), str(self.workspace)])
        elif self.jailed:
            parts = _split(expanded)
        else:
            parts = [*self.workspace.parts[1:], *_split(expanded)]
        self.pending = parts
        self.names: list[str] = []
        self.fds: list[int] = [os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        self.links = 0

    def _inside_root(self, absolute: str, workspace_spellings: list[str]) -> list[str]:
        """Components of an absolute path below the root; refused when outside it."""
        if not self.jailed:
            return _split(absolute)
        for spelling in workspace_spellings:
            prefix = spelling.rstrip("/") + "/"
            if absolute == spelling or absolute.rstrip("/") == spelling.rstrip("/"):
                return []
            if absolute.startswith(prefix):
                return _split(absolute[len(prefix):])
        raise ToolInputError(_outside_message(self.raw, os.path.normpath(absolute), self.workspace))

    @property
    def top(self) -> int:
        return self.fds[-1]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _real(self) -> Path:
        return self.root.joinpath(*self.names) if self.names else self.root

    def _existing(self, name: str) -> str:
        """``name`` as it is on disk: a shown name with ``\\xNN`` escapes maps back to its bytes."""
        alt = _unescaped(name)
        if alt is None:
            return name
        try:
            os.stat(name, dir_fd=self.top, follow_symlinks=False)
            return name
        except FileNotFoundError:
            return alt
        except OSError:
            return name

    def _follow(self, name: str) -> None:
        """``name`` (in the top directory) is a symlink: continue the walk where it points."""
        self.links += 1
        if self.links > _MAX_SYMLINKS:
            raise ToolInputError(f"{shown_name(self.raw)}: too many levels of symlinks.")
        target = os.readlink(name, dir_fd=self.top)
        if os.path.isabs(target):
            # Not normalised: a ".." in the target is walked like any other, by the stack.
            parts = self._inside_root(target, [str(self.workspace)]) if self.jailed else _split(target)
            for fd in self.fds[1:]:
                os.close(fd)
            self.fds, self.names = self.fds[:1], []
        else:
            parts = _split(target)
        self.pending = parts + self.pending

    def _up(self) -> None:
        if len(self.fds) == 1:
            if self.jailed:
                where = os.path.normpath(os.path.join(str(self.workspace), self.raw))
                raise ToolInputError(_outside_message(self.raw, where, self.workspace))
            return  # "/.." is "/"
        os.close(self.fds.pop())
        self.names.pop()

    def _descend(self, name: str) -> None:
        """Open directory ``name`` in the top directory, never through a symlink."""
        while True:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self.top)
            except FileNotFoundError:
                if not self.create_dirs:
                    raise
                try:
                    os.mkdir(name, 0o777, dir_fd=self.top)
                except FileExistsError:
                    pass  # someone made it meanwhile: open it (again, without following)
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.stat(name, dir_fd=self.top, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    self._follow(name)
                    return
                if stat.S_ISDIR(st.st_mode):
                    continue  # was a symlink a moment ago: try again
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", self._shown_so_far(name)) from None
            self.fds.append(fd)
            self.names.append(name)
            return

    def _shown_so_far(self, name: str) -> str:
        return self._shown(self._real() / name)

    def _shown(self, real: Path) -> str:
        try:
            rel = real.relative_to(self.workspace)
            text = str(rel) if rel.parts else "."
        except ValueError:
            text = str(real)
        return shown_name(text)

    def run(self) -> Located:
        """Walk every component; the last one is left unopened (unless it is a symlink)."""
        try:
            while self.pending:
                part = self.pending.pop(0)
                if part == "..":
                    self._up()
                    continue
                name = self._existing(part)
                if not self.pending:  # the last component: expand it only if it is a symlink
                    try:
                        st = os.stat(name, dir_fd=self.top, follow_symlinks=False)
                    except FileNotFoundError:
                        return self._finish(name)  # does not exist (yet): the caller decides
                    if stat.S_ISLNK(st.st_mode):
                        self._follow(name)
                        continue
                    return self._finish(name)
                self._descend(name)
            return self._finish("")
        except BaseException:
            self.close()
            raise

    def _finish(self, name: str) -> Located:
        if name == "" and self.names:
            # The path is a directory: hand back its parent and its name, so every caller opens the
            # last component the same way.
            name = self.names.pop()
            os.close(self.fds.pop())
        top = self.fds.pop()
        self.close()
        real = self._real() / name if name else self._real()
        return Located(dir_fd=top, name=name, real=real, shown=self._shown(real))


def locate(raw: str, ctx: ToolContext, *, create_dirs: bool = False) -> Located:
    """Walk ``raw`` from the workspace (or ``/`` with --allow-outside); refuse escapes.

    Raises ToolInputError for an escape, FileNotFoundError / NotADirectoryError
    for a missing or wrong component on the way.
    """
    return _Walk(raw, ctx, create_dirs=create_dirs).run()


def resolve_path(raw: str, ctx: ToolContext) -> Path:
    """The real path ``raw`` leads to (symlinks expanded), refusing escapes. For messages and tests."""
    located = locate(raw, ctx)
    located.close()
    return located.real


# --- opening what the walk found ----------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def special_file_message(shown: str, mode: int) -> str:
    return (
        f"Refused: {shown} is {_kind(mode)}, not a regular file; reading or writing it could block "
        "for ever or have side effects. File tools work on regular files only. If you really need "
        f"it, use run_bash with a timeout (e.g. `timeout 5 head -c 4096 {shown}`)."
    )


def not_found_message(raw: str, ctx: ToolContext) -> str:
    return (
        f"File not found: {shown_name(raw)}. Paths are relative to the workspace "
        f"{shown_name(str(ctx.workspace))}; check what exists with list_files."
    )


@dataclass
class OpenedFile:
    fd: int
    real: Path
    shown: str
    st: os.stat_result
    existed: bool = True


def _check_regular(st: os.stat_result, located: Located, raw: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", raw)
    if not stat.S_ISREG(st.st_mode):
        raise ToolInputError(special_file_message(located.shown, st.st_mode))


def open_file_for_reading(raw: str, ctx: ToolContext) -> OpenedFile:
    """An fd on the regular file ``raw`` leads to, opened without following anything unchecked.

    Checked before the open (lstat: no side effect of opening a device) and
    after it (fstat: what we actually hold). Raises FileNotFoundError,
    IsADirectoryError or ToolInputError.
    """
    for _ in range(_RACE_RETRIES):
        located = locate(raw, ctx)
        try:
            if not located.name:
                raise IsADirectoryError(errno.EISDIR, "is a directory", raw)
            st = os.stat(located.name, dir_fd=located.dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                continue  # became a symlink after the walk looked: walk again
            _check_regular(st, located, raw)
            try:
                fd = os.open(located.name, os.O_RDONLY | _FILE_FLAGS, dir_fd=located.dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue
                raise
            try:
                st = os.fstat(fd)
                _check_regular(st, located, raw)
            except BaseException:
                os.close(fd)
                raise
            return OpenedFile(fd=fd, real=located.real, shown=located.shown, st=st)
        finally:
            located.close()
    raise ToolInputError(f"{shown_name(raw)} kept changing while it was opened; try again.")


def open_file_for_writing(raw: str, ctx: ToolContext) -> OpenedFile:
    """An fd to write the regular file ``raw`` leads to (created with its parents; truncated)."""
    for _ in range(_RACE_RETRIES):
        located = locate(raw, ctx, create_dirs=True)
        try:
            if not located.name:
                raise IsADirectoryError(errno.EISDIR, "is a directory", raw)
            existed = True
            try:
                st = os.stat(located.name, dir_fd=located.dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    continue
                _check_regular(st, located, raw)
            except FileNotFoundError:
                existed = False
            try:
                fd = os.open(
                    located.name, os.O_WRONLY | os.O_CREAT | _FILE_FLAGS, 0o666, dir_fd=located.dir_fd
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue
                if exc.errno == errno.ENXIO:  # a FIFO with no reader appeared
                    raise ToolInputError(special_file_message(located.shown, stat.S_IFIFO)) from None
                raise
            try:
                st = os.fstat(fd)
                _check_regular(st, located, raw)
                os.ftruncate(fd, 0)  # only now: never truncate something we then refuse
            except BaseException:
                os.close(fd)
                raise
            return OpenedFile(fd=fd, real=located.real, shown=located.shown, st=st, existed=existed)
        finally:
            located.close()
    raise ToolInputError(f"{shown_name(raw)} kept changing while it was opened; try again.")


def open_directory(raw: str, ctx: ToolContext) -> tuple[int, Located]:
    """An fd on the directory ``raw`` leads to (and where it is). Raises NotADirectoryError etc."""
    for _ in range(_RACE_RETRIES):
        located = locate(raw, ctx)
        if not located.name:
            return os.dup(located.dir_fd), located
        try:
            fd = os.open(located.name, _DIR_FLAGS, dir_fd=located.dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                st = os.stat(located.name, dir_fd=located.dir_fd, follow_symlinks=False)
                located.close()
                if stat.S_ISLNK(st.st_mode):
                    continue
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", raw) from None
            located.close()
            raise
        return fd, located
    raise ToolInputError(f"{shown_name(raw)} kept changing while it was opened; try again.")


def display_path(path: Path, ctx: ToolContext) -> str:
    """``path`` relative to the workspace when inside it, else absolute; escaped for JSON."""
    try:
        return shown_name(str(path.relative_to(Path(os.path.realpath(ctx.workspace)))) or ".")
    except ValueError:
        return shown_name(str(path))

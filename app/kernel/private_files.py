"""Files under the data directory: the owner's only, never through a planted symlink.

Everything tidegauge keeps per session (transcript, session memory, meta.json,
locks, MCP server logs) can hold the user's code, conversation or a secret.
So every such file is created 0600 and re-chmodded 0600 when it already existed
(``O_CREAT`` keeps an existing file's mode), folders we create are 0700, and
every open has ``O_NOFOLLOW``: a symlink put at the path by another local user
(or left by anything else) makes the open fail instead of redirecting the write.
A path that is not a regular file (a FIFO, a device) is refused too.

Saved tool outputs (the registry's, ``run_bash``'s and the engine's) are opened
with ``open_private``. This module sits below ``app.tools`` and ``app.context``,
so both use it without importing each other.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any

FILE_MODE = 0o600
DIR_MODE = 0o700
# O_NONBLOCK: opening a FIFO planted at the path must fail at once, not wait for a reader.
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)


def make_private_dir(path: Path) -> None:
    """``path`` and the parents we create, 0700 (an existing folder keeps its mode: it may be the user's)."""
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)  # mkdir's mode is cut by the umask; 0700 is what we mean


def open_private_fd(path: Path, flags: int) -> int:
    """A descriptor on ``path`` (created 0600 when missing), never through a symlink.

    ``flags`` are the access flags (``os.O_WRONLY | os.O_APPEND``...). Raises OSError
    (ELOOP for a symlink) and refuses what is not a regular file of ours.
    """
    fd = os.open(path, flags | os.O_CREAT | _SAFE_FLAGS, FILE_MODE)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        if stat.S_IMODE(info.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)  # fails (EPERM) for a file another user owns: refused too
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(target: Path) -> IO[bytes]:
    """``target`` opened for writing from its start (a saved tool output), by the same rules."""
    make_private_dir(target.parent)
    return os.fdopen(open_private_fd(target, os.O_WRONLY | os.O_TRUNC), "wb")


def write_private_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once: a crash leaves the old file or the new one.

    The temporary file is made by ``mkstemp`` (O_EXCL, 0600) and renamed over the
    path; a rename replaces a symlink there rather than writing through it.
    """
    make_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_private(path: Path, max_bytes: int, offset: int = 0, *, ours: bool = False) -> bytes:
    """At most ``max_bytes`` of a regular file from ``offset``, never through a symlink (OSError otherwise).
    ``ours``: only a file this user owns that no one else may write or read (0600, as we
    write them); a file another user made, or one left group- or world-writable, is refused."""
    fd = _open_regular(path, ours=ours)
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        return _read_up_to(fd, max_bytes)
    finally:
        os.close(fd)


def read_private_ends(path: Path, head_bytes: int, tail_bytes: int) -> tuple[bytes, bytes, int]:
    """The first ``head_bytes`` and the last ``tail_bytes`` (not overlapping the head) of a
    regular file and its size, by the rules above: a saved output too big to read whole."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        head = _read_up_to(fd, head_bytes)
        tail = b""
        if tail_bytes > 0 and size > len(head):
            os.lseek(fd, max(len(head), size - tail_bytes), os.SEEK_SET)
            tail = _read_up_to(fd, tail_bytes)
        return head, tail, size
    finally:
        os.close(fd)


def _open_regular(path: Path, *, ours: bool = False) -> int:
    """A blocking descriptor of the regular file ``path``, never through a symlink (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | _SAFE_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if ours and (info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077):
            raise OSError(errno.EPERM, f"not tidegauge's own file (owner {info.st_uid}, "
                                       f"mode {stat.S_IMODE(info.st_mode):04o}; ours are 0600)", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private_read(path: Path | str) -> IO[bytes]:
    """``path`` opened for reading (a transcript read line by line), never through a symlink,
    only a regular file (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | _SAFE_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def refusal(path: Path, error: OSError) -> str | None:
    """The one line saying why a file under the data directory was not read, or None when it is
    simply not there (a first run): a planted symlink, a FIFO or an unreadable file is said."""
    if isinstance(error, FileNotFoundError):
        return None
    if error.errno == errno.ELOOP:
        return f"{path} is a symlink: not followed, not read (remove it; tidegauge writes a file there)"
    reason = error.strerror or str(error)
    return f"{path} not read: {reason}"


def _read_up_to(fd: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    left = max_bytes
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_kept_json(path: Path, max_bytes: int, *, ours: bool = False,
                   refused: list[str] | None = None) -> dict[str, Any]:
    """A small JSON object tidegauge keeps between runs (a cache), by the rules above; ``{}`` when
    it is missing, bigger than ``max_bytes``, not JSON or not an object: the caller starts afresh.
    Only the shape is checked here; what each field may hold is the caller's to check.
    ``ours`` as for ``read_private``; ``refused`` gets the line saying why a file there was not read."""
    try:
        raw = read_private(path, max_bytes + 1, ours=ours)
        kept = json.loads(raw) if len(raw) <= max_bytes else {}
    except OSError as error:
        line = refusal(path, error)
        if line is not None and refused is not None:
            refused.append(line)
        return {}
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json parses
        return {}
    return kept if isinstance(kept, dict) else {}


def write_kept_json(path: Path, value: dict[str, Any]) -> None:
    """Replace such a file (atomically, 0600). Never creates the data directory (the session store
    does), and a read-only one only means the next run starts afresh."""
    if not path.parent.is_dir():
        return
    try:
        write_private_atomic(path, json.dumps(value, separators=(",", ":")).encode())
    except OSError:
        pass


def remove_private(path: Path) -> bool:
    """Delete ``path`` (a logout's tokens); whether there was something to delete. ``unlink``
    never follows a link: a symlink planted at the path is removed, never the file it points at.
    A folder there is left alone (OSError)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True

"""One writer per session: an advisory lock on a file beside the transcript.

Two processes appending to one transcript interleave their turns into one
history (two tasks merged into one message, tool results doubled on the next
``--continue``). So the process that writes a session holds an exclusive
``flock`` on ``<transcript>.lock`` for as long as its writer is open, and
records its pid there so a refusal can name it.

The kernel drops a flock when its holder dies (kill -9 included), so a lock
file left by a dead process is simply taken over. A file whose lock is still
held although the recorded pid is gone (the descriptor leaked into some other
process) is replaced: the new lock is on a fresh file.

Within one process the lock is counted, not refused: the same session may
have a writer open while another one is created (tests, a reopened writer).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.kernel.errors import SetupError
from app.kernel.private_files import open_private_fd, read_private

LOCK_SUFFIX = ".lock"
GUARD_SUFFIX = ".take.lock"  # ends in .lock: a fork copies neither


class SessionLocked(SetupError):
    """Another live process writes this session; the message names it and says what to do."""

    def __init__(self, message: str, *, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


@dataclass
class _Held:
    fd: int
    count: int


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


def lock_path_for(transcript_path: Path) -> Path:
    return transcript_path.with_name(transcript_path.name + LOCK_SUFFIX)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    return True


def read_holder(lock_path: Path) -> dict[str, object]:
    """What the holder wrote: pid and start time ({} when unreadable)."""
    try:
        raw = read_private(lock_path, 64 * 1024)  # never through a symlink planted at the lock
        data = json.loads(raw.decode("utf-8", errors="replace") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(transcript_path: Path, holder: dict[str, object]) -> str:
    session = transcript_path.parent.name
    pid = holder.get("pid")
    since = holder.get("since")
    when = ""
    if isinstance(since, (int, float)):
        when = time.strftime(" since %H:%M:%S", time.localtime(since))
    who = f"process {pid}" if isinstance(pid, int) else "another process"
    return (f"session {session} is in use by {who}{when}; wait for it to end, "
            "or add --fork-session to continue in a copy of it")


def acquire(transcript_path: Path) -> Path:
    """Hold the lock of this transcript for this process; raises SessionLocked naming the holder."""
    lock_path = lock_path_for(transcript_path)
    key = str(lock_path.resolve()) if lock_path.parent.exists() else str(lock_path)
    with _held_guard:
        held = _held.get(key)
        if held is not None:
            held.count += 1
            return lock_path
        fd = _take(lock_path, transcript_path)
        _held[key] = _Held(fd=fd, count=1)
    return lock_path


def release(lock_path: Path) -> None:
    key = str(lock_path.resolve()) if lock_path.parent.exists() else str(lock_path)
    with _held_guard:
        held = _held.get(key)
        if held is None:
            return
        held.count -= 1
        if held.count > 0:
            return
        del _held[key]
        try:
            # Empty the file before letting go: a pid left behind would name a process
            # that no longer holds anything.
            os.ftruncate(held.fd, 0)
        except OSError:
            pass
        os.close(held.fd)  # closing drops the flock


def _take(lock_path: Path, transcript_path: Path) -> int:
    # Taking the lock and writing our pid into it are two steps. Without a guard, a second
    # process could fail the flock between them, read the pid a dead earlier holder left
    # (one that exited without release), judge the lock leaked, unlink it and lock a fresh
    # file: two writers on one transcript, their tasks merged into one message. Both steps
    # happen under a short blocking flock on a guard file, so whoever reads the pid reads
    # the live holder's.
    guard = open_private_fd(lock_path.with_name(lock_path.name + GUARD_SUFFIX), os.O_RDWR)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        return _take_guarded(lock_path, transcript_path)
    finally:
        os.close(guard)  # closing drops the guard's flock


def _take_guarded(lock_path: Path, transcript_path: Path) -> int:
    for attempt in range(2):
        fd = open_private_fd(lock_path, os.O_RDWR)  # 0600, never through a symlink
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(lock_path)
            pid = holder.get("pid")
            if attempt == 0 and isinstance(pid, int) and not _pid_alive(pid):
                # Held by a descriptor that outlived its process: start a fresh lock file.
                try:
                    lock_path.unlink()
                except OSError:
                    pass
                continue
            raise SessionLocked(_describe(transcript_path, holder),
                                pid=pid if isinstance(pid, int) else None) from None
        except BaseException:
            os.close(fd)
            raise
        payload = json.dumps({"pid": os.getpid(), "since": time.time()}).encode("ascii") + b"\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, payload, 0)
        return fd
    raise SessionLocked(_describe(transcript_path, read_holder(lock_path)), pid=None)  # pragma: no cover

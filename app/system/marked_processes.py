"""Processes found by an entry in their environment, and killed: what headless mode's watchdog
does once tidegauge has gone (``app/system/watchdog.py``), and the reads ``proctree`` shares.

Nothing but ``os`` and ``_signal`` at module level: the watchdog imports this module after every
headless run, in an interpreter started with ``-I -S``, where importing ``proctree`` (ctypes,
subprocess, uuid and platform, threading, typing) cost several times the sweep itself, and
``signal`` alone (it imports enum, functools and collections) about as much as the sweep.
"""

import os

# signal's C half, which signal.py re-exports: the same functions and numbers (they differ between
# architectures, so never written here) without the enum machinery signal.py builds on import.
import _signal  # type: ignore[import-not-found]  # typeshed has no stub for it

SIGSTOP: int = _signal.SIGSTOP
SIGCONT: int = _signal.SIGCONT
SIGKILL: int = _signal.SIGKILL

# Forks racing our kill are caught by looking again; this bounds the rounds.
MAX_KILL_ROUNDS = 50


def environ_entries(pid: int) -> list[bytes]:
    """The ``NAME=value`` entries a process was started with (none when we may not read them)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def send_signal(pid: int, sig: int) -> None:
    """``os.kill``, quiet when the process is gone or not ours to signal."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pids_of_user(uid: int) -> list[int]:
    pids: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return pids
    for name in names:
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


def kill_marked(name: str, value: str) -> int:
    """SIGKILL every process of this user whose environment holds exactly ``name=value``; how many.

    For when the process that started them is gone (so no tree is left to walk): its token,
    inherited by every descendant, ``setsid`` ones too, is what marks them. Stopped first and
    looked for again, as ``proctree.kill_run`` does, so a fork in flight is caught (the child
    inherits the token); checked once more while stopped, so a pid reused in between is never killed.
    """
    if not value:
        return 0
    entry = f"{name}={value}".encode()
    me, uid = os.getpid(), os.getuid()
    stopped: set[int] = set()
    for _ in range(MAX_KILL_ROUNDS):
        fresh = {pid for pid in pids_of_user(uid)
                 if pid != me and pid not in stopped and entry in environ_entries(pid)}
        if not fresh:
            break
        for pid in fresh:
            send_signal(pid, SIGSTOP)
        stopped |= fresh
    killed = 0
    for pid in stopped:
        if entry in environ_entries(pid):
            send_signal(pid, SIGKILL)
            killed += 1
        send_signal(pid, SIGCONT)  # not (or no longer) a marked process: let it run on
    return killed

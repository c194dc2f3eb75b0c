"""Whole process trees: everything a run_bash command started dies with it.

A process group is not enough: ``setsid sleep 1003 &`` leaves the group and,
once bash exits, the kernel hands the orphan to init, out of our sight. So:

- tidegauge becomes a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``,
  Linux): orphans of its descendants are re-parented to it instead of init;
- every command runs with a marker in its environment (``TIDEGAUGE_TOOL_RUN``,
  a token per call), which its children inherit;
- killing a run kills, until none is left: bash's descendants, its process
  group, and every descendant of tidegauge that carries the run's marker.
  Processes are stopped (SIGSTOP) before they are killed, so none can fork
  a new one between our look and our kill.

Background processes a command leaves on purpose (``nohup server &``) live
on until tidegauge exits: ``kill_all_descendants()`` ends every process that
carries any run's marker (an ``atexit`` hook calls it; the app should call
it on its own exit paths too). Re-parented orphans are reaped here, never a
pid that someone else (asyncio's child watcher) waits for.

In tidegauge's own processes (the CLI and the dashboard's session process, not
a program that imports a session, such as a test run) ``claim_every_descendant()``
makes every descendant "ours": MCP servers and their children, what a server
left behind, the session process and all it started. Exit paths then end them all.

A SIGKILL leaves no time for any of that: ``dying_with_parent`` (util-linux's ``setpriv``
in front of the command; where there is none, ``die_with_parent``, a ``preexec_fn``)
asks the kernel to kill bash when the thread that started it dies, and whoever
tidegauge's orphans are handed to ends the rest: the dashboard (a subreaper), or
headless mode's watchdog (``app/system/watchdog.py``, ``marked_processes.kill_marked``: every
process of this user whose environment holds the run's token).

Reads ``/proc`` directly; off Linux the marker and the group are all we have.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import select
import signal
import subprocess
import sys
import threading
import uuid
from typing import TYPE_CHECKING

from app.system.marked_processes import MAX_KILL_ROUNDS as _MAX_KILL_ROUNDS, environ_entries as _environ_entries, \
    send_signal as _signal

if TYPE_CHECKING:
    from typing import Callable

MARKER_ENV = "TIDEGAUGE_TOOL_RUN"
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1

_lock = threading.RLock()  # re-entrant: an exit on a signal may come while this thread holds it
_subreaper: bool | None = None
# Orphans of finished runs that were handed to us: reaped once they exit.
_adopted: set[int] = set()
# Markers this process handed out: only their carriers are ever killed as "ours"
# (a tidegauge started from another one's run_bash inherits that one's marker).
_issued: set[str] = set()
# Set in tidegauge's own processes: every descendant was started by us and ends with us.
_every_descendant_is_ours = False
# Descendants that end on their own once we have gone (headless mode's watchdog): never killed.
_spared: set[int] = set()
_libc: ctypes.CDLL | None = None


def _linux_libc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def claim_every_descendant() -> None:
    """This process is tidegauge itself: whatever runs below it at exit is killed (and it becomes
    a subreaper, so what its children leave behind stays below it)."""
    global _every_descendant_is_ours
    _every_descendant_is_ours = True
    enable_subreaper()


def spare(pid: int) -> None:
    """Never kill ``pid`` as one of ours: it ends itself once this process has ended (the watchdog)."""
    with _lock:
        _spared.add(pid)


# Where util-linux's setpriv is looked for: fixed system folders, never the command's PATH (a
# workspace's own "setpriv" must not run in front of every command).
SETPRIV_PATHS = ("/usr/bin/setpriv", "/bin/setpriv")


def dying_with_parent(argv: list[str]) -> "tuple[list[str], Callable[[], None] | None]":
    """``argv`` and the ``preexec_fn`` that start it so that it gets SIGKILL when the thread that
    started it ends (a SIGKILL of tidegauge, the OOM killer). Where a setpriv takes
    ``--pdeathsig``, the kernel is asked by the program the child execs (``setpriv --pdeathsig
    KILL -- argv``) and no ``preexec_fn`` is needed, which lets subprocess use vfork: a fork copies
    the page tables of the whole process and every page it then writes faults once (a command cost
    13 ms of CPU at 100 MB of tidegauge and 80 ms at 800 MB; 3 ms this way). Elsewhere (util-linux
    before 2.33, not Linux) ``die_with_parent`` runs between fork and exec, as before. A death
    between the exec and setpriv's ``prctl`` leaves the command to the subreaper or headless mode's
    watchdog, as a double fork would."""
    prefix = _working_setpriv()
    if prefix is None:
        return argv, die_with_parent()
    return [*prefix, *argv], None


@functools.cache
def _working_setpriv() -> tuple[str, ...] | None:
    """Once per process: the first setpriv that sets a death signal and execs (it execs itself)."""
    if not sys.platform.startswith("linux"):
        return None
    for path in SETPRIV_PATHS:
        if not os.access(path, os.X_OK):
            continue
        prefix = (path, "--pdeathsig", "KILL", "--")
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            probe = subprocess.run([*prefix, path, "--version"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
            if probe.returncode == 0:
                return prefix
    return None


def die_with_parent() -> "Callable[[], None]":
    """A ``preexec_fn``: the child gets SIGKILL when the thread that forked it ends (a SIGKILL of
    tidegauge, the OOM killer), and ends at once if that already happened before it asked."""
    parent = os.getpid()
    libc = _linux_libc()

    def in_the_child() -> None:
        if libc is None:
            return
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody would tell us
            os._exit(137)

    return in_the_child


def enable_subreaper() -> bool:
    """Make this process a child subreaper (once); True if the kernel agreed."""
    global _subreaper
    with _lock:
        if _subreaper is not None:
            return _subreaper
        _subreaper = False
        libc = _linux_libc()
        if libc is not None:
            try:
                _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except AttributeError:
                _subreaper = False
        atexit.register(kill_all_descendants)
        return _subreaper


def new_marker() -> str:
    marker = uuid.uuid4().hex
    with _lock:
        _issued.add(marker)
    return marker


def _stat_fields(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) from /proc/<pid>/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields follow the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _process_table() -> dict[int, tuple[str, int, int]]:
    table: dict[int, tuple[str, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                table[int(name)] = fields
    return table


def _children_files() -> bool:
    """Does this kernel list a task's children (/proc/PID/task/TID/children, CONFIG_PROC_CHILDREN)?"""
    global _has_children_files
    if _has_children_files is None:
        me = os.getpid()
        _has_children_files = os.path.exists(f"/proc/{me}/task/{me}/children")
    return _has_children_files


_has_children_files: bool | None = None


def _descendant_table() -> dict[int, tuple[str, int, int]]:
    """The stat fields of this process's descendants only, walked down the children files.

    Reading every process on the machine took ~10 ms at 120 processes on a busy machine, and a
    quit read the table four times (the session process and the dashboard, each when the session
    ends and at exit); a walk costs what the tree holds, usually nothing. The kill loop stops
    what it finds and walks again, so a fork in flight is found as with the whole table.
    Falls back to the whole table where the kernel has no children files.
    """
    if not _children_files():
        return _process_table()
    table: dict[int, tuple[str, int, int]] = {}
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # it has ended
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    data = f.read()
            except OSError:
                continue  # that thread has ended
            for word in data.split():
                child = int(word)
                if child in table:
                    continue
                fields = _stat_fields(child)
                if fields is not None:
                    table[child] = fields
                    stack.append(child)
    return table


def _descendants(root: int, table: dict[int, tuple[str, int, int]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (_state, ppid, _pgid) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _marker_of(pid: int) -> str | None:
    """The run marker in a process's environment, if it has one (and we may read it)."""
    key = MARKER_ENV.encode() + b"="
    for entry in _environ_entries(pid):
        if entry.startswith(key):
            return entry[len(key) :].decode(errors="replace")
    return None


def _members(marker: str | None, leader: int | None, table: dict[int, tuple[str, int, int]]) -> set[int]:
    """Live processes of one run (``marker``), or of every run when ``marker`` is None."""
    me = os.getpid()
    members: set[int] = set()
    if leader is not None:
        members |= _descendants(leader, table)
        members |= {pid for pid, (_s, _pp, pgid) in table.items() if pgid == leader}
        if leader in table:
            members.add(leader)
    every = _descendants(me, table)
    if marker is None and _every_descendant_is_ours:
        members |= every
        every = set()
    for pid in every:
        found = _marker_of(pid)
        if found is not None and (found == marker or (marker is None and found in _issued)):
            members.add(pid)
            members |= _descendants(pid, table)
    members.discard(me)
    members -= _spared
    return {pid for pid in members if table.get(pid, ("Z",))[0] not in ("Z", "X")}


def signal_run(marker: str, leader: int | None, sig: signal.Signals) -> None:
    """Send ``sig`` to every live process of the run (a polite SIGTERM first, say)."""
    for pid in _members(marker, leader, _process_table()):
        _signal(pid, sig)


def kill_run(marker: str | None, leader: int | None, *, spare: int | None = None) -> int:
    """SIGKILL every process of a run (every run when ``marker`` is None); how many were killed.

    Everything found is stopped first, then looked for again (a fork in flight
    shows up as a child of a stopped process), and killed once the set is
    complete. ``spare`` is a pid not to reap (asyncio waits for bash itself).
    """
    stopped: set[int] = set()
    # Without a leader every member is a descendant of this process (a run's orphans are ours
    # too: the subreaper); a leader's process group may hold processes that left the tree.
    table_of = _descendant_table if leader is None else _process_table
    for _ in range(_MAX_KILL_ROUNDS):
        table = table_of()
        members = _members(marker, leader, table) | {p for p in stopped if p in table}
        fresh = members - stopped
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
        _signal(pid, signal.SIGCONT)  # a stopped process handles SIGKILL anyway; harmless
    me = os.getpid()
    table = table_of()
    with _lock:
        for pid in stopped:
            if pid != spare and table.get(pid, ("", 0, 0))[1] == me:
                _adopted.add(pid)
    reap_adopted()
    return len(stopped)


def adopt_orphans(marker: str, spare: int | None = None) -> None:
    """Remember the orphans of a finished run that are now our children, to reap them later."""
    me = os.getpid()
    table = _descendant_table()
    with _lock:
        for pid, (_state, ppid, _pgid) in table.items():
            if ppid == me and pid != spare and _marker_of(pid) == marker:
                _adopted.add(pid)
    reap_adopted()


def reap_adopted() -> None:
    """Collect the exit status of adopted orphans that have ended (no zombies left behind)."""
    with _lock:
        for pid in list(_adopted):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                _adopted.discard(pid)  # not ours any more, or already collected
                continue
            if done:
                _adopted.discard(pid)


def kill_all_descendants() -> int:
    """Kill every process any run_bash command left behind; call it when tidegauge exits.

    Only processes that carry a run marker (and their children) are touched:
    what the app started itself (say, a server it talks to) is left to the app,
    unless ``claim_every_descendant()`` said that everything below is ours.
    Returns how many processes were killed.
    """
    if not sys.platform.startswith("linux"):
        return 0
    killed = kill_run(None, None)
    # Give the kernel a moment to turn them into zombies we can collect.
    for _ in range(100):
        with _lock:
            if not _adopted:
                break
        reap_adopted()
        if _adopted:
            threading.Event().wait(0.01)
    return killed


def wait_for_exit(process: "subprocess.Popen[bytes]", timeout: float) -> None:
    """``process.wait(timeout)``, seeing the exit the moment it happens.

    CPython waits with a timeout by polling, sleeping up to 50 ms between looks, so a quit saw
    its session process end up to 50 ms late; a pidfd (Linux 5.3) is readable at the exit.
    Raises ``subprocess.TimeoutExpired`` as ``wait`` does.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or already collected
        process.wait(timeout)
        return
    try:
        ready, _w, _x = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if not ready:
        raise subprocess.TimeoutExpired(process.args, timeout)
    process.wait()

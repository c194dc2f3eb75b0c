"""Headless tidegauge's watchdog: a kill -9 of tidegauge still ends everything it started.

A SIGKILL (the OOM killer) leaves tidegauge no time to end its processes, and the kernel's
``PR_SET_PDEATHSIG`` only reaches the command ``run_bash`` was running, not what it put in the
background (``setsid sleep 1001 &``) nor MCP servers' children. So, at a headless start:

- tidegauge puts a random token, one per run, in its environment (``RUN_TOKEN_ENV``): every
  process it starts inherits it, and theirs too, ``setsid`` or not; MCP servers, which get a
  minimal environment, are given it explicitly (``token_env``);
- it starts this watchdog, in a session of its own (a kill of tidegauge's process group does
  not take it), with the read end of a pipe on its stdin; only tidegauge holds the write end.
  The token goes down the pipe, never on a command line (``ps`` shows every user's).

The watchdog blocks on the pipe (no CPU, ~10 MB). End of file means tidegauge has ended, however
it ended: the watchdog then kills every process of this user whose environment holds exactly
``RUN_TOKEN_ENV=<token>`` (``marked_processes.kill_marked``) and exits. On a normal exit tidegauge has
already ended everything, so the look finds nothing; tidegauge never kills the watchdog
(``proctree.spare``), so the look always happens.

Escapes, by design: a process that drops its environment (``env -i``), one whose environment
this user may not read (a setuid program), or another user's.
"""

# Only what the watchdog itself needs at module level: it starts on every headless run (and no
# ``from __future__ import annotations``: its annotations need none, and it is one more import).
import os
import sys

# signal's C half (signal.py re-exports it): signal.py imports enum, functools and collections,
# about as much CPU as the rest of the watchdog's life after its interpreter has started.
import _signal  # type: ignore[import-not-found]  # typeshed has no stub for it

RUN_TOKEN_ENV = "TIDEGAUGE_RUN_TOKEN"
_TOKEN_LENGTH = 32  # secrets.token_hex(16)
_MAX_TOKEN_LINE = 64

# The write end of the pipe, held (never written after the token) until this process ends.
_pipe_to_watchdog: int | None = None


def token_env() -> dict[str, str]:
    """The run's token as an environment entry, for a process started with an environment of its
    own (an MCP server); empty when no watchdog runs."""
    token = os.environ.get(RUN_TOKEN_ENV)
    return {RUN_TOKEN_ENV: token} if token else {}


def start_watchdog() -> int | None:
    """Start the watchdog and mark this process's environment with its token; the watchdog's pid.

    Call it once, early, before anything is started (the token must be in every child's
    environment). Linux only (it reads ``/proc``).
    """
    global _pipe_to_watchdog
    if _pipe_to_watchdog is not None or not sys.platform.startswith("linux"):
        return None
    # Only the process that starts the watchdog needs these; the watchdog itself runs this file with -I -S.
    import secrets
    import subprocess

    from app.system import proctree

    token = secrets.token_hex(16)
    read_end, write_end = os.pipe()  # not inheritable: no child of ours ever holds the write end
    # Without a token of its own: a watchdog started by a tidegauge that runs inside another's
    # run_bash must outlive that one's sweep, to do its own.
    env = {k: v for k, v in os.environ.items() if k != RUN_TOKEN_ENV}
    try:
        # -I -S: no site-packages, no PYTHON* variables, no cwd on the path (~10 ms, not ~40).
        watchdog = subprocess.Popen([sys.executable, "-I", "-S", os.path.realpath(__file__)],
                                    stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=env, cwd="/", start_new_session=True)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    os.write(write_end, f"{token}\n".encode())
    _pipe_to_watchdog = write_end
    proctree.spare(watchdog.pid)
    os.environ[RUN_TOKEN_ENV] = token
    return watchdog.pid


def _read_token(fd: int) -> str | None:
    line = b""
    while not line.endswith(b"\n") and len(line) <= _MAX_TOKEN_LINE:
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        line += chunk
    token = line.strip().decode("ascii", errors="replace")
    return token if len(token) == _TOKEN_LENGTH and set(token) <= set("0123456789abcdef") else None


def watch(fd: int = 0) -> int:
    """The watchdog's life: the token, then a blocking read until end of file, then the sweep."""
    for signum in (_signal.SIGINT, _signal.SIGHUP):  # a ctrl+c or a closed terminal is tidegauge's to handle
        _signal.signal(signum, _signal.SIG_IGN)
    token = _read_token(fd)
    if token is None:
        return 2  # not started by tidegauge, or tidegauge died before it spoke: nothing is marked
    while os.read(fd, 4096):
        pass
    # Imported once the pipe closes: the watchdog (run as a file, -I -S) loads tidegauge's code only
    # to kill, and only the module that needs nothing but os and signal (not proctree's imports).
    from app.system.marked_processes import kill_marked

    kill_marked(RUN_TOKEN_ENV, token)
    return 0


if __name__ == "__main__":
    # Started as a file with -I -S: the package is found from here (app/system/watchdog.py: three
    # levels up is the folder holding app/), nothing else is on the path.
    here = os.path.realpath(__file__)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(here))))
    sys.exit(watch())

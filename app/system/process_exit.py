"""Ending a process without tearing the interpreter down.

Used where everything that matters is already written (transcripts are written with
``os.write`` and fsync'ed as they go) and Python's own finalization would only cost time
or fail: freeing ~80K objects after the dashboard closes (~1 s of a quit), a daemon thread
still blocked on stdin's lock in the session process (an abort, exit -6), a second ctrl+c,
a SIGTERM or a SIGHUP (the terminal closed).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from types import FrameType
from typing import NoReturn


def is_the_tidegauge_process() -> bool:
    """Was this process started as ``tidegauge`` (the console script or ``python -m app``),
    rather than tidegauge's code running inside another program (a test run)?"""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "app.__main__":
        return True
    return os.path.basename(getattr(main, "__file__", "") or "") == "tidegauge"


def exit_without_teardown(code: int, *, run_exit_handlers: bool = True) -> NoReturn:
    """Flush the standard streams (after the exit handlers, unless told not to) and end the process."""
    if run_exit_handlers:
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_skipping_teardown_if_nothing_waits(code: int) -> None:
    """End the process with ``code`` as Python's own exit would, without freeing every object and
    module first (about 2% of a headless run's instructions); returns, for the ordinary exit to
    take over, when that exit would do more than the exit handlers and the flush.

    Python's exit joins every thread that is not a daemon, runs the exit handlers, flushes the
    standard streams, then tears the interpreter down: when no such thread is left, the same
    handlers in the same order and the same flush leave nothing for the teardown that anyone
    sees (the transcript, the request store and the data directory's files are written and
    closed as they go; what is left for exit is written by the handlers). A flush that fails (a
    reader that closed the pipe) is left to the ordinary exit, which reports it and exits 120.
    """
    # threading is loaded in any process that ran a session; imported here so this module stays
    # light for the signal handlers that import it at start-up.
    import threading

    main_thread = threading.main_thread()
    if any(not thread.daemon and thread is not main_thread for thread in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def end_everything_on(*signums: signal.Signals) -> None:
    """On these signals, end every process this one started, then this one (exit 128 + the signal).

    Without it a SIGTERM or SIGHUP ended tidegauge at once and left its tool processes and
    MCP servers (with their children) running. Which processes are "started by this one" is
    ``app.system.proctree``'s call (every descendant, in tidegauge's own processes).
    """
    for signum in signums:
        signal.signal(signum, _end_everything)


def exit_after_signal(signum: int, last_words: str) -> NoReturn:
    """End every process this one started, then this one (128 + the signal), from any thread,
    when the orderly quit a signal asked for never came. Nothing here may block on the
    terminal: it may be gone or no longer read, so ``last_words`` go out only if stderr takes
    them at once."""
    if last_words:
        try:
            os.set_blocking(2, False)
            os.write(2, f"tidegauge: stopped by {signal.Signals(signum).name}\n{last_words}\n".encode())
        except OSError:  # a full or closed terminal: nobody would read them
            pass
    proctree = sys.modules.get("app.system.proctree")
    if proctree is not None:
        proctree.kill_all_descendants()
    os._exit(128 + signum)


def _end_everything(signum: int, _frame: FrameType | None) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a second signal must not cut this short
        signal.signal(sig, signal.SIG_IGN)
    try:
        print(f"tidegauge: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # SIGHUP: the terminal may be gone
        pass
    proctree = sys.modules.get("app.system.proctree")
    if proctree is not None:
        proctree.kill_all_descendants()
    exit_without_teardown(128 + signum, run_exit_handlers=False)

"""Ending a process without tearing the interpreter down.

Used where everything that matters is already written (transcripts are written with
``os.write`` and fsync'ed as they go) and Python's own finalization would only cost time
or fail: freeing ~80K objects after the dashboard closes (~1 s of a quit), a daemon thread
still blocked on stdin's lock in the session process (an abort, exit -6), a second ctrl+c.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


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

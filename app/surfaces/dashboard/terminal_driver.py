"""Textual's Linux driver, closing without waiting for its input thread when the app quits.

Textual's input thread polls stdin with ``select(0.1)`` and, once told to stop, polls once more
with ``select(0.1)`` on nothing; stopping it joins that thread, so every quit waited a fixed
~0.2 s (of a ~0.26 s quit) before the terminal was given back. When the app is quitting, the
thread is told to stop and not waited for: nothing it could still read matters (Textual flushes
pending input anyway), the terminal is restored at once, and the process ends with
``os._exit`` (app.system.process_exit), which does not wait for threads either. Suspending
the app (an editor, a shell) still waits, as Textual does, since input resumes after it.
"""

from __future__ import annotations

import signal
import termios
from typing import Any, Protocol, runtime_checkable

from textual.drivers.linux_driver import LinuxDriver

# What Textual's driver writes to stop mouse reporting (normal, any-motion, urxvt, SGR).
MOUSE_REPORTING_OFF = "\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l"


@runtime_checkable
class QuittingApp(Protocol):
    """An app that says when it is quitting (rather than suspending)."""

    @property
    def quitting(self) -> bool: ...


class QuickQuitDriver(LinuxDriver):
    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, **options)
        self.owner = app

    def disable_input(self) -> None:
        owner = self.owner
        if not (isinstance(owner, QuittingApp) and owner.quitting) or self.exit_event.is_set():
            super().disable_input()
            return
        signal.signal(signal.SIGWINCH, signal.SIG_DFL)
        self.write(MOUSE_REPORTING_OFF)
        self.flush()
        self.exit_event.set()  # the thread ends within its next poll; it is not joined
        try:
            termios.tcflush(self.fileno, termios.TCIFLUSH)
        except termios.error:
            pass

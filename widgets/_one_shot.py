"""A one-shot timer that fires even when the process is preempted past its deadline.

Textual's ``set_timer`` (8.2.8) is a ``Timer(repeat=0, skip=True)``. When the timer's task first
reads the clock, a deadline that has already passed makes ``skip`` count the missed ticks past
``repeat``, and the task ends without calling back. A process preempted for longer than the delay
between two reads of the clock (a loaded machine, a long garbage collection) loses the timer: a
resize test of a long reply hung in 2 of 207 runs under stress-ng, its 1 ms slice timer lost. A
lost flush timer froze a streaming reply until its end: the next deltas saw a timer still set and
scheduled none. So a widget's one-shot waits are asyncio's ``call_later``, whose
callback runs however late the loop gets to it. The callback is handed to the widget's own queue
with ``call_next``, as Textual's timers do.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from textual.message_pump import MessagePump


class OneShot:
    """``callback`` run by ``pump`` once, ``delay`` seconds from now or as soon after as the loop can."""

    def __init__(self, pump: MessagePump, delay: float, callback: Callable[[], object]) -> None:
        self.delay = delay
        self._pump = pump
        self._callback = callback
        self._handle = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._pump.call_next(self._callback)

    def stop(self) -> None:
        """Do not call back (a no-op once it has fired)."""
        self._handle.cancel()

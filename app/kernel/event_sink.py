"""Where one agent's parts send their events.

The engine, the loop and a sub-agent's forwarding are built before the session that hears
them, so each is given the same ``EventSink`` when it is built, and whoever hears them
(the runtime's event stream, then the session) connects to it in one named place, before the
first event. Until then events go nowhere: a part is never left holding a stale callable.
"""

from __future__ import annotations

from typing import Callable

from app.kernel.events import Event

Listener = Callable[[Event], None]


def _nowhere(_event: Event) -> None:
    """No one connected yet (an engine in a test, a what-if replay)."""


class EventSink:
    """A callable that passes each event to the one listener connected."""

    def __init__(self, listener: Listener = _nowhere) -> None:
        self._listener = listener

    def __call__(self, event: Event) -> None:
        self._listener(event)

    def connect(self, listener: Listener) -> None:
        """From now on every event goes to ``listener`` (the session connects over the
        runtime's stream: its handler numbers them into that same stream)."""
        self._listener = listener

"""What a surface may call: the whole contract between the core and its surfaces.

The real session (``app.session.agent_session.AgentSession``) implements it, and so do
the test fakes (a test checks both against this Protocol, so they cannot drift).
A surface submits commands and reads events; it never reaches into the agent,
the engine, the providers or the tools.

The events are a log (codex's operations in, events out): each carries ``seq`` (its place,
rising by one) and ``command_id`` (what ``submit`` returned for the command that caused it).
A surface ``attach``es: one snapshot at seq N, then every event after N, nothing lost between
the two and nothing twice, however late it attaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import threading
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from app.kernel.commands import Command
    from app.kernel.events import ContextEvent, Event, SessionInfoEvent, StateEvent

Listener = Callable[["Event"], None]


@dataclass
class SessionSnapshot:
    """Everything a surface needs to draw a session it attaches to, in one read."""

    info: "SessionInfoEvent"
    context: "ContextEvent"
    state: "StateEvent"
    # Events of the earlier runs of a resumed session, in order, to redraw the
    # conversation, the tool list and the gauge's history (no deltas among them).
    restored: list["Event"] = field(default_factory=list)
    busy: bool = False
    queued: int = 0
    # The seq of the last event this snapshot includes: the attached listener gets those after it.
    seq: int = 0
    # This run's events up to ``seq``, in order (the last ``EVENT_RING`` of them): what was said
    # before the surface attached (start-up warnings, repairs, MCP servers that failed) is not lost.
    events: list["Event"] = field(default_factory=list)


# How many of its latest events a session keeps for a surface that attaches late.
EVENT_RING = 4096


@runtime_checkable
class SessionSurface(Protocol):
    """The calls a surface may make."""

    def submit(self, command: "Command") -> int:
        """Queue a command (thread-safe); returns its id. Busy or not, it never blocks."""
        ...

    def attach(self, listener: Listener) -> tuple[SessionSnapshot, Callable[[], None]]:
        """The session as it stands at some seq N and, under the same lock, the listener
        subscribed to every event after N; returns the snapshot and the unsubscribe function.

        Listeners are called on the session's own thread: a surface with a UI thread
        hands each event over itself (the dashboard posts a Textual message), and one that
        must draw the snapshot first holds them until it has (``HeldListener``).
        """
        ...

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive every event from now on, without a snapshot (a listener added before the
        session runs, as headless mode's printers and tests are); returns the unsubscribe."""
        ...

    def snapshot(self) -> SessionSnapshot:
        """The session as it stands now."""
        ...


class Listeners:
    """A session's listeners in order of subscription, changed under its owner's lock: the lock
    its snapshot is taken and its events are passed on under, so ``attach`` misses nothing."""

    def __init__(self, lock: "threading.RLock") -> None:
        self._lock = lock
        self._items: list[Listener] = []

    def add(self, listener: Listener) -> Callable[[], None]:
        """Add ``listener``; returns the function that removes it (safe to call twice)."""
        with self._lock:
            self._items.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._items:
                    self._items.remove(listener)

        return remove

    def current(self) -> tuple[Listener, ...]:
        """The listeners now (call it under the lock; the tuple is safe to iterate after)."""
        return tuple(self._items)


class HeldListener:
    """A listener that holds the events it gets until ``release``: attach with it, draw the
    snapshot on your own thread, then release, and the events after the snapshot follow it in
    order (the session's thread may call it while the snapshot is being drawn)."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._held: list["Event"] | None = []
        self._lock = threading.Lock()

    def __call__(self, event: "Event") -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(event)
                return
        self._listener(event)

    def release(self) -> None:
        """Pass on what was held, then every event as it comes."""
        with self._lock:  # under the lock: an event arriving now waits, so none overtakes the held ones
            held, self._held = self._held or [], None
            for event in held:
                self._listener(event)

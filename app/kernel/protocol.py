"""What a surface may call: the whole contract between the core and its surfaces.

The real session (``app.session.agent_session.AgentSession``) implements it, and so do
the test fakes (a test checks both against this Protocol, so they cannot drift).
A surface submits commands and reads events; it never reaches into the agent,
the engine, the providers or the tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@runtime_checkable
class SessionSurface(Protocol):
    """The three calls a surface may make."""

    def submit(self, command: "Command") -> int:
        """Queue a command (thread-safe); returns its id. Busy or not, it never blocks."""
        ...

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Receive every event from now on, in order; returns the unsubscribe function.

        Listeners are called on the session's own thread: a surface with a UI thread
        hands each event over itself (the dashboard posts a Textual message).
        """
        ...

    def snapshot(self) -> SessionSnapshot:
        """The session as it stands now."""
        ...

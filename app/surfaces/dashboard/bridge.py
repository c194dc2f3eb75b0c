"""From the session's event stream to the widgets' Textual messages.

The bridge is a listener of the session: it is called on the session's thread
and only posts messages (``post_message`` is thread-safe). Each event becomes
the messages ``widgets.session_messages.MESSAGES_FOR`` lists for its type, each
posted to the widgets whose class handles it. Deltas in a row share one
``Deltas`` message. The first other event after them is preceded by ``DeltasPaused``,
and the messages for other widgets wait in it until the reply has drawn its text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from widgets.session_messages import MESSAGES_FOR, Deltas, DeltasPaused, SessionMessage

if TYPE_CHECKING:
    from textual.message_pump import MessagePump


def handles(target: "MessagePump", message_type: type) -> bool:
    """Does the target's class declare an ``@on`` handler for this message type (or a base of it)?"""
    for cls in type(target).__mro__:
        decorated = cls.__dict__.get("_decorated_handlers") or {}
        if any(issubclass(message_type, handled) for handled in decorated):
            return True
    return False


class SessionBridge:
    """A session listener that turns events into messages for ``targets``."""

    def __init__(self, targets: Iterable["MessagePump"], deltas_target: "MessagePump") -> None:
        targets = list(targets)
        self._routes: dict[str, list[tuple[type[SessionMessage], "MessagePump"]]] = {
            event_type: [(message, target) for message in messages for target in targets if handles(target, message)]
            for event_type, messages in MESSAGES_FOR.items()
        }
        self._deltas_target = deltas_target
        self._batch: Deltas | None = None
        self._paused: DeltasPaused | None = None  # holds other widgets' messages until released

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "text_delta" or kind == "thinking_delta":
            batch = self._batch
            if batch is None or batch.kind != kind or not batch.add(event.text):
                batch = self._batch = Deltas(kind)
                batch.add(event.text)
                self._deltas_target.post_message(batch)
            return
        if self._batch is not None:  # sealed: deltas after this event come after it on screen
            self._paused = DeltasPaused(self._batch.kind, after=self._paused if self.holding else None)
            self._deltas_target.post_message(self._paused)
            self._batch = None
        for message_type, target in self._routes.get(kind, ()):
            message = message_type(event)
            if target is not self._deltas_target and self._paused is not None:
                if self._paused.hold(target, message):
                    continue
                self._paused = None  # released: the reply's text is on screen
            target.post_message(message)

    @property
    def holding(self) -> bool:
        """Messages wait for a reply's text to be drawn (tests wait for them to go out)."""
        return self._paused is not None and not self._paused.released

    def replay(self, events: Iterable[Any]) -> None:
        """Draw what an earlier run of a resumed session recorded (no deltas among them)."""
        for event in events:
            for message_type, target in self._routes.get(event.type, ()):
                target.post_message(message_type(event, restored=True))

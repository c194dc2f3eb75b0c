"""From the session's event stream to the widgets' Textual messages.

The bridge is a listener of the session: it is called on the session's thread
and only posts messages (``post_message`` is thread-safe). Each event is folded
once into the dashboard's view model (``app.surfaces.view_model.DashboardView``);
the tool call records it changed go out in one ``ToolCallsChanged`` message, and
the event itself as the messages ``widgets.session_messages.MESSAGES_FOR`` lists
for its type. Each message goes to the targets that list its type in their
``SESSION_MESSAGES``. Deltas in a row share one ``Deltas`` message. The first other
event after them is preceded by ``DeltasPaused``, and the messages for other widgets
wait in it until the reply has drawn its text. What an earlier run recorded (``replay``)
goes to a target that lists ``Replayed`` as one message holding its messages in order.
"""

from __future__ import annotations

from typing import Iterable

from app.kernel.envelope import EventEnvelope
from app.kernel.protocol import DELTAS
from app.surfaces.view_model import DashboardView
from widgets.session_messages import (
    MESSAGES_FOR,
    Deltas,
    DeltasPaused,
    SessionMessage,
    MessageTarget,
    Replayed,
    ToolCallsChanged,
    handled_messages,
)


class SessionBridge:
    """A session listener that folds events into ``view`` and turns them into messages for ``targets``."""

    def __init__(self, targets: Iterable[MessageTarget], deltas_target: MessageTarget,
                 view: DashboardView | None = None) -> None:
        targets = list(targets)
        self.view = view if view is not None else DashboardView()

        def handlers(message: type[SessionMessage]) -> list[MessageTarget]:
            return [target for target in targets if any(issubclass(message, handled)
                                                        for handled in handled_messages(target))]

        self._routes: dict[str, list[tuple[type[SessionMessage], MessageTarget]]] = {
            event_type: [(message, target) for message in messages for target in handlers(message)]
            for event_type, messages in MESSAGES_FOR.items()
        }
        self._record_targets = handlers(ToolCallsChanged)
        self._batch_targets = [target for target in targets
                               if Replayed in handled_messages(target)]
        self._deltas_target = deltas_target
        self._batch: Deltas | None = None
        self._paused: DeltasPaused | None = None  # holds other widgets' messages until released

    def __call__(self, envelope: EventEnvelope) -> None:
        event = envelope.event
        if isinstance(event, DELTAS):
            batch = self._batch
            if batch is None or batch.kind != event.type or not batch.add(event.text):
                batch = self._batch = Deltas(event.type)
                batch.add(event.text)
                self._deltas_target.post_message(batch)
            return
        if self._batch is not None:  # sealed: deltas after this event come after it on screen
            self._paused = DeltasPaused(self._batch.kind, after=self._paused if self.holding else None)
            self._deltas_target.post_message(self._paused)
            self._batch = None
        for target, message in self._messages(envelope, restored=False):
            if target is not self._deltas_target and self._paused is not None:
                if self._paused.hold(target, message):
                    continue
                self._paused = None  # released: the reply's text is on screen
            target.post_message(message)

    def _messages(self, envelope: EventEnvelope, *, restored: bool) -> "Iterable[tuple[MessageTarget, SessionMessage]]":
        records = self.view.apply(envelope)
        event = envelope.event
        if records:
            for target in self._record_targets:
                yield target, ToolCallsChanged(event, restored=restored, records=records)
        for message_type, target in self._routes.get(event.type, ()):
            yield target, message_type(event, restored=restored)

    @property
    def holding(self) -> bool:
        """Messages wait for a reply's text to be drawn (tests wait for them to go out)."""
        return self._paused is not None and not self._paused.released

    def replay(self, envelopes: Iterable[EventEnvelope], *, restored: bool = True) -> None:
        """Draw what an earlier run of a resumed session recorded (``restored``: no deltas among
        them; ``app.kernel.envelope.outside_log`` wraps them), or this run's events so far for a
        surface attaching late (``restored=False``: the ring's, a reply's deltas merged into one).
        A target that takes ``Replayed`` gets its messages in one, after those posted one by one."""
        batches: dict[int, list[SessionMessage | Deltas]] = {id(target): [] for target in self._batch_targets}
        into_batch = batches.get(id(self._deltas_target))
        for envelope in envelopes:
            event = envelope.event
            if isinstance(event, DELTAS):
                if into_batch is None:  # no target folds a batch: the deltas go as they do live
                    self(envelope)
                    continue
                deltas = Deltas(event.type)
                deltas.add(event.text)
                into_batch.append(deltas)
                continue
            for target, message in self._messages(envelope, restored=restored):
                batch = batches.get(id(target))
                if batch is None:
                    target.post_message(message)
                else:
                    batch.append(message)
        for target in self._batch_targets:
            if batches[id(target)]:
                target.post_message(Replayed(batches[id(target)], restored=restored))

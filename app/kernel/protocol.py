"""What a surface may call: the whole contract between the core and its surfaces.

The real session (``app.session.agent_session.AgentSession``) implements it, and so do
the test fakes (a test checks both against this Protocol, so they cannot drift).
A surface submits commands and reads events; it never reaches into the agent,
the engine, the providers or the tools.

The events are a log (codex's operations in, events out): a listener gets each in an envelope
(``app.kernel.envelope.EventEnvelope``) with ``seq`` (its place, rising by one) and ``command_id``
(what ``submit`` returned for the command that caused it) around the event itself.
A surface ``attach``es: one snapshot at seq N, then every event after N, nothing lost between
the two and nothing twice, however late it attaches.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
import threading
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, TypeAlias, assert_never, runtime_checkable

from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope

if TYPE_CHECKING:
    from app.kernel.commands import Command
    from app.kernel.events import ContextEvent, Event, SessionInfoEvent, StateEvent

Listener = Callable[[EventEnvelope], None]


@dataclass
class SessionSnapshot:
    """Everything a surface needs to draw a session it attaches to, in one read."""

    info: "SessionInfoEvent"
    context: "ContextEvent"
    state: "StateEvent"
    # Events of the earlier runs of a resumed session, in order, to redraw the
    # conversation, the tool list and the gauge's history (no deltas among them): not this
    # run's log, so without envelopes.
    restored: list["Event"] = field(default_factory=list)
    busy: bool = False
    queued: int = 0
    # The seq of the last event this snapshot includes: the attached listener gets those after it.
    seq: int = 0
    # This run's events up to ``seq``, in order (the last ``EVENT_RING`` of them, deltas in a row
    # of one reply as one): what was said before the surface attached (start-up warnings, repairs,
    # MCP servers that failed, the prompt a long reply answers) is not lost.
    events: list[EventEnvelope] = field(default_factory=list)
    # The events still in force at ``seq``, in order, whether or not ``events`` still holds them:
    # the commands waiting in the queue, the questions not answered yet (approvals, servers' forms,
    # imports to approve) and the latest of each kind that sets what a surface shows as current
    # (``STANDING_KINDS``). A surface replays those older than ``events`` before them.
    standing: list[EventEnvelope] = field(default_factory=list)


# How many of its latest events a session keeps for a surface that attaches late.
EVENT_RING = 4096

# The streamed pieces of a reply: in a row, of one kind and one command, they make one event.
DELTAS = (ev.TextDeltaEvent, ev.ThinkingDeltaEvent)
Delta: TypeAlias = "ev.TextDeltaEvent | ev.ThinkingDeltaEvent"
# Events whose latest of each class is what a surface shows now (the offered MCP prompts, the breaker,
# the cleared results, the server-side compaction switch), kept however long ago it was said.
Standing: TypeAlias = "ev.McpPromptsEvent | ev.BreakerEvent | ev.ClearedResultsEvent | ev.ServerCompactionEvent"
# Questions a session waits on (with an import outside the repository: ``memory_import``, ``ask``),
# and the events that answer them, with the same request id.
Question: TypeAlias = ("ev.ApprovalRequestEvent | ev.ElicitationRequestEvent | ev.ApprovalResolvedEvent"
                       " | ev.ElicitationResolvedEvent | ev.MemoryImportEvent")


def _question_key(event: Question) -> str:
    """What names a question and its answer: the request id, or the path of an import."""
    if isinstance(event, ev.MemoryImportEvent):
        return f"import:{event.path}"
    return f"request:{event.request_id}"


def continues_run(last: EventEnvelope, envelope: EventEnvelope) -> bool:
    """``envelope`` holds a delta that goes on from ``last`` (a delta of the same kind and command)."""
    return (isinstance(envelope.event, DELTAS) and type(envelope.event) is type(last.event)
            and envelope.command_id == last.command_id)


def merged_run(last: EventEnvelope, texts: list[str]) -> EventEnvelope:
    """A run of deltas as one event: their texts joined, in the last one's envelope (its seq and command id)."""
    return EventEnvelope(last.seq, last.command_id, last.event.model_copy(update={"text": "".join(texts)}))


def merge_deltas(envelopes: Iterable[EventEnvelope]) -> list[EventEnvelope]:
    """``envelopes`` with each run of deltas in a row (``continues_run``) made one (``merged_run``)."""
    merged: list[EventEnvelope] = []
    run: list[str] = []
    last: EventEnvelope | None = None
    for envelope in envelopes:
        event = envelope.event
        if last is not None and isinstance(event, DELTAS) and continues_run(last, envelope):
            run.append(event.text)
            last = envelope
            continue
        if last is not None:
            merged.append(merged_run(last, run))
            last = None
        if isinstance(event, DELTAS):
            run = [event.text]
            last = envelope
        else:
            merged.append(envelope)
    if last is not None:
        merged.append(merged_run(last, run))
    return merged


class CommandQueue:
    """The commands waiting behind a busy session, as its events tell them: one rule for the
    session's log and the dashboard's view model.

    A ``queued`` event adds one; the first later event its command caused (the same
    ``command_id``) takes it off: a prompt an interrupt dropped ends in its own result, a queued
    compaction stays through the interrupt and leaves when it runs. A queued reset replaces what
    was queued before it. Every session numbers its commands (the real one, its process and the
    test fake alike), so there is no rule for events without an id: they take nothing off.
    """

    def __init__(self) -> None:
        # The queued events of the commands waiting, oldest first, in their envelopes (the
        # command's id is the envelope's).
        self._waiting: list[EventEnvelope] = []

    @property
    def waiting(self) -> list[ev.CommandQueuedEvent]:
        """The queued events of the commands waiting, oldest first."""
        return [envelope.event for envelope in self._waiting if isinstance(envelope.event, ev.CommandQueuedEvent)]

    def envelopes(self) -> list[EventEnvelope]:
        """The same, in their envelopes (a snapshot's standing events)."""
        return list(self._waiting)

    def see(self, envelope: EventEnvelope) -> bool:
        """Fold one event in; whether the queue changed."""
        if isinstance(envelope.event, ev.CommandQueuedEvent):
            if envelope.event.command == "reset":
                self._waiting.clear()  # a reset replaces what was queued before it
            self._waiting.append(envelope)
            return True
        if envelope.command_id is None:
            return False
        for index, queued in enumerate(self._waiting):
            if queued.command_id == envelope.command_id:
                del self._waiting[index]
                return True
        return False

    def take_over(self, queued: EventEnvelope) -> None:
        """A queued event another log held (the session process's ``@ready`` line), in seq order."""
        self._waiting.append(queued)
        self._waiting.sort(key=lambda envelope: envelope.seq)


class EventLog:
    """What a surface attaching late catches up from, kept as the events pass (call ``add`` in seq
    order, under the owner's lock): the last ``size`` events with the deltas in a row of one reply
    as one, so a long reply leaves the prompt and the tool calls before it in the ring; and the
    standing events (``SessionSnapshot.standing``), which no number of later events pushes out.
    """

    def __init__(self, size: int = EVENT_RING) -> None:
        self._size = size
        self._closed: deque[EventEnvelope] = deque(maxlen=size)
        # The run of deltas going on: its texts and its last delta (merged only when read or closed:
        # a delta costs an append, not a copy of the reply so far).
        self._run: list[str] = []
        self._run_last: EventEnvelope | None = None
        self._queue = CommandQueue()
        self._questions: dict[str, EventEnvelope] = {}  # request id or import path -> the question
        self._latest: dict[type[Standing], EventEnvelope] = {}  # the latest of each standing class

    def add(self, envelope: EventEnvelope) -> None:
        event = envelope.event
        last = self._run_last
        if last is not None:
            if isinstance(event, DELTAS) and continues_run(last, envelope):
                self._run.append(event.text)
                self._run_last = envelope
                return
            self._closed.append(merged_run(last, self._run))
            self._run_last = None
        if isinstance(event, DELTAS):
            self._run = [event.text]
            self._run_last = envelope
            return
        self._closed.append(envelope)
        self._stand(envelope)

    def add_standing(self, envelopes: Iterable[EventEnvelope]) -> None:
        """Take over another log's standing events (the session process's ``@ready`` line): those
        the events added here do not hold already."""
        known = {envelope.seq for envelope in self.standing()}
        for envelope in envelopes:
            if envelope.seq in known:
                continue
            event = envelope.event
            match event:
                case ev.CommandQueuedEvent():
                    self._queue.take_over(envelope)
                case ev.McpPromptsEvent() | ev.BreakerEvent() | ev.ClearedResultsEvent() | ev.ServerCompactionEvent():
                    self._latest.setdefault(type(event), envelope)
                case ev.ApprovalRequestEvent() | ev.ElicitationRequestEvent() | ev.MemoryImportEvent():
                    self._questions[_question_key(event)] = envelope
                case (ev.TextDeltaEvent() | ev.ThinkingDeltaEvent() | ev.AssistantMessageEvent()
                      | ev.UserMessageEvent() | ev.ToolStartEvent() | ev.ToolResultEvent() | ev.ToolCallsCappedEvent()
                      | ev.ToolProgressEvent() | ev.ToolUserContentEvent() | ev.UsageEvent() | ev.ContextEvent()
                      | ev.CompactionEvent() | ev.MicroCompactionEvent() | ev.ResetEvent() | ev.WarningCrossedEvent()
                      | ev.ResultCutEvent() | ev.RetryEvent() | ev.StateEvent() | ev.NoticeEvent() | ev.ErrorEvent()
                      | ev.ResultEvent() | ev.SessionInfoEvent() | ev.ChartPointEvent() | ev.InterruptedEvent()
                      | ev.OutputLimitEvent() | ev.PartialDiscardedEvent() | ev.CompactionPausedEvent()
                      | ev.ReportEvent() | ev.McpServerEvent() | ev.SubAgentEvent() | ev.ConfigWarningEvent()
                      | ev.SessionMemoryEvent() | ev.RestoreEvent() | ev.RuleAttachedEvent()
                      | ev.SessionRepairedEvent() | ev.UsageDistrustedEvent() | ev.ForecastEvent()
                      | ev.RestorePreviewEvent() | ev.PromptCacheOffEvent() | ev.PermissionsEvent()
                      | ev.SamplingEvent() | ev.McpAttachmentEvent() | ev.RequestRecordedEvent() | ev.WhatIfEvent()
                  | ev.EvictEvent() | ev.PinEvent() | ev.RewindPointsEvent() | ev.RewindEvent()
                  | ev.McpStatusEvent() | ev.McpAuthEvent()
                      | ev.ApprovalResolvedEvent() | ev.ElicitationResolvedEvent()):
                    pass  # not in force: an answer is only ever seen with its question gone
                case _:
                    assert_never(event)

    def events(self) -> list[EventEnvelope]:
        """The ring, oldest first; a run of deltas still going on as one event (its text so far)."""
        if self._run_last is None:
            return list(self._closed)
        closed = list(self._closed)[-(self._size - 1):] if self._size > 1 else []
        return [*closed, merged_run(self._run_last, self._run)]

    def standing(self) -> list[EventEnvelope]:
        """The events still in force, in seq order."""
        return sorted([*self._queue.envelopes(), *self._questions.values(), *self._latest.values()],
                      key=lambda envelope: envelope.seq)

    def server_compaction(self, info: "SessionInfoEvent") -> "SessionInfoEvent":
        """``info`` with server-side compaction as it was last switched (None stays None: no such provider)."""
        held = self._latest.get(ev.ServerCompactionEvent)
        switched = held.event if held is not None else None
        if not isinstance(switched, ev.ServerCompactionEvent) or info.server_compaction is None or info.server_compaction == switched.on:
            return info
        return info.model_copy(update={"server_compaction": switched.on})

    def _stand(self, envelope: EventEnvelope) -> None:
        event = envelope.event
        match event:
            case ev.McpPromptsEvent() | ev.BreakerEvent() | ev.ClearedResultsEvent() | ev.ServerCompactionEvent():
                self._latest[type(event)] = envelope
            case ev.ApprovalRequestEvent() | ev.ElicitationRequestEvent():
                self._questions[_question_key(event)] = envelope
            case ev.MemoryImportEvent() if event.action == "ask":
                self._questions[_question_key(event)] = envelope
            # answered (or, an import, said otherwise since)
            case ev.ApprovalResolvedEvent() | ev.ElicitationResolvedEvent() | ev.MemoryImportEvent():
                self._questions.pop(_question_key(event), None)
            case (ev.TextDeltaEvent() | ev.ThinkingDeltaEvent() | ev.AssistantMessageEvent()
                  | ev.UserMessageEvent() | ev.ToolStartEvent() | ev.ToolResultEvent() | ev.ToolCallsCappedEvent()
                  | ev.ToolProgressEvent() | ev.ToolUserContentEvent() | ev.UsageEvent() | ev.ContextEvent()
                  | ev.CompactionEvent() | ev.MicroCompactionEvent() | ev.ResetEvent() | ev.WarningCrossedEvent()
                  | ev.ResultCutEvent() | ev.RetryEvent() | ev.StateEvent() | ev.NoticeEvent() | ev.ErrorEvent()
                  | ev.ResultEvent() | ev.SessionInfoEvent() | ev.ChartPointEvent() | ev.InterruptedEvent()
                  | ev.OutputLimitEvent() | ev.PartialDiscardedEvent() | ev.CompactionPausedEvent()
                  | ev.ReportEvent() | ev.McpServerEvent() | ev.SubAgentEvent() | ev.ConfigWarningEvent()
                  | ev.SessionMemoryEvent() | ev.RestoreEvent() | ev.RuleAttachedEvent()
                  | ev.SessionRepairedEvent() | ev.UsageDistrustedEvent() | ev.ForecastEvent()
                  | ev.RestorePreviewEvent() | ev.PromptCacheOffEvent() | ev.PermissionsEvent()
                  | ev.SamplingEvent() | ev.McpAttachmentEvent() | ev.RequestRecordedEvent() | ev.WhatIfEvent()
                  | ev.EvictEvent() | ev.PinEvent() | ev.RewindPointsEvent() | ev.RewindEvent()
                  | ev.McpStatusEvent() | ev.McpAuthEvent()
                  | ev.CommandQueuedEvent()):
                pass  # not in force after it is said (the queue's, below)
            case _:
                assert_never(event)
        self._queue.see(envelope)


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
        self._held: list[EventEnvelope] | None = []
        self._lock = threading.Lock()

    def __call__(self, envelope: EventEnvelope) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(envelope)
                return
        self._listener(envelope)

    def release(self) -> None:
        """Pass on what was held, then every event as it comes."""
        with self._lock:  # under the lock: an event arriving now waits, so none overtakes the held ones
            held, self._held = self._held or [], None
            for envelope in held:
                self._listener(envelope)

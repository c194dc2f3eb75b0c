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

from collections import deque
from dataclasses import dataclass, field
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, runtime_checkable

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
    # This run's events up to ``seq``, in order (the last ``EVENT_RING`` of them, deltas in a row
    # of one reply as one): what was said before the surface attached (start-up warnings, repairs,
    # MCP servers that failed, the prompt a long reply answers) is not lost.
    events: list["Event"] = field(default_factory=list)
    # The events still in force at ``seq``, in order, whether or not ``events`` still holds them:
    # the commands waiting in the queue, the questions not answered yet (approvals, servers' forms,
    # imports to approve) and the latest of each kind that sets what a surface shows as current
    # (``STANDING_KINDS``). A surface replays those older than ``events`` before them.
    standing: list["Event"] = field(default_factory=list)


# How many of its latest events a session keeps for a surface that attaches late.
EVENT_RING = 4096

# The streamed pieces of a reply: in a row, of one kind and one command, they make one event.
DELTA_TYPES = frozenset({"text_delta", "thinking_delta"})
# Kinds whose latest event is what a surface shows now (the offered MCP prompts, the breaker, the
# cleared results, the server-side compaction switch), kept however long ago it was said.
STANDING_KINDS = frozenset({"mcp_prompts", "breaker", "cleared_results", "server_compaction"})
# Questions a session waits on (with an import outside the repository: ``memory_import``, ``ask``),
# and the events that answer them, with the same request id.
_QUESTIONS = frozenset({"approval_request", "elicitation_request"})
_ANSWERS = frozenset({"approval_resolved", "elicitation_resolved"})
# The queued command a starting event runs, for a queued event without a command id.
_STARTS = {"user_message": "prompt", "compaction": "compact", "reset": "reset"}


def _question_key(event: Any) -> str:  # a question or an answer: its fields read by its kind
    """What names a question and its answer: the request id, or the path of an import."""
    if event.type == "memory_import":
        return f"import:{event.path}"
    return f"request:{event.request_id}"


def continues_run(last: "Event", event: "Event") -> bool:
    """``event`` is a delta that goes on from ``last`` (a delta of the same kind and command)."""
    return event.type == last.type and event.type in DELTA_TYPES and event.command_id == last.command_id


def merged_run(last: "Event", texts: list[str]) -> "Event":
    """A run of deltas as one event: their texts joined, the last one's seq and command id."""
    return last.model_copy(update={"text": "".join(texts)})


def merge_deltas(events: "Iterable[Event]") -> "list[Event]":
    """``events`` with each run of deltas in a row (``continues_run``) made one (``merged_run``)."""
    merged: list[Event] = []
    run: list[str] = []
    last: Event | None = None
    for event in events:
        if last is not None and continues_run(last, event):
            run.append(event.text)  # type: ignore[union-attr]
            last = event
            continue
        if last is not None:
            merged.append(merged_run(last, run))
            last = None
        if event.type in DELTA_TYPES:
            run = [event.text]  # type: ignore[union-attr]
            last = event
        else:
            merged.append(event)
    if last is not None:
        merged.append(merged_run(last, run))
    return merged


class CommandQueue:
    """The commands waiting behind a busy session, as its events tell them: one rule for the
    session's log and the dashboard's view model.

    A ``queued`` event adds one; the first later event its command caused (the same
    ``command_id``) takes it off: a prompt an interrupt dropped ends in its own result, a queued
    compaction stays through the interrupt and leaves when it runs. A queued reset replaces what
    was queued before it. Events without command ids (a surface that does not number its
    commands) take off the oldest of the kind they start, and an interrupt drops such prompts,
    as the session does.
    """

    def __init__(self) -> None:
        self.waiting: list[Any] = []  # the queued events of the commands waiting, oldest first

    def see(self, event: "Event") -> bool:
        """Fold one event in; whether the queue changed."""
        if event.type == "queued":
            if event.command == "reset":
                self.waiting.clear()  # a reset replaces what was queued before it
            self.waiting.append(event)
            return True
        if not self.waiting:
            return False
        command_id = event.command_id
        for index, queued in enumerate(self.waiting):
            if queued.command_id is not None and queued.command_id == command_id:
                del self.waiting[index]
                return True
        if event.type == "interrupted":
            kept = [q for q in self.waiting if q.command_id is not None or q.command != "prompt"]
            changed = len(kept) != len(self.waiting)
            self.waiting = kept
            return changed
        started = _STARTS.get(event.type)
        if started is not None:
            for index, queued in enumerate(self.waiting):
                if queued.command_id is None and queued.command == started:
                    del self.waiting[index]
                    return True
        return False

    def take_over(self, queued: "Event") -> None:
        """A queued event another log held (the session process's ``@ready`` line), in seq order."""
        self.waiting.append(queued)
        self.waiting.sort(key=lambda event: event.seq)


class EventLog:
    """What a surface attaching late catches up from, kept as the events pass (call ``add`` in seq
    order, under the owner's lock): the last ``size`` events with the deltas in a row of one reply
    as one, so a long reply leaves the prompt and the tool calls before it in the ring; and the
    standing events (``SessionSnapshot.standing``), which no number of later events pushes out.
    """

    def __init__(self, size: int = EVENT_RING) -> None:
        self._size = size
        self._closed: deque[Event] = deque(maxlen=size)
        # The run of deltas going on: its texts and its last delta (merged only when read or closed:
        # a delta costs an append, not a copy of the reply so far).
        self._run: list[str] = []
        self._run_last: Event | None = None
        self._queue = CommandQueue()
        self._questions: dict[str, Event] = {}  # request id or import path -> the question
        self._latest: dict[str, Any] = {}  # STANDING_KINDS -> the latest of that kind

    def add(self, event: "Event") -> None:
        last = self._run_last
        if last is not None:
            if continues_run(last, event):
                self._run.append(event.text)  # type: ignore[union-attr]
                self._run_last = event
                return
            self._closed.append(merged_run(last, self._run))
            self._run_last = None
        kind = event.type
        if kind in DELTA_TYPES:
            self._run = [event.text]  # type: ignore[union-attr]
            self._run_last = event
            return
        self._closed.append(event)
        self._stand(event)

    def add_standing(self, events: "Iterable[Event]") -> None:
        """Take over another log's standing events (the session process's ``@ready`` line): those
        the events added here do not hold already."""
        known = {event.seq for event in self.standing()}
        for event in events:
            if event.seq in known:
                continue
            if event.type == "queued":
                self._queue.take_over(event)
            elif event.type in STANDING_KINDS:
                self._latest.setdefault(event.type, event)
            elif event.type in _QUESTIONS or event.type == "memory_import":
                self._questions[_question_key(event)] = event

    def events(self) -> "list[Event]":
        """The ring, oldest first; a run of deltas still going on as one event (its text so far)."""
        if self._run_last is None:
            return list(self._closed)
        closed = list(self._closed)[-(self._size - 1):] if self._size > 1 else []
        return [*closed, merged_run(self._run_last, self._run)]

    def standing(self) -> "list[Event]":
        """The events still in force, in seq order."""
        return sorted([*self._queue.waiting, *self._questions.values(), *self._latest.values()], key=lambda e: e.seq)

    def server_compaction(self, info: "SessionInfoEvent") -> "SessionInfoEvent":
        """``info`` with server-side compaction as it was last switched (None stays None: no such provider)."""
        switched = self._latest.get("server_compaction")
        if switched is None or info.server_compaction is None or info.server_compaction == switched.on:
            return info
        return info.model_copy(update={"server_compaction": switched.on})

    def _stand(self, event: Any) -> None:  # any event: its fields read by its kind
        kind = event.type
        if kind in STANDING_KINDS:
            self._latest[kind] = event
        elif kind in _QUESTIONS or (kind == "memory_import" and event.action == "ask"):
            self._questions[_question_key(event)] = event
        elif kind in _ANSWERS or kind == "memory_import":  # answered (or, an import, said otherwise since)
            self._questions.pop(_question_key(event), None)
        self._queue.see(event)


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

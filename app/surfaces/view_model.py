"""The session as the dashboard shows it: a plain-Python reducer over the session's events.

``DashboardView.apply(envelope)`` folds one event into the state the dashboard draws: one
record per tool call (status, sizes, cut, cleared, restored, where the full output was
saved, the text the model saw), whether the session is busy, what waits in its queue,
the latest context figures and the approval in progress. The dashboard's bridge applies
each event once, as it arrives, and the widgets draw the records it hands them; they keep
no state of their own about a call. The session's info, context, state and queue are a
``SessionFacts`` (app/kernel/session_facts.py), the reducer the session process's mirror
uses too. The conversation's entries (``conversation``, app/surfaces/conversation_view.py)
are the view model's as well: the conversation widget folds its messages into them as it
draws, and keeps only its mounted widgets.

A record is never changed once handed out: a change makes a new record (``replace``), so a
widget on the UI thread never sees one half-updated by the session's thread. No Textual here
(the reducer is unit-tested without it, tests/test_view_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Literal, assert_never

from app.kernel import events as ev
from app.kernel.describe import tool_progress_text
from app.kernel.session_facts import SessionFacts
from app.surfaces.conversation_view import ConversationView
from app.kernel.request_store import PartView, head_and_tail
from app.surfaces.tool_calls import ToolCallRecord

__all__ = ["PartView", "InspectorPage", "ToolCallRecord", "head_and_tail"]

if TYPE_CHECKING:
    from app.kernel.envelope import EventEnvelope
    from app.kernel.events import Event
    from app.kernel.protocol import SessionSnapshot

ToolStatus = Literal["running", "ok", "error", "interrupted"]


@dataclass(frozen=True)
class InspectorPage:
    """What the request inspector draws: a kept request's parts, and its diff against the one
    before (``app.surfaces.inspect_output.inspector_page`` reads them from the session's store)."""

    number: int  # which request, from 1
    count: int  # how many the session kept
    title: str  # which request, its size as the gauge showed it, the cache's figures
    parts: tuple[PartView, ...]  # each with its whole text (the inspector cuts what it draws)
    # Its diff, worked out when first asked for: (what it moved, in one line; the parts removed,
    # changed, then added)
    diff_of: "Callable[[], tuple[str, tuple[PartView, ...]]]"
    # Another request of the same session (None: only this one is shown)
    page_for: "Callable[[int], InspectorPage] | None" = None


@dataclass(frozen=True)
class QueuedCommand:
    """A command given while the session was busy (it runs later)."""

    command: str  # prompt | compact | reset
    text: str = ""


@dataclass
class DashboardView:
    """What the dashboard draws of one session, folded from its events."""

    tool_calls: dict[str, ToolCallRecord] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # call ids, oldest first
    # The session's info, context, state and queue: the reducer the session process's mirror uses too.
    facts: SessionFacts = field(default_factory=SessionFacts)
    approval: "ev.ApprovalRequestEvent | None" = None  # the question waiting for the user, if any
    cleared_ids: frozenset[str] = frozenset()
    evicted_ids: frozenset[str] = frozenset()
    pinned_ids: frozenset[str] = frozenset()
    breaker_paused: bool = False
    _asking: dict[str, str] = field(default_factory=dict)  # approval request id -> the call it is about
    _turn_calls: list[list[str]] = field(default_factory=list)  # the calls of each turn not rewound, in order
    mcp_status: "ev.McpStatusEvent | None" = None  # the MCP servers as the session last said (/mcp)
    # What the conversation shows, entry by entry (its prompts, replies, tool calls and lines): folded
    # by the conversation widget on the UI thread as it draws them, in the order it draws them.
    conversation: ConversationView = field(default_factory=ConversationView)

    @property
    def state(self) -> "ev.StateEvent | None":
        return self.facts.state

    @property
    def context(self) -> "ev.ContextEvent | None":
        return self.facts.context

    @property
    def busy(self) -> bool:
        """The session is running a command (as its last state event says)."""
        return self.facts.busy

    @property
    def queue(self) -> list[QueuedCommand]:
        """The commands waiting behind the one running, oldest first."""
        return [QueuedCommand(queued.command, queued.text) for queued in self.facts.queue.waiting]

    def latest_cut_call(self) -> str | None:
        """The newest call whose output was cut (its full output is on disk)."""
        return next((call_id for call_id in reversed(self.order) if self.tool_calls[call_id].full_output_path), None)

    def _cleared_results(self, event: "ev.ClearedResultsEvent") -> tuple[ToolCallRecord, ...]:
        """Which results are out of the context (cleared or evicted) and which are pinned."""
        self.cleared_ids = frozenset(event.call_ids)
        self.evicted_ids = frozenset(event.evicted)
        self.pinned_ids = frozenset(event.pinned)
        changed = [self._marked(record) for record in self.tool_calls.values()
                   if (record.cleared, record.evicted, record.pinned) != (
                       record.id in self.cleared_ids, record.id in self.evicted_ids, record.id in self.pinned_ids)]
        for record in changed:
            self.tool_calls[record.id] = record
        return tuple(changed)

    def _marked(self, record: ToolCallRecord) -> ToolCallRecord:
        """``record`` with the marks the session last said (a new record: handed-out ones never change)."""
        cleared = record.id in self.cleared_ids
        return replace(record, cleared=cleared, restored=record.restored and not cleared,
                       evicted=record.id in self.evicted_ids, pinned=record.id in self.pinned_ids)

    def apply(self, envelope: "EventEnvelope") -> tuple[ToolCallRecord, ...]:
        """Fold the event in ``envelope`` in; returns the tool call records it changed (new
        records, oldest first). The envelope's command id is the queue's (what a queued command
        caused takes it off)."""
        self.facts.apply(envelope)  # the session's own rule for the queue (an interrupt keeps a queued compaction)
        return self._fold(envelope.event)

    def _fold(self, event: "Event") -> tuple[ToolCallRecord, ...]:
        """One ``case`` per event class (mypy checks every class of the union is named): an event
        added to the union fails type-checking here until it is folded in or listed as ignored."""
        match event:
            case ev.UserMessageEvent():
                self._turn_calls.append([])
            case ev.RewindEvent():
                return self._rewound(event)
            case ev.ToolStartEvent():
                return self._tool_started(event)
            case ev.ToolResultEvent():
                return self._tool_ended(event)
            case ev.ToolProgressEvent():
                known = self.tool_calls.get(event.id)
                if known is None or known.status != "running":
                    return ()
                return self._put(replace(known, progress=tool_progress_text(event)))
            case ev.ResultCutEvent():
                known = self.tool_calls.get(event.id)
                if known is None:
                    return ()
                return self._put(replace(known, cut_before_send=True, truncated=True, kept_chars=event.kept_chars,
                                         full_output_path=event.full_output_path or known.full_output_path))
            case ev.ClearedResultsEvent():
                return self._cleared_results(event)
            case ev.RestoreEvent():
                known = self.tool_calls.get(event.id)
                self.cleared_ids = self.cleared_ids - {event.id}
                self.evicted_ids = self.evicted_ids - {event.id}
                if known is None:
                    return ()
                return self._put(replace(known, cleared=False, evicted=False, restored=True))
            case ev.ApprovalRequestEvent():
                self.approval = event
                self._asking[event.request_id] = event.tool_id
                known = self.tool_calls.get(event.tool_id)
                return self._put(replace(known, waiting_approval=True)) if known is not None else ()
            case ev.ApprovalResolvedEvent():
                if self.approval is not None and self.approval.request_id == event.request_id:
                    self.approval = None
                call_id = self._asking.pop(event.request_id, None)
                known = self.tool_calls.get(call_id) if call_id is not None else None
                return self._put(replace(known, waiting_approval=False)) if known is not None else ()
            case ev.BreakerEvent():
                self.breaker_paused = event.paused
            case ev.McpStatusEvent():
                self.mcp_status = event
            case ev.InterruptedEvent():
                if self.approval is not None:
                    self._asking.pop(self.approval.request_id, None)
                    self.approval = None
            case (ev.TextDeltaEvent() | ev.ThinkingDeltaEvent() | ev.AssistantMessageEvent()
                  | ev.ToolCallsCappedEvent() | ev.ToolUserContentEvent() | ev.UsageEvent() | ev.CompactionEvent()
                  | ev.MicroCompactionEvent() | ev.ResetEvent() | ev.WarningCrossedEvent() | ev.RetryEvent()
                  | ev.NoticeEvent() | ev.ErrorEvent() | ev.ResultEvent() | ev.SessionInfoEvent()
                  | ev.ChartPointEvent() | ev.CommandQueuedEvent() | ev.OutputLimitEvent()
                  | ev.PartialDiscardedEvent() | ev.CompactionPausedEvent() | ev.ReportEvent() | ev.McpServerEvent()
                  | ev.SubAgentEvent() | ev.ConfigWarningEvent() | ev.SessionMemoryEvent() | ev.RuleAttachedEvent()
                  | ev.SessionRepairedEvent() | ev.UsageDistrustedEvent() | ev.ForecastEvent()
                  | ev.RestorePreviewEvent() | ev.ServerCompactionEvent() | ev.MemoryImportEvent()
                  | ev.PromptCacheOffEvent() | ev.PermissionsEvent() | ev.ElicitationRequestEvent()
                  | ev.ElicitationResolvedEvent() | ev.SamplingEvent() | ev.McpPromptsEvent()
                  | ev.McpAttachmentEvent() | ev.RequestRecordedEvent() | ev.WhatIfEvent()
                  | ev.EvictEvent() | ev.PinEvent() | ev.RewindPointsEvent() | ev.McpAuthEvent()
                  | ev.StateEvent() | ev.ContextEvent()):
                pass  # the facts' alone (above), or drawn from the event itself by its widget
            case _:
                assert_never(event)
        return ()

    def _tool_started(self, event: "ev.ToolStartEvent") -> tuple[ToolCallRecord, ...]:
        record = self._marked(ToolCallRecord(id=event.id, name=event.name, summary=event.summary))
        if event.id not in self.tool_calls:
            self.order.append(event.id)
            if self._turn_calls:
                self._turn_calls[-1].append(event.id)
        return self._put(record)

    def _tool_ended(self, event: "ev.ToolResultEvent") -> tuple[ToolCallRecord, ...]:
        known = self.tool_calls.get(event.id)
        if known is None:  # a result whose start was not seen (an earlier run): drawn all the same
            self.order.append(event.id)
            known = self._marked(ToolCallRecord(id=event.id, name=event.name, summary=""))
        status = "interrupted" if event.interrupted else ("error" if event.is_error else "ok")
        return self._put(replace(
            known, status=status, truncated=event.truncated, original_chars=event.original_chars,
            kept_chars=event.kept_chars, duration_ms=event.duration_ms, full_output_path=event.full_output_path,
            content=event.content, progress="", waiting_approval=False))

    def _rewound(self, event: "ev.RewindEvent") -> tuple[ToolCallRecord, ...]:
        """The calls of the turns a rewind abandoned are marked (still listed, out of the context)."""
        if not event.ok or event.abandoned_turns <= 0:
            return ()
        cut = max(0, len(self._turn_calls) - event.abandoned_turns)
        abandoned = [call_id for calls in self._turn_calls[cut:] for call_id in calls]
        del self._turn_calls[cut:]
        changed = [replace(self.tool_calls[call_id], rewound=True) for call_id in abandoned
                   if call_id in self.tool_calls]
        for record in changed:
            self.tool_calls[record.id] = record
        return tuple(changed)

    def _put(self, record: ToolCallRecord) -> tuple[ToolCallRecord, ...]:
        self.tool_calls[record.id] = record
        return (record,)


# The snapshot holds the latest of these itself (its info, context and state): drawn from it, not the ring.
_IN_SNAPSHOT = (ev.SessionInfoEvent, ev.ContextEvent, ev.StateEvent)


def catch_up(snapshot: "SessionSnapshot") -> "list[EventEnvelope]":
    """What a surface attaching with ``snapshot`` folds in of this run, in order: the events still
    in force that have left the ring (a command still queued, a question still open, the server-side
    compaction switch) and then the ring. Its info first and its context and state last are the
    surface's to draw: they are the session as it stands, whatever the ring still holds."""
    first_in_ring = snapshot.events[0].seq if snapshot.events else snapshot.seq + 1
    left_the_ring = [envelope for envelope in snapshot.standing if envelope.seq < first_in_ring]
    return [*left_the_ring, *(envelope for envelope in snapshot.events if not isinstance(envelope.event, _IN_SNAPSHOT))]

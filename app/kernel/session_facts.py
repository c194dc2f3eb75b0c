"""What a session is now, as its events say it: who it is, its context, its state and its queue.

One reducer for the facts every follower of a session keeps: the session process's parent (its
snapshot of the child, ``app.session.process``) and the dashboard's view model
(``app.surfaces.view_model.DashboardView``) both fold the events into one of these, so "busy" and
"how many wait" have one definition there and one here, not one per follower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, assert_never

from app.kernel import events as ev
from app.kernel.protocol import CommandQueue
from app.kernel.session_states import is_busy

if TYPE_CHECKING:
    from app.kernel.envelope import EventEnvelope


@dataclass
class SessionFacts:
    """The latest info, context and state a session said, and the commands waiting behind it."""

    info: "ev.SessionInfoEvent | None" = None
    context: "ev.ContextEvent | None" = None
    state: "ev.StateEvent | None" = None
    queue: CommandQueue = field(default_factory=CommandQueue)

    @property
    def busy(self) -> bool:
        """The session is running a command (as its last state event says; none yet: not busy)."""
        return self.state is not None and is_busy(self.state.state)

    @property
    def queued(self) -> int:
        """How many commands wait behind the one running."""
        return len(self.queue.waiting)

    def apply(self, envelope: "EventEnvelope") -> None:
        """Fold one event in (every event: the queue takes a command off by the first event its
        envelope's command id says it caused).

        One ``case`` per event class (mypy checks every class of the union is named)."""
        event = envelope.event
        match event:
            case ev.SessionInfoEvent():
                self.info = event
            case ev.ContextEvent():
                self.context = event
            case ev.StateEvent():
                self.state = event
            case (ev.TextDeltaEvent() | ev.ThinkingDeltaEvent() | ev.AssistantMessageEvent() | ev.UserMessageEvent()
                  | ev.ToolStartEvent() | ev.ToolResultEvent() | ev.ToolCallsCappedEvent() | ev.ToolProgressEvent()
                  | ev.ToolUserContentEvent() | ev.UsageEvent() | ev.CompactionEvent() | ev.MicroCompactionEvent()
                  | ev.ResetEvent() | ev.WarningCrossedEvent() | ev.ResultCutEvent() | ev.BreakerEvent()
                  | ev.RetryEvent() | ev.NoticeEvent() | ev.ErrorEvent() | ev.ResultEvent() | ev.ChartPointEvent()
                  | ev.ApprovalRequestEvent() | ev.ApprovalResolvedEvent() | ev.InterruptedEvent()
                  | ev.OutputLimitEvent() | ev.PartialDiscardedEvent() | ev.CompactionPausedEvent() | ev.ReportEvent()
                  | ev.McpServerEvent() | ev.SubAgentEvent() | ev.ConfigWarningEvent() | ev.SessionMemoryEvent()
                  | ev.RestoreEvent() | ev.RuleAttachedEvent() | ev.SessionRepairedEvent() | ev.UsageDistrustedEvent()
                  | ev.ForecastEvent() | ev.RestorePreviewEvent() | ev.ClearedResultsEvent()
                  | ev.ServerCompactionEvent() | ev.MemoryImportEvent() | ev.PromptCacheOffEvent()
                  | ev.PermissionsEvent() | ev.ElicitationRequestEvent() | ev.ElicitationResolvedEvent()
                  | ev.SamplingEvent() | ev.McpPromptsEvent() | ev.McpAttachmentEvent() | ev.RequestRecordedEvent()
                  | ev.WhatIfEvent() | ev.EvictEvent() | ev.PinEvent() | ev.RewindPointsEvent() | ev.RewindEvent()
                  | ev.McpStatusEvent() | ev.McpAuthEvent() | ev.CommandQueuedEvent()):
                pass  # only the queue's (below)
            case _:
                assert_never(event)
        self.queue.see(envelope)

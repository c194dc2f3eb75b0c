"""The Textual messages that carry session events to the widgets.

The dashboard's bridge wraps each core event (``app.kernel.events``) in the messages
listed for its type in ``MESSAGES_FOR`` and posts each one to the widgets that list
it in their ``SESSION_MESSAGES`` (and handle it with ``@on``), as Toad does with its
agent's updates. A widget never asks for events; it only declares what it draws.
Tool calls reach the widgets as the view model's records (``ToolCallsChanged``): the
bridge folds each event into ``app.surfaces.view_model.DashboardView`` once.

Messages do not bubble: each is posted to the widget that handles it.
This module imports no pydantic: the events are only types here.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from textual.message import Message

from app.kernel.describe import ENGINE_LINE_TYPES

if TYPE_CHECKING:
    from app.kernel import events as ev
    from app.surfaces.view_model import ToolCallRecord


class MessageTarget(Protocol):
    """Where a session message goes: a widget or the App (Textual's ``post_message`` is thread-safe).
    A Protocol, so the bridge in app/ routes messages without importing textual."""

    def post_message(self, message: Message) -> bool: ...


def handled_messages(target: object) -> tuple[type["SessionMessage"], ...]:
    """The session messages ``target``'s class says it handles (its ``SESSION_MESSAGES``)."""
    declared: tuple[type[SessionMessage], ...] = getattr(type(target), "SESSION_MESSAGES", ())
    return declared


class SessionMessage(Message, bubble=False):
    """One session event on its way to a widget. ``restored``: replayed from an earlier run."""

    def __init_subclass__(cls, bubble: bool | None = False, **kwargs: Any) -> None:
        # Textual gives every subclass ``bubble=True`` unless it says otherwise: each message
        # posted to a widget also reached the App, which then handled an approval request
        # twice (two modals, one left open) once another widget handled it too.
        super().__init_subclass__(bubble=bubble, **kwargs)

    def __init__(self, event: Any, *, restored: bool = False) -> None:
        super().__init__()
        self.event = event
        self.restored = restored


class SessionStarted(SessionMessage):
    event: "ev.SessionInfoEvent"


class StateChanged(SessionMessage):
    event: "ev.StateEvent"


class ContextChanged(SessionMessage):
    event: "ev.ContextEvent"


class ChartPoint(SessionMessage):
    event: "ev.ChartPointEvent"


class UsageRecorded(SessionMessage):
    event: "ev.UsageEvent"


class RequestRecorded(SessionMessage):
    """A request was kept in the session's store: the inspector opens on the latest."""

    event: "ev.RequestRecordedEvent"


class UserSaid(SessionMessage):
    event: "ev.UserMessageEvent"


class ReplyDone(SessionMessage):
    event: "ev.AssistantMessageEvent"


class ToolCallsChanged(SessionMessage):
    """An event changed tool calls: ``records`` are their new records (the view model's), oldest first."""

    def __init__(self, event: Any, *, restored: bool = False, records: "tuple[ToolCallRecord, ...]" = ()) -> None:
        super().__init__(event, restored=restored)
        self.records = records


class ReplyDiscarded(SessionMessage):
    """A stream failed mid-reply: the text shown so far is not the reply (a retry starts over)."""

    event: "ev.PartialDiscardedEvent"


class BreakerChanged(SessionMessage):
    event: "ev.BreakerEvent"


class TurnEnded(SessionMessage):
    event: "ev.ResultEvent"


class EngineSaid(SessionMessage):
    """An event with an engine line (``app.describe.describe`` gives its words)."""


class ApprovalRequested(SessionMessage):
    event: "ev.ApprovalRequestEvent"


class ApprovalResolved(SessionMessage):
    event: "ev.ApprovalResolvedEvent"


class MemoryImportSaid(SessionMessage):
    """An import outside the repository (the App asks about it when the session does), or one
    refused, cut or answered."""

    event: "ev.MemoryImportEvent"


class ElicitationSaid(SessionMessage):
    """An MCP server's form to show (the App pushes it), or its end (the App closes it)."""

    event: "ev.ElicitationRequestEvent | ev.ElicitationResolvedEvent"


class McpPromptsOffered(SessionMessage):
    """A server's prompts, as slash commands the prompt box completes."""

    event: "ev.McpPromptsEvent"


class ForecastReady(SessionMessage):
    """What a compaction or reset will do (the answer to ``Preview``): the confirmation shows it."""

    event: "ev.ForecastEvent"


class RestorePreviewReady(SessionMessage):
    event: "ev.RestorePreviewEvent"


class WhatIfReady(SessionMessage):
    """This session replayed under another policy: the context chart overlays the curve."""

    event: "ev.WhatIfEvent"


class RewindPointsReady(SessionMessage):
    """The messages a rewind can go back to, each with its plan (the answer to ``PreviewRewind``)."""

    event: "ev.RewindPointsEvent"


class Rewound(SessionMessage):
    """The conversation went back to before a message: the App puts it back in the prompt, the
    conversation marks the abandoned turns (on a resume too)."""

    event: "ev.RewindEvent"


class SubAgentUpdate(SessionMessage):
    event: "ev.SubAgentEvent"


class McpStatusReady(SessionMessage):
    """The session's MCP servers as they stand: the /mcp view redraws from the view model."""

    event: "ev.McpStatusEvent"


class McpAuthSaid(SessionMessage):
    """A login in the running session: the App asks the re-authorize question of an ``offer``."""

    event: "ev.McpAuthEvent"


class Replayed(SessionMessage):
    """What an earlier run recorded (``restored``), or this run's events so far for a dashboard
    attaching late, for a widget that takes it in one go (it lists ``Replayed`` in its
    ``SESSION_MESSAGES``): the messages it would have had one by one (``Deltas`` included), in
    order. The conversation folds them into its records and mounts only the window it keeps, so
    a resumed session of thousands of turns opens as fast as a short one."""

    def __init__(self, messages: "list[SessionMessage | Deltas]", *, restored: bool = True) -> None:
        super().__init__(None, restored=restored)
        self.messages = messages


class Deltas(Message, bubble=False):
    """Text (or thinking) deltas that arrived in a row: one message, not one per delta.

    The bridge ``add``s to it (from the session's thread) until the conversation
    ``take``s the text; any other event seals the batch, so order holds. A fast
    stream costs a list append per delta, not a message dispatch.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self._texts: list[str] = []
        self._taken = False
        self._lock = threading.Lock()

    def add(self, text: str) -> bool:
        """Append a delta; False once the text was taken (the caller starts a new batch)."""
        with self._lock:
            if self._taken:
                return False
            self._texts.append(text)
            return True

    def take(self) -> str:
        with self._lock:
            self._taken = True
            return "".join(self._texts)


class DeltasPaused(Message, bubble=False):
    """Another event came after a run of deltas: the text so far is all there is for now.

    The reply shows it at once instead of on its flush timer, and in a frame of its own:
    the messages for the other widgets that come next (at the end of a reply: the usage,
    the context, the chart point, the state) are ``hold``-ed here and posted by ``release``
    once that frame is drawn. Otherwise the gauge, the chart and the header were handled
    and drawn first, and the reply's last words waited for them (benchmark 3b).
    """

    def __init__(self, kind: str, after: "DeltasPaused | None" = None) -> None:
        super().__init__()
        self.kind = kind
        self._after = after  # an earlier pause still holding: released first, so order holds
        self._held: list[tuple[MessageTarget, Message]] = []
        self._released = False
        self._lock = threading.Lock()

    def hold(self, target: MessageTarget, message: Message) -> bool:
        """Keep ``message`` for ``target`` until released; False once released (post it now)."""
        with self._lock:
            if self._released:
                return False
            self._held.append((target, message))
            return True

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Post what was held, in order (under the lock: nothing posted meanwhile overtakes it)."""
        if self._after is not None:
            self._after.release()
            self._after = None
        with self._lock:
            self._released = True
            for target, message in self._held:
                target.post_message(message)
            self._held.clear()


MESSAGES_FOR: dict[str, tuple[type[SessionMessage], ...]] = {
    "session": (SessionStarted,),
    "state": (StateChanged,),
    "context": (ContextChanged,),
    "chart_point": (ChartPoint,),
    "usage": (UsageRecorded,),
    "user_message": (UserSaid,),
    "assistant_message": (ReplyDone,),
    # tool_start, tool_result, tool_progress, cleared_results: ToolCallsChanged, from the view model
    "result_cut": (EngineSaid,),
    "breaker": (BreakerChanged, EngineSaid),
    "result": (TurnEnded, EngineSaid),
    "approval_request": (ApprovalRequested,),
    "approval_resolved": (ApprovalResolved, EngineSaid),  # EngineSaid: the rules an "always" added
    # the dashboard's questions and their answers
    "forecast": (ForecastReady,),
    "restore_preview": (RestorePreviewReady, EngineSaid),  # EngineSaid: a refusal's one line
    "partial_discarded": (ReplyDiscarded, EngineSaid),  # the partial is set apart, then the line says why
    "sub_agent": (SubAgentUpdate,),  # folded under the task call, started and finished included
    "memory_import": (MemoryImportSaid, EngineSaid),  # the App asks, the conversation says
    "elicitation_request": (ElicitationSaid, EngineSaid),  # the App shows the form
    "elicitation_resolved": (ElicitationSaid, EngineSaid),  # ... and closes it when it ends elsewhere
    "mcp_prompts": (McpPromptsOffered,),  # the prompt box completes a server's prompts
    "request_recorded": (RequestRecorded,),  # the App keeps the latest for the inspector
    "whatif": (WhatIfReady, EngineSaid),  # the chart overlays the curve, the conversation says its figures
    "rewind_points": (RewindPointsReady, EngineSaid),  # the App shows the list (a line when there is nothing)
    "rewind": (Rewound, EngineSaid),  # the prompt gets the message back, abandoned turns are dimmed, then the line
    "mcp_status": (McpStatusReady,),  # the /mcp view's rows
    "mcp_auth": (McpAuthSaid, EngineSaid),  # the App asks the re-authorize question; the conversation says
}
for _type in ENGINE_LINE_TYPES:
    MESSAGES_FOR.setdefault(_type, (EngineSaid,))

"""The session: commands in, typed events out (codex's submission queue, in Python).

``AgentSession`` owns everything a surface must not: the agent, the command
queue, the run state (one source for step, tool and retry numbers), the
permission rules chosen in the approval dialog and the pending approvals. Surfaces talk to it only
through ``app.kernel.protocol.SessionSurface``: ``submit`` a command (its id comes back on
the events it causes), ``attach`` to the event log (a snapshot at seq N, then every event
after N), read a ``snapshot``.

Threads: the session runs on one asyncio loop (its own thread under the
dashboard, the main loop in headless mode). ``submit`` may be called from any
thread, before ``run`` too (the command waits for the loop); listeners are called on
the session's loop, in order, the transcript recorder first, so every event is
persisted before any surface sees it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Protocol, assert_never
from pathlib import Path

from app.kernel.commands import (
    MCP_PROMPT_PREFIX,
    AnswerElicitation,
    ApproveImport,
    Approve,
    Command,
    DECISIONS,
    Compact,
    Decision,
    EvictResult,
    Interrupt,
    PinResult,
    ManageMcpServer,
    Preview,
    PreviewRestore,
    PreviewRewind,
    Report,
    Reset,
    Rewind,
    RestoreResult,
    ServerCompaction,
    WhatIf,
    Shutdown,
    UserInput,
)
from app.kernel import events as ev
from app.kernel.events import (
    McpServerRow,
    McpStatusEvent,
    RewindPoint,
    RewindPointsEvent,
    RewindEvent,
    ErrorEvent,
    MemoryImportEvent,
    ApprovalRequestEvent,
    ApprovalResolvedEvent,
    ClearedResultsEvent,
    EvictEvent,
    ForecastEvent,
    PinEvent,
    RestorePreviewEvent,
    ServerCompactionEvent,
    CommandQueuedEvent,
    ConfigWarningEvent,
    Event,
    PermissionDenial,
    PermissionRuleLine,
    PermissionsEvent,
    ReportEvent,
    ResultEvent,
    SandboxState,
    SessionInfoEvent,
    SessionRepairedEvent,
    StateEvent,
    TokenTotals,
    WhatIfEvent,
)
from app.context.chart_history import with_chart_points  # old sessions' chart points: derived beside the engine
from app.mcp.client_features import ClientRequests, SampledReply
from app.agent.permissions import EFFECTS, PROJECT_SETTINGS, Permissions
from app.tools.bash import escape_reason
from app.kernel.envelope import EventEnvelope
from app.kernel.protocol import EventLog, Listener, Listeners, SessionSnapshot
from app.context.engine import ResultChangeError, RestoreError
from app.agent.server_context import switch_server_compaction
from app.kernel.messages import Message, TextBlock
from app.providers.base import Completed, ModelRequest, ProviderError
from app.kernel.sanitize import sanitize_for_display
from app.agent.loop import summarize_args

if TYPE_CHECKING:
    from app.agent.loop import Agent
    from app.context.prices import Price
    from app.context.memory import ImportNotice, MemoryBundle
    from app.context.plans import Plan
    from app.kernel.messages import TextBlock, ToolUseBlock
    from app.mcp.client_features import SampledReply, SamplingCall
    from app.session.transcript import TranscriptWriter

# Deltas are not persisted (the assistant_message after them holds the whole text), nor
# reports and previews (answers to a question about the session, not part of it).
_NOT_RECORDED = (ev.TextDeltaEvent, ev.ThinkingDeltaEvent, ev.ReportEvent, ev.ForecastEvent, ev.RestorePreviewEvent,
                 ev.PermissionsEvent, ev.RewindPointsEvent, ev.McpStatusEvent)
# An "always" answer -> which of the request's offered rules it adds.
_ALWAYS_KINDS: dict[str, str] = {"always": "tool", "always_tool": "tool", "always_exact": "exact",
                                 "always_prefix": "prefix"}
# After these events the set of cleared (restorable) tool results may have changed.
_CLEARING_EVENTS = (ev.MicroCompactionEvent, ev.CompactionEvent, ev.RestoreEvent, ev.ResetEvent, ev.EvictEvent,
                    ev.PinEvent, ev.RewindEvent)
# Restored events a surface redraws from; the rest was transient (or, for notices
# written before the events were typed, a repeat of the typed event before it), or said what
# an earlier run found when it started (its settings' warnings, its MCP servers and their
# prompts, its memory imports): this run says its own, and a session resumed k times showed
# k copies of each warning before its conversation.
_NOT_REPLAYED = (ev.TextDeltaEvent, ev.ThinkingDeltaEvent, ev.StateEvent, ev.NoticeEvent, ev.SessionInfoEvent,
                 ev.ApprovalRequestEvent, ev.ApprovalResolvedEvent, ev.CommandQueuedEvent, ev.ForecastEvent,
                 ev.RestorePreviewEvent, ev.ServerCompactionEvent, ev.ConfigWarningEvent, ev.McpServerEvent,
                 ev.McpPromptsEvent, ev.MemoryImportEvent, ev.RewindPointsEvent, ev.McpAuthEvent)

# What a rewind list keeps of each message (a line is drawn; the rewind event carries it whole).
REWIND_POINT_CHARS = 1_000


# The id of the command whose handling emits the event (asyncio copies it into the tasks a
# turn starts, so its tool calls, retries and result carry it too); None: nobody asked.
_CAUSE: contextvars.ContextVar[int | None] = contextvars.ContextVar("tidegauge_command", default=None)


class MemoryReloader(Protocol):
    """Where the session's memory files come from (the runtime's ``MemorySource`` is one): the
    user's answer about an import is recorded, then the files are read again with it."""

    def record(self, path: str, approve: bool) -> None: ...

    def load(self) -> "MemoryBundle": ...


class Closable(Protocol):
    async def aclose(self) -> None: ...


class McpControl(Protocol):
    """What the /mcp view asks of the session's MCP servers (``app.mcp.hub.McpHub``)."""

    configs: "dict[str, Any]"
    busy: dict[str, str]

    async def reconnect(self, name: str) -> None: ...

    async def login(self, name: str) -> bool: ...

    async def logout(self, name: str) -> None: ...


# The /mcp view's actions, as its row says them while they run.
_MCP_BUSY = {"reconnect": "reconnecting", "login": "logging in", "logout": "logging out"}


class EventStream:
    """The session's event log: wraps each event in its envelope (``seq``, ``command_id``: the one
    place an event is numbered), keeps what a surface attaching late
    catches up from (``EventLog``: the last ``EVENT_RING`` events, a reply's deltas as one, and the
    events still in force), and fans them out to listeners in order of subscription.

    ``attach`` takes the snapshot and adds the listener under the lock ``emit`` numbers under,
    so a surface gets every event after its snapshot's seq, whenever it attaches.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a listener may attach or emit again
        self._listeners = Listeners(self._lock)
        self._log = EventLog()
        self.seq = 0  # of the last event emitted

    def continue_after(self, seq: int) -> None:
        """A resumed session numbers on after the last event its transcript holds."""
        with self._lock:
            self.seq = max(self.seq, seq)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.add(listener)

    def attach(self, listener: Listener, snapshot: Callable[[], SessionSnapshot]) -> tuple[SessionSnapshot, Callable[[], None]]:
        with self._lock:
            return self.caught_up(snapshot()), self.subscribe(listener)

    def caught_up(self, snapshot: SessionSnapshot) -> SessionSnapshot:
        """``snapshot`` at the last seq, with the log's events, the standing ones, and the session's
        info as its events since have changed it (server-side compaction switched)."""
        with self._lock:
            snapshot.seq = self.seq
            snapshot.events = self._log.events()
            snapshot.standing = self._log.standing()
            snapshot.info = self._log.server_compaction(snapshot.info)
            return snapshot

    def emit(self, event: Event, command_id: int | None = None) -> None:
        """Number the event in its envelope (the one place an event gets its seq and command id;
        the event itself is not changed, so one shared, as the session's info is, stays as it is)
        and pass it to every listener."""
        with self._lock:
            self.seq += 1
            envelope = EventEnvelope(self.seq, command_id, event)
            self._log.add(envelope)
            listeners = self._listeners.current()
            # Listeners are called under the lock: an ``attach`` from another thread waits until
            # every listener has the event its snapshot counts.
            for listener in listeners:
                listener(envelope)


def transcript_recorder(transcript: "TranscriptWriter") -> Listener:
    """The first listener of every session: persist the event (deltas excepted)."""

    def record(envelope: EventEnvelope) -> None:
        if not isinstance(envelope.event, _NOT_RECORDED):
            transcript.append_event(envelope)

    return record


def replayable(events: list[Event]) -> list[Event]:
    """What a surface redraws a resumed session from, with the gauge's history points
    (derived in app.context for a session recorded before they were events)."""
    return with_chart_points([e for e in events if not isinstance(e, _NOT_REPLAYED)])


@dataclass
class RunFigures:
    """What one run (a prompt, until its result) took: time, model calls, tokens, cost, refusals.

    Fed from the events the run emits, so the result's figures are the ones every surface saw.
    """

    started: float = field(default_factory=time.monotonic)
    api_at_start: float = 0.0  # the session's API clock when the run began
    replies: int = 0
    cost_usd: float | None = None
    by_agent: dict[str, TokenTotals] = field(default_factory=dict)
    denials: list[PermissionDenial] = field(default_factory=list)
    started_tools: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)

    def count_usage(self, agent: str, input_tokens: int | None, cache_read: int | None, cache_write: int | None,
                    output: int | None, reasoning: int | None, cost: float | None) -> None:
        totals = self.by_agent.setdefault(agent, TokenTotals())
        totals.input_tokens += input_tokens or 0
        totals.cache_read_tokens += cache_read or 0
        totals.cache_write_tokens += cache_write or 0
        totals.output_tokens += output or 0
        totals.reasoning_tokens += reasoning or 0
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost

    def completed(self, result: ResultEvent, session_id: str, api_seconds: float,
                  sandbox: SandboxState | None = None) -> ResultEvent:
        total = TokenTotals()
        for totals in self.by_agent.values():
            for name in TokenTotals.model_fields:
                setattr(total, name, getattr(total, name) + getattr(totals, name))
        return result.model_copy(update={
            "session_id": session_id,
            "duration_ms": round((time.monotonic() - self.started) * 1000, 1),
            "duration_api_ms": round(api_seconds * 1000, 1),
            "num_turns": self.replies,
            "total_cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "usage": total,
            "usage_by_agent": dict(self.by_agent),
            "permission_denials": list(self.denials),
            "sandbox": sandbox,
        })


class AgentSession:
    """One agent, one queue of commands, one stream of events (implements ``SessionSurface``)."""

    def __init__(self, agent: "Agent", *, stream: EventStream, info: SessionInfoEvent,
                 restored: list[Event] | None = None, approvals: bool = True,
                 services: "Callable[[], Awaitable[Closable | None]] | None" = None,
                 memory_source: MemoryReloader | None = None, asks_about_imports: bool = False) -> None:
        """``approvals``: a surface answers approval requests (the dashboard); without one
        (headless), tools that change things are refused unless ``--yes``. ``services``:
        started on the session's loop before the first command, closed when it stops
        (the MCP servers). ``memory_source``: reloads the memory files after the user
        answers about an import outside the repository; ``asks_about_imports``: a surface
        asks those questions (the dashboard, even with ``--yes``), else they are skipped
        with a line saying how to allow them."""
        self.agent = agent
        # What MCP servers ask of the user: forms (shown by a surface that asks questions) and model
        # calls (approved like a tool call that changes things: asked, allowed by --yes, else refused).
        self.client_requests = ClientRequests(emit=self._emit, shows_forms=asks_about_imports, approves=approvals,
                                              auto_yes=bool(getattr(getattr(agent, "options", None), "auto_approve", False)),
                                              call_model=self._sampling_call)
        self._memory_source = memory_source
        self._asks_about_imports = asks_about_imports and memory_source is not None
        # path -> the answer to its question (asked once per session, before the first request)
        self._import_questions: dict[str, asyncio.Future[bool]] = {}
        self._start_services = services
        self._services: Closable | None = None  # what they started (the MCP hub: prompts, resources)
        # What restoring a damaged transcript repaired (said once at start).
        self.repairs: list[str] = []
        # (setting, words) said once at start: settings that cannot work as set.
        self.config_warnings: list[tuple[str, str]] = []
        budget_warning = agent.engine.budget_floor_warning()
        if budget_warning:
            self.config_warnings.append(("budget", budget_warning))
        self.stream = stream
        self.info = info
        self.restored = replayable(restored or [])
        self._last_id = 0  # of the commands submitted (and of approval requests)
        self._queue: deque[tuple[int, Command]] = deque()
        # Commands submitted before ``run``: taken over by the session's loop when it starts.
        self._inbox: list[tuple[int, Command]] = []
        self._inbox_lock = threading.Lock()
        self._unanswered: list[int] = []  # prompts dropped unrun, not yet told of their result
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._wake: asyncio.Event | None = None
        self._current: asyncio.Task[object] | None = None
        # request id -> (the answer and whether to save its rule, the tool's name)
        self._approvals: dict[str, tuple["asyncio.Future[tuple[Decision, bool]]", str]] = {}
        if agent.permissions is None:  # an agent built without rules: the default ones, answers kept here
            agent.permissions = Permissions(workspace=agent.workspace)
        self.permissions: Permissions = agent.permissions
        self._stopping = False
        self._whatif_task: asyncio.Task[None] | None = None  # the replay running in a worker thread
        self._mcp_tasks: set[asyncio.Task[None]] = set()  # the /mcp view's reconnects, logins, logouts
        self._services_started = False
        self._mcp_status_asked = False  # a surface asked for the MCP servers' rows (/mcp)
        # Prompts, compactions and resets submitted and not yet done (or dropped): counted
        # at ``submit``, on the caller's thread, so "nothing pending" never races a submit.
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._last_state = StateEvent(state="idle", step=0, max_steps=agent.max_steps)
        # the restorable, evicted and pinned results the surfaces were last told of
        self._cleared: tuple[list[str], list[str], list[str]] = ([], [], [])
        self._run: RunFigures | None = None  # the figures of the run in progress
        self._api_clock = agent.api_clock  # every model call of the agent's (Agent.model_stream) runs on it
        agent.emit.connect(self._emit)
        agent.engine.emit_background = self._emit_background
        if approvals:
            agent.approver = self._ask_approval
        else:
            agent.approver = None

    # ------------------------------------------------------------ the Protocol

    def attach(self, listener: Listener) -> tuple[SessionSnapshot, Callable[[], None]]:
        return self.stream.attach(listener, self.snapshot)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self.stream.subscribe(listener)

    def snapshot(self) -> SessionSnapshot:
        return self.stream.caught_up(SessionSnapshot(
            info=self.info, context=self.agent.context_event(), state=self._last_state, restored=list(self.restored),
            busy=self.busy, queued=len(self._queue)))

    def submit(self, command: Command) -> int:
        return self.submit_as(self._next_id(), command)

    def submit_as(self, command_id: int, command: Command) -> int:
        """``submit`` under an id given by the caller (the session process's parent numbers the
        commands it sends, so its ids are the ones on the events). From any thread, before
        ``run`` too: a command given before the loop runs waits for it and is handled on it."""
        with self._inbox_lock:
            self._last_id = max(self._last_id, command_id)
            if isinstance(command, (UserInput, Compact, Reset)):
                self._count_pending(+1)
            loop = self._loop
            if loop is None:
                self._inbox.append((command_id, command))
                return command_id
        if threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._accept, command_id, command)
        else:
            self._accept(command_id, command)
        return command_id

    def _next_id(self) -> int:
        with self._inbox_lock:
            self._last_id += 1
            return self._last_id

    # ------------------------------------------------------------ state

    @property
    def busy(self) -> bool:
        """Running a command, as its state says (``is_busy``: the one definition every surface uses)."""
        return ev.is_busy(self._last_state.state)

    @property
    def _running(self) -> bool:
        """A command's task is in hand: what an interrupt cancels and a new command queues behind
        (from the moment it is taken off the queue, before its first state event)."""
        return self._current is not None and not self._current.done()

    @property
    def pending(self) -> int:
        """Prompts, compactions and resets submitted and not finished yet (any thread)."""
        return self._pending

    def _count_pending(self, change: int) -> None:
        with self._pending_lock:
            self._pending = max(0, self._pending + change)

    def _drop_prompts(self) -> None:
        """An interrupt ends the prompts queued behind the turn; a queued compaction stays and
        runs next (ctrl+s during a turn, then ctrl+c: the user still asked to compact)."""
        kept = deque(item for item in self._queue if isinstance(item[1], Compact))
        self._unanswered += [command_id for command_id, command in self._queue if isinstance(command, UserInput)]
        self._count_pending(-(len(self._queue) - len(kept)))
        self._queue = kept

    def _drop_queue(self) -> None:
        self._unanswered += [command_id for command_id, command in self._queue if isinstance(command, UserInput)]
        self._count_pending(-len(self._queue))
        self._queue.clear()

    def _answer_dropped_prompts(self) -> None:
        """Every prompt ends in one result: those dropped unrun end interrupted, after the turn
        that was running (its own result first), each with its command's id."""
        unanswered, self._unanswered = self._unanswered, []
        for command_id in unanswered:
            cause = _CAUSE.set(command_id)
            try:
                self._emit(ResultEvent(stop_reason="interrupted", text="", steps=0, session_id=self.info.session_id,
                                       sandbox=self.info.sandbox))
            finally:
                _CAUSE.reset(cause)

    def _emit(self, event: Event) -> None:
        if isinstance(event, StateEvent):
            self._last_state = event
        elif isinstance(event, ResultEvent) and not event.model:
            event = event.model_copy(update={"provider": self.info.provider, "model": self.info.model})
        if self._run is not None:
            event = self._count(self._run, event)
        self.stream.emit(event, _CAUSE.get())
        if isinstance(event, _CLEARING_EVENTS):
            self._tell_cleared()

    def _emit_background(self, update: int, events: list[Event]) -> None:
        """What the background memory update number ``update`` reported, emitted at a later step:
        under an id of the update's own (``-update``: negative, never a command's, which a parent
        process numbers), not the id of whatever command runs when they are let out."""
        cause = _CAUSE.set(-update)
        try:
            for event in events:
                self.agent.engine.emit(event)
        finally:
            _CAUSE.reset(cause)

    def _count(self, run: RunFigures, event: Event) -> Event:
        """Add the event to the run's figures; the result leaves with them."""
        match event:
            case ev.UsageEvent():
                run.count_usage(event.agent, event.input_tokens, event.cache_read_tokens, event.cache_write_tokens,
                                event.output_tokens, event.reasoning_tokens, event.cost_usd)
            case ev.AssistantMessageEvent():
                run.replies += 1
            case ev.ToolStartEvent():
                run.started_tools[event.id] = (event.name, dict(event.input))
            case ev.ToolResultEvent():
                if event.refused:
                    name, tool_input = run.started_tools.get(event.id, (event.name, {}))
                    run.denials.append(PermissionDenial(tool_name=name, tool_use_id=event.id, tool_input=tool_input))
            case ev.ResultEvent():
                self._run = None
                return run.completed(event, self.info.session_id, self._api_clock.now() - run.api_at_start,
                                     sandbox=self.info.sandbox)
            case (ev.TextDeltaEvent() | ev.ThinkingDeltaEvent() | ev.UserMessageEvent() | ev.ToolCallsCappedEvent()
                  | ev.ToolProgressEvent() | ev.ToolUserContentEvent() | ev.ContextEvent() | ev.CompactionEvent()
                  | ev.MicroCompactionEvent() | ev.ResetEvent() | ev.WarningCrossedEvent() | ev.ResultCutEvent()
                  | ev.BreakerEvent() | ev.RetryEvent() | ev.StateEvent() | ev.NoticeEvent() | ev.ErrorEvent()
                  | ev.SessionInfoEvent() | ev.ChartPointEvent() | ev.CommandQueuedEvent()
                  | ev.ApprovalRequestEvent() | ev.ApprovalResolvedEvent() | ev.InterruptedEvent()
                  | ev.OutputLimitEvent() | ev.PartialDiscardedEvent() | ev.CompactionPausedEvent()
                  | ev.ReportEvent() | ev.McpServerEvent() | ev.SubAgentEvent() | ev.ConfigWarningEvent()
                  | ev.SessionMemoryEvent() | ev.RestoreEvent() | ev.RuleAttachedEvent() | ev.SessionRepairedEvent()
                  | ev.UsageDistrustedEvent() | ev.ForecastEvent() | ev.RestorePreviewEvent()
                  | ev.ClearedResultsEvent() | ev.ServerCompactionEvent() | ev.MemoryImportEvent()
                  | ev.PromptCacheOffEvent() | ev.PermissionsEvent() | ev.ElicitationRequestEvent()
                  | ev.ElicitationResolvedEvent() | ev.SamplingEvent() | ev.McpPromptsEvent()
                  | ev.McpAttachmentEvent() | ev.RequestRecordedEvent() | ev.WhatIfEvent()
                  | ev.EvictEvent() | ev.PinEvent() | ev.RewindPointsEvent() | ev.RewindEvent()
                  | ev.McpStatusEvent() | ev.McpAuthEvent()):
                pass  # not part of the run's figures
            case _:
                assert_never(event)
        return event

    def _tell_cleared(self) -> None:
        """Say which results are cleared and restorable, when that changed (the tool list marks them)."""
        engine = self.agent.engine
        cleared = (engine.cleared_results(), *engine.marked_results())
        if cleared != self._cleared:
            self._cleared = cleared
            self.stream.emit(ClearedResultsEvent(call_ids=cleared[0], evicted=cleared[1], pinned=cleared[2]),
                             _CAUSE.get())

    def _state(self, state: str, **fields: object) -> None:
        self._emit(StateEvent(state=state, step=self.agent.step, max_steps=self.agent.max_steps,
                              **fields))

    # ------------------------------------------------------------ commands

    def _accept(self, command_id: int, command: Command) -> None:
        """On the session's loop: act now, or queue. What it emits carries the command's id."""
        cause = _CAUSE.set(command_id)
        try:
            self._act_or_queue(command_id, command)
        finally:
            _CAUSE.reset(cause)
        if not self._running:  # else when the running turn has ended
            self._answer_dropped_prompts()
        if self._wake is not None:
            self._wake.set()

    def _act_or_queue(self, command_id: int, command: Command) -> None:
        if isinstance(command, Interrupt):
            self._drop_prompts()
            self.client_requests.cancel_all("interrupted")
            self._interrupt()
        elif isinstance(command, Approve) and self.client_requests.asks(command.request_id):
            self._answer_sampling(command)
        elif isinstance(command, Approve):
            self._answer(command.request_id, command.decision, command.save)
        elif isinstance(command, Report) and command.kind == "permissions":
            self._emit(self._permissions_report())
        elif isinstance(command, Report) and command.kind != "permissions":
            self._emit(ReportEvent(kind=command.kind, messages=len(self.agent.history),
                                   context=self.agent.context_event()))
        elif isinstance(command, Preview):
            self._preview(command)
        elif isinstance(command, PreviewRestore):
            self._preview_restore(command.call_id)
        elif isinstance(command, RestoreResult):
            self._restore(command.call_id, command.plan_id)
        elif isinstance(command, (EvictResult, PinResult)):
            self._change_result(command)
        elif isinstance(command, ServerCompaction):
            self._switch_server_compaction(command.on)
        elif isinstance(command, ApproveImport):
            self._answer_import(command.path, command.approve)
        elif isinstance(command, AnswerElicitation):
            self._answer_elicitation(command)
        elif isinstance(command, WhatIf):
            self._start_whatif(command)
        elif isinstance(command, PreviewRewind):
            self._preview_rewind()
        elif isinstance(command, Rewind):
            self._rewind(command)
        elif isinstance(command, ManageMcpServer):
            self._manage_mcp(command)
        elif isinstance(command, Shutdown):
            self._stopping = True
            if command.now:
                self._drop_queue()
                self._interrupt()
                if self._whatif_task is not None:
                    self._whatif_task.cancel()  # its answer is not waited for (its thread ends on its own)
        else:
            if isinstance(command, Reset):
                # A confirmed reset replaces what was queued and ends the running turn.
                self._drop_queue()
                self._interrupt()
            if self._running:
                kind = "prompt" if isinstance(command, UserInput) else (
                    "compact" if isinstance(command, Compact) else "reset")
                self._emit(CommandQueuedEvent(command=kind, position=len(self._queue) + 1,
                                              text=command.text if isinstance(command, UserInput) else ""))
            self._queue.append((command_id, command))

    # ------------------------------------------------------------ the policy what-if

    def _start_whatif(self, command: WhatIf) -> None:
        """Replay the transcript under ``command``'s policy in a worker thread (a long session takes
        seconds), then answer with its curve; one at a time. A surface's figures are checked here:
        the web surface is a way in too."""
        reason = _whatif_problem(command)
        if reason is None and self._whatif_task is not None and not self._whatif_task.done():
            reason = "a what-if is already being replayed"
        if reason is None and not self.info.transcript_path:
            reason = "this session keeps no transcript"
        if reason is not None:
            self._emit(WhatIfEvent(reason=reason))
            return
        assert self._loop is not None
        cause = _CAUSE.get()
        price = self.agent.engine.price

        async def replay() -> None:
            event = await asyncio.to_thread(_whatif_event, self.info, price, command)
            token = _CAUSE.set(cause)
            try:
                self._emit(event)
            finally:
                _CAUSE.reset(token)

        self._whatif_task = self._loop.create_task(replay())

    # ------------------------------------------------------------ the /mcp view

    def _mcp_status(self, note: str = "") -> None:
        """Every configured server as it stands (``app.mcp.status``: the rows of ``tidegauge mcp list``)."""
        hub = self._services
        if hub is None or not hasattr(hub, "configs"):
            starting = self._start_services is not None and not self._services_started
            self._emit(McpStatusEvent(note=note or ("the MCP servers are still starting" if starting else "")))
            return
        # The status rows need the MCP client: loaded when /mcp asks, not with the session.
        from app.mcp.status import live_statuses

        busy: dict[str, str] = getattr(hub, "busy", {})
        rows = [McpServerRow(**status.as_json(), busy=busy.get(status.name, ""))
                for status in live_statuses(hub)]  # type: ignore[arg-type]
        self._emit(McpStatusEvent(servers=rows, note=note))

    def _manage_mcp(self, command: ManageMcpServer) -> None:
        """The /mcp view's asks. A reconnect, login or logout runs beside the turn (a login waits for
        the browser for minutes), one at a time per server; each ends in the servers' rows again."""
        if command.action == "status":
            self._mcp_status_asked = True
            self._mcp_status()
            return
        hub: McpControl | None = self._services if hasattr(self._services, "configs") else None  # type: ignore[assignment]
        name = command.server
        config = hub.configs.get(name) if hub is not None else None
        problem = None
        if hub is None or config is None:
            problem = f"no MCP server named {name!r} in this session"
        elif command.action not in _MCP_BUSY:
            problem = f"unknown MCP action {command.action!r}"
        elif not config.enabled:
            problem = f"{name} is disabled in config.toml (enabled = false)"
        elif name in hub.busy:
            problem = f"{name}: {hub.busy[name]} already"
        elif command.action in ("login", "logout") and config.url is None:
            problem = f"{name} is started as a command: OAuth login is for url servers"
        if problem is not None or hub is None:
            self._mcp_status(problem or "")
            return
        assert self._loop is not None
        hub.busy[name] = _MCP_BUSY[command.action]
        self._mcp_status()
        act = getattr(hub, command.action)

        async def run() -> None:
            note = ""
            try:
                await act(name)
            except Exception as error:  # noqa: BLE001 - a bug in one server's action must not end the session
                note = f"{command.action} {name} failed: {type(error).__name__}: {error}"
            finally:
                hub.busy.pop(name, None)
                self._mcp_status(note)

        task = self._loop.create_task(run())
        self._mcp_tasks.add(task)
        task.add_done_callback(self._mcp_tasks.discard)

    # ------------------------------------------------------------ previews, restore, server compaction

    def _preview(self, command: Preview) -> None:
        """The plan a confirmation shows: ``Compact(plan_id=...)`` runs exactly it."""
        engine = self.agent.engine
        if command.kind == "evict":
            self._preview_evict(command.call_id or "")
            return
        plan = engine.plan_reset() if command.kind == "reset" else engine.plan_compaction(command.focus)
        self._emit(self._forecast_event(command.kind, plan, command.focus))

    def _forecast_event(self, kind: Literal["compact", "reset", "evict"], plan: Plan,
                        focus: str | None = None) -> ForecastEvent:
        planned = plan.forecast
        return ForecastEvent(
            kind=kind, action=planned.action, focus=focus, plan_id=plan.id,
            reason=plan.reason or None, messages_before=plan.messages_before, messages_after=plan.messages_after,
            tokens_before=planned.tokens_before,
            tokens_after=planned.tokens_after, tokens_freed=planned.tokens_freed,
            tokens_after_low=planned.after_range[0] if planned.after_range[0] != planned.after_range[1] else None,
            tokens_after_high=planned.after_range[1] if planned.after_range[0] != planned.after_range[1] else None,
            cache_tokens_invalidated=planned.cache_tokens_invalidated,
            next_request_cost_before_usd=planned.next_request_cost_before_usd,
            next_request_cost_after_usd=planned.next_request_cost_after_usd,
            operation_cost_usd=planned.operation_cost_usd, model_call=planned.model_call,
            memory_updates=planned.memory_updates, memory_input_tokens=planned.memory_input_tokens,
            memory_cost_usd=planned.memory_cost_usd, call_id=plan.call_id, call=plan.call or None)

    def _preview_evict(self, call_id: str) -> None:
        """The eviction a confirmation shows (``EvictResult(plan_id=...)`` runs it), or, as a plan that
        does nothing, the one line saying why it cannot be done."""
        try:
            plan = self.agent.engine.plan_evict(call_id)
        except ResultChangeError as error:
            self._emit(ForecastEvent(kind="evict", action="nothing", reason=str(error), call_id=call_id,
                                     tokens_before=0, tokens_after=0, tokens_freed=0, cache_tokens_invalidated=0,
                                     model_call=False))
            return
        self._emit(self._forecast_event("evict", plan))

    def _change_result(self, command: EvictResult | PinResult) -> None:
        """Evict or pin one result: between turns only (a turn running now holds the request the
        history is built into); a refusal is the event with its one-line reason."""
        call_id = str(command.call_id)  # a command line from the pipe is not type-checked: never more than a name
        refused: EvictEvent | PinEvent
        if isinstance(command, EvictResult):
            refused = EvictEvent(id=call_id, reason="")
        else:
            refused = PinEvent(id=call_id, pinned=command.pin is not False, reason="")
        if self.busy:
            self._emit(refused.model_copy(update={"reason": "the agent is busy: try again when this turn ends"}))
            return
        try:
            if isinstance(command, EvictResult):
                plan_id = command.plan_id if isinstance(command.plan_id, str) else None
                self.agent.engine.evict_result(call_id, plan_id)  # emits the event and the new context
            else:
                self.agent.engine.pin_result(call_id, command.pin is not False)
        except ResultChangeError as error:
            self._emit(refused.model_copy(update={"reason": str(error)}))

    def _preview_rewind(self) -> None:
        """The user messages the conversation can go back to, newest first, each with its plan and
        the files that changed since (answered at once, busy or not: the list is only shown)."""
        engine = self.agent.engine
        plans = engine.plan_rewinds()
        files = self.agent.tool_context.file_history
        newest_first = list(reversed(plans))
        changes = (files.plans([plan.rewind.abandoned_ids if plan.rewind else () for plan in newest_first])
                   if files is not None else [None] * len(newest_first))
        points = []
        for plan, changed in zip(newest_first, changes):
            target = plan.rewind
            assert target is not None
            points.append(RewindPoint(
                # the list shows a line of each (and the event is kept in the transcript): the whole
                # message comes back with the rewind's own event
                turn=target.turn, message_id=target.message_id, text=target.text[:REWIND_POINT_CHARS], plan_id=plan.id,
                messages_after=plan.messages_after, tokens_after=plan.forecast.tokens_after,
                abandoned_turns=target.abandoned_turns,
                cache_tokens_invalidated=plan.forecast.cache_tokens_invalidated,
                next_request_cost_after_usd=plan.forecast.next_request_cost_after_usd,
                files=changed.files if changed else [], files_changed_since=changed.changed_since if changed else [],
                files_not_restorable=changed.not_restorable if changed else []))
        tokens = engine.projection().projected_tokens
        cost = plans[0].forecast.next_request_cost_before_usd if plans else None
        reason = None if points else "nothing to rewind: no message of yours is in the context (a compaction keeps them in its summary)"
        self._emit(RewindPointsEvent(tokens_before=tokens, points=points, next_request_cost_before_usd=cost,
                                     reason=reason))

    def _rewind(self, command: Rewind) -> None:
        """Between turns only: run the plan the list showed; the files first, when asked."""
        # its state may say idle while the command's task still ends (its result is out): both count
        if self._running or self.busy:
            self._emit(RewindEvent(ok=False, reason="the agent is busy: interrupt the turn (escape) or rewind when it ends"))
            return
        plan = self.agent.engine.take_rewind_plan(command.plan_id)
        if plan is None or plan.rewind is None:
            self._emit(RewindEvent(ok=False, reason="that message is no longer in the context; open the list again"))
            return
        said: dict[str, object] = {}
        files = self.agent.tool_context.file_history
        if command.files is True and files is not None:  # a surface's JSON: only a real true asks for it
            done = files.restore(plan.rewind.abandoned_ids, overwrite_changed=command.overwrite_changed is True)
            said = {"files_restored": done.restored, "files_skipped": done.skipped,
                    "files_not_restorable": done.not_restorable,
                    "reason": "; ".join(done.problems) or None}
        self.agent.engine.rewind(plan, said)

    def _preview_restore(self, call_id: str) -> None:
        try:
            preview = self.agent.engine.preview_restore(call_id)
        except RestoreError as error:
            self._emit(RestorePreviewEvent(call_id=call_id, reason=str(error)))
            return
        reason = None if preview.fits else (
            f"restoring {call_id} would push the next request to ~{preview.projected_after:,} tokens, over the"
            " blocking line; compact first")
        self._emit(RestorePreviewEvent(call_id=call_id, tool_name=preview.tool_name, tokens=preview.tokens,
                                       projected_before=preview.projected_before,
                                       projected_after=preview.projected_after,
                                       level_after=preview.level_after, reason=reason, plan_id=preview.plan_id))

    def _restore(self, call_id: str, plan_id: str | None = None) -> None:
        """Between turns only: a turn running now holds the request the history is built into."""
        if self._running:
            self._emit(RestorePreviewEvent(call_id=call_id, reason=f"the agent is busy: restore {call_id} when this turn ends"))
            return
        try:
            self.agent.engine.restore_result(call_id, by="user", plan_id=plan_id)  # emits RestoreEvent, the new context
        except RestoreError as error:
            self._emit(RestorePreviewEvent(call_id=call_id, reason=str(error)))

    def _switch_server_compaction(self, on: bool) -> None:
        provider = self.agent.provider
        threshold, problem = switch_server_compaction(provider, self.agent.engine, on)
        self._emit(ServerCompactionEvent(on=self.agent.engine.config.server_compaction,
                                         provider=getattr(provider, "name", "") or "this",
                                         threshold=threshold, reason=problem))

    # ------------------------------------------------------------ memory imports

    def _tell_imports(self, notices: "list[ImportNotice]") -> None:
        """Each import or rule file held back or cut, once. Where a surface asks, the questions
        wait for the first prompt (``_ask_about_imports``): by then it surely listens."""
        for notice in notices:
            if notice.action == "ask" and self._asks_about_imports:
                continue
            self._emit(MemoryImportEvent(action="skipped" if notice.action == "ask" else notice.action,
                                         path=str(notice.path), importer=str(notice.importer), reason=notice.reason))

    async def _ask_about_imports(self) -> None:
        """Before the first request: ask about each import from outside the repository and wait
        for the answers (``ApproveImport``), so that request already carries what was approved."""
        if not self._asks_about_imports:
            return
        assert self._loop is not None
        for notice in self.agent.engine.memory.pending:
            path = str(notice.path)
            asked = self._import_questions.get(path)
            if asked is None or asked.cancelled():  # an interrupted turn's question is asked again
                self._import_questions[path] = self._loop.create_future()
                self._emit(MemoryImportEvent(action="ask", path=path, importer=str(notice.importer),
                                             reason=notice.reason))
        waiting = [future for future in self._import_questions.values() if not future.done()]
        if waiting:
            await asyncio.gather(*waiting)

    def _answer_import(self, path: str, approve: bool) -> None:
        """Only a file the session asked about can be answered: a command cannot approve any path."""
        engine = self.agent.engine
        before = engine.memory.notices
        notice = next((n for n in engine.memory.pending if str(n.path) == path), None)
        if self._memory_source is None or notice is None:
            return
        self._memory_source.record(path, approve)
        bundle = self._memory_source.load()
        engine.use_memory(bundle)
        engine.replace_rules(bundle.rules)
        self._emit(MemoryImportEvent(action="approved" if approve else "declined", path=path,
                                     importer=str(notice.importer), reason=notice.reason))
        # What reading it brought along (its own imports from further out, a cut) is said too.
        said = {(n.action, n.path) for n in before}
        self._tell_imports([n for n in bundle.notices if (n.action, n.path) not in said
                            and n.path != notice.path])
        engine.emit_context()
        question = self._import_questions.get(path)
        if question is not None and not question.done():
            question.set_result(approve)

    def _interrupt(self) -> None:
        if self._running:
            assert self._current is not None
            self._state("interrupting")
            self._current.cancel()

    async def run(self) -> None:
        """The consumer: runs queued commands one at a time until ``Shutdown``."""
        self._wake = asyncio.Event()
        self._loop_thread = threading.get_ident()
        self._emit(self.info)
        if self.repairs:
            self._emit(SessionRepairedEvent(warnings=self.repairs))
        for setting, text in self.config_warnings:
            self._emit(ConfigWarningEvent(setting=setting, text=text))
        self._tell_imports(self.agent.engine.memory.notices)
        with self._inbox_lock:  # from now on a submit goes to this loop; those before it are taken here
            self._loop = asyncio.get_running_loop()
            early, self._inbox = self._inbox, []
        for command_id, command in early:
            self._accept(command_id, command)
        services = None
        try:
            if self._start_services is not None:
                services = await self._start_services()  # their tools are in the first request
                self._services = services
            self._services_started = True
            if self._mcp_status_asked:  # /mcp was opened while they started: its rows now
                self._mcp_status()
            self.agent.engine.emit_context()
            while True:
                if not self._queue:
                    if self._stopping:
                        whatif = self._whatif_task
                        if whatif is not None and not whatif.done():  # asked before the stop: answered
                            await asyncio.wait([whatif])
                        break
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                command_id, command = self._queue.popleft()
                # The command's task (a copy of this context) and what it starts carry its id.
                cause = _CAUSE.set(command_id)
                self._current = asyncio.ensure_future(self._execute(command))
                try:
                    await asyncio.shield(self._current)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        self._current.cancel()  # the session itself is being stopped
                        raise
                except Exception as error:  # noqa: BLE001 - a bug in a turn must not end the session

                    self._emit(ErrorEvent(message=f"{type(error).__name__}: {error}"))
                    self._state("idle")
                finally:
                    _CAUSE.reset(cause)
                    self._current = None
                    self._count_pending(-1)
                    self._answer_dropped_prompts()
        finally:
            for future, _tool in self._approvals.values():
                if not future.done():
                    future.cancel()
            for question in self._import_questions.values():
                if not question.done():
                    question.cancel()
            self.client_requests.cancel_all("the session stopped")
            for task in list(self._mcp_tasks):
                task.cancel()
            if self._mcp_tasks:
                await asyncio.gather(*self._mcp_tasks, return_exceptions=True)
            if services is not None:
                await services.aclose()
            await self.agent.aclose()
            if self.info.transcript_path and not self.info.resumed:
                # A session in which nothing was typed is not kept: it would be the next --continue.
                from pathlib import Path

                from app.session.store import remove_if_empty

                remove_if_empty(Path(self.info.transcript_path).parent)

    def _answer_elicitation(self, command: AnswerElicitation) -> None:
        """A form's answer goes to the server that asked, checked against its form again."""
        self.client_requests.answer(command.request_id, command.action, dict(command.values))

    def _answer_sampling(self, command: Approve) -> None:
        """The user's answer to an MCP server's model call (an approval like a tool call's)."""
        self.client_requests.approve(command.request_id, command.decision)

    async def _sampling_call(self, server: str, call: "SamplingCall") -> "SampledReply":
        """An MCP server's model call on the session's provider: the server's words alone (no system
        prompt, history or memory of ours), bounded output, usage on the ledger as mcp:<server>."""
        request = ModelRequest(system=call.system, tools=[], max_tokens=call.max_tokens, tool_choice="none",
                               messages=[Message(role=role, content=[TextBlock(text=text)]) for role, text in call.messages])
        async for item in self.agent.model_stream(request):
            if isinstance(item, Completed):
                self.agent.engine.record_usage(f"mcp:{server}", item.usage, self.agent.price)
                text = "".join(block.text for block in item.message.content if isinstance(block, TextBlock))
                return SampledReply(text=text, model=self.agent.provider.model, stop_reason=item.stop_reason,
                                    output_tokens=item.usage.output_tokens)
        raise ProviderError("the stream ended without a final message")

    async def _execute(self, command: Command) -> None:
        if isinstance(command, UserInput):
            self._run = RunFigures(api_at_start=self._api_clock.now())
            await self._ask_about_imports()
            mcp_text = await self._mcp_text(command.text)
            if mcp_text is not None:
                await self.agent.run_turn(command.text, *mcp_text)
        elif isinstance(command, Compact):
            # The confirmed plan if the conversation is as it was shown, else one made now (said so)
            plan = self.agent.engine.take_plan(command.plan_id, command.focus)
            await self.agent.compact(command.focus, plan=plan)
        elif isinstance(command, Reset):
            # The confirmed plan if the conversation is as it was shown, else one made now (said so)
            self.agent.reset(self.agent.engine.take_reset_plan(command.plan_id))

    async def _mcp_text(self, text: str) -> "tuple[list[TextBlock], list[Event]] | None":
        """What MCP servers add to the user's turn: a prompt run as ``/mcp__SERVER__PROMPT``, the
        resources named with ``@SERVER:URI`` (app/mcp/hub.py). None when it cannot be done: the
        turn ends in an error result with one line saying why, and no model call is made."""
        prompt_turn = getattr(self._services, "prompt_turn", None)
        if prompt_turn is None and not text.lstrip().startswith(MCP_PROMPT_PREFIX):
            return [], []  # no server: the MCP client (and its SDK) is never imported for a turn
        from app.mcp.client import McpServerError

        try:
            if prompt_turn is None:
                raise ValueError(f"unknown MCP prompt {text.split()[0]}: no MCP server offers prompts")
            blocks, said = await prompt_turn(text, self.agent.registry, self.agent.tool_context)
            return blocks, said
        except (ValueError, McpServerError) as refused:
            line = " ".join(sanitize_for_display(str(refused)).split())[:500]
            self._emit(ErrorEvent(message=line))
            self._emit(ResultEvent(stop_reason="error", text=line, steps=0, session_id=self.info.session_id,
                                   sandbox=self.info.sandbox))
            return None

    # ------------------------------------------------------------ approvals

    async def _ask_approval(self, use: "ToolUseBlock") -> Literal["yes", "no"]:
        """Asked by the agent (and its sub-agents) when the rules say ask; an "always" answer adds
        the allow rules this request offered, for the session (and saved, if asked to)."""
        assert self._loop is not None
        request_id = f"approval-{self._next_id()}"
        future: asyncio.Future[tuple[Decision, bool]] = self._loop.create_future()
        self._approvals[request_id] = (future, use.name)
        tool = self.agent.registry.get(use.name)
        outside = escape_reason(tool.spec, use.input, self.agent.tool_context.sandbox) if tool is not None else None
        # Leaving the sandbox is asked about every time: no "always" answer is offered for it.
        choices = self.permissions.choices(use.name, use.input) if outside is None else {}
        running = self._last_state  # the agent's "tool" state: its numbers stay while we wait
        self._state("waiting_approval", tool_name=use.name, tool_index=running.tool_index,
                    tool_count=running.tool_count)
        self._emit(ApprovalRequestEvent(request_id=request_id, tool_id=use.id, name=use.name,
                                        input=dict(use.input), summary=summarize_args(use.name, use.input),
                                        choices=choices, outside_sandbox=outside))
        try:
            decision, save = await future
        except asyncio.CancelledError:
            self._emit(ApprovalResolvedEvent(request_id=request_id, decision="interrupted"))
            raise
        finally:
            self._approvals.pop(request_id, None)
        kind = _ALWAYS_KINDS.get(decision)
        added = self.permissions.allow(choices.get(kind, []), save=save) if kind else []
        self._emit(ApprovalResolvedEvent(request_id=request_id, decision=decision, rules=[r.text for r in added],
                                         saved=any(r.source == "saved" for r in added)))
        self._state("tool", tool_name=use.name, tool_index=running.tool_index, tool_count=running.tool_count)
        return "no" if decision == "no" else "yes"

    def _answer(self, request_id: str, decision: str, save: bool = False) -> None:
        pending = self._approvals.get(request_id)
        if pending is not None and not pending[0].done():
            # a value no dialog offers (from a pipe) is a no
            pending[0].set_result((decision if decision in DECISIONS else "no", bool(save)))  # type: ignore[arg-type]

    def _permissions_report(self) -> PermissionsEvent:
        """/permissions: the rules in force, strongest first, each with where it came from."""
        order = {effect: index for index, effect in enumerate(EFFECTS)}
        rules = sorted(self.permissions.rules, key=lambda rule: order[rule.effect])
        saved = self.permissions.saved
        return PermissionsEvent(
            rules=[PermissionRuleLine(effect=r.effect, rule=r.text, source=r.source) for r in rules],
            saved_file=str(saved.path) if saved is not None else None,
            project_file=str((saved.project if saved is not None else self.permissions.workspace) / PROJECT_SETTINGS),
            sandbox=self.agent.tool_context.sandbox.state, sandbox_network=self.agent.tool_context.sandbox.network)


def _whatif_problem(command: WhatIf) -> str | None:
    """What is wrong with a ``WhatIf``'s figures (one line), or None."""
    window, fraction = command.window, command.auto_compact
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return f"window {window!r}: must be a whole number of tokens, more than 0"
    if window > 100_000_000:
        return f"window {window:,}: more than 100,000,000 tokens"
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        return f"auto-compact {fraction!r}: must be a fraction of the window, more than 0 and at most 1"
    return None


def _whatif_event(info: SessionInfoEvent, price: "Price | None", command: WhatIf) -> WhatIfEvent:
    """This session's transcript replayed under the policy (in a worker thread: no loop, no I/O but the reads)."""
    # The what-if replay loads when one is asked for, not with the session.
    from app.session.whatif import Policy, PolicyError, load_recording, run_whatif

    transcript = Path(info.transcript_path or "")  # checked before: the session keeps one
    name = f"window={command.window},auto-compact={command.auto_compact:g}"
    try:
        recording = load_recording(transcript, session_id=info.session_id, model=info.model,
                                   tool_results_dir=transcript.parent / "tool-results", price=price)
        recorded, curve = run_whatif(recording, [Policy(name=name, window=command.window,
                                                        auto_compact=float(command.auto_compact))])
    except PolicyError as err:
        return WhatIfEvent(name=name, reason=str(err))
    return WhatIfEvent(name=name, window=curve.window, auto_compact_line=curve.auto_compact_line,
                       warning_line=curve.warning_line, compactions=curve.compactions, peak_tokens=curve.peak_tokens,
                       points=[tokens for _, tokens in curve.points], recorded_compactions=recorded.compactions,
                       recorded_peak_tokens=recorded.peak_tokens)

"""The earlier stand-in for the session, kept for the few widget tests that draw a state the real
core reaches only after a long real run (results cleared by a micro-compaction, a session memory
in the breakdown, a provider with server-side compaction). It re-implements the session (its own
queue and forecast figures): every other dashboard test runs on ``fake_agent.FakeSession``, the
real session with a scripted model; what is left here is to be moved there.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable

from app.context.forecast import forecast
from app.context.prices import Price
from app.kernel import commands as cmd
from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope
from app.kernel.protocol import EventLog, Listener, SessionSnapshot
from snapshot_apps.fake_agent import Ask, Gate, Step, Text, big_log, context, session_steps, truncated_view

__all__ = ["Ask", "EventsOnlySession", "Gate", "Step", "Text", "big_log", "compaction_steps", "context",
           "session_steps", "truncated_view"]


# The scripted model's price: $3 per million input tokens, cached or not (what its figures assume).
FAKE_PRICE = Price(input_per_mtok=3.0, cached_input_per_mtok=3.0, cache_write_per_mtok=3.0, output_per_mtok=15.0)
# What every request of the fake starts with (system prompt, memory, tools: context(None, 4_800)).
FIXED_TOKENS = 4_800

# The id of the command being handled, as the real session keeps it: what it causes carries it
# (the queued command's task is started in a copy of the context that holds it).
_CAUSE: contextvars.ContextVar[int | None] = contextvars.ContextVar("fake_session_command", default=None)


class EventsOnlySession:
    """A scripted session: implements ``app.kernel.protocol.SessionSurface`` like the real one.

    Prompts, compactions and resets run one at a time on the loop of the first
    ``submit``; interrupts and approval answers act at once. What it was asked
    is kept in ``calls`` and ``answers``.
    """

    def __init__(self, turns: dict[str, list[Step]] | None = None, *, default: list[Step] | None = None,
                 start_context: ev.ContextEvent | None = None, restored: list[Any] | None = None,
                 provider_label: str = "fake · scripted-model", banner: str | None = None,
                 approvals: bool = True, server_compaction: bool | None = None) -> None:
        self.info = ev.SessionInfoEvent(
            session_id="20260101-000000-fixed", provider_label=provider_label, model="scripted-model",
            workspace="/home/user/project",
            transcript_path="/home/user/.local/share/tidegauge/sessions/fixed/transcript.jsonl",
            max_steps=50, banner=banner, server_compaction=server_compaction)
        self.max_steps = 50
        self.approvals = approvals
        self.turns = turns or {}
        self.default = default or [Text("Hello! I am a scripted agent.")]
        self._context = start_context or context(None, 4_800)
        self._restored = restored or []
        self._state = ev.StateEvent(state="idle", step=0, max_steps=self.max_steps)
        self._listeners: list[Callable[[Any], None]] = []
        self._seq = 0  # of the last event emitted
        self._log = EventLog()  # the real session's log: what a late surface catches up from
        self._queue: asyncio.Queue[tuple[int, Any]] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._current: asyncio.Task[Any] | None = None
        self._approvals: dict[str, asyncio.Future[str]] = {}
        self._plans = 0  # forecasts made: each names its plan, as the engine's do
        self._unanswered: list[int] = []  # prompts an interrupt dropped, told of their result after the turn
        self._idle = asyncio.Event()
        self._idle.set()
        self.pending = 0  # commands submitted and not finished (the real session has it too)
        self.history: list[str] = []  # what the "model" would see
        self.calls: list[tuple[str, Any]] = []  # the work done: run_turn, compact, reset
        self.submitted: list[cmd.Command] = []
        self.always_allowed: set[str] = set()
        self.answers: list[str] = []
        self.closed = False
        # Cleared results the user may restore: call id -> (tool name, tokens it adds back).
        self.restorable: dict[str, tuple[str, int]] = {}
        self.server_compaction = False
        # The results the user evicted and pinned (the tool list's d and p), and the plan last shown.
        self.evicted: list[str] = []
        self.pinned: list[str] = []
        self._evict_plans = 0

    # --- the SessionSurface Protocol ---

    def submit(self, command: cmd.Command) -> int:
        self.submitted.append(command)
        cause = _CAUSE.set(len(self.submitted))  # the id returned, on the events the command causes
        try:
            self._accept(command)
        finally:
            _CAUSE.reset(cause)
        return len(self.submitted)

    def _accept(self, command: cmd.Command) -> None:
        if isinstance(command, cmd.Interrupt):  # like the real one: a queued compaction stays
            self._drop_queued(keep=cmd.Compact)
            self._interrupt()
            return
        if isinstance(command, cmd.Approve):
            future = self._approvals.pop(command.request_id, None)
            if future is not None and not future.done():
                future.set_result(command.decision)
            return
        # The fake asks about no import and shows no server's form: an answer changes nothing.
        if isinstance(command, (cmd.ApproveImport, cmd.AnswerElicitation)):
            return
        if isinstance(command, cmd.Report) and command.kind == "permissions":
            self.emit(ev.PermissionsEvent(rules=[], project_file=f"{self.info.workspace}/.tidegauge/settings.toml"))
            return
        if isinstance(command, cmd.Report) and command.kind != "permissions":
            self.emit(ev.ReportEvent(kind=command.kind, messages=len(self.history), context=self._context))
            return
        if isinstance(command, cmd.WhatIf):
            self._answer_whatif(command)
            return
        if isinstance(command, (cmd.EvictResult, cmd.PinResult)) or (
                isinstance(command, cmd.Preview) and command.kind == "evict"):
            self._change_result(command)
            return
        if isinstance(command, (cmd.PreviewRewind, cmd.Rewind)):
            self._answer_rewind(command)
            return
        if isinstance(command, cmd.ManageMcpServer):  # the fake runs no MCP server, as a session without any
            note = "" if command.action == "status" else f"no MCP server named {command.server!r} in this session"
            self.emit(ev.McpStatusEvent(servers=[], note=note))
            return
        if isinstance(command, (cmd.Preview, cmd.PreviewRestore, cmd.RestoreResult, cmd.ServerCompaction)):
            self._answer_now(command)
            return
        if isinstance(command, cmd.Shutdown):
            self.closed = True
            if self._runner is not None:
                self._runner.cancel()
            return
        if isinstance(command, cmd.Reset):  # like the real one: replaces what waits, ends what runs
            self._drop_queued(keep=None)
            self._interrupt()
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._runner = asyncio.get_running_loop().create_task(self._consume())
        if self._current is not None and not self._current.done():
            kind = "prompt" if isinstance(command, cmd.UserInput) else (
                "compact" if isinstance(command, cmd.Compact) else "reset")
            self.emit(ev.CommandQueuedEvent(command=kind, position=self._queue.qsize() + 1,
                                            text=command.text if isinstance(command, cmd.UserInput) else ""))
        self._idle.clear()
        self.pending += 1
        self._queue.put_nowait((len(self.submitted), command))

    def _drop_queued(self, keep: type | None) -> None:
        """Take what waits off the queue but commands of the kind ``keep``; a prompt dropped ends
        in a result of its own, after the turn running now (at once when none runs)."""
        waiting: list[tuple[int, Any]] = []
        while self._queue is not None and not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for command_id, command in waiting:
            if keep is not None and isinstance(command, keep):
                self._queue.put_nowait((command_id, command))
                continue
            self.pending -= 1
            if isinstance(command, cmd.UserInput):
                self._unanswered.append(command_id)
        if not self._running():
            self._answer_dropped()

    def _running(self) -> bool:
        return self._current is not None and not self._current.done()

    def _interrupt(self) -> None:
        if self._running():
            assert self._current is not None
            self.emit(ev.StateEvent(state="interrupting", step=1, max_steps=self.max_steps))
            self._current.cancel()

    def _answer_dropped(self) -> None:
        unanswered, self._unanswered = self._unanswered, []
        for command_id in unanswered:
            cause = _CAUSE.set(command_id)
            try:
                self.emit(ev.ResultEvent(stop_reason="interrupted", text="", steps=0))
            finally:
                _CAUSE.reset(cause)

    def attach(self, listener: Listener) -> tuple[SessionSnapshot, Callable[[], None]]:
        """Like the real one: the snapshot at the last event's seq, the events after it (one thread here)."""
        return self.snapshot(), self.subscribe(listener)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def snapshot(self) -> SessionSnapshot:
        return SessionSnapshot(info=self._log.server_compaction(self.info), context=self._context, state=self._state,
                               restored=list(self._restored),
                               busy=self._current is not None and not self._current.done(), seq=self._seq,
                               events=self._log.events(), standing=self._log.standing())

    def _answer_whatif(self, command: cmd.WhatIf) -> None:
        """A fixed stand-in for the replay (the real one is tests/test_whatif.py's): its own call
        points, dropped to a third of the auto-compact line whenever they reach it."""
        line = int(command.window * command.auto_compact)
        calls = [e.tokens for e in (envelope.event for envelope in self._log.events())
                 if e.type == "chart_point" and e.kind == "call"]
        points, offset, compactions = [], 0, 0
        for tokens in calls:
            value = tokens - offset
            if value >= line:
                offset += value - line // 3
                value, compactions = line // 3, compactions + 1
            points.append(value)
        self.emit(ev.WhatIfEvent(name=f"window={command.window},auto-compact={command.auto_compact:g}",
                                 window=command.window, auto_compact_line=line, warning_line=line * 3 // 4,
                                 compactions=compactions, peak_tokens=max(points, default=0), points=points,
                                 recorded_compactions=0, recorded_peak_tokens=max(calls, default=0)))

    def _rewind_points(self) -> list[ev.RewindPoint]:
        """Each prompt of ``history`` (prompts and replies alternate), newest first; the context just
        before it grows with its place in the conversation, from the fixed part (4,800)."""
        projected = self._context.projected_tokens
        prompts = list(range(0, len(self.history), 2))
        points = [ev.RewindPoint(turn=n + 1, message_id=f"u-{n + 1}", text=self.history[index], plan_id=f"rewind-{n + 1}",
                                 messages_after=index, abandoned_turns=len(prompts) - n,
                                 tokens_after=4_800 + (projected - 4_800) * index // max(1, len(self.history)),
                                 files=["src/app.py"] if n == 0 else [])
                  for n, index in enumerate(prompts)]
        return points[::-1]

    def _answer_rewind(self, command: "cmd.PreviewRewind | cmd.Rewind") -> None:
        """The list with a plan per prompt, and running one, at once like the real session."""
        projected = self._context.projected_tokens
        points = self._rewind_points()
        if isinstance(command, cmd.PreviewRewind):
            self.emit(ev.RewindPointsEvent(tokens_before=projected, points=points,
                                           reason=None if points else "nothing to rewind"))
            return
        point = next((p for p in points if p.plan_id == command.plan_id), None)
        if point is None:
            self.emit(ev.RewindEvent(ok=False, reason="that message is no longer in the context"))
            return
        self.calls.append(("rewind", (point.turn, command.files)))
        del self.history[point.messages_after:]
        self._context = self._context.model_copy(update={"projected_tokens": point.tokens_after,
                                                         "estimated_tokens": point.tokens_after, "exact_tokens": None})
        self.emit(ev.RewindEvent(ok=True, turn=point.turn, message_id=point.message_id, text=point.text,
                                 abandoned_turns=point.abandoned_turns, tokens_before=projected,
                                 tokens_after=point.tokens_after, forecast_tokens_after=point.tokens_after,
                                 files_restored=point.files if command.files else []))
        self.emit(self._context)
        self.emit(ev.ChartPointEvent(tokens=point.tokens_after, kind="rewind"))

    def _answer_now(self, command: Any) -> None:
        """Previews, restores and the server-compaction switch, answered at once like the real session."""
        projected = self._context.projected_tokens
        if isinstance(command, cmd.Preview):
            # What the plan keeps is the fake's (it holds no history): a summary of 6,000 tokens,
            # or the fixed parts alone; the figures from it are the engine's own arithmetic.
            after = min(projected, 6_000 if command.kind == "compact" else FIXED_TOKENS)
            figures = forecast(command.kind, tokens_before=projected, tokens_after=after,
                               cached_prefix=projected if self._context.cumulative_cached else 0,
                               stable_prefix=FIXED_TOKENS, price=FAKE_PRICE)
            self._plans += 1
            self.emit(ev.ForecastEvent(
                plan_id=f"plan-{self._plans}", kind=command.kind, action=figures.action, focus=command.focus,
                tokens_before=projected, tokens_after=after, tokens_freed=figures.tokens_freed,
                cache_tokens_invalidated=figures.cache_tokens_invalidated,
                next_request_cost_before_usd=figures.next_request_cost_before_usd,
                next_request_cost_after_usd=figures.next_request_cost_after_usd,
                operation_cost_usd=figures.operation_cost_usd, model_call=figures.model_call))
        elif isinstance(command, cmd.ServerCompaction):
            self.server_compaction = command.on
            self.emit(ev.ServerCompactionEvent(on=command.on, provider="fake",
                                               threshold=self._context.thresholds.auto_compact_line if command.on
                                               else None))
        elif command.call_id not in self.restorable:
            self.emit(ev.RestorePreviewEvent(call_id=command.call_id, reason=f"the result of {command.call_id} is "
                                             "not cleared: it is already in the context"))
        else:
            name, tokens = self.restorable[command.call_id]
            after = projected + tokens
            if isinstance(command, cmd.PreviewRestore):
                self.emit(ev.RestorePreviewEvent(call_id=command.call_id, tool_name=name, tokens=tokens,
                                                 projected_before=projected, projected_after=after))
                return
            self.calls.append(("restore", command.call_id))
            del self.restorable[command.call_id]
            self.emit(ev.RestoreEvent(id=command.call_id, name=name, tokens=tokens, projected_before=projected,
                                      projected_after=after))
            self.emit(ev.ClearedResultsEvent(call_ids=list(self.restorable)))
            self._context = self._context.model_copy(update={"estimated_tokens": self._context.estimated_tokens
                                                             + tokens, "projected_tokens": after})
            self.emit(self._context)

    def _change_result(self, command: "cmd.EvictResult | cmd.PinResult | cmd.Preview") -> None:
        """An eviction's plan, an eviction and a pin, answered at once like the real session (a fixed
        1,200 tokens per result: the figures are the real engine's in tests/test_evict_and_pin.py)."""
        projected = self._context.projected_tokens
        name = next((e.name for e in (envelope.event for envelope in self._log.events())
                     if e.type == "tool_start" and e.id == command.call_id), None)
        if name is None:  # no such call: refused in one line, as the real session does
            reason = f"the result of {command.call_id} is no longer in the live context"
            if isinstance(command, cmd.Preview):
                self.emit(ev.ForecastEvent(kind="evict", action="nothing", reason=reason, call_id=command.call_id,
                                           tokens_before=projected, tokens_after=projected, tokens_freed=0,
                                           cache_tokens_invalidated=0, model_call=False))
            elif isinstance(command, cmd.EvictResult):
                self.emit(ev.EvictEvent(id=command.call_id, reason=reason))
            else:
                self.emit(ev.PinEvent(id=command.call_id, pinned=command.pin, reason=reason))
            return
        if isinstance(command, cmd.Preview):
            self._evict_plans += 1
            self.emit(ev.ForecastEvent(kind="evict", action="evict", plan_id=f"evict-{self._evict_plans}",
                                       call_id=command.call_id, call=f"{name}({command.call_id})",
                                       tokens_before=projected, tokens_after=projected - 1_200, tokens_freed=1_200,
                                       cache_tokens_invalidated=0, model_call=False))
            return
        self.calls.append(("evict" if isinstance(command, cmd.EvictResult) else "pin", command.call_id))
        if isinstance(command, cmd.EvictResult):
            self.evicted.append(command.call_id)
            self.emit(ev.EvictEvent(id=command.call_id, name=name, path=f"/tmp/tool-results/{command.call_id}.txt",
                                    tokens_before=projected, tokens_after=projected - 1_200, plan_id=command.plan_id,
                                    forecast_tokens_after=projected - 1_200))
            self._context = self._context.model_copy(update={"projected_tokens": projected - 1_200})
        else:
            self.pinned = [*self.pinned, command.call_id] if command.pin else [
                call for call in self.pinned if call != command.call_id]
            self.emit(ev.PinEvent(id=command.call_id, name=name, pinned=command.pin,
                                  call=f"{name}({command.call_id})", tokens=1_200, tokens_before=projected,
                                  tokens_after=projected, forecast_tokens_after=projected))
        self.emit(ev.ClearedResultsEvent(call_ids=[*self.restorable, *self.evicted], evicted=list(self.evicted),
                                         pinned=list(self.pinned)))
        self.emit(self._context)

    # --- test helpers ---

    def emit(self, event: Any) -> None:
        """Emit as the session does: numbered, with the id of the command being handled (None
        for what a test emits itself, as for what nobody asked for)."""
        self._seq += 1
        envelope = EventEnvelope(self._seq, _CAUSE.get(), event)
        if event.type == "state":
            self._state = event
        self._log.add(envelope)
        for listener in list(self._listeners):
            listener(envelope)

    async def idle(self) -> None:
        """Until every submitted command has run."""
        await self._idle.wait()

    def context_event(self) -> ev.ContextEvent:
        return self._context

    # --- the scripted work ---

    async def _consume(self) -> None:
        assert self._queue is not None
        while True:
            command_id, command = await self._queue.get()
            cause = _CAUSE.set(command_id)
            self._current = asyncio.ensure_future(self._execute(command))
            _CAUSE.reset(cause)
            try:
                await self._current
            except asyncio.CancelledError:
                if self._runner is not None and self._runner.cancelling():
                    raise
            finally:
                self._current = None
                self.pending -= 1
                self._answer_dropped()
                if self._queue.empty():
                    self._idle.set()

    async def _execute(self, command: Any) -> None:
        if isinstance(command, cmd.UserInput):
            await self.run_turn(command.text)
        elif isinstance(command, cmd.Compact):
            await self.compact(command.focus)
        elif isinstance(command, cmd.Reset):
            self.reset()

    def reset(self) -> None:
        self.calls.append(("reset", None))
        self.emit(ev.ResetEvent(messages_before=len(self.history)))
        self.history.clear()
        self._context = context(None, 4_800)
        self.emit(self._context)
        self.emit(ev.ChartPointEvent(tokens=self._context.projected_tokens, kind="reset"))
        self.emit(ev.StateEvent(state="idle", step=0, max_steps=self.max_steps))

    async def compact(self, focus: str | None = None) -> ev.CompactionEvent:
        self.calls.append(("compact", focus))
        self.emit(ev.StateEvent(state="compacting", step=0, max_steps=self.max_steps))
        await asyncio.sleep(0)
        before = self._context.projected_tokens
        # the summary's model call, on the ledger as compaction work (as the engine records it)
        self.emit(ev.UsageEvent(agent="compact", input_tokens=before, cache_read_tokens=0, cache_write_tokens=0,
                                output_tokens=600, context_tokens=before + 600))
        event = ev.CompactionEvent(trigger="manual", ok=True, messages_before=len(self.history) or 4,
                                   messages_after=1, tokens_before=before, tokens_after=6_000)
        self.history[:] = ["summary"]
        self.emit(event)
        self.emit(ev.ChartPointEvent(tokens=6_000, kind="compaction"))
        self._context = context(None, 6_000)
        self.emit(self._context)
        self.emit(ev.StateEvent(state="idle", step=0, max_steps=self.max_steps))
        return event

    async def _ask(self, step: Ask) -> str:
        if not self.approvals:
            return "no"
        if step.name in self.always_allowed:
            return "yes"
        request_id = f"approval-{len(self.submitted)}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._approvals[request_id] = future
        self.emit(ev.StateEvent(state="waiting_approval", step=1, max_steps=self.max_steps, tool_name=step.name,
                                tool_index=1, tool_count=1))
        self.emit(ev.ApprovalRequestEvent(request_id=request_id, tool_id=step.id, name=step.name,
                                          input=step.input, summary=str(step.input)[:40]))
        try:
            answer = await future
        except asyncio.CancelledError:
            self.emit(ev.ApprovalResolvedEvent(request_id=request_id, decision="interrupted"))
            raise
        self.emit(ev.ApprovalResolvedEvent(request_id=request_id, decision=answer))
        if answer == "always":
            self.always_allowed.add(step.name)
        return answer

    async def run_turn(self, user_text: str) -> ev.ResultEvent:
        self.calls.append(("run_turn", user_text))
        self.history.append(user_text)
        self.emit(ev.UserMessageEvent(text=user_text))
        steps = self.turns.get(user_text, self.default)
        final = ""
        running_tool: str | None = None
        try:
            self.emit(ev.StateEvent(state="streaming", step=1, max_steps=self.max_steps))
            for step in steps:
                if isinstance(step, Gate):
                    step.reached.set()
                    await step.event.wait()
                elif isinstance(step, Ask):
                    self.emit(ev.ToolStartEvent(id=step.id, name=step.name, input=step.input, summary=str(step.input)[:40]))
                    running_tool = step.name
                    answer = await self._ask(step)
                    running_tool = None
                    self.answers.append(answer)
                    content = "done" if answer in ("yes", "always") else f"The user declined this {step.name} call."
                    self.emit(ev.ToolResultEvent(id=step.id, name=step.name, is_error=answer == "no",
                                                 truncated=False, original_chars=len(content),
                                                 kept_chars=len(content), content=content))
                elif isinstance(step, Text):
                    for i in range(0, len(step.text), step.size):
                        self.emit(ev.TextDeltaEvent(text=step.text[i:i + step.size]))
                        await asyncio.sleep(0)
                    self.emit(ev.AssistantMessageEvent(text=step.text))
                    final = step.text
                else:
                    if isinstance(step, ev.ContextEvent):
                        self._context = step
                    self.emit(step)
                    if isinstance(step, ev.UsageEvent) and step.agent == "main":
                        self.emit(ev.ChartPointEvent(tokens=step.context_tokens or 0, kind="call"))
                    await asyncio.sleep(0)
            self.history.append(final)
            result = ev.ResultEvent(stop_reason="end_turn", text=final, steps=1)
            self.emit(ev.StateEvent(state="idle", step=1, max_steps=self.max_steps))
            self.emit(result)
            return result
        except asyncio.CancelledError:
            self.history.append("[interrupted]")
            self.emit(ev.InterruptedEvent(tool_name=running_tool))
            self.emit(ev.StateEvent(state="idle", step=1, max_steps=self.max_steps))
            self.emit(ev.ResultEvent(stop_reason="interrupted", text=final, steps=1))
            raise


def compaction_steps() -> list[Step]:
    return [
        ev.StateEvent(state="compacting", step=12, max_steps=50),
        ev.UsageEvent(agent="compact", input_tokens=142_000, cache_read_tokens=0, cache_write_tokens=0,
                      output_tokens=2_100, context_tokens=144_100),
        ev.CompactionEvent(trigger="auto", ok=True, messages_before=26, messages_after=1, tokens_before=156_280,
                           tokens_after=7_400),
        ev.ChartPointEvent(tokens=7_400, kind="compaction"),
        context(None, 7_400, turns=None, cost=0.31, compact_cost=0.09),
        Text("Compacted; carrying on from the summary."),
        ev.UsageEvent(input_tokens=7_400, cache_read_tokens=0, cache_write_tokens=0, output_tokens=120,
                      context_tokens=7_520),
        context(7_520, 0, turns=10, cost=0.33, compact_cost=0.09),
    ]

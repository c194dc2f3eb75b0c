"""The context engine's service: runs what its pure core decides.

The agent loop asks it three things: what to do before a request (prune, compact,
recover), whether a fresh tool result fits (cut it if it alone would push the request
over the blocking line), and how to react to a "prompt too long" rejection. The
decisions, the live history and its figures are the core's (``app/context/core.py``,
``ContextCore``: no I/O); this module carries them out: the model calls, through
callables it is given (``summarize`` per call, ``memory_summarize`` for the background
memory update), the files (outputs saved when cleared or cut, read back to restore, the
session memory's file), the transcript (a ``HistoryRecorder``), the events (``emit``),
the clock, and the circuit breaker.
"""

from __future__ import annotations

import asyncio
import time
from itertools import groupby
from pathlib import Path
from typing import Awaitable, Callable, Literal, Mapping, Protocol, Sequence

from app.context.accounting import ContextAccounting, Ledger, Projection
from app.context.compaction import (CircuitBreaker, CompactionFailed, build_compaction_request, extract_summary,
                                    paste_call_id)
from app.context.core import (
    Appended,
    ClearedResult,
    ContextCore,
    Effect,
    EngineConfig as EngineConfig,
    Replaced,
    RestoreError as RestoreError,
    RestorePreview as RestorePreview,
    ResultChangeError as ResultChangeError,
    Trigger,
)
from app.context.forecast import Forecast
from app.context.memory import MemoryBundle
from app.context.plans import MemoryPlan, Plan
from app.context.prices import Price
from app.context.request_parts import PartsMemo, request_parts
from app.context.rules import RuleSet
from app.context.session_memory import MEMORY_FILE_NAME, SessionMemory, build_memory_request
from app.context.thresholds import Thresholds
from app.context.tokens import count_tokens
from app.kernel.events import (
    AgentName,
    BreakerEvent,
    CompactionEvent,
    CompactionPausedEvent,
    ConfigWarningEvent,
    ContextEvent,
    Event,
    EvictEvent,
    PinEvent,
    RewindEvent,
    RuleAttachedEvent,
    SessionMemoryEvent,
    UsageEvent,
)
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolSpec
from app.kernel.private_files import open_private, open_private_read
from app.kernel.redact import redact
from app.kernel.request_store import RequestPart
from app.kernel.usage import Usage
from app.kernel.model_call import ContextTooLongError, ModelRequest, ProviderError

# EngineConfig, RestoreError and RestorePreview are the core's; callers keep importing them from here.
__all__ = ["ContextEngine", "EngineConfig", "HistoryRecorder", "RestoreError", "RestorePreview",
           "ResultChangeError", "Summarize"]


class HistoryRecorder(Protocol):
    """Where every history change is persisted (the session's transcript writer is one): the
    engine hands it over and never knows the session's files (app/context imports no app.session)."""

    def append_message(self, message: Message) -> None: ...

    def replace_history(self, messages: Sequence[Message], reason: str) -> None: ...


# A compaction call: request in, (assistant message, usage) out. Raises ProviderError.
Summarize = Callable[[ModelRequest], Awaitable[tuple[Message, Usage]]]

MAX_OVERFLOW_RETRIES = 3




class SavedBytes(Protocol):
    """The session's budget of saved bytes (``app.tools.base.SavedOutputBudget``, shared with the
    tools): a paste saved whole by a compaction counts against it as a saved tool output does."""

    @property
    def room(self) -> int: ...

    def take(self, wanted: int) -> int: ...


class ContextEngine:
    """One session's context: a ``ContextCore`` and the I/O that carries out its decisions."""

    def __init__(self, system_prompt: str, memory: MemoryBundle, tools: list[ToolSpec], config: EngineConfig,
                 price: Price | None = None, compact_price: Price | None = None,
                 emit: Callable[[Event], None] = lambda _e: None,
                 transcript: HistoryRecorder | None = None,  # persists every history change
                 tool_results_dir: Path | None = None,
                 clock: Callable[[], float] = time.time,
                 breaker: CircuitBreaker | None = None,
                 history: list[Message] | None = None,
                 tool_owner: Callable[[str], str | None] | None = None,
                 tool_tokens_saved: Callable[[], int] = lambda: 0,
                 rules: RuleSet | None = None,
                 workspace: Path | None = None,
                 memory_summarize: Summarize | None = None,
                 saved_budget: SavedBytes | None = None) -> None:
        memory_path = (tool_results_dir.parent / MEMORY_FILE_NAME) if tool_results_dir else None
        self.core = ContextCore(system_prompt=system_prompt, memory=memory, tools=tools, config=config,
                                price=price, compact_price=compact_price,
                                history=history if history is not None else [],
                                tool_owner=tool_owner, tool_tokens_saved=tool_tokens_saved, rules=rules,
                                session_memory=SessionMemory.load(memory_path))
        self.emit = emit
        self.transcript = transcript
        self.tool_results_dir = tool_results_dir
        self.clock = clock
        self.breaker = breaker if breaker is not None else CircuitBreaker()
        # File paths in tool calls are relative to ``workspace`` (path-scoped rules).
        self.workspace = workspace
        # The background memory update's model call; None: the ``summarize`` of before_request.
        self.memory_summarize = memory_summarize
        self.saved_budget = saved_budget
        self._pause_noted: float | None = None  # the breaker pause the last paused notice was about
        self._memory_task: asyncio.Task[None] | None = None
        # Events of the background memory update wait here until the agent next touches the
        # engine, so they never land after a turn's final "result" event; each with the number of
        # the update that said it (counted from 1), for the host to tell them from the step's own.
        self._deferred: list[tuple[int, Event]] = []
        self._memory_updates = 0  # started so far
        # How a host emits what update N reported, held until a later step: apart from whatever
        # command runs then (the session gives them an id of the update's own). None: ``emit``.
        self.emit_background: Callable[[int, list[Event]], None] | None = None
        self._parts_memo = PartsMemo()  # each message cut into the inspector's parts once

    # ---- the core's state, read here; it changes only through the core's methods ----

    @property
    def history(self) -> list[Message]:
        return self.core.history

    @property
    def tools(self) -> list[ToolSpec]:
        return self.core.tools

    @property
    def system_prompt(self) -> str:
        return self.core.system_prompt

    @property
    def memory(self) -> MemoryBundle:
        return self.core.memory

    @property
    def config(self) -> EngineConfig:
        return self.core.config

    @property
    def price(self) -> Price | None:
        return self.core.price

    @property
    def compact_price(self) -> Price | None:
        return self.core.compact_price

    @property
    def tool_owner(self) -> Callable[[str], str | None] | None:
        return self.core.tool_owner

    @property
    def tool_tokens_saved(self) -> Callable[[], int]:
        return self.core.tool_tokens_saved

    @property
    def rules(self) -> RuleSet | None:
        return self.core.rules

    @property
    def session_memory(self) -> SessionMemory:
        return self.core.session_memory

    @property
    def thresholds(self) -> Thresholds:
        return self.core.thresholds

    @property
    def accounting(self) -> ContextAccounting:
        return self.core.accounting

    @property
    def ledger(self) -> Ledger:
        return self.core.ledger

    @property
    def last_assistant_at(self) -> float | None:
        return self.core.last_assistant_at

    @property
    def system_text(self) -> str:
        """System prompt with the memory files: they live in the core, so compaction cannot lose them."""
        return self.core.system_text

    # ---- carrying out what the core decided ----

    def _run(self, effects: Sequence[Effect]) -> None:
        """In order: a history change persisted, then the events after it emitted."""
        for effect in effects:
            if isinstance(effect, Replaced):
                self._record_replaced(effect)
            elif isinstance(effect, Appended):
                if self.transcript is not None:
                    self.transcript.append_message(effect.message)
            else:
                if isinstance(effect, ContextEvent):
                    self.flush_background_events()  # what the memory update reported comes first
                self.emit(effect)

    def _record_replaced(self, replaced: Replaced) -> None:
        if self.transcript is not None:
            self.transcript.replace_history(replaced.history, replaced.reason)

    def _replace(self, new_history: list[Message], reason: str) -> None:
        self._record_replaced(self.core.replace(new_history, reason))

    def _recount_memory_tokens(self) -> None:
        self.core.recount_memory_tokens()

    def _auto_compaction_is_ours(self) -> bool:
        return self.core.auto_compaction_is_ours()

    def use_tools(self, tools: list[ToolSpec]) -> None:
        """The tools every later request offers (an MCP server's, the task tool)."""
        self.core.use_tools(tools)

    def use_tool_owners(self, owner: Callable[[str], str | None] | None, tokens_saved: Callable[[], int]) -> None:
        """Which server each tool comes from, and what deferring tool definitions saves (MCP)."""
        self.core.use_tool_owners(owner, tokens_saved)

    def load_history(self, history: list[Message]) -> None:
        """A history read back (a resumed session) as the live one; the caller persists it."""
        self.core.load_history(history)

    def use_server_compaction(self, on: bool) -> None:
        """The provider's server compacts from now on (on), or our own compaction does (off)."""
        self.core.use_server_compaction(on)

    # ---- the budget and the memory files ----

    def use_memory(self, memory: MemoryBundle) -> None:
        """Memory files read again mid-session (an import the user approved): the next
        request carries them, and the budget lines move with the fixed part."""
        self.core.use_memory(memory)

    def use_server_instructions(self, instructions: dict[str, str]) -> None:
        """The MCP servers' instructions (server -> bounded text): in the system prompt from the next request."""
        self.core.use_server_instructions(instructions)

    def fixed_tokens(self) -> int:
        """Estimated tokens every request carries whatever the history: system prompt, memory files, tools."""
        return self.core.fixed_tokens()

    def set_budget(self, budget: int) -> str | None:
        """Change the budget mid-session: the lines move at once. Returns the floor warning
        to show when the new budget is below the compaction floor (None otherwise)."""
        return self.core.set_budget(budget)

    def budget_floor_warning(self) -> str | None:
        """A line for the user when the budget is below the compaction floor (None when fine).
        The host says it once at start-up and again whenever the budget is set."""
        return self.core.budget_floor_warning()

    # ---- what the model sees ----

    def build_request(self, max_tokens: int) -> ModelRequest:
        # Our estimate of exactly this request, which its usage is checked and calibrated against
        # (a pruning or compaction just before may have changed the history since the last one).
        self.core.projection()
        return ModelRequest(system=self.system_text, messages=list(self.history), tools=self.tools,
                            max_tokens=max_tokens, tool_choice="auto")

    def projection(self, extra: list[Message] | None = None) -> Projection:
        return self.core.projection(extra)

    def request_parts(self, request: ModelRequest) -> list[RequestPart]:
        """``request`` as the inspector keeps it: each part with its estimated tokens and origin."""
        prompt = self.core.system_prompt
        system, memory = ((prompt, request.system[len(prompt):]) if request.system.startswith(prompt)
                          else (request.system, ""))
        return request_parts(system, memory, request.tools, request.messages, self.core.tool_owner, self._parts_memo)

    # ---- history changes (every one persisted) ----

    def append(self, message: Message) -> None:
        self._run(self.core.append(message, self.clock()))

    def append_user_text(self, text: str, attached: Sequence[TextBlock] = ()) -> None:
        """A user message; merged into a trailing user message (e.g. interrupted tool results)
        so roles keep alternating. ``attached``: blocks that go with it and are not the user's
        words (an MCP server's prompt or resource, ``TextBlock.from_mcp``)."""
        self._run(self.core.append_user_text(text, attached, self.clock()))
        self._save_pastes(self.history[-1:])

    def reset(self, plan: Plan | None = None) -> None:
        """Run a reset plan (``take_reset_plan``; None: one made now): clear the conversation and the
        live accounting; the ledger and files on disk stay (the session memory's file is emptied:
        its words must not seep into the new one)."""
        if self._memory_task is not None and not self._memory_task.done():
            self._memory_task.cancel()
        if self.session_memory.exists:
            self.session_memory.save("", None)
        self._run(self.core.reset(plan))

    # ---- accounting ----

    def record_usage(self, agent: AgentName, usage: Usage, model_price: Price | None) -> UsageEvent:
        record = self.core.record_usage(agent, usage, model_price)
        if agent != "main" and self._in_background():
            self._deferred.append((self._memory_updates, record.event))  # a background update: shown at the next step
        else:
            self.emit(record.event)
        self._run(record.then)
        return record.event

    def context_event(self) -> ContextEvent:
        return self.core.context_event()

    def emit_context(self) -> ContextEvent:
        self.flush_background_events()
        event = self.core.context_event()
        self.emit(event)
        return event

    def live_usage(self, usage: Usage) -> None:
        """A usage figure from inside a stream (Anthropic's message_start gives the prompt
        size at once): the gauge shows it before the call ends. The call's final usage,
        recorded after it, is what the accounting keeps."""
        event = self.core.live_context(usage)
        if event is not None:
            self.emit(event)

    def note_model_call(self) -> None:
        """One point of the gauge's history per model call."""
        self.emit(self.core.note_model_call())

    # ---- tool results: the projection rescues what would not fit ----

    def fit_tool_result(self, block: ToolResultBlock, tool_name: str, pending: list[Message]) -> ToolResultBlock:
        """Cut a result that alone would push the next request over the blocking line.

        It has not been sent yet, so it can still be saved: cut head+tail to fit
        under the warning line, full output on disk, and say so.
        """
        max_chars = self.core.room_for_result(block, pending)
        if max_chars is not None:
            path = block.full_output_path or self._save_output(block.tool_use_id, block.content)
            block, event = self.core.cut_result(block, tool_name, max_chars, path)
            self.emit(event)
        return self._attach_rules(block, tool_name)

    def result_in_context(self, tool_use_id: str) -> bool:
        """Is the full (not cleared) result of this call still in the live history?"""
        return self.core.result_in_context(tool_use_id)

    # ---- before every request: the lines of defence, lightest first ----

    async def before_request(self, summarize: Summarize) -> None:
        """The lines of defence in order; each "is it needed" is the core's, each run is here."""
        self.flush_background_events()
        core = self.core
        self._save_pastes()  # a resumed history's pastes too
        self._micro_by_time()
        proj = core.projected()
        crossed = core.warning_crossed(proj)
        if crossed is not None:
            self.emit(crossed)
        if core.needs_clearing_by_size(proj):
            self._micro_by_size()
            proj = core.projected()
        if core.wants_auto_compaction(proj):
            plan = await self._memory_compaction_plan()
            if plan is not None:
                self.compact_from_memory(plan)
                proj = core.projected()
            if not core.still_needs_compaction(proj):
                pass
            elif self.breaker.allows_auto():
                await self.compact(summarize, "auto")
                proj = core.projected()
            elif not core.must_fall_back(proj) and self._pause_noted != self.breaker.retry_at:
                # Said once per pause, not before every request of a long paused turn.
                self._pause_noted = self.breaker.retry_at
                self.emit(CompactionPausedEvent(failures=self.breaker.failures, retry_in_s=self.breaker.retry_in()))
        if core.must_fall_back(proj):
            # Never send a request that cannot fit. The breaker is open or the
            # compaction failed: fall back to the extractive summary so the
            # session is never dead.
            self.fallback_compact()
        core.rearm_warning(proj)
        self._maybe_start_memory_update(summarize)

    def _micro_by_time(self) -> None:
        plan = self.core.plan_clearing("time", self.clock())
        if plan is not None:
            self._clear(plan)

    def _micro_by_size(self) -> None:
        plan = self.core.plan_clearing("size")
        if plan is not None:
            self._clear(plan)

    def _clear(self, plan: Plan) -> None:
        """Run a clearing plan. A cleared result whose full output was never saved is written to
        tool-results/ first, so its stub can name a file the model can re-read."""
        assert plan.prune is not None
        saved: dict[str, str] = {}
        if self.tool_results_dir is not None:
            for block in self.core.outputs_to_save(plan.prune.history):
                path = self._save_output(block.tool_use_id, block.content)
                if path is not None:  # else the stub says "not saved"; the transcript still holds it
                    saved[block.tool_use_id] = path
        self._run(self.core.run_clearing(plan, saved))

    def _output_path(self, tool_use_id: str) -> str | None:
        """Where ``_save_output`` writes this call's output (None: this engine saves none)."""
        if self.tool_results_dir is None:
            return None
        return str(self.tool_results_dir / f"{_safe_name(tool_use_id)}.txt")

    def _save_output(self, tool_use_id: str, content: str) -> str | None:
        """Write a full output to tool-results/; on a disk error there is just no path."""
        if self.tool_results_dir is None:
            return None
        out = self.tool_results_dir / f"{_safe_name(tool_use_id)}.txt"
        try:  # 0600, and a symlink planted at ``out`` is not followed (as the registry's saves)
            with open_private(out) as f:
                f.write(content.encode("utf-8", errors="replace"))
        except OSError:
            return None
        return str(out)

    def _save_pastes(self, messages: Sequence[Message] | None = None) -> None:
        """Save the user's pastes not saved yet (in ``messages``, else the whole history), whole,
        for the summaries that keep only their head and tail to name
        (tool-results/paste-<message id>.txt, read back with read_saved_output). Once each: a
        failure is remembered, and the cut says it."""
        for ident, text in self.core.pastes_to_save(messages):
            self.core.saved_pastes[ident] = self._save_paste(ident, text)

    def _save_paste(self, ident: str, text: str) -> str | None:
        if self.tool_results_dir is None:
            return None
        data = redact(text).encode("utf-8", errors="replace")
        out = self.tool_results_dir / f"{paste_call_id(ident)}.txt"
        try:  # saved by an earlier run of this session (a resume): already counted in the budget
            if not out.is_symlink() and out.is_file() and out.stat().st_size == len(data):
                return str(out)
        except OSError:
            pass
        if self.saved_budget is not None:
            if self.saved_budget.room < len(data):  # over the session's cap: not saved, never cut short
                return None
            self.saved_budget.take(len(data))
        try:  # 0600, and a symlink planted at ``out`` is not followed
            with open_private(out) as f:
                f.write(data)
        except OSError:
            return None
        return str(out)

    # ---- compaction ----

    async def compact(self, summarize: Summarize, trigger: Trigger = "manual", focus: str | None = None,
                      plan: Plan | None = None) -> CompactionEvent:
        """Run ``plan`` (from ``plan_compaction`` or ``take_plan``: a summary, or a compaction from
        the session memory), or without one a summary. On failure the history is exactly as it was."""
        core = self.core
        self._save_pastes()
        if plan is None:
            plan = core.plan_compaction(focus, use_memory=False)
        before_msgs = len(self.history)
        tokens_before = core.projected()
        if plan.does_nothing:
            # A lone summary compacts to itself: a model call would gain nothing.
            event = core.compaction_not_done(trigger, before_msgs, tokens_before, reason=plan.reason,
                                             replanned=plan.replanned, nothing_to_compact=True)
            self.emit(event)
            return event
        if plan.memory is not None:
            return self._run_memory_compaction(plan.memory, plan.forecast, plan.replanned)
        work = core.compaction_work(tokens_before)
        reason: str | None = None
        summary: str | None = None
        for _attempt in range(MAX_OVERFLOW_RETRIES + 1):
            request = build_compaction_request(self.system_text, work, self.tools, plan.focus,
                                               self.config.compact_max_output, pinned=core.pinned_note())
            try:
                message, usage = await summarize(request)
                self.record_usage("compact", usage, self.compact_price)
                summary = extract_summary(message)
                # a summary over its cap or no smaller than the history is a failure too
                reason = core.summary_problem(summary, usage.output_tokens)
                if reason is not None:
                    summary = None
                break
            except ContextTooLongError as err:
                # The compaction request itself is too long: drop the oldest rounds of the copy and retry.
                shrunk = core.shrink_work(work, err.gap_tokens)
                if shrunk is None:
                    reason = f"compaction request too long and nothing left to drop: {err.message}"
                    break
                work = shrunk
                reason = f"compaction request too long: {err.message}"
            except (ProviderError, CompactionFailed) as err:
                reason = str(err)
                break
        if summary is None:
            if trigger == "auto":
                was_paused = self.breaker.paused
                self.breaker.record_failure()
                if self.breaker.paused and not was_paused:
                    self.emit(BreakerEvent(paused=True, failures=self.breaker.failures,
                                           retry_at=self._retry_epoch()))
            event = core.compaction_not_done(trigger, before_msgs, tokens_before,
                                             reason=reason or "unknown failure", replanned=plan.replanned)
            self.emit(event)
            return event
        if self.breaker.paused or self.breaker.failures:
            self.breaker.record_success()
            self.emit(BreakerEvent(paused=False, failures=0))
        event, effects = core.install_summary(summary, trigger, before_msgs, tokens_before, plan.forecast,
                                              plan.replanned)
        self._run(effects)
        return event

    def estimate_request(self, history: list[Message]) -> int:
        """The whole request for ``history``, estimated (one measure for before and after)."""
        return self.core.estimate_request(history)

    def estimate_with_summary(self, summary: str) -> int:
        """The estimated context if ``summary`` replaced the history (nothing is changed)."""
        return self.core.estimate_with_summary(summary)

    def fallback_compact(self) -> CompactionEvent:
        """Deterministic extractive summary: no model call, so it works when nothing else can."""
        self._save_pastes()
        event, effects = self.core.fallback_compact()
        self._run(effects)
        return event

    def _retry_epoch(self) -> float | None:
        retry_in = self.breaker.retry_in()
        return None if retry_in is None else time.time() + retry_in

    # ---- overflow recovery (reactive compact) ----

    def recover_overflow(self, err: ContextTooLongError) -> bool:
        """Drop the oldest API rounds to cover the reported gap. False when nothing can be dropped."""
        dropped, effects = self.core.recover_overflow(err.gap_tokens, err.message)
        self._run(effects)
        return dropped

    # ---- session memory: the background update ----

    def _in_background(self) -> bool:
        task = self._memory_task
        try:
            return task is not None and asyncio.current_task() is task
        except RuntimeError:
            return False

    def flush_background_events(self) -> None:
        """Emit what the background memory update reported since the last step.
        The agent's next step does it anyway; a host may call it when a turn is over."""
        pending, self._deferred = self._deferred, []
        for update, held in groupby(pending, key=lambda numbered: numbered[0]):
            events = [event for _update, event in held]
            if self.emit_background is not None:
                self.emit_background(update, events)
            else:
                for event in events:
                    self.emit(event)

    def _maybe_start_memory_update(self, summarize: Summarize) -> None:
        """Start a background update once enough new context has piled up.

        Runs as an asyncio task beside the main request (never awaited here), so the
        user's turn does not wait for it; a compaction that needs it waits for it.
        """
        if self._memory_task is not None and not self._memory_task.done():
            return
        batch = self.core.memory_batch()
        if batch is None:
            return
        self._memory_updates += 1
        self._memory_task = asyncio.get_running_loop().create_task(
            self._update_memory(self._memory_caller(summarize), batch))

    def _memory_caller(self, summarize: Summarize) -> Summarize:
        """The background call: ``memory_summarize`` when the host gave one (the runtime gives
        ``quiet_model_call``: the agent's ``summarize`` announces a "compacting" state, wrong
        while the main reply streams, and retries with visible notices), else ``summarize``."""
        return self.memory_summarize or summarize

    async def _update_memory(self, summarize: Summarize, batch: list[Message]) -> None:
        memory = self.session_memory
        request = build_memory_request(self.system_text, batch, self.tools, memory.text or None,
                                       self.config.memory_max_output)
        try:
            message, usage = await summarize(request)
            self.record_usage("memory", usage, self.compact_price)
            text = extract_summary(message)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a background failure must never reach the turn; it is shown instead
            self._deferred.append((self._memory_updates, SessionMemoryEvent(
                ok=False, memory_tokens=count_tokens(memory.text),
                covered_messages=memory.covered_index(self.history), reason=str(err) or type(err).__name__)))
            self.core.memory_update_failed()
            return
        memory.save(text, self.core.memory_update_seen(batch))
        self.core.recount_memory_tokens()
        self._deferred.append((self._memory_updates, SessionMemoryEvent(
            ok=True, memory_tokens=count_tokens(memory.text), covered_messages=memory.covered_index(self.history),
            path=str(memory.path) if memory.path else None)))

    async def wait_memory_update(self) -> None:
        """Wait for a running background memory update (tests, benchmarks, shutdown)."""
        task = self._memory_task
        if task is not None and not task.done():
            await asyncio.shield(task)

    async def cancel_background(self) -> None:
        """Stop a running memory update (call before closing the provider)."""
        task = self._memory_task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _memory_compaction_plan(self) -> MemoryPlan | None:
        if self.config.memory_update_tokens <= 0:
            return None
        if self._memory_task is not None and not self._memory_task.done():
            await self.wait_memory_update()  # started a step ago: cheaper to wait than to summarise anew
        return self.core.memory_plan()

    def memory_compaction_available(self) -> bool:
        """Can the context be compacted from the session memory now (no model call)?"""
        return self.core.memory_plan() is not None

    def compact_from_memory(self, plan: MemoryPlan | None = None, planned: Forecast | None = None,
                            replanned: bool = False) -> CompactionEvent | None:
        """Compact without a model call: the memory replaces what it covers, the latest
        messages stay verbatim. None when the memory is not usable (then compact normally).
        ``planned``: the forecast the user confirmed (else it is made here)."""
        self._save_pastes()
        plan = plan or self.core.memory_plan()
        if plan is None:
            return None
        return self._run_memory_compaction(plan, planned, replanned)

    def _run_memory_compaction(self, plan: MemoryPlan, planned: Forecast | None, replanned: bool) -> CompactionEvent:
        event, effects = self.core.compact_from_memory(plan, planned, replanned)
        self._run(effects)
        return event

    # ---- plans: what the confirmation shows is what runs ----

    def forecast_compaction(self) -> Forecast:
        """What a compaction asked for now will do (the forecast of ``plan_compaction``)."""
        return self.core.plan_compaction(None, use_memory=True).forecast

    def plan_compaction(self, focus: str | None = None) -> Plan:
        """The compaction a confirmation asks about, kept for ``take_plan``: from the session
        memory when it is up to date and frees at least half of what a summary would (no model
        call), else a summary (with ``focus``, always a summary: the memory was not written
        with it); nothing when the context is empty or already one summary."""
        self._save_pastes()
        return self.core.remember(self.core.plan_compaction(focus, use_memory=True))

    def plan_reset(self) -> Plan:
        """The reset a confirmation asks about (its figures use the prompt cache as it is now)."""
        return self.core.plan_reset()

    def take_reset_plan(self, plan_id: str | None) -> Plan:
        """The reset plan a confirmation named, if it was made on the live history; else one made
        now, marked ``replanned`` when a plan was named (the event says so)."""
        return self.core.take_reset_plan(plan_id)

    def take_plan(self, plan_id: str | None, focus: str | None = None) -> Plan:
        """The compaction plan a confirmation named, if it was made on the live history; else
        (the conversation moved on, or the plan is unknown) one made now, marked ``replanned``
        when a plan was named. Without an id: a plan made now, as ``plan_compaction``."""
        self._save_pastes()
        return self.core.take_plan(plan_id, focus)

    # ---- rewind: back to just before an earlier user message ----

    def plan_rewinds(self) -> list[Plan]:
        """A plan per user message the conversation can go back to (oldest first), kept for ``take_rewind_plan``."""
        return self.core.plan_rewinds()

    def take_rewind_plan(self, plan_id: str) -> Plan | None:
        """The rewind plan a confirmation named (made again, and marked so, on a changed history)."""
        return self.core.take_rewind_plan(plan_id)

    def rewind(self, plan: Plan, files: Mapping[str, object] | None = None) -> RewindEvent:
        """Run a rewind plan: persisted (a ``rewind`` history line), then its event and the new context.
        ``files``: what putting the files back did (the event's ``files_*`` fields), said with it."""
        target = plan.rewind
        covered = self.session_memory.covered
        # The session memory written from turns this rewind abandons would bring them back at the
        # next compaction from it: it is emptied (as by a reset) and written again from what stays.
        stale = (target is not None and self.session_memory.exists and covered is not None
                 and any(m is covered for m in self.history[target.message_index:]))
        event, effects = self.core.rewind(plan)
        if stale:
            if self._memory_task is not None and not self._memory_task.done():
                self._memory_task.cancel()
            self.session_memory.save("", None)
            self.core.memory_starts_over()
        if files:
            said = event.model_copy(update=dict(files))
            effects = [said if effect is event else effect for effect in effects]
            event = said
        self._run(effects)
        return event

    def forecast_reset(self) -> Forecast:
        """What ``reset`` will do: everything but the system prompt, memory files and tools goes."""
        return self.core.forecast_reset()

    # ---- reversible clearing ----

    def _saved_output(self, cleared: ClearedResult) -> str:
        try:
            with open_private_read(cleared.saved_path) as f:  # never through a symlink planted there
                return f.read().decode("utf-8", errors="replace")
        except OSError as err:
            raise RestoreError(f"cannot read the saved output {cleared.saved_path}: "
                               f"{err.strerror or err}") from None

    def preview_restore(self, call_id: str) -> RestorePreview:
        """What restoring a cleared result costs: its tokens and the projection after, kept as a
        plan (its id in ``plan_id``). Raises RestoreError (one line saying why) when it cannot be restored."""
        cleared = self.core.cleared_result(call_id)
        return self.core.plan_restore(cleared, self._saved_output(cleared))

    def restore_result(self, call_id: str, by: Literal["user", "model"] = "user",
                       plan_id: str | None = None) -> RestorePreview:
        """Bring a cleared result back for the next request (kept through it, then prunable
        again): the plan ``plan_id`` names if the context is as it was shown, else the restore
        as it is now (the event says it was made anew). Returns its token cost and the new
        projection; the transcript records it."""
        cleared = self.core.cleared_result(call_id)
        plan = self.core.take_named_plan("restore", plan_id, call_id)
        done, effects = self.core.restore(cleared, self._saved_output(cleared), by, plan,
                                          replanned=plan_id is not None and plan is None)
        self._run(effects)
        return done

    # ---- the user's hand on one result: evict and pin ----

    def plan_evict(self, call_id: str) -> Plan:
        """What taking ``call_id``'s result out of the context frees, kept for ``evict_result``.
        ResultChangeError (one line) when it cannot be evicted."""
        return self.core.plan_evict(call_id, self._output_path(call_id))

    def plan_pin(self, call_id: str, pin: bool = True) -> Plan:
        """What pinning (or unpinning) ``call_id``'s result does; ResultChangeError (one line) when it cannot."""
        return self.core.plan_pin(call_id, pin)

    def evict_result(self, call_id: str, plan_id: str | None = None) -> EvictEvent:
        """Run the eviction ``plan_id`` names if the context is as it was shown, else one made now
        (said so). An output never saved is saved first, so the stub names a file restore reads."""
        plan = self.core.take_named_plan("evict", plan_id, call_id)
        replanned = plan_id is not None and plan is None
        if plan is None:
            plan = self.plan_evict(call_id)
        unsaved = self.core.output_to_save(call_id)
        path = self._save_output(call_id, unsaved.content) if unsaved is not None else None
        event, effects = self.core.evict(plan, path, replanned)
        self._run(effects)
        return event

    def pin_result(self, call_id: str, pin: bool = True) -> PinEvent:
        """Pin (or unpin) ``call_id``'s result: a plan made and run at once (a pin changes nothing
        sent; its event says what clearing and compaction now keep)."""
        event, effects = self.core.set_pin(self.core.plan_pin(call_id, pin))
        self._run(effects)
        return event

    def marked_results(self) -> tuple[list[str], list[str]]:
        """Call ids of the results the user evicted, and of those pinned (oldest first)."""
        return self.core.marked_results()

    def cleared_results(self) -> list[str]:
        """Call ids of the cleared results that can be restored (oldest first)."""
        return self.core.cleared_results()

    # ---- path-scoped rules ----

    def use_rules(self, rules: RuleSet, workspace: Path) -> None:
        """Take the path-scoped rules (app.context.rules.load_rules) for tool paths relative to
        ``workspace``; a rule file that could not be read is named in one warning line each."""
        self.core.use_rules(rules)
        self.workspace = workspace
        for problem in rules.problems:
            self.emit(ConfigWarningEvent(setting="rules", text=f"{problem}; that rule is not loaded"))

    def replace_rules(self, rules: RuleSet | None) -> None:
        """The rules read again with the memory files (an import the user answered), said already."""
        self.core.use_rules(rules)

    def _attach_rules(self, block: ToolResultBlock, tool_name: str) -> ToolResultBlock:
        """The rules for the file a read or write touched, attached once (here, not in the core:
        matching a rule resolves the file's path on disk)."""
        rules = self.rules
        if rules is None or not rules.rules or block.is_error:
            return block
        if tool_name not in ("read_file", "write_file", "edit_file"):
            return block
        use = next((u for m in reversed(self.history[-2:]) if m.role == "assistant"
                    for u in m.tool_uses if u.id == block.tool_use_id), None)
        raw = use.input.get("path") if use is not None else None
        if not isinstance(raw, str) or not raw:
            return block
        path = Path(raw).expanduser()
        if not path.is_absolute() and self.workspace is not None:
            path = self.workspace / path
        attached = self.core.attached_rules
        additions: list[str] = []
        for rule in rules.matching(path):
            key = str(rule.path)
            if key in attached or rule.path.resolve() in self.memory.sources:
                continue  # already in the context (or in the system prompt through an import)
            attached.add(key)
            additions.append(rule.attachment())
            self.emit(RuleAttachedEvent(id=block.tool_use_id, rule_path=key, file_path=raw, tokens=rule.tokens))
        if not additions:
            return block
        content = block.content + "\n\n" + "\n\n".join(additions)
        return ToolResultBlock(tool_use_id=block.tool_use_id, content=content, is_error=block.is_error,
                               full_output_path=block.full_output_path)


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:100] or "result"

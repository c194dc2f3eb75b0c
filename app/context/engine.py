"""The context engine: owns the live history and every line of defence.

The agent loop asks it three things: what to do before a request (prune,
compact, recover), whether a fresh tool result fits (cut it if it alone
would push the request over the blocking line), and how to react to a
"prompt too long" rejection. Model calls are made by the agent and passed
in as ``summarize`` so this module never talks to a provider itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Awaitable, Callable, Literal, Protocol, Sequence, TypedDict

from app.context.accounting import USAGE_FLOOR_RATIO, USAGE_WINDOW_FACTOR, ContextAccounting, Ledger, Projection
from app.context.audit import AuditResult, append_checked_facts, audit_summary
from app.context.compaction import (
    CircuitBreaker,
    CompactionFailed,
    build_compaction_request,
    build_summary_history,
    extract_summary,
    is_summary_message,
    summary_problem,
)
from app.context.forecast import Forecast, ForecastAction, forecast
from app.context.memory import MemoryBundle
from app.context.overflow import drop_oldest_rounds
from app.context.plans import PLANS_KEPT, Plan, PlanKind, new_plan_id
from app.context.prices import Price, cost_usd
from app.context.pruning import PruneResult, is_cleared, prune_by_size, prune_by_time, stub_for
from app.context.rules import RuleSet, attached_rule_paths
from app.context.session_memory import (
    MEMORY_FILE_NAME,
    MEMORY_INTRO,
    SessionMemory,
    UnseenMessages,
    build_memory_request,
    safe_cut,
)
from app.context.summarizer import extractive_summary
from app.context.thresholds import MIN_SUMMARY_ROOM, Thresholds, budget_floor_warning, compute_thresholds, level
from app.context.tokens import count_tokens, estimate_message, estimate_messages, estimate_tools
from app.kernel.events import (
    AgentName,
    BreakerEvent,
    ChartPointEvent,
    CompactionEvent,
    CompactionPausedEvent,
    ConfigWarningEvent,
    ContextEvent,
    Event,
    MicroCompactionEvent,
    PointKind,
    ResetEvent,
    RestoreEvent,
    ResultCutEvent,
    RuleAttachedEvent,
    SessionMemoryEvent,
    ThresholdsModel,
    UsageDistrustedEvent,
    UsageEvent,
    WarningCrossedEvent,
)
from app.kernel.messages import Message, OpaqueBlock, TextBlock, ToolResultBlock, ToolSpec
from app.kernel.private_files import open_private
from app.providers.base import Completed, ContextTooLongError, ModelRequest, Provider, ProviderError
from app.context.truncation import truncate_head_tail
from app.kernel.usage import ServerEdit, Usage

class HistoryRecorder(Protocol):
    """Where every history change is persisted (the session's transcript writer is one): the
    engine hands it over and never knows the session's files (app/context imports no app.session)."""

    def append_message(self, message: Message) -> None: ...

    def replace_history(self, messages: Sequence[Message], reason: str) -> None: ...


# A compaction call: request in, (assistant message, usage) out. Raises ProviderError.
Summarize = Callable[[ModelRequest], Awaitable[tuple[Message, Usage]]]
Trigger = Literal["auto", "manual", "reactive", "fallback", "memory"]

MAX_OVERFLOW_RETRIES = 3
# Exact counting of a 15 MB string costs seconds; above this size we sample.
EXACT_COUNT_LIMIT_CHARS = 200_000
SAMPLE_CHARS = 50_000


def quiet_model_call(provider_of: Callable[[], Provider]) -> Summarize:
    """One model call streamed to its end, showing nothing and retrying nothing (a failed
    background memory update is simply tried again after more context). ``provider_of`` is
    asked at each call: the host may swap its provider."""

    async def call(request: ModelRequest) -> tuple[Message, Usage]:
        async for item in provider_of().stream(request):
            if isinstance(item, Completed):
                return item.message, item.usage
        raise ProviderError("the stream ended without a final message")

    return call


def estimate_text_fast(text: str) -> int:
    """Token estimate that stays cheap for huge texts (head+tail sample, extrapolated)."""
    if len(text) <= EXACT_COUNT_LIMIT_CHARS:
        return count_tokens(text)
    sample = text[:SAMPLE_CHARS] + text[-SAMPLE_CHARS:]
    ratio = count_tokens(sample) / len(sample)
    return int(len(text) * ratio) + 1


@dataclass
class EngineConfig:
    window: int
    budget: int
    compact_max_output: int = 8_000
    micro_idle_minutes: float = 60.0
    micro_keep_latest: int = 5
    micro_keep_tokens: int = 40_000
    micro_min_free: int = 20_000
    recent_user_budget: int = 4_000
    # issue 17: the provider compacts server-side at the auto-compact line, so ours stands down
    server_compaction: bool = False

    # Session memory (issue 15): update every N tokens of new context (0: off); a memory
    # compaction keeps at least this many tokens of the latest messages verbatim. Off unless
    # the runtime passes Settings.memory_update_tokens (default 10,000) on: the dashboard must
    # know the "memory" compaction trigger first.
    memory_update_tokens: int = 0
    memory_keep_tokens: int = 4_000
    memory_max_output: int = 4_000
    # Reversible clearing (issue 15): a restored output larger than this is cut head+tail.
    restore_max_chars: int = 40_000


# issue 17: what stands before a server's compaction item in the history (the item carries the rest).
SERVER_COMPACTED_NOTE = ("[Context compaction] The conversation before this point was compacted by the server; "
                         "its compaction item follows.")


@dataclass
class ContextEngine:
    """Live history + accounting + thresholds + compaction state for one session."""

    system_prompt: str
    memory: MemoryBundle
    tools: list[ToolSpec]
    config: EngineConfig
    price: Price | None = None
    compact_price: Price | None = None
    emit: Callable[[Event], None] = lambda _e: None
    # Persists every history change.
    transcript: HistoryRecorder | None = None
    tool_results_dir: Path | None = None
    clock: Callable[[], float] = time.time
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    history: list[Message] = field(default_factory=list)
    # MCP (issue 16): which server a tool comes from (the breakdown per server), and the
    # tokens deferred tool definitions save on every request (the gauge). Set by start_mcp.
    tool_owner: Callable[[str], str | None] | None = None
    tool_tokens_saved: Callable[[], int] = lambda: 0
    # Path-scoped rules (issue 15): set by the runtime with app.context.rules.load_rules;
    # file paths in tool calls are relative to ``workspace``.
    rules: RuleSet | None = None
    workspace: Path | None = None
    # The background memory update's model call; None: the ``summarize`` of before_request.
    memory_summarize: Summarize | None = None

    def __post_init__(self) -> None:
        self.thresholds: Thresholds = compute_thresholds(
            self.config.window, self.config.budget, self.config.compact_max_output,
            fixed_tokens=self._fixed_tokens_if_budget_is_near(),
        )
        self.accounting = ContextAccounting(window=self.config.window)
        self.ledger = Ledger()
        self.last_assistant_at: float | None = None
        self._warned = False
        self._pause_noted: float | None = None  # the breaker pause the last paused notice was about
        # issue 17: a server compaction seen in a reply, waiting for that call's usage (messages, tokens before)
        self._server_compaction_pending: tuple[int, int] | None = None
        self._server_edits_reported: tuple[ServerEdit, ...] = ()
        self._system_text = self._with_memory(self.memory)
        self._init_features()

    def _with_memory(self, memory: MemoryBundle) -> str:
        return self.system_prompt + (
            "\n\n# Project and user rules (memory files)\n" + memory.text if memory.text else "")

    def use_memory(self, memory: MemoryBundle) -> None:
        """Memory files read again mid-session (issue 24: an import the user approved): the next
        request carries them, and the budget lines move with the fixed part."""
        self.memory = memory
        self._system_text = self._with_memory(memory)
        self.set_budget(self.config.budget)

    def fixed_tokens(self) -> int:
        """Estimated tokens every request carries whatever the history: system prompt, memory files, tools."""
        return (count_tokens(self.system_prompt) + count_tokens(self.memory.text)
                + estimate_tools(self.tools))

    def _fixed_tokens_if_budget_is_near(self) -> int:
        """The fixed part, counted only when the budget could be below the compaction floor:
        counting loads the tokenizer, which start-up should not wait for (a token is at
        least one character, so the characters bound the count from above)."""
        budget = self.config.budget
        if budget <= 0:
            return 0
        upper = (len(self.system_prompt) + len(self.memory.text) + MIN_SUMMARY_ROOM
                 + sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) + 64 for t in self.tools))
        return self.fixed_tokens() if budget < upper else 0

    def set_budget(self, budget: int) -> str | None:
        """Change the budget mid-session: the lines move at once. Returns the floor warning
        to show when the new budget is below the compaction floor (None otherwise)."""
        self.config.budget = max(0, int(budget))
        self.thresholds = compute_thresholds(self.config.window, self.config.budget, self.config.compact_max_output,
                                             fixed_tokens=self._fixed_tokens_if_budget_is_near())
        return self.budget_floor_warning()

    def budget_floor_warning(self) -> str | None:
        """A line for the user when the budget is below the compaction floor (None when fine).
        The host says it once at start-up and again whenever the budget is set."""
        fixed = self._fixed_tokens_if_budget_is_near()
        if not fixed:
            return None  # the budget is clearly above any floor (or off): nothing to count
        return budget_floor_warning(self.config.budget, fixed, self.config.window, self.config.compact_max_output)

    # ---- what the model sees ----

    @property
    def system_text(self) -> str:
        """System prompt with the memory files: they live here, so compaction cannot lose them."""
        return self._system_text

    def build_request(self, max_tokens: int) -> ModelRequest:
        # Our estimate of exactly this request, which its usage is checked and calibrated against
        # (a pruning or compaction just before may have changed the history since the last one).
        self.projection()
        return ModelRequest(system=self.system_text, messages=list(self.history), tools=self.tools,
                            max_tokens=max_tokens, tool_choice="auto")

    def projection(self, extra: list[Message] | None = None) -> Projection:
        history = self.history + extra if extra else self.history
        return self.accounting.project(self.system_prompt, self.tools, history, self.memory.text)

    # ---- history changes (every one persisted) ----

    def append(self, message: Message) -> None:
        if message.role == "assistant" and _server_compaction_in(message):
            self._install_server_compaction(message)
            return
        if self.config.memory_update_tokens > 0:
            self._unseen().add(message)  # before the append: a resumed history is unseen too
            self._memory_new_tokens += estimate_message(message)
        self.history.append(message)
        self._history_version += 1
        if message.role == "assistant":
            self.last_assistant_at = self.clock()
        if self.transcript is not None:
            self.transcript.append_message(message)

    def append_user_text(self, text: str, attached: Sequence[TextBlock] = ()) -> None:
        """A user message; merged into a trailing user message (e.g. interrupted tool results)
        so roles keep alternating. ``attached``: blocks that go with it and are not the user's
        words (an MCP server's prompt or resource, ``TextBlock.from_mcp``)."""
        typed = Message.typed_by_user(text)
        if attached:
            typed = typed.copy_with([*typed.content, *attached])
        if self.history and self.history[-1].role == "user":
            merged = self.history[-1].copy_with([*self.history[-1].content, *typed.content])
            self._replace(self.history[:-1] + [merged], "merge_user")
            return
        self.append(typed)

    def _replace(self, new_history: list[Message], reason: str) -> None:
        old_history = self.history
        self._cached_prefix = self._cache_still_valid(old_history, new_history)
        self.history = new_history
        self._history_version += 1
        self.accounting.invalidate()
        if self.transcript is not None:
            self.transcript.replace_history(new_history, reason)
        self._after_replace(old_history, reason)

    def _cache_still_valid(self, old_history: list[Message], new_history: list[Message]) -> int:
        """The last request's cached prefix that a new history still starts with: the fixed
        part and the messages both share, no more (a compaction keeps only the fixed part). The
        forecasts after it must not count a cache the change already invalidated."""
        if not self._cached_prefix:
            return 0
        shared = 0
        for old, new in zip(old_history, new_history):
            if old is not new:
                break
            shared += 1
        return min(self._cached_prefix, self._stable_prefix() + estimate_messages(old_history[:shared]))

    def reset(self) -> None:
        """Clear the conversation and the live accounting; the ledger and files on disk stay."""
        self.emit(ResetEvent(messages_before=len(self.history)))  # recorded: a resumed chart shows the drop too
        self._replace([], "reset")
        self.accounting.reset()  # the growth of the old conversation says nothing about the new one
        self.last_assistant_at = None
        self._warned = False
        self._cached_prefix = 0  # a new conversation shares no cached prefix beyond the system part
        self._point(self.emit_context().projected_tokens, "reset")

    # ---- accounting ----

    def record_usage(self, agent: AgentName, usage: Usage,
                     model_price: Price | None) -> UsageEvent:
        cost = cost_usd(usage, model_price) if model_price is not None and usage.known else None
        self.ledger.add(agent, usage, cost)
        check = None
        if agent == "main":
            if self._server_compaction_pending is not None or usage.server_edits:
                self.accounting.server_shrank_the_request()
            check = self.accounting.record_usage(usage, len(self.history))
            if usage.known:
                self._cached_prefix = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
            self._pinned.clear()  # a restored result was seen by this call: prunable again
        event = UsageEvent(
            agent=agent,
            input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            output_tokens=usage.output_tokens,
            context_tokens=usage.context_tokens,
            cost_usd=cost,
            reasoning_tokens=usage.reasoning_tokens,
        )
        if agent != "main" and self._in_background():
            self._deferred.append(event)  # a background memory update: shown at the next step
        else:
            self.emit(event)
        if check is not None and check.flag:  # implausible figures: said once per kind, the estimate stands in
            self.emit(UsageDistrustedEvent(reason=check.reason, reported_tokens=check.reported_tokens,
                                           estimated_tokens=check.estimated_tokens))
        if agent == "main":
            self._reconcile_server_report(usage, model_price)  # issue 17: after the call's own usage line
        return event

    def context_event(self) -> ContextEvent:
        proj = self.projection()
        t = self.thresholds
        total = self.ledger.total()
        return ContextEvent(
            exact_tokens=proj.exact_tokens,
            estimated_tokens=proj.estimated_tokens,
            projected_tokens=proj.projected_tokens,
            thresholds=_thresholds_model(t),
            breakdown=self._feature_breakdown(
                self.accounting.breakdown(self.system_prompt, self.memory.text, self.tools, self.history,
                                          tool_owner=self.tool_owner)),
            level=level(proj.projected_tokens, t),
            turns_to_compact=self.accounting.turns_to(t.auto_compact_line, proj.projected_tokens),
            cumulative_input=total.input_tokens,
            cumulative_cached=total.cached_tokens,
            cumulative_output=total.output_tokens,
            cumulative_reasoning=total.reasoning_tokens,
            cost_usd=total.cost_usd,
            compact_cost_usd=self.ledger.compact_cost_usd,
            memory_updates=self.ledger.memory.calls,
            memory_input_tokens=self.ledger.memory.input_tokens,
            memory_cost_usd=self.ledger.memory.cost_usd,
            tool_tokens_saved=self.tool_tokens_saved(),
            estimate_scale=proj.estimate_scale,
        )

    def emit_context(self) -> ContextEvent:
        self.flush_background_events()
        event = self.context_event()
        self.emit(event)
        return event

    def live_usage(self, usage: Usage) -> None:
        """A usage figure from inside a stream (Anthropic's message_start gives the prompt
        size at once): the gauge shows it before the call ends. The call's final usage,
        recorded after it, is what the accounting keeps."""
        tokens = usage.context_tokens
        if tokens is None:
            return
        event = self.context_event()
        # Only a plausible figure moves the gauge early (the call's final usage is checked and
        # flagged when it is not): never negative, under a few windows, not far below our estimate.
        fields = (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens)
        if (any(v is not None and v < 0 for v in fields) or tokens > self.config.window * USAGE_WINDOW_FACTOR
                or tokens < event.projected_tokens * USAGE_FLOOR_RATIO):
            return
        t = self.thresholds
        self.emit(event.model_copy(update={
            "exact_tokens": tokens, "estimated_tokens": 0, "projected_tokens": tokens,
            "level": level(tokens, t), "live": True, "estimate_scale": None,
        }))

    def note_model_call(self) -> None:
        """One point of the gauge's history per model call."""
        projected = self.projection().projected_tokens
        self.accounting.record_point(projected)
        self._point(projected, "call")

    def _point(self, tokens: int, kind: PointKind) -> None:
        if kind != "call":  # a compaction, a clearing or a reset: turns-to-compact counts afresh
            self.accounting.restart_growth(tokens)
        self.emit(ChartPointEvent(tokens=tokens, kind=kind))

    # ---- tool results: the projection rescues what would not fit ----

    def fit_tool_result(self, block: ToolResultBlock, tool_name: str, pending: list[Message]) -> ToolResultBlock:
        """Cut a result that alone would push the next request over the blocking line.

        It has not been sent yet, so it can still be saved: cut head+tail to fit
        under the warning line, full output on disk, and say so.
        """
        return self._attach_rules(self._fit_tool_result(block, tool_name, pending), tool_name)

    def _fit_tool_result(self, block: ToolResultBlock, tool_name: str, pending: list[Message]) -> ToolResultBlock:
        t = self.thresholds
        base = self.projection(pending).projected_tokens
        result_tokens = estimate_text_fast(block.content)
        if base + result_tokens <= t.blocking_line:
            return block
        room_tokens = max(500, t.warning_line - base)
        ratio = len(block.content) / max(1, result_tokens)
        max_chars = max(1_000, int(room_tokens * ratio * 0.9))
        path = block.full_output_path
        if path is None and self.tool_results_dir is not None:
            path = self._save_output(block.tool_use_id, block.content)
        cut = truncate_head_tail(block.content, max_chars, path)
        self.emit(ResultCutEvent(id=block.tool_use_id, name=tool_name, original_chars=len(block.content),
                                 kept_chars=len(cut), full_output_path=path))
        return ToolResultBlock(tool_use_id=block.tool_use_id, content=cut, is_error=block.is_error,
                               full_output_path=path)

    # ---- before every request: the lines of defence, lightest first ----

    async def before_request(self, summarize: Summarize) -> None:
        self.flush_background_events()
        t = self.thresholds
        self._micro_by_time()
        proj = self.projection().projected_tokens
        if proj >= t.warning_line and not self._warned:
            self._warned = True
            self.emit(WarningCrossedEvent(projected_tokens=proj, warning_line=t.warning_line))
        if proj >= t.warning_line:
            self._micro_by_size()
            proj = self.projection().projected_tokens
        if proj >= t.auto_compact_line and not self._only_a_summary() and self._auto_compaction_is_ours():
            plan = await self._memory_compaction_plan()
            if plan is not None:
                self.compact_from_memory(plan)
                proj = self.projection().projected_tokens
            if proj < t.auto_compact_line:
                pass
            elif self.breaker.allows_auto():
                await self.compact(summarize, "auto")
                proj = self.projection().projected_tokens
            elif proj < t.blocking_line and self._pause_noted != self.breaker.retry_at:
                # Said once per pause, not before every request of a long paused turn.
                self._pause_noted = self.breaker.retry_at
                self.emit(CompactionPausedEvent(failures=self.breaker.failures, retry_in_s=self.breaker.retry_in()))
        if proj >= t.blocking_line:
            # Never send a request that cannot fit. The breaker is open or the
            # compaction failed: fall back to the extractive summary so the
            # session is never dead.
            self.fallback_compact()
        if proj < t.warning_line:
            self._warned = False
        self._maybe_start_memory_update(summarize)

    def _auto_compaction_is_ours(self) -> bool:
        """Issue 17: with server-side compaction on, the server compacts at this same line
        (the request carries it as its threshold): ours stands down. The blocking-line
        fallback stays, as the last line of defence."""
        return not self.config.server_compaction

    # ---- issue 17: what the provider did to the context, as it reported ----

    def _install_server_compaction(self, message: Message) -> None:
        """The reply carries a compaction item: it stands for everything before it, so the
        history becomes a short note (roles must start with the user) and this reply. The old
        messages stay in the transcript; the event waits for this call's usage (``record_usage``)."""
        tokens_before = self.projection().projected_tokens  # the request the server just compacted
        messages_before = len(self.history)
        self._replace([Message.user(SERVER_COMPACTED_NOTE), message], "server_compaction")
        self.last_assistant_at = self.clock()
        self._warned = False
        self._server_compaction_pending = (messages_before, tokens_before)

    def _reconcile_server_report(self, usage: Usage, model_price: Price | None) -> None:
        """Turn what the server reported with this call into events; the exact figure already
        is the server's (``record_usage``), so the projection starts from it."""
        if usage.compaction_usage is not None:
            # the server's compaction run is compaction work: it counts apart, like ours
            self.record_usage("compact", usage.compaction_usage, self.compact_price or model_price)
        pending, self._server_compaction_pending = self._server_compaction_pending, None
        if pending is not None:
            messages_before, tokens_before = pending
            reported = usage.context_tokens
            estimated = reported is None or usage.compaction_usage is None
            if reported is not None and not estimated:
                tokens_after = reported  # Anthropic: the compaction run apart, this figure is the compacted request
            else:
                # Without the compaction run split out (OpenAI Responses), this call's usage is the
                # request the server compacted: the size before. The compacted size is estimated
                # from what was kept until the next call reports.
                if reported is not None:
                    tokens_before = reported
                    self.accounting.invalidate()
                tokens_after = self.projection().projected_tokens
            self.emit(CompactionEvent(trigger="server", ok=True, messages_before=messages_before,
                                      messages_after=len(self.history), tokens_before=tokens_before,
                                      tokens_after=tokens_after, tokens_after_estimated=estimated))
            self._point(tokens_after, "server")  # drawn apart on the gauge's history
        edits = usage.server_edits
        tool_tokens = sum(e.cleared_input_tokens for e in edits if e.kind.startswith("clear_tool_uses"))
        other_tokens = sum(e.cleared_input_tokens for e in edits) - tool_tokens
        self.accounting.note_server_cleared({"tool_results": tool_tokens, "assistant": other_tokens})
        if edits and edits != self._server_edits_reported:
            # The server re-applies its edits to every request (the local history stays whole);
            # a new event only when what it cleared changed.
            uses = sum(e.cleared_tool_uses for e in edits)
            freed = tool_tokens + other_tokens  # thinking turns the server cleared count here too
            self.emit(MicroCompactionEvent(trigger="server", results_cleared=uses, tokens_freed=freed))
        self._server_edits_reported = tuple(edits)

    def _only_a_summary(self) -> bool:
        """A history that is just a summary (plus the user's new words): compacting it
        again gains nothing and, with a tiny budget, would loop on every request."""
        return len(self.history) == 1 and is_summary_message(self.history[0])

    def _micro_by_time(self) -> None:
        if self.last_assistant_at is None:
            return
        idle_min = (self.clock() - self.last_assistant_at) / 60.0
        result = prune_by_time(self.history, idle_min, self.config.micro_idle_minutes, self.config.micro_keep_latest,
                               keep_ids=frozenset(self._pinned))
        self._apply_prune(result, "time")

    def _micro_by_size(self) -> None:
        result = prune_by_size(self.history, self.config.micro_keep_tokens, self.config.micro_min_free,
                               keep_ids=frozenset(self._pinned))
        self._apply_prune(result, "size")

    def _apply_prune(self, result: PruneResult, trigger: Literal["time", "size"]) -> None:
        if result.results_cleared == 0:
            return
        self._replace(self._save_cleared_outputs(self.history, result.history), "micro_compaction")
        self.emit(MicroCompactionEvent(trigger=trigger, results_cleared=result.results_cleared,
                                       tokens_freed=result.tokens_freed))
        self._point(self.projection().projected_tokens, "prune")  # first: the context event counts afresh
        self.emit_context()

    def _save_cleared_outputs(self, old: list[Message], new: list[Message]) -> list[Message]:
        """A cleared result whose full output was never saved (it was not truncated) is
        written to tool-results/ first, so its stub can name a file the model can re-read."""
        if self.tool_results_dir is None:
            return new
        uses = {u.id: u for m in old if m.role == "assistant" for u in m.tool_uses}
        out = list(new)
        for i, (before, after) in enumerate(zip(old, new)):
            if before is after:
                continue
            blocks = list(after.content)
            changed = False
            for j, (was, now) in enumerate(zip(before.content, after.content)):
                if not (isinstance(was, ToolResultBlock) and isinstance(now, ToolResultBlock)):
                    continue
                if was.full_output_path is not None or is_cleared(was) or not is_cleared(now):
                    continue
                path = self._save_output(was.tool_use_id, was.content)
                if path is None:
                    continue  # the stub says "not saved"; the transcript still holds the output
                saved = ToolResultBlock(tool_use_id=was.tool_use_id, content=was.content,
                                        is_error=was.is_error, full_output_path=path)
                stub = stub_for(saved, uses.get(was.tool_use_id))
                blocks[j] = ToolResultBlock(tool_use_id=now.tool_use_id, content=stub, is_error=now.is_error,
                                            full_output_path=path)
                changed = True
            if changed:
                out[i] = after.copy_with(blocks)
        return out

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

    # ---- compaction ----

    async def compact(self, summarize: Summarize, trigger: Trigger = "manual", focus: str | None = None,
                      plan: Plan | None = None) -> CompactionEvent:
        """Run ``plan`` (from ``plan_compaction`` or ``take_plan``: a summary, or a compaction from
        the session memory), or without one a summary. On failure the history is exactly as it was."""
        if plan is None:
            plan = self._plan_compaction(focus, use_memory=False)
        before_msgs = len(self.history)
        tokens_before = self.projection().projected_tokens
        if plan.does_nothing:
            # A lone summary compacts to itself: a model call would gain nothing.
            event = CompactionEvent(trigger=trigger, ok=False, messages_before=before_msgs,
                                    messages_after=before_msgs, tokens_before=tokens_before,
                                    tokens_after=tokens_before, nothing_to_compact=True,
                                    reason=plan.reason, replanned=plan.replanned)
            self.emit(event)
            return event
        if plan.memory is not None:
            done = self.compact_from_memory(plan.memory, planned=plan.forecast, replanned=plan.replanned)
            assert done is not None  # a memory plan always applies
            return done
        planned = plan.forecast
        focus = plan.focus
        work = list(self.history)
        if tokens_before > self.thresholds.blocking_line:
            # The compaction request carries the whole history: one over the blocking
            # line would be rejected too, so shrink the copy before sending it.
            work, _dropped = drop_oldest_rounds(work, tokens_before - self.thresholds.blocking_line)
        reason: str | None = None
        summary: str | None = None
        for _attempt in range(MAX_OVERFLOW_RETRIES + 1):
            request = build_compaction_request(self.system_text, work, self.tools, focus,
                                               self.config.compact_max_output)
            try:
                message, usage = await summarize(request)
                self.record_usage("compact", usage, self.compact_price)
                summary = extract_summary(message)
                # a summary over its cap or no smaller than the history is a failure too
                reason = summary_problem(summary, usage.output_tokens, self.config.compact_max_output,
                                         self.estimate_request(self.history), self.estimate_with_summary(summary))
                if reason is not None:
                    summary = None
                break
            except ContextTooLongError as err:
                # The compaction request itself is too long: drop the oldest rounds of the copy and retry.
                kept, dropped = drop_oldest_rounds(work, err.gap_tokens)
                if not dropped:
                    reason = f"compaction request too long and nothing left to drop: {err.message}"
                    break
                work = kept
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
            event = CompactionEvent(trigger=trigger, ok=False, messages_before=before_msgs,
                                    messages_after=before_msgs, tokens_before=tokens_before,
                                    tokens_after=tokens_before, reason=reason or "unknown failure",
                                    replanned=plan.replanned)
            self.emit(event)
            return event
        if self.breaker.paused or self.breaker.failures:
            self.breaker.record_success()
            self.emit(BreakerEvent(paused=False, failures=0))
        return self._install_summary(summary, trigger, before_msgs, tokens_before, planned, plan.replanned)

    def estimate_request(self, history: list[Message]) -> int:
        """The whole request for ``history``, estimated (one measure for before and after:
        the server's own figure may count with another tokenizer)."""
        return ContextAccounting().project(self.system_prompt, self.tools, history, self.memory.text).projected_tokens

    def estimate_with_summary(self, summary: str) -> int:
        """The estimated context if ``summary`` replaced the history (nothing is changed)."""
        return self.estimate_request(build_summary_history(summary, self.history, self.config.recent_user_budget))

    def fallback_compact(self) -> CompactionEvent:
        """Deterministic extractive summary: no model call, so it works when nothing else can."""
        before_msgs = len(self.history)
        tokens_before = self.projection().projected_tokens
        summary = extractive_summary(self.history)
        return self._install_summary(summary, "fallback", before_msgs, tokens_before)

    def _install_summary(self, summary: str, trigger: Trigger, before_msgs: int, tokens_before: int,
                         planned: Forecast | None = None, replanned: bool = False) -> CompactionEvent:
        # Audited summaries: the checklist of what is replaced, against the summary and the
        # user's words quoted after it; what is missing is appended as checked facts.
        new_history = build_summary_history(summary, self.history, self.config.recent_user_budget)
        audit = audit_summary(self.history, new_history[0].text)
        if audit.missing:
            summary = append_checked_facts(summary, audit)
            new_history = build_summary_history(summary, self.history, self.config.recent_user_budget)
        self._summary_sizes.append(estimate_message(new_history[0]))  # cached: the accounting reuses it
        self._replace(new_history, "compaction")
        self._warned = False
        tokens_after = self.projection().projected_tokens
        event = CompactionEvent(trigger=trigger, ok=True, messages_before=before_msgs,
                                messages_after=len(new_history), tokens_before=tokens_before,
                                tokens_after=tokens_after, replanned=replanned, **_audit_fields(audit),
                                **_forecast_fields(planned))
        self.emit(event)
        self._point(tokens_after, "compaction")
        self.emit_context()
        return event

    def _retry_epoch(self) -> float | None:
        retry_in = self.breaker.retry_in()
        return None if retry_in is None else time.time() + retry_in

    # ---- overflow recovery (reactive compact) ----

    def recover_overflow(self, err: ContextTooLongError) -> bool:
        """Drop the oldest API rounds to cover the reported gap. False when nothing can be dropped."""
        before_msgs = len(self.history)
        tokens_before = self.projection().projected_tokens
        kept, dropped = drop_oldest_rounds(self.history, err.gap_tokens)
        if not dropped:
            self.emit(CompactionEvent(trigger="reactive", ok=False, messages_before=before_msgs,
                                      messages_after=before_msgs, tokens_before=tokens_before,
                                      tokens_after=tokens_before, reason="nothing left to drop"))
            return False
        self._replace(kept, "overflow")
        tokens_after = self.projection().projected_tokens
        self.emit(CompactionEvent(trigger="reactive", ok=True, messages_before=before_msgs,
                                  messages_after=len(kept), tokens_before=tokens_before,
                                  tokens_after=tokens_after, reason=err.message, gap_tokens=err.gap_tokens))
        self._point(tokens_after, "compaction")
        self.emit_context()
        return True

    def result_in_context(self, tool_use_id: str) -> bool:
        """Is the full (not cleared) result of this call still in the live history?

        A result with a saved full output was cut (by the registry or the pre-send
        cut, or cleared): only part of it is in the context, so it does not count.
        """
        for message in reversed(self.history):
            for block in message.content:
                if isinstance(block, ToolResultBlock) and block.tool_use_id == tool_use_id:
                    return not is_cleared(block) and block.full_output_path is None
        return False

    # ==== issue 15: session memory, audits, restore, forecasts, path-scoped rules ====
    # (kept together here so other work on this file merges cleanly)

    def _init_features(self) -> None:
        memory_path = (self.tool_results_dir.parent / MEMORY_FILE_NAME) if self.tool_results_dir else None
        self.session_memory = SessionMemory.load(memory_path)
        self._memory_task: asyncio.Task[None] | None = None
        self._memory_new_tokens = 0  # tokens of the messages the memory has not seen
        # The messages the memory has not seen (issue 27: an update sends only these). Filled
        # from the history at first use, which after a resume is the whole restored history
        # (which part the memory file covers is not known).
        self._memory_unseen = UnseenMessages()
        self._memory_unseen_ready = False
        # The running update's last message as the history holds it now (a clearing or a restore
        # replaces a message with a new version), so its coverage is found when it ends.
        self._memory_batch_last: Message | None = None
        self._pinned: set[str] = set()  # restored results, kept through the next request
        self._cached_prefix = 0  # prompt-cache tokens of the last main request
        self._summary_sizes: list[int] = []
        # Plans a confirmation may name (issue 25), and a count of history changes: a plan made
        # on another history than the live one is made again before it runs.
        self._plans: dict[str, Plan] = {}
        self._history_version = 0
        self._stable_tokens: int | None = None
        self._attached_rules: set[str] = set()
        # Events of the background memory update wait here until the agent next touches the
        # engine, so they never land after a turn's final "result" event.
        self._deferred: list[Event] = []

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
        for event in pending:
            self.emit(event)

    def _after_replace(self, old_history: list[Message], reason: str) -> None:
        """Keep what the features track about the history in step with a replacement."""
        if self.config.memory_update_tokens > 0:
            self._unseen(old_history)  # a resumed history replaced before any append: still unseen
        if reason in ("micro_compaction", "restore", "merge_user") and len(old_history) == len(self.history):
            # Same messages, some blocks changed: the memory still covers the same positions.
            # (A clearing leaves the unseen messages as they were sent: the memory sees the output.)
            covered = self.session_memory.covered_index(old_history)
            merged = reason == "merge_user" and bool(old_history) and old_history[-1] is not self.history[-1]
            if merged and self.config.memory_update_tokens > 0:
                self._unseen().merged(old_history[-1], self.history[-1])
            if merged and covered == len(old_history):
                covered -= 1  # what the user typed into the last message is not covered yet
            self.session_memory.covered = self.history[covered - 1] if covered else None
            if not merged and self._memory_batch_last is not None:
                for old, new in zip(old_history, self.history):
                    if old is self._memory_batch_last:
                        self._memory_batch_last = new
                        break
        else:
            if reason != "memory_compaction" and not self._in_history(self.session_memory.covered):
                self.session_memory.covered = None
            if reason == "reset":
                # A new conversation: the old memory must not seep into its first update.
                if self._memory_task is not None and not self._memory_task.done():
                    self._memory_task.cancel()
                self._memory_unseen.clear()
                self._memory_unseen_ready = True
                if self.session_memory.exists:
                    self.session_memory.save("", None)
        self._recount_memory_tokens()
        if self.rules is not None and self.rules.rules:
            self._attached_rules = attached_rule_paths(
                [b.content for m in self.history if m.role == "user" for b in m.tool_results])

    def _recount_memory_tokens(self) -> None:
        if self.config.memory_update_tokens <= 0:
            self._memory_new_tokens = 0
            return
        self._memory_new_tokens = self._unseen().tokens()

    def _unseen(self, history_before: list[Message] | None = None) -> UnseenMessages:
        """The unseen messages; at first use, the history (before a replacement being applied)."""
        if not self._memory_unseen_ready:
            self._memory_unseen_ready = True
            self._memory_unseen.messages = list(self.history if history_before is None else history_before)
            if self.config.memory_update_tokens > 0:  # a resumed history: due at the next request
                self._memory_new_tokens = self._memory_unseen.tokens()
        return self._memory_unseen

    def _in_history(self, message: Message | None) -> bool:
        return message is not None and any(m is message for m in reversed(self.history))

    # ---- session memory ----

    def _maybe_start_memory_update(self, summarize: Summarize) -> None:
        """Start a background update once enough new context has piled up.

        Runs as an asyncio task beside the main request (never awaited here), so the
        user's turn does not wait for it; a compaction that needs it waits for it.
        """
        if self.config.memory_update_tokens <= 0 or not self.history:
            return
        if self._memory_task is not None and not self._memory_task.done():
            return
        if self._memory_new_tokens < self.config.memory_update_tokens:
            return
        # Only what the memory has not seen, a bounded batch (after failed updates or a resume
        # the rest follows in the next one).
        batch = self._unseen().batch(max(self.config.memory_update_tokens, self.config.window // 2))
        if not batch:
            return
        self._memory_batch_last = batch[-1]
        self._memory_task = asyncio.get_running_loop().create_task(
            self._update_memory(self._memory_caller(summarize), batch))

    def _memory_caller(self, summarize: Summarize) -> Summarize:
        """The background call: ``memory_summarize`` when the host gave one (the runtime gives
        ``quiet_model_call``: the agent's ``summarize`` announces a "compacting" state, wrong
        while the main reply streams, and retries with visible notices), else ``summarize``."""
        return self.memory_summarize or summarize

    async def _update_memory(self, summarize: Summarize, batch: list[Message]) -> None:
        request = build_memory_request(self.system_text, batch, self.tools, self.session_memory.text or None,
                                       self.config.memory_max_output)
        try:
            message, usage = await summarize(request)
            self.record_usage("memory", usage, self.compact_price)
            text = extract_summary(message)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a background failure must never reach the turn; it is shown instead
            self._deferred.append(SessionMemoryEvent(
                ok=False, memory_tokens=count_tokens(self.session_memory.text),
                covered_messages=self.session_memory.covered_index(self.history),
                reason=str(err) or type(err).__name__))
            # Wait for another full interval before retrying (no retry storm on a failing server).
            self._memory_new_tokens = 0
            self._memory_batch_last = None  # its messages stay unseen: the next update sends them
            return
        self._memory_unseen.seen(batch)
        # The batch's last message, if the live history still holds it: everything before it
        # there is seen (or a summary of what was). Else (compacted away since) the coverage is
        # unknown and the memory waits for its next update.
        last, self._memory_batch_last = self._memory_batch_last, None
        self.session_memory.save(text, last if self._in_history(last) else None)
        self._recount_memory_tokens()
        self._deferred.append(SessionMemoryEvent(
            ok=True, memory_tokens=count_tokens(self.session_memory.text),
            covered_messages=self.session_memory.covered_index(self.history),
            path=str(self.session_memory.path) if self.session_memory.path else None))

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
        return self._memory_plan()

    def _memory_plan(self) -> MemoryPlan | None:
        """(cut, new history) of a compaction from the memory, or None when the memory
        is not up to date or would not bring the context under the auto-compact line."""
        memory = self.session_memory
        if not memory.exists:
            return None
        covered = memory.covered_index(self.history)
        cut = safe_cut(self.history, covered, self.config.memory_keep_tokens)
        if cut is None:
            return None
        replaced, kept = self.history[:cut], self.history[cut:]
        summary = f"{MEMORY_INTRO}\n\n{memory.text}"
        head = build_summary_history(summary, replaced, self.config.recent_user_budget)
        audit = audit_summary(replaced, head[0].text, kept)
        if audit.missing:
            summary = append_checked_facts(summary, audit)
            head = build_summary_history(summary, replaced, self.config.recent_user_budget)
        new_history = head + list(kept)
        # Everything the memory does not cover stays verbatim, so a stale memory loses
        # nothing; it is only used when that leaves real headroom (under the warning line).
        after = self._stable_prefix() + estimate_messages(new_history)
        if after >= self.thresholds.warning_line:
            return None
        return MemoryPlan(cut, new_history, audit)

    def memory_compaction_available(self) -> bool:
        """Can the context be compacted from the session memory now (no model call)?"""
        return self._memory_plan() is not None

    def compact_from_memory(self, plan: MemoryPlan | None = None, planned: Forecast | None = None,
                            replanned: bool = False) -> CompactionEvent | None:
        """Compact without a model call: the memory replaces what it covers, the latest
        messages stay verbatim. None when the memory is not usable (then compact normally).
        ``planned``: the forecast the user confirmed (else it is made here)."""
        plan = plan or self._memory_plan()
        if plan is None:
            return None
        new_history, audit = plan.history, plan.audit
        planned = planned or self._forecast_compaction(plan)
        before_msgs = len(self.history)
        tokens_before = self.projection().projected_tokens
        self._replace(new_history, "memory_compaction")
        self.session_memory.covered = new_history[0]  # the memory covers its own summary message
        self._recount_memory_tokens()
        self._warned = False
        tokens_after = self.projection().projected_tokens
        event = CompactionEvent(trigger="memory", ok=True, messages_before=before_msgs,
                                messages_after=len(new_history), tokens_before=tokens_before,
                                tokens_after=tokens_after, replanned=replanned, **_audit_fields(audit),
                                **_forecast_fields(planned))
        self.emit(event)
        self._point(tokens_after, "memory")  # drawn apart on the gauge's history: no model call
        self.emit_context()
        return event

    # ---- cost before you compact or reset ----

    def _stable_prefix(self) -> int:
        """Tokens every request starts with (system prompt with the memory files, tools); counted once."""
        if self._stable_tokens is None:
            self._stable_tokens = count_tokens(self.system_text) + estimate_tools(self.tools)
        return self._stable_tokens

    def forecast_compaction(self) -> Forecast:
        """What a compaction asked for now will do (the forecast of ``plan_compaction``)."""
        return self._plan_compaction(None, use_memory=True).forecast

    # ---- plans: what the confirmation shows is what runs (issue 25) ----

    def _history_mark(self) -> tuple[int, int, int]:
        """Which history (and session memory) a plan was made on: it changes with every append
        and replacement, and with a background memory update (a memory plan carries its text)."""
        return self._history_version, len(self.history), hash(self.session_memory.text)

    def _remember(self, plan: Plan) -> Plan:
        self._plans[plan.id] = plan
        while len(self._plans) > PLANS_KEPT:
            del self._plans[next(iter(self._plans))]
        return plan

    def _nothing(self, kind: PlanKind, reason: str, focus: str | None = None) -> Plan:
        tokens = self.projection().projected_tokens
        planned = forecast("nothing", tokens_before=tokens, tokens_after=tokens, cached_prefix=self._cached_prefix,
                           stable_prefix=self._stable_prefix(), price=self.price)
        return Plan(new_plan_id(), kind, planned, len(self.history), len(self.history), self._history_mark(),
                    focus, reason)

    def plan_compaction(self, focus: str | None = None) -> Plan:
        """The compaction a confirmation asks about, kept for ``take_plan``: from the session
        memory when it is up to date and frees at least half of what a summary would (no model
        call), else a summary (with ``focus``, always a summary: the memory was not written
        with it); nothing when the context is empty or already one summary."""
        return self._remember(self._plan_compaction(focus, use_memory=True))

    def _plan_compaction(self, focus: str | None, *, use_memory: bool) -> Plan:
        if not self.history:
            return self._nothing("compact", "nothing to compact: the conversation is empty", focus)
        if self._only_a_summary():
            return self._nothing("compact", "nothing to compact: the context is already one summary", focus)
        by_summary = self._forecast_compaction(None)
        count = len(self.history)
        if use_memory and focus is None and self.config.memory_update_tokens > 0:
            memory_plan = self._memory_plan()
            if memory_plan is not None:
                from_memory = self._forecast_compaction(memory_plan)
                if from_memory.tokens_freed * 2 >= by_summary.tokens_freed > 0:
                    return Plan(new_plan_id(), "compact", from_memory, count, len(memory_plan.history),
                                self._history_mark(), focus, memory=memory_plan)
        return Plan(new_plan_id(), "compact", by_summary, count, 1, self._history_mark(), focus)

    def plan_reset(self) -> Plan:
        """The reset a confirmation asks about (its figures use the prompt cache as it is now)."""
        if not self.history:
            return self._remember(self._nothing("reset", "nothing to reset: the conversation is already empty"))
        return self._remember(Plan(new_plan_id(), "reset", self.forecast_reset(), len(self.history), 0,
                                   self._history_mark()))

    def take_plan(self, plan_id: str | None, focus: str | None = None) -> Plan:
        """The compaction plan a confirmation named, if it was made on the live history; else
        (the conversation moved on, or the plan is unknown) one made now, marked ``replanned``
        when a plan was named. Without an id: a plan made now, as ``plan_compaction``."""
        named = self._plans.pop(plan_id, None) if isinstance(plan_id, str) else None
        if named is not None and named.kind == "compact" and named.history_mark == self._history_mark():
            return named
        fresh = self._plan_compaction(focus, use_memory=True)
        return replace(fresh, replanned=True) if plan_id is not None else fresh

    def _forecast_compaction(self, plan: MemoryPlan | None) -> Forecast:
        tokens_before = self.projection().projected_tokens
        action: ForecastAction = "compact"
        summary_tokens = 0
        if plan is not None:
            action = "memory_compact"
            tokens_after = self._stable_prefix() + estimate_messages(plan.history)
        else:
            # The summary's size is not known before it is written: the average of this
            # session's summaries, else a typical handoff summary.
            history_tokens = max(0, tokens_before - self._stable_prefix())
            summary_tokens = (sum(self._summary_sizes) // len(self._summary_sizes) if self._summary_sizes
                              else min(1_500, self.config.compact_max_output, max(200, history_tokens // 3)))
            # The user's words quoted after the summary: at most their budget (an upper bound,
            # cheap: the exact pick would walk the whole history once more).
            self.accounting._sums.update(self.history)
            quoted = min(self.config.recent_user_budget, self.accounting._sums.by_part["user"])
            tokens_after = self._stable_prefix() + summary_tokens + quoted + 60
        memory = self.ledger.memory
        return forecast(action, tokens_before=tokens_before, tokens_after=min(tokens_after, tokens_before),
                        cached_prefix=self._cached_prefix, stable_prefix=self._stable_prefix(),
                        price=self.price, summary_tokens=summary_tokens, compact_price=self.compact_price,
                        memory_updates=memory.calls, memory_input_tokens=memory.input_tokens,
                        memory_cost_usd=memory.cost_usd if memory.cost_known else None)

    def forecast_reset(self) -> Forecast:
        """What ``reset`` will do: everything but the system prompt, memory files and tools goes."""
        tokens_before = self.projection().projected_tokens
        return forecast("reset", tokens_before=tokens_before, tokens_after=min(self._stable_prefix(), tokens_before),
                        cached_prefix=self._cached_prefix, stable_prefix=self._stable_prefix(), price=self.price)

    # ---- reversible clearing ----

    def _find_result(self, call_id: str) -> tuple[int, int, ToolResultBlock]:
        for i in range(len(self.history) - 1, -1, -1):
            for j, block in enumerate(self.history[i].content):
                if isinstance(block, ToolResultBlock) and block.tool_use_id == call_id:
                    return i, j, block
        raise RestoreError(f"no tool result with call id {call_id!r} in the live context "
                           "(it may have been compacted into a summary)")

    def _restored_content(self, call_id: str) -> tuple[int, int, ToolResultBlock, str, str]:
        i, j, block = self._find_result(call_id)
        if not is_cleared(block):
            raise RestoreError(f"the result of {call_id} is not cleared: it is already in the context")
        if not block.full_output_path:
            raise RestoreError(f"the result of {call_id} was cleared without a saved copy: nothing to restore")
        try:
            with open(block.full_output_path, encoding="utf-8", errors="replace", newline="") as f:
                text = f.read()
        except OSError as err:
            raise RestoreError(f"cannot read the saved output {block.full_output_path}: "
                               f"{err.strerror or err}") from None
        if len(text) > self.config.restore_max_chars:
            text = truncate_head_tail(text, self.config.restore_max_chars, block.full_output_path)
        uses = {u.id: u for m in self.history if m.role == "assistant" for u in m.tool_uses}
        name = uses[call_id].name if call_id in uses else "tool"
        return i, j, block, text, name

    def preview_restore(self, call_id: str) -> RestorePreview:
        """What restoring a cleared result costs: its tokens and the projection after.
        Raises RestoreError (one line saying why) when it cannot be restored."""
        _i, _j, block, text, name = self._restored_content(call_id)
        before = self.projection().projected_tokens
        added = max(0, estimate_text_fast(text) - count_tokens(block.content))
        after = before + added
        t = self.thresholds
        return RestorePreview(call_id=call_id, tool_name=name, tokens=added, projected_before=before,
                              projected_after=after, level_after=level(after, t),
                              fits=after < t.blocking_line)

    def restore_result(self, call_id: str, by: Literal["user", "model"] = "user") -> RestorePreview:
        """Bring a cleared result back for the next request (kept through it, then prunable
        again). Returns its token cost and the new projection; the transcript records it."""
        preview = self.preview_restore(call_id)
        if not preview.fits:
            raise RestoreError(f"restoring {call_id} (~{preview.tokens:,} tokens) would push the next request "
                               f"to ~{preview.projected_after:,}, over the blocking line "
                               f"({self.thresholds.blocking_line:,}); compact first")
        i, j, block, text, _name = self._restored_content(call_id)
        blocks = list(self.history[i].content)
        blocks[j] = ToolResultBlock(tool_use_id=block.tool_use_id, content=text, is_error=block.is_error,
                                    full_output_path=block.full_output_path)
        new_history = list(self.history)
        new_history[i] = self.history[i].copy_with(blocks)
        self._replace(new_history, "restore")
        self._pinned.add(call_id)
        after = self.projection().projected_tokens
        self.emit(RestoreEvent(id=call_id, name=preview.tool_name, tokens=preview.tokens,
                               projected_before=preview.projected_before, projected_after=after, by=by))
        self.emit_context()
        return RestorePreview(call_id=call_id, tool_name=preview.tool_name, tokens=preview.tokens,
                              projected_before=preview.projected_before, projected_after=after,
                              level_after=level(after, self.thresholds), fits=True)

    def cleared_results(self) -> list[str]:
        """Call ids of the cleared results that can be restored (oldest first)."""
        return [b.tool_use_id for m in self.history if m.role == "user" for b in m.tool_results
                if is_cleared(b) and b.full_output_path]

    # ---- path-scoped rules ----

    def use_rules(self, rules: RuleSet, workspace: Path) -> None:
        """Take the path-scoped rules (app.context.rules.load_rules) for tool paths relative to
        ``workspace``; a rule file that could not be read is named in one warning line each."""
        self.rules = rules
        self.workspace = workspace
        for problem in rules.problems:
            self.emit(ConfigWarningEvent(setting="rules", text=f"{problem}; that rule is not loaded"))

    def _attach_rules(self, block: ToolResultBlock, tool_name: str) -> ToolResultBlock:
        if self.rules is None or not self.rules.rules or block.is_error:
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
        additions: list[str] = []
        for rule in self.rules.matching(path):
            key = str(rule.path)
            if key in self._attached_rules or rule.path.resolve() in self.memory.sources:
                continue  # already in the context (or in the system prompt through an import)
            self._attached_rules.add(key)
            additions.append(rule.attachment())
            self.emit(RuleAttachedEvent(id=block.tool_use_id, rule_path=key, file_path=raw, tokens=rule.tokens))
        if not additions:
            return block
        content = block.content + "\n\n" + "\n\n".join(additions)
        return ToolResultBlock(tool_use_id=block.tool_use_id, content=content, is_error=block.is_error,
                               full_output_path=block.full_output_path)

    def _feature_breakdown(self, breakdown: dict[str, int]) -> dict[str, int]:
        """The session memory's and the attached rules' tokens as parts of their own
        (taken out of "user" and "tool_results", so the parts still add up)."""
        out = dict(breakdown)
        first = self.history[0] if self.history else None
        if first is not None and first.role == "user" and MEMORY_INTRO in first.text:
            tokens = min(estimate_message(first), out.get("user", 0))
            out["user"] = out.get("user", 0) - tokens
            out["session_memory"] = tokens
        if self._attached_rules and self.rules is not None:
            tokens = sum(r.tokens for r in self.rules.rules if str(r.path) in self._attached_rules)
            tokens = min(tokens, out.get("tool_results", 0))
            out["tool_results"] = out.get("tool_results", 0) - tokens
            out["rules"] = tokens
        return out


@dataclass(frozen=True)
class MemoryPlan:
    """A compaction from the session memory, worked out but not applied."""

    cut: int  # messages before this index are replaced by the memory
    history: list[Message]  # the new history: the memory message, then the kept messages
    audit: AuditResult


class RestoreError(Exception):
    """A cleared result cannot be restored; the message says why in one line."""


@dataclass(frozen=True)
class RestorePreview:
    call_id: str
    tool_name: str
    tokens: int  # what the restore adds to the next request
    projected_before: int
    projected_after: int
    level_after: str  # "ok", "warning", "compact", "blocking"
    fits: bool  # False: it would push the request over the blocking line

    def describe(self) -> str:
        return (f"restore {self.tool_name} result {self.call_id}: +~{self.tokens:,} tokens, "
                f"context ~{self.projected_before:,} → ~{self.projected_after:,} ({self.level_after})")


class _AuditFields(TypedDict):
    """The audit's fields of a CompactionEvent."""

    facts_added: int
    checked_facts: list[str]
    facts_checked: int


class _ForecastFields(TypedDict, total=False):
    """The forecast's fields of a CompactionEvent (none when nothing was forecast)."""

    forecast_tokens_freed: int
    cache_tokens_invalidated: int
    next_request_cost_before_usd: float | None
    next_request_cost_after_usd: float | None
    compaction_call_cost_usd: float | None


def _audit_fields(audit: AuditResult) -> _AuditFields:
    return {"facts_added": len(audit.missing), "checked_facts": audit.added, "facts_checked": len(audit.facts)}


def _forecast_fields(planned: Forecast | None) -> _ForecastFields:
    if planned is None:
        return {}
    return {"forecast_tokens_freed": planned.tokens_freed,
            "cache_tokens_invalidated": planned.cache_tokens_invalidated,
            "next_request_cost_before_usd": planned.next_request_cost_before_usd,
            "next_request_cost_after_usd": planned.next_request_cost_after_usd,
            "compaction_call_cost_usd": planned.operation_cost_usd}


def _server_compaction_in(message: Message) -> bool:
    """Issue 17: a provider's compaction item (Responses) or block (Anthropic) in a reply."""
    return any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for b in message.content)


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:100] or "result"


def _thresholds_model(t: Thresholds) -> ThresholdsModel:
    """The lines as the event carries them (thresholds.py stays free of the event models)."""
    return ThresholdsModel(window=t.window, reserve=t.reserve, effective_window=t.effective_window,
                           auto_compact_line=t.auto_compact_line, warning_line=t.warning_line,
                           blocking_line=t.blocking_line)

"""The context engine: owns the live history and every line of defence.

The agent loop asks it three things: what to do before a request (prune,
compact, recover), whether a fresh tool result fits (cut it if it alone
would push the request over the blocking line), and how to react to a
"prompt too long" rejection. Model calls are made by the agent and passed
in as ``summarize`` so this module never talks to a provider itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Literal

from app.context.accounting import ContextAccounting, Ledger, Projection
from app.context.compaction import (
    CircuitBreaker,
    CompactionFailed,
    build_compaction_request,
    build_summary_history,
    extract_summary,
    is_summary_message,
    summary_problem,
)
from app.context.memory import MemoryBundle
from app.context.overflow import drop_oldest_rounds
from app.context.prices import Price, cost_usd
from app.context.pruning import PruneResult, is_cleared, prune_by_size, prune_by_time, stub_for
from app.context.summarizer import extractive_summary
from app.context.thresholds import MIN_SUMMARY_ROOM, Thresholds, budget_floor_warning, compute_thresholds, level
from app.context.tokens import count_tokens, estimate_tools
from app.events import (
    BreakerEvent,
    ChartPointEvent,
    CompactionEvent,
    CompactionPausedEvent,
    ContextEvent,
    Event,
    MicroCompactionEvent,
    PointKind,
    ResetEvent,
    ResultCutEvent,
    UsageEvent,
    WarningCrossedEvent,
)
from app.messages import Message, TextBlock, ToolResultBlock, ToolSpec
from app.providers.base import ContextTooLongError, ModelRequest, ProviderError
from app.tools.registry import truncate_head_tail
from app.transcript import TranscriptWriter
from app.usage import Usage

# A compaction call: request in, (assistant message, usage) out. Raises ProviderError.
Summarize = Callable[[ModelRequest], Awaitable[tuple[Message, Usage]]]
Trigger = Literal["auto", "manual", "reactive", "fallback"]

MAX_OVERFLOW_RETRIES = 3
# Exact counting of a 15 MB string costs seconds; above this size we sample.
EXACT_COUNT_LIMIT_CHARS = 200_000
SAMPLE_CHARS = 50_000


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
    transcript: TranscriptWriter | None = None
    tool_results_dir: Path | None = None
    clock: Callable[[], float] = time.time
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    history: list[Message] = field(default_factory=list)
    # MCP (issue 16): which server a tool comes from (the breakdown per server), and the
    # tokens deferred tool definitions save on every request (the gauge). Set by start_mcp.
    tool_owner: Callable[[str], str | None] | None = None
    tool_tokens_saved: Callable[[], int] = lambda: 0

    def __post_init__(self) -> None:
        self.thresholds: Thresholds = compute_thresholds(
            self.config.window, self.config.budget, self.config.compact_max_output,
            fixed_tokens=self._fixed_tokens_if_budget_is_near(),
        )
        self.accounting = ContextAccounting()
        self.ledger = Ledger()
        self.last_assistant_at: float | None = None
        self._warned = False
        self._pause_noted: float | None = None  # the breaker pause the last paused notice was about
        self._system_text = self.system_prompt + (
            "\n\n# Project and user rules (memory files)\n" + self.memory.text if self.memory.text else ""
        )

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
        return ModelRequest(system=self.system_text, messages=list(self.history), tools=self.tools,
                            max_tokens=max_tokens, tool_choice="auto")

    def projection(self, extra: list[Message] | None = None) -> Projection:
        history = self.history + extra if extra else self.history
        return self.accounting.project(self.system_prompt, self.tools, history, self.memory.text)

    # ---- history changes (every one persisted) ----

    def append(self, message: Message) -> None:
        self.history.append(message)
        if message.role == "assistant":
            self.last_assistant_at = self.clock()
        if self.transcript is not None:
            self.transcript.append_message(message)

    def append_user_text(self, text: str) -> None:
        """A user message; merged into a trailing user message (e.g. interrupted tool results)
        so roles keep alternating."""
        if self.history and self.history[-1].role == "user":
            merged = self.history[-1].copy_with([*self.history[-1].content, TextBlock(text=text)])
            self._replace(self.history[:-1] + [merged], "merge_user")
            return
        self.append(Message.user(text))

    def _replace(self, new_history: list[Message], reason: str) -> None:
        self.history = new_history
        self.accounting.invalidate()
        if self.transcript is not None:
            self.transcript.replace_history(new_history, reason)

    def reset(self) -> None:
        """Clear the conversation and the live accounting; the ledger and files on disk stay."""
        self.emit(ResetEvent(messages_before=len(self.history)))  # recorded: a resumed chart shows the drop too
        self._replace([], "reset")
        self.accounting.reset()  # the growth of the old conversation says nothing about the new one
        self.last_assistant_at = None
        self._warned = False
        self._point(self.emit_context().projected_tokens, "reset")

    # ---- accounting ----

    def record_usage(self, agent: Literal["main", "compact"], usage: Usage, model_price: Price | None) -> UsageEvent:
        cost = cost_usd(usage, model_price) if model_price is not None and usage.known else None
        self.ledger.add(agent, usage, cost)
        if agent == "main":
            self.accounting.record_usage(usage, len(self.history))
        event = UsageEvent(
            agent=agent,
            input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            output_tokens=usage.output_tokens,
            context_tokens=usage.context_tokens,
            cost_usd=cost,
        )
        self.emit(event)
        return event

    def context_event(self) -> ContextEvent:
        proj = self.projection()
        t = self.thresholds
        total = self.ledger.total()
        return ContextEvent(
            exact_tokens=proj.exact_tokens,
            estimated_tokens=proj.estimated_tokens,
            projected_tokens=proj.projected_tokens,
            thresholds=t.to_model(),
            breakdown=self.accounting.breakdown(self.system_prompt, self.memory.text, self.tools, self.history,
                                                tool_owner=self.tool_owner),
            level=level(proj.projected_tokens, t),
            turns_to_compact=self.accounting.turns_to(t.auto_compact_line, proj.projected_tokens),
            cumulative_input=total.input_tokens,
            cumulative_cached=total.cached_tokens,
            cumulative_output=total.output_tokens,
            cost_usd=total.cost_usd,
            compact_cost_usd=self.ledger.compact_cost_usd,
            tool_tokens_saved=self.tool_tokens_saved(),
        )

    def emit_context(self) -> ContextEvent:
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
        t = self.thresholds
        self.emit(event.model_copy(update={
            "exact_tokens": tokens, "estimated_tokens": 0, "projected_tokens": tokens,
            "level": level(tokens, t), "live": True,
        }))

    def note_model_call(self) -> None:
        """One point of the gauge's history per model call."""
        projected = self.projection().projected_tokens
        self.accounting.record_point(projected)
        self._point(projected, "call")

    def _point(self, tokens: int, kind: PointKind) -> None:
        self.emit(ChartPointEvent(tokens=tokens, kind=kind))

    # ---- tool results: the projection rescues what would not fit ----

    def fit_tool_result(self, block: ToolResultBlock, tool_name: str, pending: list[Message]) -> ToolResultBlock:
        """Cut a result that alone would push the next request over the blocking line.

        It has not been sent yet, so it can still be saved: cut head+tail to fit
        under the warning line, full output on disk, and say so.
        """
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
        t = self.thresholds
        self._micro_by_time()
        proj = self.projection().projected_tokens
        if proj >= t.warning_line and not self._warned:
            self._warned = True
            self.emit(WarningCrossedEvent(projected_tokens=proj, warning_line=t.warning_line))
        if proj >= t.warning_line:
            self._micro_by_size()
            proj = self.projection().projected_tokens
        if proj >= t.auto_compact_line and not self._only_a_summary():
            if self.breaker.allows_auto():
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

    def _only_a_summary(self) -> bool:
        """A history that is just a summary (plus the user's new words): compacting it
        again gains nothing and, with a tiny budget, would loop on every request."""
        return len(self.history) == 1 and is_summary_message(self.history[0])

    def _micro_by_time(self) -> None:
        if self.last_assistant_at is None:
            return
        idle_min = (self.clock() - self.last_assistant_at) / 60.0
        result = prune_by_time(self.history, idle_min, self.config.micro_idle_minutes, self.config.micro_keep_latest)
        self._apply_prune(result, "time")

    def _micro_by_size(self) -> None:
        result = prune_by_size(self.history, self.config.micro_keep_tokens, self.config.micro_min_free)
        self._apply_prune(result, "size")

    def _apply_prune(self, result: PruneResult, trigger: Literal["time", "size"]) -> None:
        if result.results_cleared == 0:
            return
        self._replace(self._save_cleared_outputs(self.history, result.history), "micro_compaction")
        self.emit(MicroCompactionEvent(trigger=trigger, results_cleared=result.results_cleared,
                                       tokens_freed=result.tokens_freed))
        self._point(self.emit_context().projected_tokens, "prune")

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
        try:
            self.tool_results_dir.mkdir(parents=True, exist_ok=True)
            with open(out, "w", encoding="utf-8", errors="replace", newline="") as f:
                f.write(content)
        except OSError:
            return None
        return str(out)

    # ---- compaction ----

    async def compact(self, summarize: Summarize, trigger: Trigger = "manual", focus: str | None = None) -> CompactionEvent:
        """Summarize the history into one message. On failure the history is exactly as it was."""
        before_msgs = len(self.history)
        tokens_before = self.projection().projected_tokens
        if not self.history:
            event = CompactionEvent(trigger=trigger, ok=False, messages_before=0, messages_after=0,
                                    tokens_before=tokens_before, tokens_after=tokens_before,
                                    reason="nothing to compact")
            self.emit(event)
            return event
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
                                    tokens_after=tokens_before, reason=reason or "unknown failure")
            self.emit(event)
            return event
        if self.breaker.paused or self.breaker.failures:
            self.breaker.record_success()
            self.emit(BreakerEvent(paused=False, failures=0))
        return self._install_summary(summary, trigger, before_msgs, tokens_before)

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

    def _install_summary(self, summary: str, trigger: Trigger, before_msgs: int, tokens_before: int) -> CompactionEvent:
        new_history = build_summary_history(summary, self.history, self.config.recent_user_budget)
        self._replace(new_history, "compaction")
        self._warned = False
        tokens_after = self.projection().projected_tokens
        event = CompactionEvent(trigger=trigger, ok=True, messages_before=before_msgs,
                                messages_after=len(new_history), tokens_before=tokens_before,
                                tokens_after=tokens_after)
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


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:100] or "result"

"""What a compaction or a reset will cost, before it runs.

Three figures the confirmation shows (and auto-compaction logs):

- tokens freed: the projection now minus the projection after;
- prompt-cache tokens invalidated: the cached prefix of the last request
  that the new history no longer shares (only the system prompt and the tool
  definitions survive a compaction; they are the start of every request);
- the estimated cost of the next request before and after, with the model's
  prices: the still-cached part at the cached price, the rest at the input
  price (output is left out: it does not depend on the history). A
  compaction that calls the model adds that call's own cost.

Pure functions over numbers: the engine gathers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.context.prices import Price

# "nothing": the plan does nothing (the context is already one summary, or empty); "extractive":
# the fallback's summary, written before it runs; "drop": the oldest rounds dropped on a "too long";
# "clear": old results cleared; "restore", "evict", "pin", "unpin": one result brought back, taken
# out, kept verbatim through clearing and compaction, or no longer kept; "rewind": back to just
# before an earlier user message
ForecastAction = Literal["compact", "memory_compact", "reset", "nothing", "extractive", "drop", "clear", "restore",
                         "evict", "pin", "unpin", "rewind"]


@dataclass(frozen=True)
class Forecast:
    action: ForecastAction
    tokens_before: int
    tokens_after: int  # estimated
    cache_tokens_invalidated: int
    next_request_cost_before_usd: float | None  # None: no price known for the model
    next_request_cost_after_usd: float | None
    operation_cost_usd: float | None  # the compaction call itself (0 for a reset or a memory compaction)
    model_call: bool  # does it call the model?
    # What the session memory's background updates cost so far: a compaction from
    # the memory makes no call because these were paid for already. 0 updates: off or none yet.
    memory_updates: int = 0
    memory_input_tokens: int = 0
    memory_cost_usd: float | None = None  # None: some update had no price or no usage
    # What is known of the size after: a summary's length is not known until the model writes it,
    # so a compaction that calls the model has a range (what it keeps, exactly, plus the summary's
    # bounds); -1: as tokens_after (a reset, a compaction from the memory: exact).
    tokens_after_low: int = -1
    tokens_after_high: int = -1

    @property
    def after_range(self) -> tuple[int, int]:
        low = self.tokens_after if self.tokens_after_low < 0 else self.tokens_after_low
        high = self.tokens_after if self.tokens_after_high < 0 else self.tokens_after_high
        return low, high

    def memory_text(self) -> str:
        """The memory's own spend, and the setting that turns it off ("" when there were no updates)."""
        if not self.memory_updates:
            return ""
        cost = f", ~${self.memory_cost_usd:.4f}" if self.memory_cost_usd else ""
        return (f"session memory so far: {self.memory_updates:,} background update"
                f"{'' if self.memory_updates == 1 else 's'}, {self.memory_input_tokens:,} input tokens{cost} "
                "(memory_update_tokens = 0 turns them off)")

    @property
    def tokens_freed(self) -> int:
        return max(0, self.tokens_before - self.tokens_after)

    def describe(self) -> str:
        """One line for a confirmation dialog or a log."""
        what = {"compact": "compaction", "memory_compact": "compaction from session memory",
                "reset": "reset", "nothing": "nothing to do", "extractive": "extractive compaction",
                "drop": "overflow drop", "clear": "clearing old results",
                "restore": "restore", "evict": "eviction", "pin": "pin", "unpin": "unpin",
                "rewind": "rewind"}[self.action]
        low, high = self.after_range
        if low == high and self.tokens_after > self.tokens_before:  # a restore grows the context
            frees = f"adds ~{self.tokens_after - self.tokens_before:,} tokens ({self.tokens_before:,} → ~{self.tokens_after:,})"
        elif low == high:
            frees = f"frees ~{self.tokens_freed:,} tokens ({self.tokens_before:,} → ~{self.tokens_after:,})"
        else:
            frees = (f"frees {max(0, self.tokens_before - high):,}–{max(0, self.tokens_before - low):,} tokens "
                     f"({self.tokens_before:,} → {low:,}–{high:,})")
        parts = [f"{what}: {frees}",
                 f"invalidates {self.cache_tokens_invalidated:,} cached prompt tokens"]
        if self.next_request_cost_before_usd is not None and self.next_request_cost_after_usd is not None:
            parts.append(f"next request ~${self.next_request_cost_before_usd:.4f} → "
                         f"~${self.next_request_cost_after_usd:.4f}")
        if self.operation_cost_usd:
            parts.append(f"the summary call ~${self.operation_cost_usd:.4f}")
        elif not self.model_call:
            parts.append("no model call")
        if self.action != "reset" and self.memory_text():
            parts.append(self.memory_text())
        return "; ".join(parts)


def request_cost(tokens: int, cached_tokens: int, price: Price | None) -> float | None:
    """Input cost of a request of ``tokens`` whose first ``cached_tokens`` are read from the cache."""
    if price is None:
        return None
    cached = max(0, min(cached_tokens, tokens))
    rates = price.rates_for(tokens)  # a long request is billed at its tier's rates (e.g. above 200K)
    return ((tokens - cached) * rates.input_per_mtok + cached * rates.cached_input_per_mtok) / 1_000_000


def forecast(action: ForecastAction, *, tokens_before: int, tokens_after: int, cached_prefix: int,
             stable_prefix: int, price: Price | None, summary_tokens: int = 0,
             compact_price: Price | None = None, memory_updates: int = 0, memory_input_tokens: int = 0,
             memory_cost_usd: float | None = None, after_range: tuple[int, int] | None = None) -> Forecast:
    """The figures for one action.

    ``cached_prefix``: prompt-cache tokens the last request read or wrote (0 when
    the provider reported none); ``stable_prefix``: tokens of what every request
    starts with (system prompt, memory files, tool definitions), which stay cached.
    ``summary_tokens``: the expected output of the compaction call (0: no call).
    ``memory_*``: the session memory's updates so far, from the ledger (shown, not added in).
    ``after_range``: the size after as a range (low, high), when it is not known exactly.
    """
    kept_cached = min(cached_prefix, stable_prefix)
    invalidated = max(0, cached_prefix - kept_cached)
    before = request_cost(tokens_before, cached_prefix, price)
    after = request_cost(tokens_after, kept_cached, price)
    model_call = action == "compact"
    operation: float | None = 0.0
    if model_call:
        cp = compact_price or price
        operation = request_cost(tokens_before, cached_prefix, cp)
        if operation is not None and cp is not None:
            operation += summary_tokens * cp.rates_for(tokens_before).output_per_mtok / 1_000_000
    return Forecast(action=action, tokens_before=tokens_before, tokens_after=tokens_after,
                    cache_tokens_invalidated=invalidated, next_request_cost_before_usd=before,
                    next_request_cost_after_usd=after, operation_cost_usd=operation, model_call=model_call,
                    memory_updates=memory_updates, memory_input_tokens=memory_input_tokens,
                    memory_cost_usd=memory_cost_usd,
                    tokens_after_low=after_range[0] if after_range else -1,
                    tokens_after_high=after_range[1] if after_range else -1)

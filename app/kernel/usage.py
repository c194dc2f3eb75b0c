"""Token usage of one model call, normalised across wire protocols."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ServerEdit:
    """One context edit the server applied before the model saw the request."""

    kind: str  # "clear_tool_uses_20250919" | "clear_thinking_20251015" | a future edit type
    cleared_input_tokens: int = 0
    cleared_tool_uses: int = 0
    cleared_thinking_turns: int = 0


@dataclass(frozen=True)
class Usage:
    """Usage with the cache split out.

    ``input_tokens`` is the *uncached* input (Anthropic's meaning); for
    OpenAI-compatible servers it is ``prompt_tokens - cached_tokens``.
    Every field is None when the server reported no usage at all.
    """

    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    # ---- what the server reported beyond the counts (provider-side context management) ----
    # Part of output_tokens spent on reasoning (Responses' output_tokens_details.reasoning_tokens).
    reasoning_tokens: int | None = None
    # Context edits the server applied to this request (Anthropic context_management.applied_edits).
    server_edits: tuple["ServerEdit", ...] = ()
    # A server-side compaction run inside this call (Anthropic usage.iterations of type "compaction").
    compaction_usage: Optional["Usage"] = None

    @property
    def known(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None

    @property
    def total_input(self) -> int | None:
        """All input including cache reads and writes (seed pitfall 3)."""
        if self.input_tokens is None:
            return None
        return self.input_tokens + (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0)

    @property
    def context_tokens(self) -> int | None:
        """Size of the context after this call: total input + output."""
        total = self.total_input
        if total is None:
            return None
        return total + (self.output_tokens or 0)

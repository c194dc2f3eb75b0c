"""Token usage of one model call, normalised across wire protocols."""

from __future__ import annotations

from dataclasses import dataclass


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

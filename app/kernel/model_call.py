"""A model call as every layer sees it: the request, and the errors a call can end in.

The providers (app/providers/) turn a ``ModelRequest`` into their wire format and raise these
errors; the context engine builds requests and reacts to the errors without knowing any wire
format, so it imports them from here, never from a provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.kernel.messages import Message, ToolSpec

ToolChoice = Literal["auto", "none"]


@dataclass
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 16_000
    tool_choice: ToolChoice = "auto"


class ProviderError(Exception):
    """A model call failed. ``message`` is the server's own text where there was one."""

    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, error_type: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type
        self.retry_after = retry_after

    def __str__(self) -> str:
        prefix = f"HTTP {self.status}: " if self.status else ""
        kind = f"[{self.error_type}] " if self.error_type else ""
        return f"{prefix}{kind}{self.message}"


class APIError(ProviderError):
    """A non-2xx answer or an error event inside the stream."""

    def __init__(self, message: str, *, status: int | None = None, error_type: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, status=status, error_type=error_type, retry_after=retry_after)
        transient_status = status in (408, 409, 429, 500, 502, 503, 504, 529)
        transient_type = error_type in ("overloaded_error", "rate_limit_error", "api_error")
        self.retryable = bool(transient_status or transient_type)


class ContextTooLongError(APIError):
    """The request was rejected for its length. Counts are parsed when the message gives them."""

    def __init__(self, message: str, *, status: int | None = None, error_type: str | None = None,
                 actual_tokens: int | None = None, limit_tokens: int | None = None) -> None:
        super().__init__(message, status=status, error_type=error_type)
        self.retryable = False
        self.actual_tokens = actual_tokens
        self.limit_tokens = limit_tokens

    @property
    def gap_tokens(self) -> int | None:
        if self.actual_tokens is None or self.limit_tokens is None:
            return None
        return max(0, self.actual_tokens - self.limit_tokens)


class StreamCutError(ProviderError):
    """The stream ended without a stop reason / [DONE], or stalled past the read timeout."""

    retryable = True


class ConnectError(ProviderError):
    """Could not reach the server (connect error or connect timeout)."""

    retryable = True

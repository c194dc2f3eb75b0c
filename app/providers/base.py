"""What every provider speaks: a request in, a stream of typed events out.

A provider streams exactly one model call. It yields ``StreamEvent``s and
finishes with one ``Completed`` carrying the assembled assistant message,
or raises a ``ProviderError``. It never touches the agent's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Literal, Protocol, Union, runtime_checkable

from app.kernel.messages import Message, ToolSpec
from app.kernel.request_store import CacheMark
from app.kernel.usage import Usage

ToolChoice = Literal["auto", "none"]


@dataclass
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 16_000
    tool_choice: ToolChoice = "auto"


# ---- stream events (plain dataclasses: internal) ----

@dataclass
class TextDelta:
    text: str


@dataclass
class ThinkingDelta:
    text: str


@dataclass
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass
class ToolCallDelta:
    index: int
    partial_json: str


@dataclass
class UsageUpdate:
    usage: Usage


@dataclass
class Completed:
    """The call finished: the assembled message, usage and the stop reason.

    ``stop_reason`` is normalised: end_turn | tool_use | max_tokens | other
    provider-specific values passed through (refusal, content_filter, ...).
    """

    message: Message
    usage: Usage
    stop_reason: str  # also "refusal": the model declined (its text is the refusal)

    @property
    def cut_tool_ids(self) -> list[str]:
        """Tool calls whose arguments the output limit cut: they must not be run."""
        return [u.id for u in self.message.tool_uses if u.cut_at_output_limit]


def cut_call_result(name: str) -> str:
    """What the model (and the user) get instead of running a call the output limit cut."""
    return (f"This {name} call was not run: its arguments were cut off at the output token limit "
            "(max_tokens) before they were complete. Retry with smaller arguments, e.g. write a large "
            "file in several smaller edits or appends.")


@dataclass
class PromptCacheOff:
    """The server rejected the prompt-cache breakpoints (``cache_control``, the system prompt as
    blocks): the call was made again without them, and so is every later call of the session.
    ``reason`` is the server's own words. ``remembered``: it refused them in an earlier session
    (``base_url`` is kept in the data directory), so this session sends none from the start."""

    reason: str
    base_url: str = ""
    remembered: bool = False


StreamEvent = Union[TextDelta, ThinkingDelta, ToolCallStart, ToolCallDelta, UsageUpdate, PromptCacheOff, Completed]


# ---- errors ----

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


class Provider(Protocol):
    """One wire protocol. ``stream`` performs exactly one HTTP request."""

    name: str
    model: str

    @property
    def label(self) -> str:
        """How the header names it, e.g. "anthropic · claude-sonnet-4-5"."""
        ...

    @property
    def banner(self) -> str | None:
        """A note the dashboard shows once when the session opens (None: nothing to say)."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class CacheMarkingProvider(Protocol):
    """A provider that marks prompt-cache breakpoints in what it sends (Anthropic's ``cache_control``)."""

    def cache_marks(self, request: ModelRequest) -> tuple[CacheMark, ...]:
        """Where the breakpoints went in the body last built for ``request`` (the one sent: a
        retry without them builds it again); () for another request or none sent."""
        ...


@runtime_checkable
class ServerCompactingProvider(Protocol):
    """A provider whose server can compact the conversation itself: the engine's
    server-side compaction goes through this method, never through a provider's attributes."""

    def set_server_compaction(self, threshold: int | None) -> int | None:
        """Compact on the server once a request reaches ``threshold`` input tokens (None: off).
        Returns the threshold the server will use (its API may have a floor), None when off."""
        ...

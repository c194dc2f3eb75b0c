"""What every provider speaks: a request in, a stream of typed events out.

A provider streams exactly one model call. It yields ``StreamEvent``s and
finishes with one ``Completed`` carrying the assembled assistant message,
or raises a ``ProviderError``. It never touches the agent's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol, Union, runtime_checkable

from app.kernel.messages import Message
from app.kernel.request_store import CacheMark
from app.kernel.model_call import APIError as APIError
from app.kernel.model_call import ConnectError as ConnectError
from app.kernel.model_call import ContextTooLongError as ContextTooLongError
from app.kernel.model_call import ModelRequest as ModelRequest
from app.kernel.model_call import ProviderError as ProviderError
from app.kernel.model_call import StreamCutError as StreamCutError
from app.kernel.model_call import ToolChoice as ToolChoice
from app.kernel.usage import Usage

# The longest wait a Retry-After may impose before a retry (the agent caps its delay here). Here,
# not in sse.py, so that the agent reads it without importing httpx (a demo session never needs it).
MAX_RETRY_AFTER = 120.0

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

    def server_context(self) -> ServerContext | None:
        """The server's own context management (compaction, context editing), in this
        provider's wire format; None: this provider has none, and tidegauge's engine does it all."""
        ...

    def stop_prompt_caching(self) -> None:
        """Send no prompt-cache breakpoints from now on (the server refused them earlier in this
        session); nothing to do for a provider that sends none."""
        ...


@runtime_checkable
class CacheMarkingProvider(Protocol):
    """A provider that marks prompt-cache breakpoints in what it sends (Anthropic's ``cache_control``)."""

    def cache_marks(self, request: ModelRequest) -> tuple[CacheMark, ...]:
        """Where the breakpoints went in the body last built for ``request`` (the one sent: a
        retry without them builds it again); () for another request or none sent."""
        ...


@dataclass(frozen=True)
class ContextEditing:
    """Server-side context editing as the user asked for it: old tool uses and thinking
    cleared by the server (Anthropic's Messages API has it). Provider-neutral: the provider
    whose server can do it turns it into its own wire format."""

    clear_tool_uses: bool = False
    clear_tool_uses_trigger: int | None = None
    clear_tool_uses_keep: int | None = None
    clear_tool_uses_clear_at_least: int | None = None
    clear_tool_uses_exclude: tuple[str, ...] = ()
    clear_thinking: bool = False
    clear_thinking_keep: int | None = None

    @property
    def wanted(self) -> bool:
        return self.clear_tool_uses or self.clear_thinking


class ServerContext(Protocol):
    """A server that manages the context itself, as its provider offers it: what the engine
    switches goes through these methods, never through a provider's attributes or its name."""

    def set_compaction(self, threshold: int | None) -> int | None:
        """Compact on the server once a request reaches ``threshold`` input tokens (None: off).
        Returns the threshold the server will use (its API may have a floor), None when off."""
        ...

    def set_editing(self, editing: ContextEditing) -> bool:
        """Send ``editing`` with every request. False: this server has no context editing
        (nothing is sent)."""
        ...

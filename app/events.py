"""Engine events: the one-way stream from the agent to whoever watches.

The headless printer writes them as stream-json lines, the transcript
stores them, and the dashboard's worker turns them into widget messages.
Every event has a ``type`` and serialises with ``model_dump(mode="json")``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field

AgentName = Literal["main", "compact"]
AgentState = Literal["idle", "streaming", "tool", "compacting", "waiting_approval", "retrying"]


class TextDeltaEvent(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDeltaEvent(BaseModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class AssistantMessageEvent(BaseModel):
    """A complete assistant turn entered the history."""

    type: Literal["assistant_message"] = "assistant_message"
    text: str
    tool_calls: int = 0


class UserMessageEvent(BaseModel):
    type: Literal["user_message"] = "user_message"
    text: str


class ToolStartEvent(BaseModel):
    type: Literal["tool_start"] = "tool_start"
    id: str
    name: str
    input: dict[str, Any]
    summary: str  # short one-line form of the arguments, for display


class ToolResultEvent(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    id: str
    name: str
    is_error: bool
    truncated: bool
    original_chars: int
    kept_chars: int
    full_output_path: str | None = None
    duration_ms: float = 0.0
    # Exactly what the model sees (may be large: up to the registry limit).
    content: str = ""


class UsageEvent(BaseModel):
    type: Literal["usage"] = "usage"
    agent: AgentName = "main"
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    context_tokens: int | None
    cost_usd: float | None = None


class ThresholdsModel(BaseModel):
    window: int
    reserve: int
    effective_window: int
    auto_compact_line: int
    warning_line: int
    blocking_line: int


class ContextEvent(BaseModel):
    """Where the context stands now: what the gauge draws."""

    type: Literal["context"] = "context"
    exact_tokens: int | None  # last figure from API usage (None: none since reset/compaction)
    estimated_tokens: int  # tiktoken estimate of what was appended since
    projected_tokens: int  # exact + estimated: what decides
    thresholds: ThresholdsModel
    breakdown: dict[str, int]  # system, memory, tools, user, assistant, tool_results
    level: Literal["ok", "warning", "compact", "blocking"]
    turns_to_compact: int | None = None
    cumulative_input: int = 0
    cumulative_cached: int = 0
    cumulative_output: int = 0
    cost_usd: float = 0.0
    compact_cost_usd: float = 0.0


class CompactionEvent(BaseModel):
    type: Literal["compaction"] = "compaction"
    trigger: Literal["auto", "manual", "reactive", "fallback"]
    ok: bool
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    reason: str | None = None


class MicroCompactionEvent(BaseModel):
    type: Literal["micro_compaction"] = "micro_compaction"
    trigger: Literal["time", "size"]
    results_cleared: int
    tokens_freed: int


class ResetEvent(BaseModel):
    """The conversation was cleared (ctrl+r, /reset); the ContextEvent after it shows the drop."""

    type: Literal["reset"] = "reset"
    messages_before: int


class WarningCrossedEvent(BaseModel):
    type: Literal["warning_crossed"] = "warning_crossed"
    projected_tokens: int
    warning_line: int


class ResultCutEvent(BaseModel):
    """A result that alone would push the request over the blocking line was cut before sending."""

    type: Literal["result_cut"] = "result_cut"
    id: str
    name: str
    original_chars: int
    kept_chars: int
    full_output_path: str | None


class BreakerEvent(BaseModel):
    type: Literal["breaker"] = "breaker"
    paused: bool
    failures: int
    retry_at: float | None = None  # epoch seconds when one trial is allowed


class RetryEvent(BaseModel):
    type: Literal["retry"] = "retry"
    attempt: int
    max_attempts: int
    delay_s: float
    reason: str


class StateEvent(BaseModel):
    type: Literal["state"] = "state"
    state: AgentState
    step: int
    max_steps: int
    detail: str = ""


class NoticeEvent(BaseModel):
    """A visible line from the engine (info) or a problem (warning/error)."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    text: str


class ErrorEvent(BaseModel):
    type: Literal["error"] = "error"
    message: str


class ResultEvent(BaseModel):
    type: Literal["result"] = "result"
    stop_reason: Literal["end_turn", "max_steps", "error", "interrupted"]
    text: str
    steps: int


class SessionRepairedEvent(BaseModel):
    """A resumed transcript was damaged or cut short and was repaired (RestoredState.warnings)."""

    type: Literal["session_repaired"] = "session_repaired"
    warnings: list[str]


class UsageDistrustedEvent(BaseModel):
    """The server's usage figures were implausible; our own estimate stands in (once per kind)."""

    type: Literal["usage_distrusted"] = "usage_distrusted"
    reason: str  # one line: what was wrong
    reported_tokens: int | None  # the context size the server's usage implied
    estimated_tokens: int  # our estimate, used instead


Event = Annotated[
    Union[
        TextDeltaEvent, ThinkingDeltaEvent, AssistantMessageEvent, UserMessageEvent,
        ToolStartEvent, ToolResultEvent, UsageEvent, ContextEvent, CompactionEvent,
        MicroCompactionEvent, ResetEvent, WarningCrossedEvent, ResultCutEvent, BreakerEvent, RetryEvent,
        StateEvent, NoticeEvent, ErrorEvent, ResultEvent, SessionRepairedEvent, UsageDistrustedEvent,
    ],
    Field(discriminator="type"),
]

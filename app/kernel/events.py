"""Engine events: the one-way stream from the agent to whoever watches.

The headless printer writes them as stream-json lines, the transcript
stores them, and the dashboard's worker turns them into widget messages.
Every event has a ``type`` and serialises with ``model_dump(mode="json")``.

No ``from __future__ import annotations`` here: with ~60 models, pydantic evaluating every
annotation from its string was a third of this module's import (a headless run imports it).
"""

from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from app.kernel.context_lines import Thresholds
# Busy is defined without pydantic (the dashboard's header needs it before its first frame); re-exported.
from app.kernel.session_states import AT_REST as AT_REST, is_busy as is_busy

AgentName = Union[
    Literal["main", "compact", "sub", "memory"],  # sub: a task tool's sub-agent; memory: the session memory's updates
    Annotated[str, Field(pattern=r"^mcp:[A-Za-z0-9_-]{1,64}$")],  # mcp:NAME: model calls MCP server NAME asked for
]
AgentState = Literal["starting", "idle", "streaming", "tool", "compacting", "waiting_approval", "retrying",
                     "interrupting"]


PointKind = Literal["call", "compaction", "prune", "reset", "memory", "server", "rewind"]  # memory/server: compactions from the session memory / by the provider
# How commands run: in bubblewrap, unsandboxed by the user's choice, or unsandboxed for want of it.
SandboxState = Literal["bwrap", "off", "unavailable"]


# A session uses a handful of its ~60 event types; building a model's validator when it is first
# used, not when this module is imported, is most of this module's import time (a headless run).
DEFERRED = ConfigDict(defer_build=True)


class EventBase(BaseModel):
    """What happened, and nothing about where it was emitted: the same event built twice is
    equal wherever each was emitted. Its place in the session's log and the command that caused
    it are the envelope's (``app.kernel.envelope.EventEnvelope``)."""

    model_config = DEFERRED


class TextDeltaEvent(EventBase):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDeltaEvent(EventBase):
    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class AssistantMessageEvent(EventBase):
    """A complete assistant turn entered the history."""

    type: Literal["assistant_message"] = "assistant_message"
    text: str
    tool_calls: int = 0


class UserMessageEvent(EventBase):
    type: Literal["user_message"] = "user_message"
    text: str


class ToolStartEvent(EventBase):
    type: Literal["tool_start"] = "tool_start"
    id: str
    name: str
    input: dict[str, Any]
    summary: str  # short one-line form of the arguments, for display


class ToolResultEvent(EventBase):
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
    # The call never finished: the content is the synthetic "interrupted" result.
    interrupted: bool = False
    # Refused unrun for want of approval (no one to ask, a "no", a deny rule); left out when false.
    refused: bool = Field(default=False, exclude_if=lambda value: not value)


class ToolCallsCappedEvent(EventBase):
    """The model asked for more tool calls in one reply than ``max_tool_calls_per_turn``: the first
    ``ran`` run, the others are answered "not run" without being shown one by one."""

    type: Literal["tool_calls_capped"] = "tool_calls_capped"
    asked: int
    ran: int


class ToolProgressEvent(EventBase):
    """A running tool said how far it got (an MCP server's progress notification), or where the MCP
    task it runs as stands (``task_status``, from the server's answer to ``tasks/get``)."""

    type: Literal["tool_progress"] = "tool_progress"
    id: str  # the tool call
    progress: float
    total: float | None = None
    message: str = ""  # the server's words, cleaned and cut to 200 characters
    # An MCP task's status (working, input_required, completed, failed, cancelled); "" for progress.
    task_status: str = ""


class ToolUserContentEvent(EventBase):
    """Content a tool returned for the user alone (MCP ``audience: ["user"]``): shown, never sent to the model."""

    type: Literal["tool_user_content"] = "tool_user_content"
    id: str  # the tool call
    text: str


class UsageEvent(EventBase):
    type: Literal["usage"] = "usage"
    agent: AgentName = "main"
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    context_tokens: int | None
    cost_usd: float | None = None
    # The part of output_tokens spent on reasoning (Responses' reasoning_tokens, Anthropic's
    # thinking_tokens); left out of the line when the server did not say (older consumers match).
    reasoning_tokens: int | None = Field(default=None, exclude_if=lambda value: value is None)


# The lines as the engine computes them: one definition (a dataclass pydantic validates as is).
ThresholdsModel = Thresholds


class ContextEvent(EventBase):
    """Where the context stands now: what the gauge draws."""

    type: Literal["context"] = "context"
    exact_tokens: int | None  # last figure from API usage (None: none since reset/compaction)
    estimated_tokens: int  # tiktoken estimate of what was appended since
    projected_tokens: int  # exact + estimated: what decides
    thresholds: Thresholds
    breakdown: dict[str, int]  # system, memory, tools, user, assistant, tool_results
    level: Literal["ok", "warning", "compact", "blocking"]
    # Model calls until the auto-compact line at the recent calls' pace: the median's figure and
    # its range (fewest..most); None until enough calls were measured since the last compaction,
    # or when the line is further ahead than the calls measured. 0: at the line.
    turns_to_compact: int | None = None
    calls_to_compact_fewest: int | None = Field(default=None, exclude_if=lambda value: value is None)
    calls_to_compact_most: int | None = Field(default=None, exclude_if=lambda value: value is None)
    cumulative_input: int = 0
    cumulative_cached: int = 0
    cumulative_output: int = 0
    cumulative_reasoning: int = 0  # of cumulative_output: reasoning the servers reported
    cost_usd: float = 0.0
    compact_cost_usd: float = 0.0
    # the session memory's background updates, apart (also counted in the totals above)
    memory_updates: int = 0
    memory_input_tokens: int = 0
    memory_cost_usd: float = 0.0
    # Figures from a usage update inside a stream (the prompt size, known before the call ends).
    live: bool = False
    # Tokens the deferred tool definitions save on every request (0: none deferred).
    tool_tokens_saved: int = 0
    # estimated_tokens was scaled by this (the server's count of the last request over our
    # estimate of it: its tokenizer is not cl100k); None: the estimate as it is.
    estimate_scale: float | None = Field(default=None, exclude_if=lambda value: value is None)


class CompactionEvent(EventBase):
    type: Literal["compaction"] = "compaction"
    # server: the provider compacted; memory: from the session memory, without a model call
    trigger: Literal["auto", "manual", "reactive", "fallback", "server", "memory"]
    ok: bool
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    # tokens_after is our estimate of what was kept, not a server's figure (server-side compaction on
    # OpenAI Responses: the call's usage is the size before; the next call's usage gives the real one).
    tokens_after_estimated: bool = False
    reason: str | None = None
    # Not a failure: the history was empty or already one summary, so no model call was made.
    nothing_to_compact: bool = False
    # Overflow recovery: how far over the server said the request was (None: it gave no figures).
    gap_tokens: int | None = None
    # Audited summaries: facts the summary missed, appended to it as "checked facts".
    facts_added: int = 0
    facts_checked: int = 0  # facts the audit checked the summary against
    checked_facts: list[str] = Field(default_factory=list)
    # Cost before you compact: the forecast made just before this compaction ran.
    forecast_tokens_freed: int | None = None
    # The size after that forecast gave, low to high (equal: it was known exactly).
    forecast_tokens_after_low: int | None = Field(default=None, exclude_if=lambda value: value is None)
    forecast_tokens_after_high: int | None = Field(default=None, exclude_if=lambda value: value is None)
    cache_tokens_invalidated: int | None = None
    next_request_cost_before_usd: float | None = None
    next_request_cost_after_usd: float | None = None
    compaction_call_cost_usd: float | None = None
    # The confirmed plan was made on a history that changed before it ran: this one was made anew.
    replanned: bool = False
    # What was kept is over the warning line: auto-compaction waits until the context reaches this
    # (compacting again at once would free next to nothing, one model call per request).
    auto_held_until: int | None = Field(default=None, exclude_if=lambda value: value is None)


class MicroCompactionEvent(EventBase):
    type: Literal["micro_compaction"] = "micro_compaction"
    trigger: Literal["time", "size", "server"]  # server: the provider's context editing, as it reported
    results_cleared: int
    tokens_freed: int
    # The plan it ran: what it was forecast to free (None: the server's, reported after the fact).
    forecast_tokens_freed: int | None = Field(default=None, exclude_if=lambda value: value is None)
    plan_id: str | None = Field(default=None, exclude_if=lambda value: value is None)


class ResetEvent(EventBase):
    """The conversation was cleared (ctrl+r, /reset); the ContextEvent after it shows the drop.
    The plan it ran (``Reset(plan_id)``, what the dialog showed) is beside what happened."""

    type: Literal["reset"] = "reset"
    messages_before: int
    # 0 and None in lines written before resets were plans
    tokens_before: int = 0
    tokens_after: int = 0
    plan_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    forecast_tokens_after: int | None = Field(default=None, exclude_if=lambda value: value is None)
    cache_tokens_invalidated: int | None = Field(default=None, exclude_if=lambda value: value is None)
    # the confirmed plan was made on a history that changed before it ran: this one was made anew
    replanned: bool = Field(default=False, exclude_if=lambda value: not value)


class WarningCrossedEvent(EventBase):
    type: Literal["warning_crossed"] = "warning_crossed"
    projected_tokens: int
    warning_line: int


class ResultCutEvent(EventBase):
    """A result that alone would push the request over the blocking line was cut before sending."""

    type: Literal["result_cut"] = "result_cut"
    id: str
    name: str
    original_chars: int
    kept_chars: int
    full_output_path: str | None


class BreakerEvent(EventBase):
    type: Literal["breaker"] = "breaker"
    paused: bool
    failures: int
    retry_at: float | None = None  # epoch seconds when one trial is allowed


class RetryEvent(EventBase):
    type: Literal["retry"] = "retry"
    attempt: int
    max_attempts: int
    delay_s: float
    reason: str


class StateEvent(EventBase):
    """What the session is doing. The only source of the step, tool and retry numbers."""

    type: Literal["state"] = "state"
    state: AgentState
    step: int
    max_steps: int
    detail: str = ""
    tool_name: str = ""
    tool_index: int = 0  # 1-based position of the running tool among this model call's calls
    tool_count: int = 0
    attempt: int = 0  # retrying: the attempt about to be made (2 = first retry)
    max_attempts: int = 0


class NoticeEvent(EventBase):
    """A prose line. The core no longer emits it (every engine line is a typed event
    worded by ``app.kernel.describe``); stream-json derives it after the typed events that
    used to carry one, and transcripts written before keep parsing."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    text: str


class ErrorEvent(EventBase):
    type: Literal["error"] = "error"
    message: str


ResultSubtype = Literal["success", "error_max_steps", "error_during_execution", "refusal", "interrupted"]
_SUBTYPE_OF_STOP: dict[str, ResultSubtype] = {
    "end_turn": "success", "max_steps": "error_max_steps", "error": "error_during_execution",
    "refusal": "refusal", "interrupted": "interrupted",
}


class TokenTotals(BaseModel):
    """Tokens of the model calls of one run (``input_tokens``: the uncached part)."""

    model_config = DEFERRED

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0  # part of output_tokens, where the server says it


class PermissionDenial(BaseModel):
    """A tool call refused for want of approval (headless without --yes, or "no" in the dashboard)."""

    model_config = DEFERRED

    tool_name: str
    tool_use_id: str
    tool_input: dict[str, Any] = Field(default_factory=dict)


class ResultEvent(EventBase):
    """The last event of a run: how it ended and what it cost (what a script needs, as Claude Code's).

    The agent gives stop_reason, text and steps; the session adds the run's figures.
    """

    type: Literal["result"] = "result"
    stop_reason: Literal["end_turn", "max_steps", "error", "interrupted", "refusal"]
    text: str
    steps: int
    # Filled from stop_reason when not given (older transcripts, the agent itself).
    subtype: ResultSubtype = "success"
    is_error: bool = False
    session_id: str = ""
    # Who answered (the provider's name and the model it was asked for): a script can tell a real
    # model's answer from the keyless demo's canned one.
    provider: str = ""
    model: str = ""
    duration_ms: float = 0.0
    duration_api_ms: float = 0.0  # wall time with at least one model call in flight
    num_turns: int = 0  # model replies of the main agent in this run
    total_cost_usd: float | None = None  # None: no call of the run had a known price
    usage: TokenTotals = Field(default_factory=TokenTotals)
    # "main", "compact" (compaction), "sub" (the task tool's agents) and "memory" (the session memory's updates)
    usage_by_agent: dict[str, TokenTotals] = Field(default_factory=dict)
    # [] and not default_factory=list: pydantic copies it for each event, and the signature of the builtin
    # list (asked of a factory) costs tokenize's patterns in every run, at its result.
    permission_denials: list[PermissionDenial] = []
    # How the run's commands ran: in bwrap, unsandboxed by choice ("off"), or unsandboxed because
    # the sandbox cannot run here ("unavailable"). None: not known (an older transcript).
    sandbox: SandboxState | None = None

    @model_validator(mode="before")
    @classmethod
    def _derive_outcome(cls, data: Any) -> Any:
        if isinstance(data, dict) and "stop_reason" in data:
            subtype = _SUBTYPE_OF_STOP.get(str(data["stop_reason"]), "error_during_execution")
            data = {"subtype": subtype, "is_error": subtype != "success", **data}
        return data


class SessionInfoEvent(EventBase):
    """Who and where: the first event of every session, and what a surface shows in its header."""

    type: Literal["session"] = "session"
    session_id: str
    provider_label: str
    model: str
    provider: str = ""  # the provider's name as --provider takes it ("openai", "demo"...)
    workspace: str
    transcript_path: str | None = None
    max_steps: int = 0
    # A provider's own welcome line (the offline demo lists its prompts).
    banner: str | None = None
    resumed: bool = False
    # The directory tidegauge was started in: the project the header names (the offline demo's
    # ``workspace`` is a scratch copy under the data directory).
    started_in: str = ""
    # Server-side compaction: None where the provider has none, else whether it is on now.
    server_compaction: bool | None = None
    # Whether commands run sandboxed (see ResultEvent.sandbox); None in older transcripts.
    sandbox: SandboxState | None = None


class ChartPointEvent(EventBase):
    """One point of the context history: after a model call, a compaction, a micro-compaction or a reset."""

    type: Literal["chart_point"] = "chart_point"
    tokens: int
    kind: PointKind


class RequestRecordedEvent(EventBase):
    """A main request was sent and kept in the session's request store (the inspector reads it there)."""

    type: Literal["request_recorded"] = "request_recorded"
    request: int  # its number in the session, from 1
    total_tokens: int  # the gauge's figure when it was sent
    parts: int
    store: str  # the store's folder (``<session>/requests``)


class CommandQueuedEvent(EventBase):
    """A command arrived while the session was busy (or still starting): it runs later."""

    type: Literal["queued"] = "queued"
    command: Literal["prompt", "compact", "reset"]
    position: int  # 1 = runs next
    waiting_for: Literal["turn", "start"] = "turn"
    text: str = ""  # the prompt's own words (shown now; its turn shows it again when it runs)


class ApprovalRequestEvent(EventBase):
    """A tool that changes things waits for an answer: submit ``Approve(request_id, ...)``."""

    type: Literal["approval_request"] = "approval_request"
    request_id: str
    tool_id: str
    name: str
    input: dict[str, Any]
    summary: str
    # The allow rules each "always" answer would add: "exact" (this command / file),
    # "prefix" (commands starting with its first word(s) / files in its folder), "tool".
    choices: dict[str, list[str]] = Field(default_factory=dict)
    # A command asking to run outside the sandbox: the model's reason (asked every time; no
    # "always" answer is offered).
    outside_sandbox: str | None = None


class ApprovalResolvedEvent(EventBase):
    type: Literal["approval_resolved"] = "approval_resolved"
    request_id: str
    decision: Literal["yes", "always", "always_exact", "always_prefix", "always_tool", "no", "interrupted"]
    rules: list[str] = Field(default_factory=list)  # the allow rules an "always" added
    saved: bool = False  # ... and saved for the project


class PermissionRuleLine(BaseModel):
    model_config = DEFERRED

    effect: Literal["allow", "ask", "deny"]
    rule: str
    source: Literal["flag", "config", "project", "saved", "session"]


class PermissionsEvent(EventBase):
    """Answer to ``/permissions``: the rules in force, each with where it came from."""

    type: Literal["permissions"] = "permissions"
    rules: list[PermissionRuleLine]
    saved_file: str | None = None  # where rules saved from the approval dialog go
    project_file: str | None = None  # the project's settings (ask and deny rules only)
    sandbox: SandboxState | None = None  # how commands run (see ResultEvent.sandbox)
    sandbox_network: bool = False  # ... and whether they may reach the network


class InterruptedEvent(EventBase):
    """The turn was interrupted; the history was repaired so the next request is valid."""

    type: Literal["interrupted"] = "interrupted"
    tool_name: str | None = None  # the tool that was running, if any
    partial_kept: bool = False  # the reply streamed so far was kept, marked as interrupted
    # The tool had not started: the turn was waiting for the user's approval of it.
    at_approval: bool = False


class OutputLimitEvent(EventBase):
    """The model stopped at its output limit (max_tokens)."""

    type: Literal["output_limit"] = "output_limit"


class PartialDiscardedEvent(EventBase):
    """A stream failed mid-reply: what it had shown is not in the history (a retry starts over)."""

    type: Literal["partial_discarded"] = "partial_discarded"
    chars: int


class CompactionPausedEvent(EventBase):
    """Auto-compaction is due but paused by the circuit breaker (said once per pause)."""

    type: Literal["compaction_paused"] = "compaction_paused"
    failures: int
    retry_in_s: float | None = None


class ReportEvent(EventBase):
    """Answer to ``/usage`` or ``/context``: the figures; ``app.kernel.describe`` words them."""

    type: Literal["report"] = "report"
    kind: Literal["usage", "context"]
    messages: int
    context: ContextEvent


class ConfigWarningEvent(EventBase):
    """A setting that cannot work as set (a budget below the fixed part of every request, a
    provider-side option the provider does not have), said once when the session starts."""

    type: Literal["config_warning"] = "config_warning"
    setting: str
    text: str


class McpServerEvent(EventBase):
    """An MCP server started, failed or stopped; a failure is never fatal."""

    type: Literal["mcp_server"] = "mcp_server"
    name: str
    status: Literal["starting", "ready", "failed", "exited", "stopped"]  # exited: stopped on its own mid-session
    detail: str = ""
    tools: int = 0  # tools it offers (when ready)
    # Tools it lists that are not offered to the model: they run only as MCP tasks (taskSupport
    # "required"), which tidegauge does not make, so every call would fail.
    not_offered: list[str] = Field(default_factory=list)
    # The folders given to it as roots when ready ([]: none advertised); None where not said (older lines).
    roots: list[str] | None = None


class SubAgentEvent(EventBase):
    """What a task tool's sub-agent is doing: the dashboard folds it under the task call
    and draws the sub-agent's own small gauge from it."""

    type: Literal["sub_agent"] = "sub_agent"
    call_id: str  # the task call it works for
    status: Literal["started", "tool", "context", "writing", "finished"]
    tool: str = ""  # status "tool": the tool it called
    summary: str = ""  # "tool": its arguments in one line; "finished": the stop reason
    # status "writing": characters of its reply streamed so far (its report, after its last tool:
    # seconds in which nothing else would change on screen)
    written_chars: int = 0
    step: int = 0
    max_steps: int = 0
    context_tokens: int = 0  # its own context now (projected)
    auto_compact_line: int = 0
    window: int = 0



# ---- session memory, reversible clearing, path-scoped rules ----

class SessionMemoryEvent(EventBase):
    """The session memory was updated in the background (or the update failed)."""

    type: Literal["session_memory"] = "session_memory"
    ok: bool
    memory_tokens: int  # size of the memory now
    covered_messages: int  # leading messages of the live history it summarises
    path: str | None = None  # the memory file in the session folder
    reason: str | None = None


class RestoreEvent(EventBase):
    """A cleared tool result was brought back into the context for the next request."""

    type: Literal["restore"] = "restore"
    id: str  # the tool call id
    name: str  # the tool's name
    tokens: int  # what the restored result adds
    projected_before: int
    projected_after: int
    by: Literal["user", "model"] = "user"
    # The plan it ran (``RestoreResult(plan_id)``, what the dialog showed), beside what happened.
    plan_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    forecast_projected_after: int | None = Field(default=None, exclude_if=lambda value: value is None)
    replanned: bool = Field(default=False, exclude_if=lambda value: not value)


class RuleAttachedEvent(EventBase):
    """A path-scoped rule file was attached to the result of a read or edit of a matching file."""

    type: Literal["rule_attached"] = "rule_attached"
    id: str  # the tool call whose result carries it
    rule_path: str
    file_path: str
    tokens: int


class SessionRepairedEvent(EventBase):
    """A resumed transcript was damaged or cut short and was repaired (RestoredState.warnings)."""

    type: Literal["session_repaired"] = "session_repaired"
    warnings: list[str]


class UsageDistrustedEvent(EventBase):
    """The server's usage figures were implausible; our own estimate stands in (once per kind)."""

    type: Literal["usage_distrusted"] = "usage_distrusted"
    reason: str  # one line: what was wrong
    reported_tokens: int | None  # the context size the server's usage implied
    estimated_tokens: int  # our estimate, used instead


# ---- the dashboard's questions (answers to app.kernel.commands Preview, PreviewRestore,
# RestoreResult, ServerCompaction; and which results are cleared) ----

class ForecastEvent(EventBase):
    """What a compaction, a reset or an eviction would do (the answer to ``Preview``), before it runs."""

    type: Literal["forecast"] = "forecast"
    kind: Literal["compact", "reset", "evict"]
    # memory_compact: from the session memory; nothing: there is nothing to do (``reason`` says why)
    action: Literal["compact", "memory_compact", "reset", "nothing", "evict"]
    focus: str | None = None
    # The plan these figures describe; ``Compact(plan_id=...)`` runs exactly it.
    plan_id: str = ""
    reason: str | None = None
    messages_before: int = 0
    messages_after: int = 0  # a summary (or the memory) and the messages kept verbatim; 0 after a reset
    tokens_before: int
    tokens_after: int  # estimated
    tokens_freed: int
    # What is known of the size after: for a summary, what is kept (exactly) up to that plus the
    # summary's max_tokens; None: tokens_after is exact (a reset, a compaction from the memory).
    tokens_after_low: int | None = Field(default=None, exclude_if=lambda value: value is None)
    tokens_after_high: int | None = Field(default=None, exclude_if=lambda value: value is None)
    cache_tokens_invalidated: int
    next_request_cost_before_usd: float | None = None  # None: no price known for the model
    next_request_cost_after_usd: float | None = None
    operation_cost_usd: float | None = None  # the summary call itself
    model_call: bool = True
    # what the session memory's background updates cost so far (0 updates: off or none yet)
    memory_updates: int = 0
    memory_input_tokens: int = 0
    memory_cost_usd: float | None = None
    # an eviction: the call whose result it takes out, in words ("read_file(path='a.py')")
    call_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    call: str | None = Field(default=None, exclude_if=lambda value: value is None)


class RestorePreviewEvent(EventBase):
    """What restoring a cleared tool result would cost, or (``reason``) why it cannot be done."""

    type: Literal["restore_preview"] = "restore_preview"
    call_id: str
    tool_name: str = ""
    tokens: int = 0
    projected_before: int = 0
    projected_after: int = 0
    level_after: Literal["ok", "warning", "compact", "blocking"] = "ok"
    reason: str | None = None  # set: it cannot be restored (one line)
    plan_id: str = ""  # the plan these figures describe; ``RestoreResult(plan_id=...)`` runs exactly it


class WhatIfEvent(EventBase):
    """This session replayed offline under another policy (the answer to ``WhatIf``): the context
    after each model call it would have had, beside the recorded one; or (``reason``) why not."""

    type: Literal["whatif"] = "whatif"
    name: str = ""  # the policy, as the user gave it
    window: int = 0
    auto_compact_line: int = 0
    warning_line: int = 0
    compactions: int = 0
    peak_tokens: int = 0
    points: list[int] = Field(default_factory=list)  # tokens after each model call, in order
    recorded_compactions: int = 0
    recorded_peak_tokens: int = 0
    reason: str | None = None  # set: nothing was replayed (one line)


class ClearedResultsEvent(EventBase):
    """The tool calls whose results are cleared from the context and can be restored (oldest first);
    sent when that set changes."""

    type: Literal["cleared_results"] = "cleared_results"
    call_ids: list[str]
    # the results the user took out (a subset of call_ids) and those pinned, oldest first
    evicted: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    pinned: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)


class PromptCacheOffEvent(EventBase):
    """The server rejected the prompt-cache breakpoints: the call went again without them and
    the rest of the session sends none (``reason``: the server's words)."""

    type: Literal["prompt_cache_off"] = "prompt_cache_off"
    provider: str
    reason: str
    base_url: str = ""
    # it refused them in an earlier session: none were sent, nothing was sent twice
    remembered: bool = False


class ServerCompactionEvent(EventBase):
    """Server-side compaction was switched for this session (or could not be: ``reason``)."""

    type: Literal["server_compaction"] = "server_compaction"
    on: bool  # the state now
    provider: str
    threshold: int | None = None  # the auto-compact line the server compacts at
    reason: str | None = None  # the switch was refused: why


class MemoryImportEvent(EventBase):
    """A memory import or rule file that was not read whole, said when the session
    starts and when the user answers: ``ask`` (outside the repository; the dashboard asks,
    answered with an ``ApproveImport`` command), ``skipped`` (the same without a surface that
    asks: headless mode), ``refused`` (a secret store, tidegauge's config, a FIFO or device:
    never read), ``declined`` (the user said no for this project), ``cut`` (only its head was
    read), ``approved`` (read from the next request on)."""

    type: Literal["memory_import"] = "memory_import"
    action: Literal["ask", "skipped", "refused", "declined", "cut", "approved"]
    path: str  # the real path (symlinks resolved): what would be read
    importer: str  # the memory file naming it, or the rules directory holding it
    reason: str = ""


# ---- MCP servers asking the client: forms (elicitation)

ElicitationAction = Literal["accept", "decline", "cancel"]


class ElicitationField(BaseModel):
    """One field of a server's form, from its JSON schema (already bounded and sanitized).

    ``value_from`` is the one rule of what a field accepts: the dashboard's form checks each
    field with it as the user types, and the session checks the answer again before it goes."""

    model_config = DEFERRED

    name: str
    # multi_enum: several of the options (the spec's array of enum, a multi-select)
    kind: Literal["string", "number", "integer", "boolean", "enum", "multi_enum"]
    title: str = ""
    description: str = ""
    required: bool = False
    options: list[str] = Field(default_factory=list)  # enum, multi_enum: the values sent
    option_labels: list[str] = Field(default_factory=list)  # enum, multi_enum: the words shown (same order)
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None  # multi_enum
    max_items: int | None = None
    format: Literal["email", "uri", "date", "date-time"] | None = None  # string: the spec's formats
    # int before float: a whole-number field keeps 30, not 30.0
    default: str | int | float | bool | list[str] | None = None

    def value_from(self, given: object) -> str | int | float | bool | list[str] | None:
        """The value to send for what the user gave (text, a bool, an option, a list of options),
        None for an empty optional field; ValueError with one line naming what was wrong."""
        label = self.title or self.name
        if (given is None or (isinstance(given, str) and not given.strip() and self.kind != "string") or given == ""
                or (self.kind == "multi_enum" and given == [] and not self.min_items)):
            if self.required:
                raise ValueError(f"{label}: required")
            return [] if self.kind == "multi_enum" and given == [] else None
        if self.kind == "multi_enum":
            if not isinstance(given, list) or not all(isinstance(g, str) and g in self.options for g in given):
                raise ValueError(f"{label}: must be some of the choices")
            chosen = [option for option in self.options if option in given]  # the form's order, once each
            if self.min_items is not None and len(chosen) < self.min_items:
                raise ValueError(f"{label}: choose at least {self.min_items}")
            if self.max_items is not None and len(chosen) > self.max_items:
                raise ValueError(f"{label}: choose at most {self.max_items}")
            return chosen
        if self.kind == "boolean":
            if isinstance(given, bool):
                return given
            raise ValueError(f"{label}: must be yes or no")
        if self.kind == "enum":
            if isinstance(given, str) and given in self.options:
                return given
            raise ValueError(f"{label}: must be one of the choices")
        if self.kind == "string":
            if not isinstance(given, str):
                raise ValueError(f"{label}: must be text")
            if self.min_length is not None and len(given) < self.min_length:
                raise ValueError(f"{label}: at least {self.min_length} characters")
            if self.max_length is not None and len(given) > self.max_length:
                raise ValueError(f"{label}: at most {self.max_length} characters")
            if self.format is not None and given and not _has_format(given, self.format):
                raise ValueError(f"{label}: must be {_FORMAT_WORDS[self.format]}")
            return given
        number: int | float
        if isinstance(given, bool) or not isinstance(given, (str, int, float)):
            raise ValueError(f"{label}: must be a number")
        text = str(given).strip()
        try:
            number = int(text) if self.kind == "integer" else float(text)
        except ValueError:
            raise ValueError(f"{label}: must be {'a whole number' if self.kind == 'integer' else 'a number'}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(f"{label}: must be a finite number")
        if self.minimum is not None and number < self.minimum:
            raise ValueError(f"{label}: at least {self.minimum:g}")
        if self.maximum is not None and number > self.maximum:
            raise ValueError(f"{label}: at most {self.maximum:g}")
        return number


_FORMAT_WORDS = {"email": "an email address", "uri": "a URI (scheme:…)", "date": "a date (YYYY-MM-DD)",
                 "date-time": "a date and time (YYYY-MM-DDTHH:MM:SS, with an offset or Z)"}


def _has_format(text: str, form: str) -> bool:
    """Whether ``text`` is of the spec's string ``format`` (checked as a person would type it)."""
    # Only a form's format check needs these: kept off events.py's import, which the first frame waits for.
    import datetime
    import re
    from urllib.parse import urlsplit

    if form == "email":
        return re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s.]+", text) is not None
    if form == "uri":
        parts = urlsplit(text)
        return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme or "-")) and bool(parts.netloc or parts.path)
    try:
        if form == "date":
            datetime.date.fromisoformat(text)
        else:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            return moment.tzinfo is not None and "T" in text.upper()
    except ValueError:
        return False
    return True


class ElicitationRequestEvent(EventBase):
    """An MCP server asks the user to fill in a form: submit ``AnswerElicitation(request_id, ...)``.
    What the user enters goes to that server alone (never to the model, the transcript or a log)."""

    type: Literal["elicitation_request"] = "elicitation_request"
    request_id: str
    server: str
    message: str
    fields: list[ElicitationField] = Field(default_factory=list)


class SamplingEvent(EventBase):
    """An MCP server's request for a model call (sampling): refused (headless without --yes, the
    user said no, a request over the bounds) or answered by the session's provider, with only the
    server's own messages (never tidegauge's system prompt or history); its usage is on the
    ledger as ``mcp:<server>``."""

    type: Literal["mcp_sampling"] = "mcp_sampling"
    server: str
    status: Literal["refused", "answered", "failed"]
    reason: str = ""
    max_tokens: int = 0  # what the call was allowed (the server's wish, bounded)
    output_tokens: int | None = None


class ElicitationResolvedEvent(EventBase):
    """What the server was told: accept (with the fields named, never their values), decline or
    cancel; ``reason`` when tidegauge answered for the user (headless, a form it cannot show)."""

    type: Literal["elicitation_resolved"] = "elicitation_resolved"
    request_id: str
    server: str
    action: ElicitationAction
    fields: list[str] = Field(default_factory=list)  # the fields sent (accept)
    reason: str = ""



# ---- MCP prompts and resources (rest)


class McpPromptInfo(BaseModel):
    """One prompt a server offers, as the slash command that runs it (names and words sanitized)."""

    model_config = DEFERRED

    command: str  # "/mcp__git__review"
    description: str = ""
    arguments: list[str] = Field(default_factory=list)
    required: list[str] = Field(default_factory=list)


class McpPromptsEvent(EventBase):
    """The prompts a server offers (``prompts/list``, when it is ready): the prompt box completes them."""

    type: Literal["mcp_prompts"] = "mcp_prompts"
    server: str
    prompts: list[McpPromptInfo] = Field(default_factory=list)


class McpAttachmentEvent(EventBase):
    """Text from an MCP server put in the user's turn: a prompt run as a slash command
    (``prompts/get``) or a resource attached with ``@SERVER:URI`` (``resources/read``). It is the
    server's text, never the user's words (``TextBlock.from_mcp``); bounded like a tool result."""

    type: Literal["mcp_attachment"] = "mcp_attachment"
    server: str
    kind: Literal["prompt", "resource"]
    name: str  # the prompt's name, or the resource's URI (sanitized)
    chars: int = 0  # what the model gets
    original_chars: int = 0  # what the server sent
    full_output_path: str | None = None  # the whole text, when it was cut
    messages: int = 0  # a prompt's messages


class ToolResultPlanFields(BaseModel):
    """What an evict and a pin of one tool result both carry: the call, the context's size before
    and after, the plan it ran beside what happened; or (``reason``) why nothing changed. The
    fields of both events, defined once; not an event of its own (not an ``EventBase``, not in
    ``Event``)."""

    model_config = DEFERRED

    # Declared first so that each event's own ``type`` Literal, which overrides it, keeps its
    # place at the head of the line, as every other event's does.
    type: str
    id: str  # the tool call id
    name: str = ""  # the tool's name
    tokens_before: int = 0
    tokens_after: int = 0
    plan_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    forecast_tokens_after: int | None = Field(default=None, exclude_if=lambda value: value is None)
    cache_tokens_invalidated: int | None = Field(default=None, exclude_if=lambda value: value is None)
    replanned: bool = Field(default=False, exclude_if=lambda value: not value)
    reason: str | None = Field(default=None, exclude_if=lambda value: value is None)  # set: nothing changed (one line)


class EvictEvent(ToolResultPlanFields, EventBase):
    """The user took one tool result out of the context (the tool list's d): a stub naming the
    saved file stands in its place until it is restored. With the plan it ran beside what happened;
    or (``reason``) why nothing changed."""

    type: Literal["evict"] = "evict"
    path: str | None = None  # where its full output is (what restore reads back)


class PinEvent(ToolResultPlanFields, EventBase):
    """The user pinned one tool result (the tool list's p), or unpinned it: clearing and compaction
    keep a pinned result verbatim. With the plan it ran beside what happened; or (``reason``) why
    nothing changed."""

    type: Literal["pin"] = "pin"
    pinned: bool = True  # False: unpinned
    call: str = ""  # the call in words ("read_file(path='a.py')")
    tokens: int = 0  # the result's own tokens: what clearing and compaction now keep (or may free)


# ---- rewind: back to just before an earlier user message (commands PreviewRewind, Rewind) ----

class RewindPoint(BaseModel):
    """One user message the conversation can go back to, with the plan that does it."""

    model_config = DEFERRED

    turn: int  # 1-based, among the user's messages the context knows
    message_id: str
    text: str  # what the user typed: put back in the prompt
    plan_id: str  # ``Rewind(plan_id)`` runs exactly this plan
    messages_after: int
    tokens_after: int  # the context just before this message (estimated, as the gauge)
    abandoned_turns: int  # this message and every one after it
    cache_tokens_invalidated: int = 0
    next_request_cost_after_usd: float | None = None
    # Files write_file/edit_file changed since (relative to the workspace): restorable, of which
    # ``files_changed_since`` were changed by something else after tidegauge wrote them (not
    # overwritten unless asked), and those over the size bound, named as not restorable.
    files: list[str] = Field(default_factory=list)
    files_changed_since: list[str] = Field(default_factory=list)
    files_not_restorable: list[str] = Field(default_factory=list)


class RewindPointsEvent(EventBase):
    """The user messages a rewind can go back to, newest first (the answer to ``PreviewRewind``)."""

    type: Literal["rewind_points"] = "rewind_points"
    tokens_before: int
    points: list[RewindPoint] = Field(default_factory=list)
    next_request_cost_before_usd: float | None = None
    reason: str | None = None  # why there is nothing to go back to


class RewindEvent(EventBase):
    """The conversation went back to just before turn ``turn`` (its words are ``text``); the turns
    from it on are abandoned: out of the context, still in the transcript (a resume marks them)."""

    type: Literal["rewind"] = "rewind"
    ok: bool
    turn: int = 0
    message_id: str = ""
    text: str = ""
    abandoned_turns: int = 0
    abandoned_ids: list[str] = Field(default_factory=list)
    messages_before: int = 0
    messages_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    forecast_tokens_after: int | None = None  # the plan's figure, beside the actual one
    cache_tokens_invalidated: int = 0
    replanned: bool = False  # the conversation changed after the list was shown: planned again
    files_restored: list[str] = Field(default_factory=list)
    files_skipped: list[str] = Field(default_factory=list)  # changed since by something else: left as they are
    files_not_restorable: list[str] = Field(default_factory=list)
    reason: str | None = None  # why it was not done (ok False), or what went wrong with a file
    by: Literal["dashboard", "cli"] = "dashboard"


# ---- the /mcp view and re-authorization


class McpServerRow(BaseModel):
    """One configured MCP server as ``tidegauge mcp list`` and the /mcp view show it (``app.mcp.status``)."""

    model_config = DEFERRED

    name: str
    state: Literal["starting", "ready", "failed", "stopped", "disabled"]
    transport: str  # "stdio" or "http"
    target: str = ""  # the command, or the URL without its secrets
    reason: str = ""  # why it failed or stopped
    tools: int = 0
    prompts: int = 0
    resources: bool = False
    schema_tokens: int = 0
    instructions_tokens: int = 0
    deferred: bool = False
    auth: str = "none"
    scopes: str = ""  # what its OAuth tokens were granted ("" when none is said)
    not_offered: list[str] = Field(default_factory=list)
    busy: str = ""  # "reconnecting", "logging in", "logging out" while the view's action runs


class McpStatusEvent(EventBase):
    """Every configured MCP server as it stands (the /mcp view's rows), sent when asked
    (``ManageMcpServer("status")``) and after each reconnect, login or logout. ``note``: what the
    action just did or why it could not (one line)."""

    type: Literal["mcp_status"] = "mcp_status"
    servers: list[McpServerRow] = Field(default_factory=list)
    note: str = ""


class McpAuthEvent(EventBase):
    """A url server's OAuth in a running session. ``offer``: a tool call met a 403
    insufficient_scope; the user is asked whether to log in again for ``scopes`` (the union of
    those granted and those asked), answered by ``Approve(request_id, "yes" | "no")``, the call
    waiting. ``consent``: a login waits for the browser at ``url`` (opened when there is a display).
    ``logged_in``, ``failed`` (``reason``), ``logged_out``: how it ended."""

    type: Literal["mcp_auth"] = "mcp_auth"
    server: str
    status: Literal["offer", "consent", "logged_in", "failed", "logged_out"]
    request_id: str = ""
    scopes: str = ""
    url: str = ""
    reason: str = ""


Event = Annotated[
    Union[
        TextDeltaEvent, ThinkingDeltaEvent, AssistantMessageEvent, UserMessageEvent,
        ToolStartEvent, ToolResultEvent, ToolCallsCappedEvent, ToolProgressEvent, ToolUserContentEvent, UsageEvent, ContextEvent, CompactionEvent,
        MicroCompactionEvent, ResetEvent, WarningCrossedEvent, ResultCutEvent, BreakerEvent, RetryEvent,
        StateEvent, NoticeEvent, ErrorEvent, ResultEvent,
        SessionInfoEvent, ChartPointEvent, CommandQueuedEvent, ApprovalRequestEvent, ApprovalResolvedEvent,
        InterruptedEvent, OutputLimitEvent, PartialDiscardedEvent, CompactionPausedEvent, ReportEvent,
        McpServerEvent, SubAgentEvent, ConfigWarningEvent,
        SessionMemoryEvent, RestoreEvent, RuleAttachedEvent,
        SessionRepairedEvent, UsageDistrustedEvent,
        ForecastEvent, RestorePreviewEvent, ClearedResultsEvent, ServerCompactionEvent,
        MemoryImportEvent, PromptCacheOffEvent, PermissionsEvent,
        ElicitationRequestEvent, ElicitationResolvedEvent, SamplingEvent,
        McpPromptsEvent, McpAttachmentEvent, RequestRecordedEvent, WhatIfEvent,
        EvictEvent, PinEvent, RewindPointsEvent, RewindEvent, McpStatusEvent, McpAuthEvent,
    ],
    Field(discriminator="type"),
]


@cache
def event_adapter() -> TypeAdapter[Event]:
    """The one validator of the ``Event`` union (the transcript reader and the session
    process's pipe), built on first use rather than whenever this module is imported."""
    return TypeAdapter(Event)

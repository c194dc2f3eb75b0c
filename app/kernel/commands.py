"""Commands: what a surface may ask of a session (``SessionSurface.submit``).

Frozen dataclasses, no pydantic: the dashboard builds them before the core loads.
Prompts, compactions and resets run one at a time, in order; an interrupt, an
approval answer and a report act at once, whatever is running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

# A prompt typed as `/mcp__SERVER__PROMPT args` runs an MCP server's prompt (app/mcp/prompts.py);
# every surface and the session tell it from other slash commands by this prefix alone.
MCP_PROMPT_PREFIX = "/mcp__"

# "always" (kept for older surfaces) is "always_tool"; the other "always" answers add the
# rules the request offered (``ApprovalRequestEvent.choices``), never a rule a surface wrote.
Decision = Literal["yes", "always", "always_exact", "always_prefix", "always_tool", "no"]
DECISIONS: tuple[str, ...] = ("yes", "always", "always_exact", "always_prefix", "always_tool", "no")


@dataclass(frozen=True)
class UserInput:
    """A prompt from the user: one turn of the agent loop."""

    text: str


@dataclass(frozen=True)
class Compact:
    """Compact the conversation now (ctrl+s, /compact [focus]); always runs, breaker or not.
    ``plan_id``: the plan a ``ForecastEvent`` showed; it runs as shown (made anew, and said so,
    when the conversation changed since)."""

    focus: str | None = None
    plan_id: str | None = None


@dataclass(frozen=True)
class Reset:
    """Forget the conversation (the transcript stays). Replaces whatever is queued and ends the running turn.
    ``plan_id``: the plan a ``ForecastEvent`` showed; it runs as shown (made anew, and said so, when
    the conversation changed since)."""

    plan_id: str | None = None


@dataclass(frozen=True)
class Interrupt:
    """End the running turn; the history is repaired so the next request is valid. Clears the queue."""


@dataclass(frozen=True)
class Approve:
    """The answer to an ``ApprovalRequestEvent``."""

    request_id: str
    decision: Decision
    save: bool = False  # an "always" rule also saved for the project (used in later sessions)


@dataclass(frozen=True)
class Report:
    """Ask for the figures of ``/usage`` or ``/context`` (answered by a ``ReportEvent``), or
    the rules of ``/permissions`` (answered by a ``PermissionsEvent``)."""

    kind: Literal["usage", "context", "permissions"]


@dataclass(frozen=True)
class Shutdown:
    """Stop the session after what is queued (``now``: interrupt and stop at once)."""

    now: bool = False


# ---- the dashboard's questions: answered at once with a typed event ----


@dataclass(frozen=True)
class Preview:
    """What a compaction, a reset or an eviction would do, before it runs (answered by a
    ``ForecastEvent``): tokens freed, prompt-cache tokens invalidated, next request's cost before and after."""

    kind: Literal["compact", "reset", "evict"]
    focus: str | None = None  # /compact's focus, echoed in the answer
    call_id: str | None = None  # an eviction: the tool call whose result it takes out


@dataclass(frozen=True)
class PreviewRestore:
    """What bringing back a cleared tool result would cost (``RestorePreviewEvent``)."""

    call_id: str


@dataclass(frozen=True)
class RestoreResult:
    """Bring a cleared tool result back into the context for the next request (``RestoreEvent``,
    or ``RestorePreviewEvent`` with the one-line reason it cannot be done). ``plan_id``: the plan the
    ``RestorePreviewEvent`` showed, run as shown (made anew, and said so, when the context changed since)."""

    call_id: str
    plan_id: str | None = None


@dataclass(frozen=True)
class ServerCompaction:
    """Turn the provider's server-side compaction on or off for this session (``ServerCompactionEvent``)."""

    on: bool


@dataclass(frozen=True)
class ApproveImport:
    """The user's answer to a ``MemoryImportEvent`` asking about a file outside the repository:
    remembered for this project; an approved file is in the next request."""

    path: str
    approve: bool


@dataclass(frozen=True)
class AnswerElicitation:
    """The user's answer to an ``ElicitationRequestEvent`` (an MCP server's form): ``values`` (field
    name -> text, bool or option) are checked against the form again and go to that server only."""

    request_id: str
    action: Literal["accept", "decline", "cancel"]
    values: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class WhatIf:
    """Replay this session's transcript offline under another window and auto-compact line (a
    fraction of the window): the curve it would have drawn (``WhatIfEvent``). No model call."""

    window: int
    auto_compact: float


@dataclass(frozen=True)
class EvictResult:
    """Take one tool result out of the context (the tool list's d): a stub naming its saved file stands
    in for it, and restore (``RestoreResult``) brings it back (``EvictEvent``). ``plan_id``: the plan
    ``Preview("evict", call_id=...)`` showed, run as shown (made anew, and said so, when the context
    changed since). Between turns only."""

    call_id: str
    plan_id: str | None = None


@dataclass(frozen=True)
class PinResult:
    """Pin one tool result (the tool list's p), or unpin it (``pin=False``): clearing and compaction
    keep a pinned result verbatim and the summarizer is told so (``PinEvent``). Between turns only."""

    call_id: str
    pin: bool = True


@dataclass(frozen=True)
class PreviewRewind:
    """The user messages the conversation can go back to, each with its plan (``RewindPointsEvent``)."""


@dataclass(frozen=True)
class Rewind:
    """Run the rewind plan a ``RewindPointsEvent`` showed (``RewindEvent``): the conversation and the
    context go back to just before that user message. ``files``: also put back the files
    write_file/edit_file changed since; ``overwrite_changed``: even those changed since by something else."""

    plan_id: str
    files: bool = False
    overwrite_changed: bool = False


McpAction = Literal["status", "reconnect", "login", "logout"]


@dataclass(frozen=True)
class ManageMcpServer:
    """The /mcp view's asks: ``status`` (every configured server as it stands, answered by an
    ``McpStatusEvent``), or ``reconnect``, ``login`` (the OAuth consent of ``tidegauge mcp login``, a
    browser opened) or ``logout`` (its tokens deleted) for ``server``. They run beside the turn, never
    queued behind it; each ends in a new ``McpStatusEvent``."""

    action: McpAction
    server: str = ""


Command = Union[UserInput, Compact, Reset, Interrupt, Approve, Report, Shutdown,
                Preview, PreviewRestore, RestoreResult, ServerCompaction, ApproveImport, AnswerElicitation, WhatIf,
                EvictResult, PinResult, PreviewRewind, Rewind, ManageMcpServer]

"""What an MCP server may ask of tidegauge: its roots, and forms for the user.

A server is someone else's code, so each question is a way in:

- **roots** (``roots/list``): by default the session's workspace as one ``file://`` root, nothing
  else; a server's ``roots`` setting gives it the folders the user names there, or none at all
  (the capability is then not declared). A server never learns another folder from us.
- **elicitation** (``elicitation/create``, form mode): the server's message and fields reach
  the user as an ``ElicitationRequestEvent``; the answer comes back through ``submit`` as an
  ``AnswerElicitation`` and goes to that server only (never to the model, the transcript or a
  log). Everything shown is sanitized and bounded here (a form of 30 MB, a thousand fields or
  an escape sequence in a title never reaches the screen), and the form says which server gets
  the answer, since a server may well ask for an API key. Without a surface that shows forms
  (headless mode), the server is told "decline" at once and the run carries on. URL-mode
  elicitation (open this page) is declined: tidegauge opens no links for a server.
- **sampling** (``sampling/createMessage``): a model call on the user's provider and bill. It is
  asked like a tool call that changes things (the same rule as the permission system's: a
  surface that answers approvals asks, ``--yes`` allows, headless without it refuses), bounded
  (``MAX_SAMPLING_TOKENS`` out, ``MAX_SAMPLING_CHARS`` in, text only, no tools) and made with
  the server's own messages and system prompt alone: never tidegauge's system prompt, history
  or memory (``includeContext`` is ignored), so a server cannot read the conversation through
  it. Its usage goes on the ledger as ``mcp:<server>``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Sequence

from app.kernel.events import (
    McpAuthEvent,
    ApprovalRequestEvent,
    ApprovalResolvedEvent,
    ElicitationAction,
    ElicitationField,
    ElicitationRequestEvent,
    ElicitationResolvedEvent,
    Event,
    SamplingEvent,
)
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display

# Bounds of a model call a server asks for.
MAX_SAMPLING_TOKENS = 4_096  # out, whatever maxTokens the server asks
MAX_SAMPLING_CHARS = 100_000  # in: the server's messages and system prompt together
MAX_SAMPLING_MESSAGES = 50
SHOWN_SAMPLING_CHARS = 2_000  # of each message, in the approval dialog

# Bounds of a form (what a server can put on the user's screen).
MAX_SCHEMA_BYTES = 64 * 1024  # the requested schema, as JSON
MAX_FIELDS = 30
MAX_OPTIONS = 100  # of one enum
MAX_MESSAGE_CHARS = 2_000
MAX_TITLE_CHARS = 120
MAX_DESCRIPTION_CHARS = 500
MAX_OPTION_CHARS = 200
MAX_NAME_CHARS = 64


class SamplingRefused(Exception):
    """A model call a server asked for is not made; the message says why, in one line."""


@dataclass(frozen=True)
class SamplingCall:
    """A server's model call as tidegauge makes it: its own words only, bounded."""

    system: str
    messages: list[tuple[Literal["user", "assistant"], str]]
    max_tokens: int


@dataclass(frozen=True)
class SampledReply:
    text: str
    model: str
    stop_reason: str  # the provider's: end_turn, max_tokens, ...
    output_tokens: int | None = None


def sampling_call(system: str | None, messages: Sequence[tuple[str, str, object]], max_tokens: int,
                  tools: object = None) -> SamplingCall:
    """The call for a server's request: ``messages`` as (role, content type, text); SamplingRefused
    when it asks for more than a server may (tools, images, too much text)."""
    if tools:
        raise SamplingRefused("it asked for tools, which a server's model call is not given")
    if len(messages) > MAX_SAMPLING_MESSAGES:
        raise SamplingRefused(f"it sent {len(messages)} messages, over the {MAX_SAMPLING_MESSAGES} allowed")
    turns: list[tuple[Literal["user", "assistant"], str]] = []
    for role, kind, text in messages:
        if kind != "text" or not isinstance(text, str) or role not in ("user", "assistant"):
            raise SamplingRefused(f"it sent {shown(kind, 20)} content; only text is passed on")
        turns.append(("user" if role == "user" else "assistant", text))
    size = len(system or "") + sum(len(text) for _, text in turns)
    if size > MAX_SAMPLING_CHARS:
        raise SamplingRefused(f"it sent {size:,} characters, over the {MAX_SAMPLING_CHARS:,} allowed")
    if not turns or turns[-1][0] != "user":
        raise SamplingRefused("its last message is not the user's")
    return SamplingCall(system=system or "", messages=turns, max_tokens=max(1, min(max_tokens, MAX_SAMPLING_TOKENS)))


class UnfitForm(ValueError):
    """A form tidegauge will not show; the message says why, in one line."""


def workspace_roots(workspace: Path) -> list[tuple[str, str]]:
    """(uri, name) of the roots given to a server by default: the workspace, resolved, alone."""
    return folder_roots([workspace])


def folder_roots(folders: list[Path]) -> list[tuple[str, str]]:
    """(uri, name) of each folder, resolved."""
    return [(path.as_uri(), path.name or str(path)) for path in (folder.resolve() for folder in folders)]


def configured_roots(setting: bool | list[str], workspace: Path) -> list[Path] | None:
    """The folders a server's ``roots`` setting gives it (None: no roots are advertised). Raises
    ValueError with one line naming a folder that is not there."""
    if setting is False:
        return None
    if setting is True:
        return [workspace.resolve()]
    folders = []
    for entry in setting:
        folder = (workspace / Path(entry).expanduser()).resolve()
        if not folder.is_dir():
            raise ValueError(f"roots: {entry!r} is not a folder ({folder})")
        folders.append(folder)
    return folders


def shown(text: object, limit: int) -> str:
    """Server text made safe to draw on one screen: secrets redacted, controls defused, bounded."""
    clean = sanitize_for_display(redact(str(text)))
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def form_fields(schema: object) -> list[ElicitationField]:
    """The fields of a requested schema (a flat object of primitives, as the spec allows);
    UnfitForm naming what is wrong with it."""
    size = len(json.dumps(schema, default=str).encode())
    if size > MAX_SCHEMA_BYTES:
        raise UnfitForm(f"its schema is {size:,} bytes, over the {MAX_SCHEMA_BYTES // 1024} KiB a form may have")
    if not isinstance(schema, dict) or not isinstance(schema.get("properties", {}), dict):
        raise UnfitForm("its schema is not an object with properties")
    properties: dict[str, Any] = schema.get("properties") or {}
    if len(properties) > MAX_FIELDS:
        raise UnfitForm(f"it has {len(properties)} fields, over the {MAX_FIELDS} a form may have")
    required = schema.get("required") or []
    required = set(required) if isinstance(required, list) else set()
    return [_field(name, spec, name in required) for name, spec in properties.items()]


def _field(name: str, spec: object, required: bool) -> ElicitationField:
    shown_name = shown(name, MAX_NAME_CHARS)
    if shown_name != name or not name:
        raise UnfitForm(f"a field's name ({shown_name!r}) is empty, too long or has control characters")
    if not isinstance(spec, dict):
        raise UnfitForm(f"field {name} has no schema")
    kind = spec.get("type")
    options = spec.get("enum")
    labels = spec.get("enumNames")
    if options is None and isinstance(spec.get("oneOf"), list):  # titled options: [{const, title}]
        options = [choice.get("const") for choice in spec["oneOf"] if isinstance(choice, dict)]
        labels = [choice.get("title") or choice.get("const") for choice in spec["oneOf"] if isinstance(choice, dict)]
    common: dict[str, Any] = {"name": name, "required": required,
                              "title": shown(spec.get("title") or "", MAX_TITLE_CHARS),
                              "description": shown(spec.get("description") or "", MAX_DESCRIPTION_CHARS)}
    if kind == "array":
        return _multi_select(name, spec, common)
    if options is not None:
        if kind not in (None, "string"):
            raise UnfitForm(f"field {name} offers choices that are not text")
        values, shown_labels = _choices(name, options, labels)
        default = spec.get("default") if spec.get("default") in values else None
        return ElicitationField(kind="enum", options=values, option_labels=shown_labels, default=default, **common)
    if kind == "boolean":
        default = spec.get("default")
        return ElicitationField(kind="boolean", default=default if isinstance(default, bool) else None, **common)
    if kind in ("number", "integer"):
        bounds: dict[str, Any] = {key: spec.get(key) for key in ("minimum", "maximum")
                  if isinstance(spec.get(key), (int, float)) and not isinstance(spec.get(key), bool)}
        default = spec.get("default")
        usable = isinstance(default, (int, float)) and not isinstance(default, bool)
        return ElicitationField(kind=kind, default=default if usable else None, **bounds, **common)
    if kind == "string":
        lengths: dict[str, Any] = {key: spec.get(attr) for key, attr in (("min_length", "minLength"), ("max_length", "maxLength"))
                   if isinstance(spec.get(attr), int) and not isinstance(spec.get(attr), bool)}
        default = spec.get("default")
        form = spec.get("format") if spec.get("format") in ("email", "uri", "date", "date-time") else None
        return ElicitationField(kind="string", default=shown(default, 2_000) if isinstance(default, str) else None,
                                format=form, **lengths, **common)
    raise UnfitForm(f"field {name} has type {shown(kind, 40)!r}, which a form cannot ask")


def _choices(name: str, options: object, labels: object) -> tuple[list[str], list[str]]:
    """(values, shown labels) of a field's choices, checked; UnfitForm naming what is wrong."""
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise UnfitForm(f"field {name} offers choices that are not text")
    if not options or len(options) > MAX_OPTIONS:
        raise UnfitForm(f"field {name} offers {len(options)} choices (a form shows 1 to {MAX_OPTIONS})")
    if not isinstance(labels, list) or len(labels) != len(options):
        labels = options
    return list(options), [shown(label, MAX_OPTION_CHARS) for label in labels]


def _multi_select(name: str, spec: dict[str, Any], common: dict[str, Any]) -> ElicitationField:
    """The spec's multi-select: ``{"type": "array", "items": {"enum": [...]}}``, or titled with
    ``"items": {"anyOf": [{"const", "title"}]}``; ``minItems``, ``maxItems`` and a default list."""
    items = spec.get("items")
    if not isinstance(items, dict):
        raise UnfitForm(f"field {name} is a list without the choices of its items")
    options: object = items.get("enum")
    labels: object = items.get("enumNames")
    titled = items.get("anyOf") if isinstance(items.get("anyOf"), list) else items.get("oneOf")
    if options is None and isinstance(titled, list):
        options = [choice.get("const") for choice in titled if isinstance(choice, dict)]
        labels = [choice.get("title") or choice.get("const") for choice in titled if isinstance(choice, dict)]
    if options is None:
        raise UnfitForm(f"field {name} is a list of {shown(items.get('type'), 40)!r}, which a form cannot ask "
                        "(only a list of choices)")
    values, shown_labels = _choices(name, options, labels)
    counts: dict[str, Any] = {key: spec.get(attr) for key, attr in (("min_items", "minItems"), ("max_items", "maxItems"))
                              if isinstance(spec.get(attr), int) and not isinstance(spec.get(attr), bool)}
    default = spec.get("default")
    chosen = [value for value in values if isinstance(default, list) and value in default] if default else None
    return ElicitationField(kind="multi_enum", options=values, option_labels=shown_labels, default=chosen,
                            **counts, **common)


def answer_content(fields: list[ElicitationField], values: dict[str, object]) -> dict[str, Any]:
    """The content sent for ``values``: each field checked by its own rule (ValueError, one
    line per bad field, joined), names the form does not have dropped, empty optional ones left out."""
    content: dict[str, Any] = {}
    errors: list[str] = []
    for form_field in fields:
        try:
            value = form_field.value_from(values.get(form_field.name))
        except ValueError as error:
            errors.append(str(error))
            continue
        if value is not None:
            content[form_field.name] = value
    if errors:
        raise ValueError("; ".join(errors))
    return content


@dataclass
class _PendingForm:
    server: str
    fields: list[ElicitationField]
    answer: asyncio.Future[tuple[ElicitationAction, dict[str, Any]]]


@dataclass
class ClientRequests:
    """The session's side of what servers ask: emits the questions, holds them until answered.

    ``shows_forms``: a surface answers forms (the dashboard); without one, every form is
    declined at once with a line saying so."""

    emit: Callable[[Event], None]
    shows_forms: bool
    # Model calls (sampling): whether a surface answers approvals, whether --yes allows them, and
    # the session's call to its provider (None: sampling is not offered to servers).
    approves: bool = False
    auto_yes: bool = False
    call_model: Callable[[str, SamplingCall], Awaitable[SampledReply]] | None = None
    _pending: dict[str, _PendingForm] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # request id -> (the user's answer, the server); servers allowed for the session ("always")
    _approvals: dict[str, tuple[asyncio.Future[bool], str]] = field(default_factory=dict)
    _always: set[str] = field(default_factory=set)
    _reauthorizations: set[str] = field(default_factory=set)  # request ids of re-authorize offers

    async def sample(self, server: str, system: str | None, messages: Sequence[tuple[str, str, object]],
                     max_tokens: int, tools: object = None) -> SampledReply:
        """A server's model call (its request's parts, see ``sampling_call``), once allowed;
        SamplingRefused saying why not."""
        assert self.call_model is not None
        try:
            call = sampling_call(system, messages, max_tokens, tools)
            await self._allow_sampling(server, call)
        except SamplingRefused as refused:
            self.emit(SamplingEvent(server=server, status="refused", reason=str(refused),
                                    max_tokens=min(max(max_tokens, 0), MAX_SAMPLING_TOKENS)))
            raise
        try:
            reply = await self.call_model(server, call)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - the server hears why, the session carries on
            reason = shown(str(error) or type(error).__name__, 300).replace("\n", " ")
            self.emit(SamplingEvent(server=server, status="failed", reason=reason, max_tokens=call.max_tokens))
            raise SamplingRefused(f"the model call failed: {reason}") from None
        self.emit(SamplingEvent(server=server, status="answered", max_tokens=call.max_tokens,
                                output_tokens=reply.output_tokens))
        return reply

    async def _allow_sampling(self, server: str, call: SamplingCall) -> None:
        if server in self._always:
            return
        if not self.approves:
            if self.auto_yes:
                return
            raise SamplingRefused("no one to approve it (run with --yes to allow model calls for MCP servers)")
        request_id = f"sampling-{next(self._ids)}"
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._approvals[request_id] = (answer, server)
        shown_messages = [f"{role}: {shown(text, SHOWN_SAMPLING_CHARS)}" for role, text in call.messages]
        self.emit(ApprovalRequestEvent(
            request_id=request_id, tool_id="", name=f"a model call for MCP server {server}",
            input={"system_prompt": shown(call.system, SHOWN_SAMPLING_CHARS), "messages": shown_messages,
                   "max_tokens": call.max_tokens},
            summary=f"MCP server {server} asks for a model call of at most {call.max_tokens:,} tokens on your provider"))
        try:
            allowed = await answer
        except asyncio.CancelledError:  # the server's request ended: the dialog goes
            if self._approvals.pop(request_id, None) is not None:
                self.emit(ApprovalResolvedEvent(request_id=request_id, decision="interrupted"))
            raise
        if not allowed:
            raise SamplingRefused("you said no")

    async def reauthorize(self, server: str, scopes: str) -> bool:
        """A tool call of ``server`` refused for want of scope: ask the user whether to log in again,
        asking for ``scopes`` (answered by ``Approve``). False at once where no surface asks questions
        (headless: the refusal's line says how to log in)."""
        if not self.shows_forms:
            return False
        request_id = f"reauthorize-{next(self._ids)}"
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._approvals[request_id] = (answer, server)
        self._reauthorizations.add(request_id)
        self.emit(McpAuthEvent(server=server, status="offer", request_id=request_id, scopes=scopes))
        try:
            return await answer
        except asyncio.CancelledError:  # the call ended (an interrupt): the dialog goes
            if self._approvals.pop(request_id, None) is not None:
                self.emit(ApprovalResolvedEvent(request_id=request_id, decision="interrupted"))
            raise
        finally:
            self._reauthorizations.discard(request_id)

    def asks(self, request_id: str) -> bool:
        """Whether ``request_id`` is a model call waiting for the user's answer."""
        return request_id in self._approvals

    def approve(self, request_id: str, decision: str) -> None:
        """The user's answer to a model call: yes, an "always" (this server, for the session), or no."""
        waiting = self._approvals.pop(request_id, None)
        if waiting is None or waiting[0].done():
            return
        answer, server = waiting
        allowed = decision != "no"
        if decision.startswith("always") and request_id not in self._reauthorizations:  # a login is asked each time
            self._always.add(server)
        self.emit(ApprovalResolvedEvent(request_id=request_id, decision="yes" if allowed else "no"))
        answer.set_result(allowed)

    async def elicit(self, server: str, message: str, schema: object, *,
                     url: str | None = None) -> tuple[ElicitationAction, dict[str, Any]]:
        """The user's answer to a server's form: (action, content); content only with accept."""
        request_id = f"elicitation-{next(self._ids)}"
        if url is not None:
            return self._refused(request_id, server, "tidegauge opens no links for a server")
        if not self.shows_forms:
            return self._refused(request_id, server, "headless mode shows no forms")
        try:
            fields = form_fields(schema)
        except UnfitForm as unfit:
            return self._refused(request_id, server, f"tidegauge cannot show it: {unfit}")
        answer: asyncio.Future[tuple[ElicitationAction, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _PendingForm(server, fields, answer)
        self.emit(ElicitationRequestEvent(request_id=request_id, server=server,
                                          message=shown(message, MAX_MESSAGE_CHARS), fields=fields))
        try:
            return await answer
        except asyncio.CancelledError:  # the server's request ended (its call cancelled, the server gone)
            if self._pending.pop(request_id, None) is not None:
                self.emit(ElicitationResolvedEvent(request_id=request_id, server=server, action="cancel",
                                                   reason="the server's request ended"))
            raise

    def answer(self, request_id: str, action: ElicitationAction, values: dict[str, object]) -> None:
        """The surface's answer; an answer that does not fit the form is declined, saying why."""
        pending = self._pending.pop(request_id, None)
        if pending is None or pending.answer.done():
            return  # answered already, or never asked: a command cannot invent a form
        content: dict[str, Any] = {}
        reason = ""
        if action == "accept":
            try:
                content = answer_content(pending.fields, values)
            except ValueError as error:
                action, reason = "decline", f"the answer did not fit the form ({error})"
        self.emit(ElicitationResolvedEvent(request_id=request_id, server=pending.server, action=action,
                                           fields=sorted(content), reason=reason))
        pending.answer.set_result((action, content))

    def cancel_all(self, reason: str) -> None:
        """Every open form is cancelled and every model call waiting for an answer refused (an
        interrupt, the session stops): the server hears "cancel", or the refusal."""
        for request_id, (answer, _server) in list(self._approvals.items()):
            self._approvals.pop(request_id, None)
            if not answer.done():
                self.emit(ApprovalResolvedEvent(request_id=request_id, decision="interrupted"))
                answer.set_result(False)
        for request_id, pending in list(self._pending.items()):
            self._pending.pop(request_id, None)
            if not pending.answer.done():
                self.emit(ElicitationResolvedEvent(request_id=request_id, server=pending.server, action="cancel",
                                                   reason=reason))
                pending.answer.set_result(("cancel", {}))

    def _refused(self, request_id: str, server: str, reason: str) -> tuple[ElicitationAction, dict[str, Any]]:
        self.emit(ElicitationResolvedEvent(request_id=request_id, server=server, action="decline", reason=reason))
        return "decline", {}

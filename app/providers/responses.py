"""OpenAI Responses API over httpx, streaming (``--provider responses``).

Same three parts as the other protocols: ``to_responses_input`` turns our
history into input items, ``ResponsesStreamAssembler`` (pure, no I/O) turns
the semantic SSE events into stream events and the final message, and
``ResponsesProvider`` is the thin HTTP layer.

What this protocol adds: items the client cannot read but must send back.
Reasoning items carry ``encrypted_content`` (we ask for it with
``include: ["reasoning.encrypted_content"]`` and ``store: false``, so nothing
is kept on OpenAI's side), and with server-side compaction the stream
returns an encrypted ``compaction`` item that stands for everything before
it. Both are kept verbatim as ``OpaqueBlock(provider="responses")``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Unpack

from app.kernel.messages import Message, OpaqueBlock, TextBlock, ToolResultBlock, ToolUseBlock
from app.providers.base import (
    Completed,
    ContextEditing,
    ModelRequest,
    ProviderError,
    ServerContext,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.providers.http_base import HttpSettings, SseHttpProvider
from app.providers.json_fields import ArgumentBuffer, int_field, list_field, object_field
from app.providers.openai import parse_tool_arguments, tool_result_text, tool_use_block, wire_arguments
from app.providers.sse import SSEEvent, assemble_stream, error_from_payload, event_object, stream_cut_error
from app.kernel.usage import Usage

PROTOCOL = "responses"
# Items we keep opaque and send back unchanged (only to this protocol).
OPAQUE_ITEM_TYPES = frozenset({"reasoning", "compaction"})
_TERMINAL = frozenset({"response.completed", "response.incomplete"})
# Codes and types of an in-stream failure that a new attempt can cure (load, limits, a server
# fault). Anything else the service named (quota, key, a bad request) fails at once; a failure
# that names nothing is taken as the server's fault.
_TRANSIENT_ERRORS = frozenset({"server_error", "rate_limit_exceeded", "rate_limit_error", "too_many_requests",
                               "overloaded_error", "api_error", "service_unavailable", "vector_store_timeout",
                               "timeout", "internal_error"})
# A message item's phase as the API names them ("commentary", "final_answer"): a word, kept and sent
# back; anything else a server put there (a blob, control characters) is not carried in the history.
_PHASE = re.compile(r"[a-z][a-z_]{0,31}")
# Between two reasoning summary parts (they stream with no separator of their own).
SUMMARY_PART_BREAK = "\n\n"


# ---- history -> wire ----

def to_responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    """Input items in history order.

    User text -> an input message; a tool result -> ``function_call_output``;
    assistant blocks in their own order -> reasoning/compaction items (verbatim),
    an assistant message, ``function_call`` items. Thinking blocks from another
    provider cannot be sent (Responses has no plain-text reasoning input).
    Items before the latest compaction item are left out: the server says the
    compaction item carries them.
    """
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "user":
            texts: list[str] = []
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    output: str | list[dict[str, Any]] = tool_result_text(block)
                    if block.images:  # function_call_output takes input_text and input_image parts
                        output = [{"type": "input_text", "text": output}, *(
                            {"type": "input_image", "image_url": f"data:{image.media_type};base64,{image.data}"}
                            for image in block.images)]
                    items.append({"type": "function_call_output", "call_id": block.tool_use_id, "output": output})
                elif isinstance(block, TextBlock) and block.text:
                    texts.append(block.text)
            if texts:
                items.append({"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": "\n\n".join(texts)}]})
            continue
        for block in message.content:
            if isinstance(block, OpaqueBlock):
                if block.provider == PROTOCOL:
                    items.append(dict(block.item))
            elif isinstance(block, TextBlock):
                if block.text:
                    message_item: dict[str, Any] = {"type": "message", "role": "assistant", "content": block.text}
                    if block.phase:  # the API asks for it back on every assistant message that had one
                        message_item["phase"] = block.phase
                    items.append(message_item)
            elif isinstance(block, ToolUseBlock):
                items.append({"type": "function_call", "call_id": block.id, "name": block.name,
                              "arguments": wire_arguments(block)})
    last_compaction = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    return items[last_compaction:] if last_compaction is not None else items


# ---- wire -> events ----

def parse_responses_usage(raw: Any) -> Usage:
    """``input_tokens`` includes the cached part (and cache writes); ours is the uncached rest."""
    if not isinstance(raw, dict):
        return Usage()
    total_in = raw.get("input_tokens")
    out = raw.get("output_tokens")
    details = object_field(raw, "input_tokens_details")
    cached = int_field(details, "cached_tokens")
    written = int_field(details, "cache_write_tokens")
    reasoning = object_field(raw, "output_tokens_details").get("reasoning_tokens")
    if not isinstance(total_in, int) and not isinstance(out, int):
        return Usage()
    has_in = isinstance(total_in, int)
    return Usage(
        input_tokens=max(0, total_in - cached - written) if isinstance(total_in, int) else None,
        cache_read_tokens=cached if has_in else None,
        cache_write_tokens=written if has_in else None,
        output_tokens=out if isinstance(out, int) else None,
        reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
    )


@dataclass
class _Item:
    """One output item as it streams: the ``added`` shape, deltas, then the ``done`` shape."""

    item: dict[str, Any]
    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=ArgumentBuffer)  # held up to a cap
    done: bool = False

    @property
    def kind(self) -> str:
        kind = self.item.get("type")
        return kind if isinstance(kind, str) else ""


class ResponsesStreamAssembler:
    """Decoded SSE events in, stream events out; ``finish()`` gives the Completed or raises.

    Complete means ``response.completed`` (or ``response.incomplete``) arrived;
    the Responses stream has no ``[DONE]``. The completed response's ``output``
    is authoritative; the streamed items are the fallback.
    """

    def __init__(self, *, secret: str | None = None) -> None:
        self._secret = secret
        self._items: dict[int, _Item] = {}
        self._final_output: list[Any] | None = None
        self._usage = Usage()
        self._status: str | None = None
        self._incomplete_reason: str | None = None
        self._events_seen = 0
        # The reasoning summary part that streamed last ((output index, summary index)): a new
        # part starts after a blank line, so "…street." and "**Explaining…" stay apart.
        self._summary_part: tuple[int, Any] | None = None

    def feed(self, sse: SSEEvent) -> list[StreamEvent]:
        self._events_seen += 1
        if self._status is not None:
            return []
        payload = event_object(sse.data, unterminated=sse.unterminated)
        if payload is None:
            return []
        kind = payload.get("type") if isinstance(payload.get("type"), str) else sse.event
        out: list[StreamEvent] = []
        if kind == "error" or sse.event == "error":
            raise self._error(payload)
        if kind == "response.failed":
            raise self._error({"error": object_field(object_field(payload, "response"), "error")})
        if kind == "response.output_item.added":
            self._added(payload, out)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            # a safety refusal streams in its own events (no output_text): it is the reply too
            delta = payload.get("delta")
            state = self._item_for(payload, "message")
            if isinstance(delta, str) and delta:
                (state.text if kind == "response.output_text.delta" else state.refusal).append(delta)
                out.append(TextDelta(delta))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = payload.get("delta")
            if isinstance(delta, str) and delta:
                part = (self._index(payload), payload.get("summary_index", payload.get("content_index")))
                if self._summary_part is not None and part != self._summary_part:
                    out.append(ThinkingDelta(SUMMARY_PART_BREAK))
                self._summary_part = part
                out.append(ThinkingDelta(delta))
        elif kind == "response.function_call_arguments.delta":
            delta = payload.get("delta")
            index = self._index(payload)
            call = self._items.get(index)
            if call is None or call.kind != "function_call":
                raise ProviderError(f"arguments delta for output {index}, which is not a started function call",
                                    error_type="bad_response")
            if isinstance(delta, str) and delta:
                call.arguments.append(delta)
                out.append(ToolCallDelta(index=index, partial_json=delta))
        elif kind == "response.output_item.done":
            item = payload.get("item")
            if isinstance(item, dict):
                index = self._index(payload)
                finished = self._items.get(index)
                if finished is None:
                    finished = self._items[index] = _Item(item)
                    self._announce(index, finished, out)
                finished.item = item
                finished.done = True
        elif kind in _TERMINAL:
            response = object_field(payload, "response")
            self._status = "completed" if kind == "response.completed" else "incomplete"
            output = response.get("output")
            if isinstance(output, list):
                self._final_output = output
            reason = object_field(response, "incomplete_details").get("reason")
            if isinstance(reason, str):
                self._incomplete_reason = reason
            usage = response.get("usage")
            if isinstance(usage, dict):
                self._usage = parse_responses_usage(usage)
                out.append(UsageUpdate(self._usage))
        # response.created / in_progress / content_part.* / *.done text events and unknown types change nothing
        return out

    def _error(self, payload: dict[str, Any]) -> ProviderError:
        """An ``error`` event or a failed response. The service nests the error under ``error``
        (``{"type":"error","error":{"type","code","message","param"}}``, ``response.error``);
        the API reference shows it flat (``{"type":"error","code","message"}``): both are read."""
        nested = payload.get("error")
        err = nested if isinstance(nested, dict) else payload
        code = err.get("code") if isinstance(err.get("code"), str) else None
        err_type = err.get("type") if isinstance(err.get("type"), str) and err is nested else None
        name = code or err_type  # "insufficient_quota", "rate_limit_exceeded", "server_error" ...
        message = err.get("message") if isinstance(err.get("message"), str) and err.get("message") else None
        body = {"error": {"message": message or (f"the response failed ({name})" if name else None),
                          "code": code, "type": name}}
        error = error_from_payload(body, status=None, fallback="the response failed", secret=self._secret,
                                   in_stream=True)
        if name is not None and name not in _TRANSIENT_ERRORS:
            error.retryable = False  # the service said what is wrong: the same request fails the same way
        return error

    def _index(self, payload: dict[str, Any]) -> int:
        """The output item an event is about: its ``output_index``; some compatible servers leave
        it out, then the item with that ``item_id``, else the latest item (a new one for ``added``)."""
        index = payload.get("output_index")
        if isinstance(index, int):
            return index
        item_id = payload.get("item_id")
        item = payload.get("item")
        if item_id is None and isinstance(item, dict):
            item_id = item.get("id")
        if isinstance(item_id, str):
            for known, state in self._items.items():
                if state.item.get("id") == item_id:
                    return known
        if payload.get("type") == "response.output_item.added" or not self._items:
            return max(self._items, default=-1) + 1
        return max(self._items)

    def _item_for(self, payload: dict[str, Any], kind: str) -> _Item:
        """The item a delta belongs to; a text delta for an item never announced opens one."""
        index = self._index(payload)
        state = self._items.get(index)
        if state is None:
            item_id = payload.get("item_id")
            state = self._items[index] = _Item({"type": kind, **({"id": item_id} if isinstance(item_id, str) else {})})
        return state

    def _added(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        item = payload.get("item")
        if not isinstance(item, dict):
            return
        index = self._index(payload)
        if index in self._items:
            raise ProviderError(f"output item {index} added twice", error_type="bad_response")
        state = self._items[index] = _Item(item)
        self._announce(index, state, out)

    def _announce(self, index: int, state: _Item, out: list[StreamEvent]) -> None:
        if state.kind != "function_call":
            return
        call_id, name = state.item.get("call_id"), state.item.get("name")
        if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
            raise ProviderError(f"function_call item {index} without call_id or name", error_type="bad_response")
        out.append(ToolCallStart(index=index, id=call_id, name=name))
        arguments = state.item.get("arguments")
        if isinstance(arguments, str) and arguments:
            state.arguments.append(arguments)
            out.append(ToolCallDelta(index=index, partial_json=arguments))

    @property
    def complete(self) -> bool:
        return self._status is not None

    def finish(self) -> Completed:
        if self._status is None:
            raise stream_cut_error(self._events_seen, "response.completed")
        if self._final_output:  # an empty or missing output (some compatible servers): what streamed
            items = [_Item(i, done=True) for i in self._final_output if isinstance(i, dict)]
        else:
            items = [self._items[i] for i in sorted(self._items)]
        content: list[Any] = []
        for state in items:
            block = _block_of(state)
            if block is not None:
                content.append(block)
        has_tools = any(isinstance(b, ToolUseBlock) for b in content)
        if self._status == "incomplete":
            reason = self._incomplete_reason or "incomplete"
            stop_reason = "max_tokens" if reason == "max_output_tokens" else reason
        elif has_tools:
            stop_reason = "tool_use"
        else:
            # only a refusal part tells (the status says "completed"): as on Chat Completions
            refused = any(_refusal_of(state) for state in items)
            stop_reason = "refusal" if refused else "end_turn"
        return Completed(message=Message(role="assistant", content=content), usage=self._usage,
                         stop_reason=stop_reason)


def _block_of(state: _Item) -> Any | None:
    item, kind = state.item, state.kind
    if kind in OPAQUE_ITEM_TYPES:
        return OpaqueBlock(provider=PROTOCOL, item=item)
    if kind == "message":
        parts = list_field(item, "content")
        text = "".join(p.get("text", "") for p in parts
                       if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str))
        text = (text if state.done else "") or "".join(state.text)
        refusal = _refusal_of(state)
        text = text + ("\n\n" if text and refusal else "") + refusal  # as Chat Completions joins them
        phase = item.get("phase")
        kept_phase = phase if isinstance(phase, str) and _PHASE.fullmatch(phase) else None
        return TextBlock(text=text, phase=kept_phase) if text else None
    if kind == "function_call":
        call_id, name = item.get("call_id"), item.get("name")
        if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
            raise ProviderError("function_call item without call_id or name", error_type="bad_response")
        arguments = item.get("arguments")
        raw = arguments if state.done and isinstance(arguments, str) else state.arguments
        text = raw if isinstance(raw, str) else "".join(raw)
        return tool_use_block(call_id, name, parse_tool_arguments(raw), cut=False, raw_arguments=text)
    return None  # hosted-tool items we never ask for


def _refusal_of(state: _Item) -> str:
    """A message item's refusal text: its ``refusal`` parts once done, else what streamed."""
    if state.kind != "message":
        return ""
    refusal = "".join(p.get("refusal", "") for p in list_field(state.item, "content")
                      if isinstance(p, dict) and p.get("type") == "refusal" and isinstance(p.get("refusal"), str))
    return (refusal if state.done else "") or "".join(state.refusal)


def assemble_responses_stream(chunks: Iterable[bytes | str], *, secret: str | None = None) -> list[StreamEvent]:
    """Decode and assemble a whole stream (tests, fuzzing); the last event is the Completed."""
    return assemble_stream(ResponsesStreamAssembler(secret=secret), chunks)


def response_to_events(payload: dict[str, Any]) -> list[SSEEvent]:
    """One response object (from a server that ignored ``stream: true``) replayed as its final event."""
    if payload.get("object") != "response":
        return []
    status = payload.get("status")
    if status == "failed":
        kind = "response.failed"
    else:
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
    return [SSEEvent(kind, json.dumps({"type": kind, "response": payload}))]


# ---- the HTTP layer ----

class ResponsesProvider(SseHttpProvider):
    """One streaming ``POST /responses`` per ``stream``; stateless (``store: false``)."""

    name = PROTOCOL
    assembler_class = ResponsesStreamAssembler
    replay_reply = staticmethod(response_to_events)

    def __init__(self, model: str, base_url: str, api_key: str | None, *, compact_threshold: int | None = None,
                 **settings: Unpack[HttpSettings]) -> None:
        super().__init__(model, base_url, api_key, **settings)
        # Server-side compaction: on when set (the engine's auto-compact line, ``ServerContext``).
        self.compact_threshold = compact_threshold

    # ---- ServerContext: the Responses API compacts on the server; it has no context editing ----

    def server_context(self) -> ServerContext:
        return self

    def set_compaction(self, threshold: int | None) -> int | None:
        """``context_management`` compaction at ``threshold`` (None: off)."""
        self.compact_threshold = threshold
        return threshold

    def set_editing(self, editing: ContextEditing) -> bool:
        return not editing.wanted

    @property
    def url(self) -> str:
        return f"{self.base_url}/responses"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "input": to_responses_input(request.messages),
            "stream": True,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "max_output_tokens": self.max_tokens or request.max_tokens,
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                              "parameters": t.input_schema, "strict": False} for t in request.tools]
            body["tool_choice"] = request.tool_choice
        if self.compact_threshold is not None:
            body["context_management"] = [{"type": "compaction", "compact_threshold": self.compact_threshold}]
        body.update(self.extra_body)
        return body

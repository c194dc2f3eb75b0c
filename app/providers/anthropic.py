"""Anthropic Messages API over httpx, streaming (also DeepSeek's Anthropic-compatible endpoint).

Same shape as the OpenAI provider: ``to_anthropic_messages`` for the wire
format, ``AnthropicStreamAssembler`` (pure) for the events, and a thin
``AnthropicProvider`` over httpx.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Unpack

import httpx

from app.kernel.private_files import read_kept_json, write_kept_json
from app.kernel.request_store import CacheMark
from app.kernel.messages import Message, OpaqueBlock, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.providers.base import (
    APIError,
    Completed,
    ContextEditing,
    ContextTooLongError,
    ModelRequest,
    PromptCacheOff,
    ProviderError,
    ServerContext,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.providers.json_fields import ArgumentBuffer  # arguments held up to a cap
from app.providers.openai import parse_tool_arguments, tool_use_block
from app.providers.http_base import HttpSettings, SseHttpProvider
from app.providers.json_fields import int_field, object_field
from app.providers.sse import SSEEvent, assemble_stream, error_from_payload, event_object, stream_cut_error
from app.kernel.usage import ServerEdit, Usage

# The server-side compaction edit, and the smallest trigger the API accepts for it.
COMPACT_EDIT = "compact_20260112"
ANTHROPIC_MIN_COMPACT_TRIGGER = 50_000

ANTHROPIC_VERSION = "2023-06-01"
# ---- provider-side context management: the betas and the edit types that need them ----
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"  # clear_tool_uses_20250919, clear_thinking_20251015
COMPACTION_BETA = "compact-2026-01-12"  # compact_20260112


# ---- history -> wire ----

def to_anthropic_messages(messages: list[Message], *, send_unsigned_thinking: bool = False) -> list[dict[str, Any]]:
    """Messages API content: roles alternate (neighbours with one role are merged), tool
    results open their user message, thinking goes back with its signature (unsigned
    thinking is dropped unless the server wants it: Anthropic rejects it), empty text is dropped."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[dict[str, Any]] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                if block.text:
                    blocks.append({"type": "text", "text": block.text})
            elif isinstance(block, ThinkingBlock):
                if message.role != "assistant" or not (block.signature or send_unsigned_thinking):
                    continue
                thinking: dict[str, Any] = {"type": "thinking", "thinking": block.thinking}
                if block.signature:
                    thinking["signature"] = block.signature
                blocks.append(thinking)
            elif isinstance(block, RedactedThinkingBlock):
                # opaque and signed by the server: back exactly as it came, in its place
                if message.role == "assistant":
                    blocks.append({"type": "redacted_thinking", "data": block.data})
            elif isinstance(block, ToolUseBlock):
                if message.role == "assistant":
                    blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
            elif isinstance(block, OpaqueBlock):
                # our own compaction blocks go back verbatim (the server drops what precedes them)
                if message.role == "assistant" and block.provider == "anthropic":
                    blocks.append(dict(block.item))
            elif isinstance(block, ToolResultBlock):
                if message.role == "user":
                    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id,
                                              "content": block.content}
                    if block.images:  # Messages takes image blocks inside a tool_result
                        result["content"] = [{"type": "text", "text": block.content}, *(
                            {"type": "image", "source": {"type": "base64", "media_type": image.media_type,
                                                         "data": image.data}} for image in block.images)]
                    if block.is_error:
                        result["is_error"] = True
                    blocks.append(result)
        if not blocks:
            continue
        if out and out[-1]["role"] == message.role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": message.role, "content": blocks})
    for wire in out:
        if wire["role"] == "user":
            # tool_result blocks must come first (stable: results keep their order)
            wire["content"].sort(key=lambda b: b["type"] != "tool_result")
    return out


# ---- prompt caching ----

MAX_CACHE_BREAKPOINTS = 4  # the API rejects a request with more
_EPHEMERAL = {"type": "ephemeral"}
# Blocks that cannot carry cache_control (the API rejects it on them).
_UNCACHEABLE = {"thinking", "redacted_thinking"}


# A 400 (or a gateway's 422) that names the cache marks or the system prompt's block form: what a
# server or gateway that does not take them says ("…cache_control: Extra inputs are not permitted",
# "system: Input should be a valid string").
_CACHE_FIELD = re.compile(r"cache_control", re.IGNORECASE)
_SYSTEM_BLOCKS = re.compile(r"\bsystem\b.*\b(string|str|array|list|blocks?|type)\b", re.IGNORECASE | re.DOTALL)


def rejects_cache_breakpoints(error: ProviderError) -> bool:
    """Did the server refuse the request for its cache breakpoints (not for anything else)?"""
    if error.status not in (400, 422):
        return False
    return bool(_CACHE_FIELD.search(error.message) or _SYSTEM_BLOCKS.search(error.message))


# A first cached request to a server other than Anthropic's that fails with one of these says
# nothing about the cache marks: the key (401), its rights (403), the rate or the load (429, 529:
# another request now would spend the quota or the capacity the server asks to wait for; the
# agent's retry waits as told). Any other 4xx or 5xx may be a gateway choking on them (LiteLLM in
# front of llama-cpp-python answers 500 to a system prompt as blocks).
NOT_ABOUT_CACHING = frozenset({401, 403, 429, 529})
# Base URLs that refused cache marks, kept between sessions (<data_dir>/prompt-cache-refused.json).
CACHE_REFUSALS_FILE = "prompt-cache-refused.json"
MAX_CACHE_REFUSALS_BYTES = 256 * 1024
MAX_CACHE_REFUSALS = 200


class CacheRefusals:
    """The servers (by base URL) that refused a cached request, so the next session sends them
    none from its first request. Read and written through ``private_files`` (0600, no links)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def reason_for(self, base_url: str) -> str | None:
        entry = read_kept_json(self.path, MAX_CACHE_REFUSALS_BYTES).get(_url_key(base_url))
        reason = entry.get("reason") if isinstance(entry, dict) else None
        return reason[:200] if isinstance(reason, str) else None

    def remember(self, base_url: str, reason: str) -> None:
        kept = read_kept_json(self.path, MAX_CACHE_REFUSALS_BYTES)
        kept.pop(_url_key(base_url), None)
        kept[_url_key(base_url)] = {"reason": reason[:200]}
        while len(kept) > MAX_CACHE_REFUSALS:  # the oldest go first (insertion order)
            del kept[next(iter(kept))]
        write_kept_json(self.path, kept)


def _url_key(base_url: str) -> str:
    return base_url.rstrip("/")


def add_cache_breakpoints(body: dict[str, Any]) -> int:
    """Mark the stable prefix for Anthropic's prompt cache; returns how many marks were set.

    Order of the prefix is tools, system, messages. One mark on the last tool and one
    on the system prompt (they change only when the session does); one on the last
    block of the latest message, which moves every turn, so the next request reads
    everything up to it from the cache; and one on the latest message of the request
    before (the previous user turn), so a turn that added more than the API's
    20-block look-back still finds the previous prefix. Built fresh from the history
    on every request, so compaction and micro-compaction (which rewrite the history)
    can never leave a stale or a fifth mark.
    """
    used = 0
    tools = body.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": _EPHEMERAL}
        used += 1
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
        used += 1
    messages = body.get("messages") or []
    user_turns = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    targets = [len(messages) - 1] if messages else []
    if len(user_turns) >= 2 and user_turns[-2] not in targets:
        targets.append(user_turns[-2])
    for index in targets:
        if used >= MAX_CACHE_BREAKPOINTS:
            break
        content = messages[index].get("content")
        if not isinstance(content, list):
            continue
        for position in range(len(content) - 1, -1, -1):
            block = content[position]
            if block.get("type") in _UNCACHEABLE or (block.get("type") == "text" and not block.get("text")):
                continue
            content[position] = {**block, "cache_control": _EPHEMERAL}
            used += 1
            break
    return used


def cache_marks_in(body: dict[str, Any]) -> tuple[CacheMark, ...]:
    """The blocks of a built body that carry ``cache_control``, by what each is (``CacheMark``)."""
    marks: list[CacheMark] = []
    for tool in body.get("tools") or []:
        if "cache_control" in tool:
            marks.append(("tool", str(tool.get("name", ""))))
    system = body.get("system")
    if isinstance(system, list) and any(isinstance(b, dict) and "cache_control" in b for b in system):
        marks.append(("system", ""))
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not (isinstance(block, dict) and "cache_control" in block):
                continue
            kind = block.get("type")
            if kind == "tool_result":
                marks.append(("tool_result", str(block.get("tool_use_id", ""))))
            elif kind == "tool_use":
                marks.append(("tool_use", str(block.get("id", ""))))
            elif kind == "text":
                marks.append(("text", str(block.get("text", ""))))
    return tuple(marks)


# ---- wire -> events ----

@dataclass
class _Block:
    kind: str  # text | thinking | redacted_thinking | tool_use | other
    parts: list[str] = field(default_factory=list)
    signature: str = ""
    id: str = ""
    name: str = ""
    initial_input: dict[str, Any] = field(default_factory=dict)
    compaction: dict[str, Any] = field(default_factory=dict)  # a compaction block's content


_USAGE_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


# The kind of block each delta type may extend.
_BLOCK_KIND_OF_DELTA = {"text_delta": "text", "thinking_delta": "thinking",
                        "signature_delta": "thinking", "input_json_delta": "tool_use"}


class AnthropicStreamAssembler:
    """Decoded SSE events in, stream events out; ``finish()`` gives the Completed or raises.

    Complete means ``message_stop`` arrived; anything less is a StreamCutError.
    Usage in ``message_delta`` is cumulative: the last value of each field wins.
    """

    def __init__(self, *, secret: str | None = None) -> None:
        self._secret = secret
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._stopped = False
        self._events_seen = 0
        # what the server reported about its own context management
        self._server_edits: tuple[ServerEdit, ...] = ()
        self._compaction_usage: Usage | None = None

    def feed(self, sse: SSEEvent) -> list[StreamEvent]:
        self._events_seen += 1
        if self._stopped:
            return []
        payload = event_object(sse.data, unterminated=sse.unterminated)
        if payload is None:
            return []
        kind = payload.get("type") if isinstance(payload.get("type"), str) else sse.event
        if kind == "error" or sse.event == "error":
            raise error_from_payload(payload, status=None, fallback="error inside the stream",
                                     secret=self._secret, in_stream=True)
        out: list[StreamEvent] = []
        if kind == "message_start":
            message = payload.get("message")
            if isinstance(message, dict) and self._merge_usage(message.get("usage")):
                out.append(UsageUpdate(self._current_usage()))
        elif kind == "content_block_start":
            self._block_start(payload, out)
        elif kind == "content_block_delta":
            self._block_delta(payload, out)
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            self._note_context_management(payload)
            if self._merge_usage(payload.get("usage")):
                out.append(UsageUpdate(self._current_usage()))
        elif kind == "message_stop":
            self._stopped = True
        # ping, content_block_stop and unknown types change nothing
        return out

    def _index(self, payload: dict[str, Any]) -> int:
        index = payload.get("index")
        if not isinstance(index, int):
            raise ProviderError(f"stream event without a block index: {payload.get('type')}", error_type="bad_response")
        return index

    def _block_start(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(payload)
        if index in self._blocks:
            raise ProviderError(f"content block {index} started twice", error_type="bad_response")
        start = payload.get("content_block")
        start = start if isinstance(start, dict) else {}
        kind = start.get("type")
        if kind == "text":
            block = _Block("text")
            _extend_text(block, start.get("text"), out)
        elif kind == "thinking":
            block = _Block("thinking")
            _extend_text(block, start.get("thinking"), out)
            if isinstance(start.get("signature"), str):
                block.signature = start["signature"]
        elif kind == "tool_use":
            call_id, name = start.get("id"), start.get("name")
            if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
                raise ProviderError(f"tool_use block {index} without id or name", error_type="bad_response")
            initial = start.get("input")
            block = _Block("tool_use", id=call_id, name=name, parts=ArgumentBuffer(),  # held up to a cap
                           initial_input=initial if isinstance(initial, dict) else {})
            out.append(ToolCallStart(index=index, id=call_id, name=name))
        elif kind == "redacted_thinking":
            data = start.get("data")
            block = _Block("redacted_thinking", parts=[data] if isinstance(data, str) else [])
        elif kind == "compaction":  # server-side compaction (compact_20260112)
            block = _Block("compaction", compaction={k: start.get(k) for k in ("content", "encrypted_content")
                                                     if start.get(k) is not None})
        else:
            block = _Block("other")  # server tools and future types: nothing we can send back
        self._blocks[index] = block

    def _block_delta(self, payload: dict[str, Any], out: list[StreamEvent]) -> None:
        index = self._index(payload)
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return
        kind = delta.get("type")
        block = self._blocks.get(index)
        if kind == "compaction_delta":  # the delta sets the block's content, it does not append
            if block is not None and block.kind == "compaction":
                block.compaction.update({k: delta[k] for k in ("content", "encrypted_content")
                                         if delta.get(k) is not None})
            return
        if block is None and kind in ("text_delta", "thinking_delta"):
            # tolerate a server that skips content_block_start for plain text
            block = self._blocks[index] = _Block("text" if kind == "text_delta" else "thinking")
        if block is None:
            if kind in ("input_json_delta", "signature_delta"):
                raise ProviderError(f"{kind} for block {index}, which never started", error_type="bad_response")
            return
        expected = _BLOCK_KIND_OF_DELTA.get(kind) if isinstance(kind, str) else None
        if expected is None:
            return  # citations_delta and future delta types
        if block.kind != expected:
            raise ProviderError(f"{kind} for a {block.kind} block ({index})", error_type="bad_response")
        if kind == "text_delta":
            _extend_text(block, delta.get("text"), out)
        elif kind == "thinking_delta":
            _extend_text(block, delta.get("thinking"), out)
        elif kind == "signature_delta":
            if isinstance(delta.get("signature"), str):
                block.signature += delta["signature"]
        else:
            partial = delta.get("partial_json")
            if isinstance(partial, str) and partial:
                block.parts.append(partial)
                out.append(ToolCallDelta(index=index, partial_json=partial))

    def _merge_usage(self, raw: Any) -> bool:
        if not isinstance(raw, dict):
            return False
        changed = False
        for name in _USAGE_FIELDS:
            value = raw.get(name)
            if isinstance(value, int):
                self._usage[name] = value
                changed = True
        # the part of output_tokens spent thinking, where the server reports it
        thinking = object_field(raw, "output_tokens_details").get("thinking_tokens")
        if isinstance(thinking, int):
            self._usage["thinking_tokens"] = thinking
        return changed

    def _current_usage(self) -> Usage:
        if "input_tokens" not in self._usage and "output_tokens" not in self._usage:
            return Usage()
        has_input = "input_tokens" in self._usage
        return Usage(
            input_tokens=self._usage.get("input_tokens"),
            cache_read_tokens=self._usage.get("cache_read_input_tokens", 0) if has_input else None,
            cache_write_tokens=self._usage.get("cache_creation_input_tokens", 0) if has_input else None,
            output_tokens=self._usage.get("output_tokens"),
            reasoning_tokens=self._usage.get("thinking_tokens"),
            server_edits=self._server_edits,
            compaction_usage=self._compaction_usage,
        )

    # ---- context editing and compaction, as the server reports them ----

    def _note_context_management(self, payload: dict[str, Any]) -> None:
        """``context_management.applied_edits`` and ``usage.iterations`` of a message_delta."""
        managed = payload.get("context_management")
        edits = managed.get("applied_edits") if isinstance(managed, dict) else None
        if isinstance(edits, list):
            self._server_edits = tuple(_server_edit(e) for e in edits if isinstance(e, dict))
        usage = payload.get("usage")
        iterations = usage.get("iterations") if isinstance(usage, dict) else None
        if isinstance(iterations, list):
            runs = [i for i in iterations if isinstance(i, dict) and i.get("type") == "compaction"]
            if runs:
                self._compaction_usage = Usage(
                    input_tokens=sum(int_field(r, "input_tokens") for r in runs),
                    cache_read_tokens=sum(int_field(r, "cache_read_input_tokens") for r in runs),
                    cache_write_tokens=sum(int_field(r, "cache_creation_input_tokens") for r in runs),
                    output_tokens=sum(int_field(r, "output_tokens") for r in runs))

    @property
    def complete(self) -> bool:
        """The message has ended (what may still come is usage or the terminator)."""
        return self._stopped

    def finish(self) -> Completed:
        if not self._stopped:
            raise stream_cut_error(self._events_seen, "message_stop")
        content: list[Any] = []
        last_index = max(self._blocks) if self._blocks else None
        for index in sorted(self._blocks):
            block = self._blocks[index]
            joined = "".join(block.parts)
            if block.kind == "text" and joined:
                content.append(TextBlock(text=joined))
            elif block.kind == "thinking" and (joined or block.signature):
                content.append(ThinkingBlock(thinking=joined, signature=block.signature or None))
            elif block.kind == "redacted_thinking" and joined:
                content.append(RedactedThinkingBlock(data=joined))
            elif block.kind == "tool_use":
                tool_input = parse_tool_arguments(block.parts) if block.parts else block.initial_input
                content.append(tool_use_block(block.id, block.name, tool_input,
                                              cut=self._stop_reason == "max_tokens",
                                              no_arguments_yet=(index == last_index and not joined.strip()
                                                                and not block.initial_input)))
            elif block.kind == "compaction":  # kept verbatim, sent back to this provider only
                # "content" is always there: null marks a failed compaction, which the server treats as a no-op
                item = {"type": "compaction", "content": block.compaction.get("content"), **block.compaction}
                content.append(OpaqueBlock(provider="anthropic", item=item))
        has_tools = any(isinstance(b, ToolUseBlock) for b in content)
        stop_reason = self._stop_reason or ("tool_use" if has_tools else "end_turn")
        return Completed(
            message=Message(role="assistant", content=content),
            usage=self._current_usage(),
            stop_reason=stop_reason,
        )


def _extend_text(block: _Block, piece: Any, out: list[StreamEvent]) -> None:
    """A streamed piece of a text or thinking block: kept in the block and passed on (an empty one is neither)."""
    if isinstance(piece, str) and piece:
        block.parts.append(piece)
        out.append(TextDelta(piece) if block.kind == "text" else ThinkingDelta(piece))


def _server_edit(raw: dict[str, Any]) -> ServerEdit:
    kind = raw.get("type")
    return ServerEdit(kind=kind if isinstance(kind, str) else "unknown",
                      cleared_input_tokens=int_field(raw, "cleared_input_tokens"),
                      cleared_tool_uses=int_field(raw, "cleared_tool_uses"),
                      cleared_thinking_turns=int_field(raw, "cleared_thinking_turns"))


def assemble_anthropic_stream(chunks: Iterable[bytes | str], *, secret: str | None = None) -> list[StreamEvent]:
    """Decode and assemble a whole stream (tests, fuzzing); the last event is the Completed."""
    return assemble_stream(AnthropicStreamAssembler(secret=secret), chunks)


def message_to_events(payload: dict[str, Any]) -> list[SSEEvent]:
    """One message (from a server that ignored ``stream: true``) replayed as the events of its stream."""
    if payload.get("type") != "message":
        return []

    def event(data: dict[str, Any]) -> SSEEvent:
        return SSEEvent(data["type"], json.dumps(data))

    usage = object_field(payload, "usage")
    events = [event({"type": "message_start", "message": {**payload, "content": [], "usage": usage}})]
    for index, block in enumerate(payload.get("content") or []):
        if isinstance(block, dict):
            events.append(event({"type": "content_block_start", "index": index, "content_block": block}))
            events.append(event({"type": "content_block_stop", "index": index}))
    events.append(event({"type": "message_delta", "delta": {"stop_reason": payload.get("stop_reason")},
                         "usage": {"output_tokens": usage.get("output_tokens")}}))
    events.append(event({"type": "message_stop"}))
    return events


# ---- provider-side context management ----

def context_management_edits(editing: ContextEditing, compact_threshold: int | None) -> list[dict[str, Any]]:
    """``context_management.edits`` for the Messages API ([] when nothing is on). Thinking
    clearing comes first: the API wants it ahead of the other edits; compaction comes last."""
    edits: list[dict[str, Any]] = []
    if editing.clear_thinking:
        thinking: dict[str, Any] = {"type": "clear_thinking_20251015"}
        if editing.clear_thinking_keep is not None:
            thinking["keep"] = {"type": "thinking_turns", "value": editing.clear_thinking_keep}
        edits.append(thinking)
    if editing.clear_tool_uses:
        tools: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
        if editing.clear_tool_uses_trigger is not None:
            tools["trigger"] = {"type": "input_tokens", "value": editing.clear_tool_uses_trigger}
        if editing.clear_tool_uses_keep is not None:
            tools["keep"] = {"type": "tool_uses", "value": editing.clear_tool_uses_keep}
        if editing.clear_tool_uses_clear_at_least is not None:
            tools["clear_at_least"] = {"type": "input_tokens", "value": editing.clear_tool_uses_clear_at_least}
        if editing.clear_tool_uses_exclude:
            tools["exclude_tools"] = list(editing.clear_tool_uses_exclude)
        edits.append(tools)
    if compact_threshold is not None:
        edits.append({"type": COMPACT_EDIT, "trigger": {"type": "input_tokens", "value": compact_threshold}})
    return edits


# ---- the HTTP layer ----

class AnthropicProvider(SseHttpProvider):
    """One streaming Messages call per ``stream``; one httpx client reused."""

    name = "anthropic"
    assembler_class = AnthropicStreamAssembler
    replay_reply = staticmethod(message_to_events)
    protocol_headers = {"anthropic-version": ANTHROPIC_VERSION}

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None,
        *,
        send_unsigned_thinking: bool | None = None,
        thinking_budget: int = 0,
        prompt_caching: bool | None = None,
        cache_refusals: CacheRefusals | None = None,
        **settings: Unpack[HttpSettings],
    ) -> None:
        super().__init__(model, base_url, api_key, **settings)
        # Anthropic signs all thinking and rejects unsigned blocks (they can only come from another
        # provider); compatible servers (DeepSeek's /anthropic) sign nothing and want their thinking back.
        host = httpx.URL(self.base_url).host
        is_anthropic = host == "anthropic.com" or host.endswith(".anthropic.com")
        self.is_anthropic = is_anthropic
        if send_unsigned_thinking is None:
            send_unsigned_thinking = not is_anthropic
        self.send_unsigned_thinking = send_unsigned_thinking
        # Extended thinking: 0 = off; else the budget_tokens of each request (>= 1024).
        self.thinking_budget = thinking_budget
        # Breakpoints are sent to every server of this protocol (gateways in front of Anthropic cache
        # too); one that rejects them gets the call again without, and no more of them (``stream``).
        self.prompt_caching = True if prompt_caching is None else prompt_caching
        # A server that refused them in an earlier session gets none (unless the setting asks for them).
        self.cache_refusals = cache_refusals
        self.remembered_refusal = (cache_refusals.reason_for(self.base_url)
                                   if cache_refusals is not None and prompt_caching is None else None)
        if self.remembered_refusal is not None:
            self.prompt_caching = False
        self._refusal_said = False
        self._cache_worked = False  # a cached request went through: a later failure is not the marks'
        self._plain_retry_tried = False
        # What ``context_management.edits`` carries on every request (``ServerContext``).
        self._editing = ContextEditing()
        self._compact_threshold: int | None = None
        self._marked: tuple[ModelRequest | None, tuple[CacheMark, ...]] = (None, ())

    def cache_marks(self, request: ModelRequest) -> tuple[CacheMark, ...]:
        """CacheMarkingProvider: the breakpoints of the body last built, when it was ``request``'s."""
        built, marks = self._marked
        return marks if built is request else ()

    # ---- ServerContext: the Messages API's context editing and compaction ----

    def server_context(self) -> ServerContext:
        return self

    def set_compaction(self, threshold: int | None) -> int | None:
        """The ``compact_20260112`` edit at ``threshold`` (None: off), raised to the API's floor;
        the other context edits stay as they are."""
        self._compact_threshold = None if threshold is None else max(ANTHROPIC_MIN_COMPACT_TRIGGER, threshold)
        return self._compact_threshold

    def set_editing(self, editing: ContextEditing) -> bool:
        self._editing = editing
        return True

    @property
    def context_edits(self) -> list[dict[str, Any]]:
        """``context_management.edits`` as sent ([] when nothing is on)."""
        return context_management_edits(self._editing, self._compact_threshold)

    def stop_prompt_caching(self) -> None:
        self.prompt_caching = False

    @property
    def url(self) -> str:
        # accept both "https://api.anthropic.com" and ".../v1"
        if self.base_url.endswith("/v1"):
            return f"{self.base_url}/messages"
        return f"{self.base_url}/v1/messages"

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        max_tokens = self.max_tokens or request.max_tokens
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": to_anthropic_messages(request.messages, send_unsigned_thinking=self.send_unsigned_thinking),
            "stream": True,
        }
        # budget_tokens must stay under max_tokens: a call with a smaller cap (the compaction
        # summary) runs without thinking rather than being rejected
        if self.thinking_budget and max_tokens > self.thinking_budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                             for t in request.tools]
            body["tool_choice"] = {"type": request.tool_choice}
        if self.prompt_caching:
            add_cache_breakpoints(body)
        # what the inspector shows as this request's breakpoints (read back by ``cache_marks``)
        self._marked = (request, cache_marks_in(body) if self.prompt_caching else ())
        if edits := self.context_edits:
            body["context_management"] = {"edits": edits}
        body.update(self.extra_body)
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """One call. When the server rejects the cache breakpoints, once more without them and
        with the system prompt as a plain string; caching stays off for the rest of the session
        and for this base URL's later sessions (said once, with the server's words)."""
        if self.remembered_refusal is not None and not self._refusal_said:
            self._refusal_said = True
            yield PromptCacheOff(reason=self.remembered_refusal, base_url=self.base_url, remembered=True)
        marked = self.prompt_caching
        streamed = False
        try:
            async for event in super().stream(request):
                if not streamed:  # the server took the request as sent (a caller may stop at Completed)
                    streamed = True
                    self._cache_worked = self._cache_worked or marked
                yield event
            return
        except APIError as err:
            if not marked or streamed:
                raise
            named = rejects_cache_breakpoints(err)
            if not named and not self._may_be_the_marks(err):
                raise
            reason = " ".join(err.message.split())[:200]
            if err.status is not None:
                reason = f"HTTP {err.status}: {reason}"
            refused = err
        self.prompt_caching = False
        if named:
            self._remember(reason)
            yield PromptCacheOff(reason=reason, base_url=self.base_url)
            async for event in super().stream(request):
                yield event
            return
        # Not named: the marks are to blame only if the same call without them goes through.
        self._plain_retry_tried = True
        first = True
        try:
            async for event in super().stream(request):
                if first:
                    first = False
                    self._remember(reason)
                    yield PromptCacheOff(reason=reason, base_url=self.base_url)
                yield event
        except APIError:
            if not first:
                raise
            # it failed without them too: not the marks; the server's first answer is the error
            self.prompt_caching = True
            raise refused from None

    def _may_be_the_marks(self, err: APIError) -> bool:
        """Could this failure of the first cached request be a gateway refusing the cache marks
        (or the system prompt as blocks) without saying so? Never for Anthropic's own API, whose
        errors name them; once per session."""
        return (not self.is_anthropic and not self._cache_worked and not self._plain_retry_tried
                and err.status is not None and 400 <= err.status < 600 and err.status not in NOT_ABOUT_CACHING
                and not isinstance(err, ContextTooLongError))

    def _remember(self, reason: str) -> None:
        if self.cache_refusals is not None:
            self.cache_refusals.remember(self.base_url, reason)

    def key_headers(self, api_key: str) -> dict[str, str]:
        """The Messages API takes the key in its own header, not as a bearer token."""
        return {"x-api-key": api_key}

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        betas = self._context_betas()
        if betas:
            given = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]
            headers["anthropic-beta"] = ",".join(given + [b for b in betas if b not in given])
        return headers

    def _context_betas(self) -> list[str]:
        """The beta headers the configured context edits need."""
        kinds = {e.get("type") for e in self.context_edits}
        betas = []
        if kinds & {"clear_tool_uses_20250919", "clear_thinking_20251015"}:
            betas.append(CONTEXT_MANAGEMENT_BETA)
        if COMPACT_EDIT in kinds:
            betas.append(COMPACTION_BETA)
        return betas

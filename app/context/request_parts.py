"""A request cut into the parts the inspector shows, each with its tokens and its origin.

Origins come from what the engine put on the blocks (``TextBlock.user_message_id``,
``in_summary``, ``from_mcp``, a result's saved file, the results tidegauge itself writes), never
from reading what a model or a tool wrote. The only texts looked for are tidegauge's own: the
head of a summary it framed (a session-memory summary starts with the memory's intro) and the
checked-facts section the audit appends after a summary.
"""

from __future__ import annotations

import json
from typing import Callable, Sequence

from app.context.audit import CHECKED_FACTS_HEADER, CHECKED_FACTS_NOTE
from app.context.pruning import is_cleared
from app.context.session_memory import MEMORY_INTRO
from app.context.tokens import BLOCK_OVERHEAD, MESSAGE_OVERHEAD, block_estimates, count_tokens, estimate_tool
from app.context.user_words import SUMMARY_INTRO
from app.kernel.markers import INTERRUPTED_RESULT, NOT_RUN_RESULT
from app.kernel.messages import (
    ContentBlock,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from app.kernel.request_store import CacheMark, RequestPart

# The deferred tools' catalogue (app.tools.deferral.LOAD_TOOLS): named here, not imported, so the
# context package keeps off the tools package.
LOAD_TOOLS = "load_tools"
_MEMORY_HEAD = f"{SUMMARY_INTRO}\n\n{MEMORY_INTRO}"
_FACTS_HEAD = f"{CHECKED_FACTS_HEADER}\n{CHECKED_FACTS_NOTE}"


class PartsMemo:
    """The parts of each message, made once: a request re-sends the whole history, and counting
    a 1M-token history again for every request would cost what the request store saves. Keyed
    by the message object (messages are never changed in place: a change is a new message);
    the entries of messages no longer sent are dropped at each request."""

    def __init__(self) -> None:
        self._by_message: dict[int, tuple[Message, list[RequestPart]]] = {}
        self._names: dict[str, str] = {}  # tool call id -> tool name, for the results' origins
        # A tool's definition is counted once: the same spec objects go with every request.
        self._tool_tokens: dict[int, tuple[ToolSpec, int]] = {}

    def tool_tokens(self, spec: ToolSpec) -> int:
        hit = self._tool_tokens.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        if len(self._tool_tokens) >= 1_024:  # specs made anew (an MCP server reconnected): start over
            self._tool_tokens.clear()
        tokens = estimate_tool(spec)
        self._tool_tokens[id(spec)] = (spec, tokens)
        return tokens

    def parts_of(self, messages: Sequence[Message]) -> list[RequestPart]:
        kept: dict[int, tuple[Message, list[RequestPart]]] = {}
        out: list[RequestPart] = []
        for message in messages:
            hit = self._by_message.get(id(message))
            if hit is not None and hit[0] is message:
                parts = hit[1]
            else:
                if message.role == "assistant":
                    self._names.update((u.id, u.name) for u in message.tool_uses)
                parts = _message_parts(message, self._names)
            kept[id(message)] = (message, parts)
            out.extend(parts)
        self._by_message = kept
        return out


def request_parts(system_prompt: str, memory_text: str, tools: Sequence[ToolSpec], messages: Sequence[Message],
                  tool_owner: Callable[[str], str | None] | None = None,
                  memo: PartsMemo | None = None) -> list[RequestPart]:
    """The parts of one request, in the order they are sent (system, memory, tools, messages)."""
    memo = memo or PartsMemo()
    parts = [RequestPart("system", "system", "tidegauge", system_prompt, count_tokens(system_prompt), "system")]
    if memory_text:
        parts.append(RequestPart("memory", "system", "memory files", memory_text, count_tokens(memory_text), "memory"))
    for spec in tools:
        owner = tool_owner(spec.name) if tool_owner is not None else None
        if spec.name == LOAD_TOOLS:
            origin = "tidegauge · deferred tools' catalogue"
        else:
            origin = f"MCP server {owner}" if owner else "built-in"
        text = f"{spec.name}: {spec.description}\n{json.dumps(spec.input_schema, ensure_ascii=False)}"
        parts.append(RequestPart("tool", "tools", origin, text, memo.tool_tokens(spec), f"tool:{spec.name}"))
    parts.extend(memo.parts_of(messages))
    return parts


def breakpoint_indexes(parts: Sequence[RequestPart], marks: Sequence[CacheMark]) -> tuple[int, ...]:
    """The indexes of the parts each cache breakpoint follows (a mark no part matches is left out).
    The system prompt's mark follows the memory files, sent in the same system text; a marked text
    block cut into a summary and its checked facts is followed by its last part. The marks sit on
    the latest messages, so the search runs from the end."""
    found: set[int] = set()
    for kind, value in marks:
        if kind == "system":
            at = [i for i, p in enumerate(parts[:2]) if p.role == "system"]
            index = at[-1] if at else None
        elif kind in ("tool", "tool_use", "tool_result"):
            key = {"tool": "tool:", "tool_use": "use:", "tool_result": "result:"}[kind] + value
            index = next((i for i in range(len(parts) - 1, -1, -1) if parts[i].key == key), None)
        elif kind == "text":
            index = next((i for i in range(len(parts) - 1, -1, -1) if parts[i].kind == "text" and (
                parts[i].text == value or (parts[i].origin == "checked facts" and value.endswith(parts[i].text)))),
                None)
        else:
            index = None
        if index is not None:
            found.add(index)
    return tuple(sorted(found))


def _message_parts(message: Message, names: dict[str, str]) -> list[RequestPart]:
    summary_message = any(isinstance(b, TextBlock) and b.in_summary for b in message.content)
    parts: list[RequestPart] = []
    for block, tokens in zip(message.content, block_estimates(message)):
        parts.extend(_block_parts(block, tokens, message.role, summary_message, names))
    if parts:  # the message's own overhead goes with its first part
        head = parts[0]
        parts[0] = RequestPart(head.kind, head.role, head.origin, head.text, head.tokens + MESSAGE_OVERHEAD, head.key)
    return parts


def _block_parts(block: ContentBlock, tokens: int, role: str, summary_message: bool,
                 names: dict[str, str]) -> list[RequestPart]:
    if isinstance(block, TextBlock):
        if role == "assistant":
            return [RequestPart("text", role, "model", block.text, tokens)]
        if block.from_mcp:
            return [RequestPart("text", role, f"MCP {block.from_mcp}", block.text, tokens)]
        if block.user_message_id:
            origin = "kept user words" if (block.in_summary or summary_message) else "user"
            return [RequestPart("text", role, origin, block.text, tokens)]
        if block.in_summary:
            return _summary_parts(block.text)
        return [RequestPart("text", role, "tidegauge", block.text, tokens)]
    if isinstance(block, (ThinkingBlock, RedactedThinkingBlock)):
        text = block.thinking if isinstance(block, ThinkingBlock) else "[redacted thinking]"
        return [RequestPart("thinking", role, "model (thinking)", text, tokens)]
    if isinstance(block, ToolUseBlock):
        text = f"{block.name}({json.dumps(block.input, ensure_ascii=False)})"
        return [RequestPart("tool_use", role, f"model · call {block.id}", text, tokens, f"use:{block.id}")]
    if isinstance(block, ToolResultBlock):
        name = names.get(block.tool_use_id, "tool")
        call = f"call {block.tool_use_id}"
        if is_cleared(block):
            origin = f"{name} · {call} · cleared"
        elif block.content in (INTERRUPTED_RESULT, NOT_RUN_RESULT):
            origin = f"tidegauge · {call}"
        elif block.full_output_path:
            origin = f"{name} · {call} · cut notice"
        else:
            origin = f"{name} · {call}"
        return [RequestPart("tool_result", role, origin, block.content, tokens, f"result:{block.tool_use_id}")]
    if isinstance(block, OpaqueBlock):
        return [RequestPart("opaque", role, f"{block.provider} item ({block.kind or 'unknown'})",
                            json.dumps(block.item, ensure_ascii=False)[:4_000], tokens)]
    return []


def _summary_parts(text: str) -> list[RequestPart]:
    """A summary block: the summary (or session memory) and, apart, the checked facts after it."""
    origin = "session memory" if text.startswith(_MEMORY_HEAD) else "summary"
    if not text.startswith(SUMMARY_INTRO):
        origin = "summary frame"
    at = text.rfind(_FACTS_HEAD)
    if at <= 0:
        return [RequestPart("text", "user", origin, text, count_tokens(text) + BLOCK_OVERHEAD)]
    head, facts = text[:at], text[at:]
    return [RequestPart("text", "user", origin, head, count_tokens(head) + BLOCK_OVERHEAD),
            RequestPart("text", "user", "checked facts", facts, count_tokens(facts))]

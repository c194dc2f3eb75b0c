"""Replies in OpenAI's Responses API wire format, for the fake LLM server (tests/fake_llm_server.py).

The server itself answers any path ending in ``/responses``; this module builds
what it sends. The event sequence and every field of every event follow a
published recording of the real API (SwiftedMind/SwiftAgent's
OpenAIStreamingToolCallsTests, gpt-5, store=false, reasoning.encrypted_content):
``response.created``, ``response.in_progress``, then per output item
``response.output_item.added`` … deltas … ``response.output_item.done``
(a message also has ``content_part.added/done`` and ``output_text.done``),
and ``response.completed`` whose ``response.output`` repeats every item.
Each frame is ``event: <type>`` + ``data: <json>`` + a blank line; there is
no ``[DONE]``. The content is ours.

    fake_llm.enqueue(
        responses_tool_calls([("read_file", {"path": "a.txt"})], reasoning="looking", usage=dict(input=120, output=9)),
        responses_text("done", usage=dict(input=300, cached=256, output=4, reasoning=2)),
    )
    provider = fake_llm.provider("responses")

Builders:
    responses_text(text | [deltas], *, reasoning=None, compaction=None, usage=DEFAULT_USAGE, status="completed")
    responses_tool_calls([(name, args) | (name, args, call_id), ...], *, text=None, reasoning=None,
                         compaction=None, usage=DEFAULT_USAGE, fragments=3)
        ``reasoning``: summary text (str or deltas) of a reasoning item with encrypted_content;
        ``reasoning=""`` gives a reasoning item with an empty summary (what gpt-5 sends by default);
        a tuple is several summary parts (each a str or deltas), streamed one after the other.
        ``phase``: the message item's ``phase`` ("commentary" | "final_answer", gpt-5.3-codex and later).
        ``compaction``: the encrypted_content of a compaction item, sent first (server-side compaction).
        ``usage``: dict(input=.., output=.., cached=.., cache_write=.., reasoning=..); None: "usage": null.
    responses_events([event dicts])                 low level: each dict's "type" is its event line
    responses_failed(code, message)                 response.created, then response.failed
    responses_error(code, message, nested=True)     an ``error`` event (e.g. rate limit mid-stream), nested
                                                    under "error" as the service sends it; ``nested=False``:
                                                    the flat shape of the API reference
    responses_refusal(text | [deltas])              a message whose only part is a refusal
                                                    (``response.refusal.delta`` / ``.done``)
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from fake_llm_server import DEFAULT_USAGE, Reply, _calls, _frame, _pieces

_ids = itertools.count(1)
CREATED_AT = 1_759_064_126


def _hex() -> str:
    return f"{next(_ids):048x}"


def responses_events(events: list[dict[str, Any]]) -> Reply:
    """Frames for these events, ``sequence_number`` filled in order (0, 1, 2 …) where missing."""
    frames = []
    for number, event in enumerate(events):
        event = {"type": event["type"], "sequence_number": number,
                 **{k: v for k, v in event.items() if k != "type"}}
        frames.append(_frame(json.dumps(event, ensure_ascii=False, separators=(",", ":")), event["type"]))
    return Reply(events=frames)


def wire_usage(usage: dict[str, int] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    if usage is DEFAULT_USAGE:
        usage = {"input": DEFAULT_USAGE["prompt"], "output": DEFAULT_USAGE["completion"]}
    details: dict[str, int] = {"cached_tokens": usage.get("cached", 0)}
    if "cache_write" in usage:
        details["cache_write_tokens"] = usage["cache_write"]
    return {"input_tokens": usage.get("input", 0), "input_tokens_details": details,
            "output_tokens": usage.get("output", 0),
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning", 0)},
            "total_tokens": usage.get("input", 0) + usage.get("output", 0)}


def response_object(response_id: str, status: str, output: list[dict[str, Any]],
                    usage: dict[str, Any] | None) -> dict[str, Any]:
    """The response envelope with the recorded field set (values of a stateless call)."""
    return {"id": response_id, "object": "response", "created_at": CREATED_AT, "status": status,
            "background": False, "error": None, "incomplete_details": None, "instructions": None,
            "max_output_tokens": None, "max_tool_calls": None, "model": "fake-model", "output": output,
            "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None,
            "reasoning": {"effort": "medium", "summary": None}, "safety_identifier": None,
            "service_tier": "default", "store": False, "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto", "tools": [],
            "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None,
            "metadata": {}}


def _reasoning_events(index: int, summary: str | list[str] | tuple[str | list[str], ...]
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    item_id = f"rs_{_hex()}"
    parts = [_pieces(part) for part in (summary if isinstance(summary, tuple) else (summary,))]
    texts = ["".join(deltas) for deltas in parts if "".join(deltas)]
    encrypted = f"gAAAAAB-fake-encrypted-{item_id}"
    done = {"id": item_id, "type": "reasoning", "encrypted_content": encrypted,
            "summary": [{"type": "summary_text", "text": text} for text in texts]}
    events: list[dict[str, Any]] = [{"type": "response.output_item.added", "output_index": index,
                                     "item": {"id": item_id, "type": "reasoning",
                                              "encrypted_content": encrypted[:20], "summary": []}}]
    for number, deltas in enumerate(d for d in parts if d):
        text = "".join(deltas)
        events.append({"type": "response.reasoning_summary_part.added", "item_id": item_id, "output_index": index,
                       "summary_index": number, "part": {"type": "summary_text", "text": ""}})
        events += [{"type": "response.reasoning_summary_text.delta", "item_id": item_id, "output_index": index,
                    "summary_index": number, "delta": d, "obfuscation": "fake"} for d in deltas]
        events.append({"type": "response.reasoning_summary_text.done", "item_id": item_id, "output_index": index,
                       "summary_index": number, "text": text})
        events.append({"type": "response.reasoning_summary_part.done", "item_id": item_id, "output_index": index,
                       "summary_index": number, "part": {"type": "summary_text", "text": text}})
    events.append({"type": "response.output_item.done", "output_index": index, "item": done})
    return events, done


def _compaction_events(index: int, encrypted: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    item = {"id": f"cmp_{_hex()}", "type": "compaction", "encrypted_content": encrypted}
    return ([{"type": "response.output_item.added", "output_index": index, "item": item},
             {"type": "response.output_item.done", "output_index": index, "item": item}], item)


def _message_events(index: int, text: str | list[str], *, phase: str | None = None,
                    refusal: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A message item; ``refusal``: its one part is a refusal (``response.refusal.*`` events)."""
    item_id = f"msg_{_hex()}"
    deltas = _pieces(text)
    full = "".join(deltas)
    if refusal:
        part: dict[str, Any] = {"type": "refusal", "refusal": full}
        empty_part: dict[str, Any] = {"type": "refusal", "refusal": ""}
        delta_type, done_event = "response.refusal.delta", {"type": "response.refusal.done", "refusal": full}
    else:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": full}
        empty_part = {**part, "text": ""}
        delta_type, done_event = "response.output_text.delta", {"type": "response.output_text.done", "text": full,
                                                                "logprobs": []}  # type: ignore[dict-item]
    with_phase = {"phase": phase} if phase is not None else {}
    done = {"id": item_id, "type": "message", "status": "completed", "content": [part], **with_phase,
            "role": "assistant"}
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": index,
         "item": {"id": item_id, "type": "message", "status": "in_progress", "content": [], **with_phase,
                  "role": "assistant"}},
        {"type": "response.content_part.added", "item_id": item_id, "output_index": index, "content_index": 0,
         "part": empty_part},
    ]
    events += [{"type": delta_type, "item_id": item_id, "output_index": index, "content_index": 0, "delta": d,
                **({} if refusal else {"logprobs": []}), "obfuscation": "fake"} for d in deltas]
    events += [
        {"type": done_event["type"], "item_id": item_id, "output_index": index, "content_index": 0,
         **{k: v for k, v in done_event.items() if k != "type"}},
        {"type": "response.content_part.done", "item_id": item_id, "output_index": index, "content_index": 0,
         "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]
    return events, done


def _call_events(index: int, call_id: str, name: str, raw: str,
                 fragments: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    item_id = f"fc_{_hex()}"
    added = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
             "call_id": call_id, "name": name}
    done = {**added, "status": "completed", "arguments": raw}
    events: list[dict[str, Any]] = [{"type": "response.output_item.added", "output_index": index, "item": added}]
    events += [{"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index,
                "delta": d, "obfuscation": "fake"} for d in _pieces(raw, fragments)]
    events += [{"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index,
                "arguments": raw},
               {"type": "response.output_item.done", "output_index": index, "item": done}]
    return events, done


def _response(parts: list[tuple[list[dict[str, Any]], dict[str, Any]]], usage: dict[str, int] | None,
              status: str = "completed") -> Reply:
    response_id = f"resp_{_hex()}"
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_object(response_id, "in_progress", [], None)},
        {"type": "response.in_progress", "response": response_object(response_id, "in_progress", [], None)},
    ]
    output = []
    for part_events, item in parts:
        events += part_events
        output.append(item)
    final = response_object(response_id, status, output, wire_usage(usage))
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    events.append({"type": f"response.{status}", "response": final})
    return responses_events(events)


def _head(reasoning: str | list[str] | tuple[str | list[str], ...] | None, compaction: str | None) -> list[Any]:
    parts: list[Any] = []
    if compaction is not None:
        parts.append(_compaction_events(len(parts), compaction))
    if reasoning is not None:
        parts.append(_reasoning_events(len(parts), reasoning))
    return parts


def responses_text(text: str | list[str], *, reasoning: str | list[str] | tuple[str | list[str], ...] | None = None,
                   compaction: str | None = None, usage: dict[str, int] | None = DEFAULT_USAGE,
                   status: str = "completed", phase: str | None = None) -> Reply:
    """A streamed text answer, after an optional compaction item and reasoning item."""
    parts = _head(reasoning, compaction)
    parts.append(_message_events(len(parts), text, phase=phase))
    return _response(parts, usage, status)


def responses_refusal(text: str | list[str], *, usage: dict[str, int] | None = DEFAULT_USAGE) -> Reply:
    """The model declined: a message whose one content part is a ``refusal`` (status "completed")."""
    return _response([_message_events(0, text, refusal=True)], usage)


def responses_tool_calls(calls: list[tuple], *, text: str | list[str] | None = None,
                         reasoning: str | list[str] | tuple[str | list[str], ...] | None = None,
                         compaction: str | None = None, usage: dict[str, int] | None = DEFAULT_USAGE,
                         fragments: int = 3, phase: str | None = None) -> Reply:
    """function_call items whose arguments arrive as ``function_call_arguments.delta`` fragments."""
    parts = _head(reasoning, compaction)
    if text:
        parts.append(_message_events(len(parts), text, phase=phase))
    for call_id, name, raw in _calls(calls):
        parts.append(_call_events(len(parts), call_id or f"call_{_hex()[-24:]}", name, raw, fragments))
    return _response(parts, usage)


def responses_failed(code: str, message: str) -> Reply:
    """The response was created, then failed (its ``error`` says why)."""
    response_id = f"resp_{_hex()}"
    failed = response_object(response_id, "failed", [], None)
    failed["error"] = {"code": code, "message": message}
    return responses_events([
        {"type": "response.created", "response": response_object(response_id, "in_progress", [], None)},
        {"type": "response.failed", "response": failed},
    ])


def responses_error(code: str, message: str, *, after_text: str | None = None, nested: bool = True,
                    error_type: str | None = None) -> Reply:
    """An ``error`` event (optionally after some text): the stream ends there. The service nests
    the error (``{"type":"error","error":{"type","code","message","param"},"sequence_number"}``);
    ``nested=False`` sends the flat shape the API reference documents."""
    parts = [_message_events(0, after_text)] if after_text else []
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_object(f"resp_{_hex()}", "in_progress", [], None)}]
    for part_events, _item in parts:
        events += part_events[:3]  # added, content_part.added, the first delta: cut mid-message
    if nested:
        events.append({"type": "error", "error": {"type": error_type or code, "code": code, "message": message,
                                                  "param": None}})
    else:
        events.append({"type": "error", "code": code, "message": message, "param": None})
    return responses_events(events)

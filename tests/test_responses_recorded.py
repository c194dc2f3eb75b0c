"""Recorded-shape Responses streams: our builders reproduce the structure of a published
recording of the real API, and the official ``openai`` SDK, reading the very same bytes
from the same loopback server, sees what our provider sees.

The published recording (SwiftedMind/SwiftAgent, Tests/SwiftAgentTests/OpenAI/
OpenAIStreamingToolCallsTests.swift: gpt-5, store=false, reasoning.encrypted_content)
has two streams: a reasoning item then a function call, and a text answer. Their event
sequence and the keys of every event (in order) are written down below; the content
of our streams is our own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.kernel.messages import Message, OpaqueBlock
from app.providers.base import ModelRequest
from fake_llm_server import Reply, run_stream
from fake_responses_server import responses_text, responses_tool_calls

RESPONSE_KEYS = ["id", "object", "created_at", "status", "background", "error", "incomplete_details",
                 "instructions", "max_output_tokens", "max_tool_calls", "model", "output", "parallel_tool_calls",
                 "previous_response_id", "prompt_cache_key", "reasoning", "safety_identifier", "service_tier",
                 "store", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation",
                 "usage", "user", "metadata"]
ENVELOPE = ["type", "sequence_number", "response"]
ITEM_EVENT = ["type", "sequence_number", "output_index", "item"]
PART_EVENT = ["type", "sequence_number", "item_id", "output_index", "content_index", "part"]

# (event type, keys in order, keys of its item / part in order) as published.
PUBLISHED_FUNCTION_CALL_STREAM: list[tuple[str, list[str], list[str] | None]] = [
    ("response.created", ENVELOPE, None),
    ("response.in_progress", ENVELOPE, None),
    ("response.output_item.added", ITEM_EVENT, ["id", "type", "encrypted_content", "summary"]),
    ("response.output_item.done", ITEM_EVENT, ["id", "type", "encrypted_content", "summary"]),
    ("response.output_item.added", ITEM_EVENT, ["id", "type", "status", "arguments", "call_id", "name"]),
    *[("response.function_call_arguments.delta",
       ["type", "sequence_number", "item_id", "output_index", "delta", "obfuscation"], None)] * 3,
    ("response.function_call_arguments.done", ["type", "sequence_number", "item_id", "output_index", "arguments"],
     None),
    ("response.output_item.done", ITEM_EVENT, ["id", "type", "status", "arguments", "call_id", "name"]),
    ("response.completed", ENVELOPE, None),
]
PUBLISHED_TEXT_STREAM: list[tuple[str, list[str], list[str] | None]] = [
    ("response.created", ENVELOPE, None),
    ("response.in_progress", ENVELOPE, None),
    ("response.output_item.added", ITEM_EVENT, ["id", "type", "status", "content", "role"]),
    ("response.content_part.added", PART_EVENT, ["type", "annotations", "logprobs", "text"]),
    *[("response.output_text.delta", ["type", "sequence_number", "item_id", "output_index", "content_index",
                                      "delta", "logprobs", "obfuscation"], None)] * 3,
    ("response.output_text.done", ["type", "sequence_number", "item_id", "output_index", "content_index", "text",
                                   "logprobs"], None),
    ("response.content_part.done", PART_EVENT, ["type", "annotations", "logprobs", "text"]),
    ("response.output_item.done", ITEM_EVENT, ["id", "type", "status", "content", "role"]),
    ("response.completed", ENVELOPE, None),
]
PUBLISHED_USAGE_KEYS = ["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details",
                        "total_tokens"]


def frames(reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    """(event line, data) of every frame, checking the framing: one event line, one data line, blank line."""
    out = []
    for frame in reply.events:
        text = frame.decode("utf-8")
        assert text.endswith("\n\n") and text.count("\n") == 3, f"not one event + one data line: {text[:80]!r}"
        event_line, data_line = text[:-2].split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        data = json.loads(data_line[len("data: "):])
        assert data["type"] == event_line[len("event: "):]
        out.append((event_line[len("event: "):], data))
    return out


def structure(reply: Reply) -> list[tuple[str, list[str], list[str] | None]]:
    shape = []
    for kind, data in frames(reply):
        inner = data.get("item", data.get("part"))
        shape.append((kind, list(data), list(inner) if isinstance(inner, dict) else None))
    return shape


def function_call_stream() -> Reply:
    return responses_tool_calls([("read_file", {"path": "notes/todo.md"}, "call_rec_1")], reasoning="",
                                usage=dict(input=75, output=155, reasoning=128))


def text_stream() -> Reply:
    return responses_text("The file lists three open tasks.", usage=dict(input=114, output=15))


def compaction_stream() -> Reply:
    # server-side compaction: the compaction item first, then a summarised reasoning item and the answer
    return responses_text(["Continuing ", "from the ", "compacted state."], reasoning=["Checked ", "the plan."],
                          compaction="gAAAAAB-compacted-context-fake",
                          usage=dict(input=2_400, cached=1_024, output=40, reasoning=12))


def test_our_streams_have_the_published_structure() -> None:
    assert structure(function_call_stream()) == PUBLISHED_FUNCTION_CALL_STREAM
    assert structure(text_stream()) == PUBLISHED_TEXT_STREAM
    for reply in (function_call_stream(), text_stream()):
        kinds_and_data = frames(reply)
        assert [d["sequence_number"] for _k, d in kinds_and_data] == list(range(len(kinds_and_data)))
        completed = kinds_and_data[-1][1]["response"]
        assert list(completed) == RESPONSE_KEYS
        assert list(completed["usage"]) == PUBLISHED_USAGE_KEYS


def sdk_view(events: list[Any]) -> dict[str, Any]:
    """What the official SDK made of a stream."""
    final = events[-1].response
    return {
        "types": [e.type for e in events],
        "text": "".join(e.delta for e in events if e.type == "response.output_text.delta"),
        "thinking": "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta"),
        "output_text": final.output_text,
        "calls": [(o.call_id, o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"],
        "opaque": [o.to_dict() for o in final.output if o.type in ("reasoning", "compaction")],
        "usage": (final.usage.input_tokens, final.usage.input_tokens_details.cached_tokens,
                  final.usage.output_tokens, final.usage.output_tokens_details.reasoning_tokens),
        "status": final.status,
    }


def our_view(result: Any) -> dict[str, Any]:
    message = result.completed.message
    usage = result.completed.usage
    return {
        "text": result.text,
        "thinking": result.thinking,
        "output_text": message.text,
        "calls": [(u.id, u.name, u.input) for u in message.tool_uses],
        "opaque": [b.item for b in message.content if isinstance(b, OpaqueBlock)],
        "usage": (usage.total_input, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens),
    }


@pytest.mark.xdist_group("official-sdks")  # the worker that imports the SDKs (test_providers_replay.py)
@pytest.mark.parametrize("make", [function_call_stream, text_stream, compaction_stream],
                         ids=["reasoning+function_call", "text", "compaction+reasoning+text"])
async def test_the_official_sdk_reads_the_same_bytes_the_same_way(fake_llm, make) -> None:
    import openai  # here, not at the top: every xdist worker collects this file, few run it

    reply = make()
    fake_llm.enqueue(reply, reply)
    client = openai.AsyncOpenAI(api_key="sk-test-fake-key-0123456789", base_url=fake_llm.base_url("responses"),
                                max_retries=0)
    try:
        stream = await client.responses.create(model="fake-model", input="hi", stream=True)
        events = [event async for event in stream]
    finally:
        await client.close()
    sdk = sdk_view(events)
    assert sdk["types"] == [kind for kind, _data in frames(reply)]  # every frame became one typed event
    assert sdk["status"] == "completed"

    provider = fake_llm.provider("responses")
    try:
        ours = our_view(await run_stream(provider, ModelRequest(system="", messages=[Message.user("hi")],
                                                                tools=[])))
    finally:
        await provider.aclose()
    assert ours == {k: v for k, v in sdk.items() if k in ours}
    assert fake_llm.requests[0].path == fake_llm.requests[1].path == "/v1/responses"

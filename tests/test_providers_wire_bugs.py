"""The five wire bugs of issue 14, each through the real provider and the loopback server.

Refusals lost, redacted thinking dropped, a tool call cut by the output limit executed,
a last line without newline rejected, and OpenAI's cache_write_tokens ignored.
"""

from __future__ import annotations

import json
from typing import Any

from agent_helpers import make_agent
from app.kernel.messages import Message, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolSpec, ToolUseBlock
from app.providers.base import ModelRequest
from fake_llm_server import (
    anthropic_events,
    anthropic_text,
    openai_chunk,
    openai_events,
    openai_text,
    openai_usage,
    raw_sse,
    run_stream,
)

WRITE_FILE = ToolSpec(name="write_file", description="Write a file", input_schema={
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}})


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=list(messages) or [Message.user("hi")],
                        tools=[WRITE_FILE])


# ---- 1. refusals ----

def _refusal_stream() -> Any:
    head = openai_chunk({"role": "assistant", "content": None, "refusal": ""})
    pieces = [openai_chunk({"refusal": p}) for p in ["I'm", " sorry,", " I can't", " help with that."]]
    return openai_events([head, *pieces, openai_chunk({}, "stop"),
                          openai_chunk(usage=openai_usage(30, 9), choices=False)])


async def test_an_openai_refusal_is_the_reply_with_its_own_stop_reason(fake_llm) -> None:
    fake_llm.enqueue(_refusal_stream())
    provider = fake_llm.provider("openai")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert result.text == "I'm sorry, I can't help with that."  # streamed as it came
    assert result.completed.message.text == "I'm sorry, I can't help with that."
    assert result.completed.stop_reason == "refusal"


async def test_a_refusal_ends_the_turn_as_refusal_in_the_result(fake_llm, tmp_path, monkeypatch) -> None:
    fake_llm.enqueue(_refusal_stream())
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    try:
        result = await agent.run_turn("do something bad")
    finally:
        await agent.aclose()
    assert result.stop_reason == "refusal"
    assert result.text == "I'm sorry, I can't help with that."
    assert events.of("assistant_message")[-1].text == result.text


# ---- 2. redacted thinking ----

def _anthropic_thinking_tool_turn() -> Any:
    return anthropic_events([
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                              "model": "m", "content": [], "stop_reason": None,
                                              "usage": {"input_tokens": 50, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Need the file."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG-A"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \".\"}"}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ])


async def test_redacted_thinking_is_kept_and_sent_back_unchanged_in_the_tool_loop(
        fake_llm, tmp_path, monkeypatch) -> None:
    fake_llm.enqueue(_anthropic_thinking_tool_turn(), anthropic_text("Done."))
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    try:
        result = await agent.run_turn("list the files")
    finally:
        await agent.aclose()
    assert result.stop_reason == "end_turn"
    assistant = fake_llm.requests[1].json["messages"][1]
    assert assistant["role"] == "assistant"
    # the whole thinking sequence, in order, signature and opaque data untouched
    assert assistant["content"][:3] == [
        {"type": "thinking", "thinking": "Need the file.", "signature": "SIG-A"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
        {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {"path": "."}},
    ]
    kept = agent.history[1].content
    assert [type(b) for b in kept[:2]] == [ThinkingBlock, RedactedThinkingBlock]


def test_redacted_thinking_never_reaches_an_openai_compatible_server() -> None:
    from app.providers.openai import to_openai_messages

    history = [Message.user("hi"), Message(role="assistant", content=[
        RedactedThinkingBlock(data="opaque"), TextBlock(text="hello")])]
    wire = to_openai_messages("sys", history)
    assert "opaque" not in json.dumps(wire)
    assert wire[-1] == {"role": "assistant", "content": "hello"}


# ---- 3. a tool call cut by the output limit ----

def _anthropic_cut_write() -> Any:
    return anthropic_events([
        {"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant",
                                              "model": "m", "content": [], "stop_reason": None,
                                              "usage": {"input_tokens": 50, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_cut", "name": "write_file", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"big.txt\", \"content\": \"line 1\\nli"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
         "usage": {"output_tokens": 4096}},
        {"type": "message_stop"},
    ])


def _openai_cut_write() -> Any:
    return openai_events([
        openai_chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_cut", "type": "function", "function": {"name": "write_file", "arguments": ""}}]}),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"big.txt\",\"content\":\"li"}}]}),
        openai_chunk({}, "length"),
        openai_chunk(usage=openai_usage(50, 4096), choices=False),
    ])


async def test_anthropic_tool_call_cut_at_max_tokens_is_marked(fake_llm) -> None:
    fake_llm.enqueue(_anthropic_cut_write())
    provider = fake_llm.provider("anthropic")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    (use,) = result.completed.message.tool_uses
    assert use.cut_at_output_limit and result.completed.cut_tool_ids == ["toolu_cut"]
    assert use.input == {}  # the half-written arguments are not passed off as the model's


async def test_a_complete_call_before_the_cut_one_is_not_marked(fake_llm) -> None:
    fake_llm.enqueue(openai_events([
        openai_chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_ok", "type": "function", "function": {"name": "write_file",
                                                                          "arguments": "{\"path\":\"a\"}"}}]}),
        openai_chunk({"tool_calls": [{"index": 1, "id": "call_cut", "type": "function",
                                      "function": {"name": "write_file", "arguments": "{\"pa"}}]}),
        openai_chunk({}, "length"),
    ]))
    provider = fake_llm.provider("openai")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert result.completed.cut_tool_ids == ["call_cut"]
    assert result.completed.message.tool_uses[0].input == {"path": "a"}


async def _run_cut(fake_llm, tmp_path, monkeypatch, provider: str, first: Any, final: Any):
    fake_llm.enqueue(first, final)
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, yes=True)
    try:
        result = await agent.run_turn("write big.txt")
    finally:
        await agent.aclose()
    return agent, events, result


async def test_a_cut_anthropic_call_is_not_run_and_the_model_is_told(fake_llm, tmp_path, monkeypatch) -> None:
    agent, events, result = await _run_cut(fake_llm, tmp_path, monkeypatch, "anthropic",
                                           _anthropic_cut_write(), anthropic_text("I'll write it in parts."))
    assert result.stop_reason == "end_turn"
    assert not (tmp_path / "work" / "big.txt").exists()
    (tool_result,) = events.of("tool_result")
    assert tool_result.is_error and "output token limit" in tool_result.content  # the user sees why
    sent = fake_llm.requests[1].json["messages"]
    assert sent[1]["content"] == [{"type": "tool_use", "id": "toolu_cut", "name": "write_file", "input": {}}]
    answer = sent[2]["content"][0]
    assert answer["tool_use_id"] == "toolu_cut" and answer["is_error"] is True
    assert "retry with smaller arguments" in answer["content"].lower()


async def test_a_cut_openai_call_is_not_run_and_the_model_is_told(fake_llm, tmp_path, monkeypatch) -> None:
    _agent, events, _result = await _run_cut(fake_llm, tmp_path, monkeypatch, "openai",
                                             _openai_cut_write(), openai_text("Splitting it up."))
    assert not (tmp_path / "work" / "big.txt").exists()
    assert "output token limit" in events.of("tool_result")[0].content
    tool_message = fake_llm.requests[1].json["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_cut"
    assert "output token limit" in tool_message["content"]
    assert "_raw_arguments" not in json.dumps(fake_llm.requests[1].json)


# ---- 4. a last line without newline ----

async def test_anthropic_stream_whose_last_line_has_no_newline_completes(fake_llm) -> None:
    body = b"".join(anthropic_text("All good.").events).rstrip(b"\n")
    assert body.endswith(b'{"type": "message_stop"}')
    fake_llm.enqueue(raw_sse(body))
    provider = fake_llm.provider("anthropic")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert result.error is None and result.completed.message.text == "All good."


async def test_openai_final_usage_chunk_without_newline_is_kept(fake_llm) -> None:
    chunks = [openai_chunk({"role": "assistant", "content": "ok"}), openai_chunk({}, "stop"),
              openai_chunk(usage=openai_usage(40, 2), choices=False)]
    body = b"".join(openai_events(chunks, done=False).events).rstrip(b"\n")
    fake_llm.enqueue(raw_sse(body))
    provider = fake_llm.provider("openai")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert result.completed.usage.total_input == 40 and result.completed.usage.output_tokens == 2


async def test_a_last_line_cut_mid_json_is_still_a_cut_stream(fake_llm) -> None:
    body = b"".join(anthropic_text("Half").events)
    body = body[: body.rindex(b"message_stop") - 5]  # inside the message_delta/message_stop lines
    fake_llm.enqueue(raw_sse(body))
    provider = fake_llm.provider("anthropic")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert result.completed is None and "message_stop" in str(result.error)


# ---- 5. cache_write_tokens ----

async def test_openai_cache_write_tokens_are_mapped(fake_llm) -> None:
    usage = openai_usage(1_000, 10, cached=600)
    usage["prompt_tokens_details"]["cache_write_tokens"] = 300
    fake_llm.enqueue(openai_events([openai_chunk({"role": "assistant", "content": "hi"}), openai_chunk({}, "stop"),
                                    openai_chunk(usage=usage, choices=False)]))
    provider = fake_llm.provider("openai")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    got = result.completed.usage
    assert (got.cache_read_tokens, got.cache_write_tokens) == (600, 300)
    assert got.total_input == 1_000  # prompt_tokens already holds both: nothing counted twice


async def test_a_call_cut_before_any_argument_is_not_run_either(fake_llm) -> None:
    fake_llm.enqueue(anthropic_events([
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m",
                                              "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Writing now."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_empty", "name": "write_file", "input": {}}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}},
        {"type": "message_stop"},
    ]))
    provider = fake_llm.provider("anthropic")
    try:
        result = await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert result.completed.cut_tool_ids == ["toolu_empty"]


def test_redacted_thinking_and_the_cut_mark_survive_the_transcript_round_trip() -> None:
    message = Message(role="assistant", content=[
        RedactedThinkingBlock(data="opaque=="),
        ToolUseBlock(id="t", name="write_file", input={}, cut_at_output_limit=True)])
    again = Message.model_validate_json(message.model_dump_json())
    assert again == message

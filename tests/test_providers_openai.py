"""The OpenAI-compatible provider (and its DeepSeek preset) against the local fake server."""

from __future__ import annotations

import email.utils
import json
import socket
import time
from typing import Any

import pytest

from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.providers.base import (
    APIError,
    ConnectError,
    ContextTooLongError,
    StreamCutError,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.kernel.usage import Usage
from fake_llm_server import (
    Reply,
    cut_after,
    empty_200,
    http_error,
    openai_chunk,
    openai_error_body,
    openai_events,
    openai_text,
    openai_tool_calls,
    run_stream,
    stall_after,
    stream_error,
)
from provider_helpers import provider_fixture, request

provider = provider_fixture("openai")


def openai_history_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What a Chat Completions server would reject: unanswered or orphan tool calls, bad arguments."""
    problems = []
    answered: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            following = messages[i + 1:i + 1 + len(ids)]
            if [f["role"] for f in following] != ["tool"] * len(ids) or \
                    sorted(f["tool_call_id"] for f in following) != sorted(ids):
                problems.append(f"message {i}: tool calls {ids} not answered right after")
            answered.update(ids)
            for call in m["tool_calls"]:
                if not isinstance(json.loads(call["function"]["arguments"]), dict):
                    problems.append(f"message {i}: arguments not a JSON object")
        if m["role"] == "tool" and m["tool_call_id"] not in answered:
            problems.append(f"message {i}: orphan tool result {m['tool_call_id']}")
    return problems


# ---- streaming text, request shape ----

async def test_text_streams_in_deltas_and_completes(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text(["Hel", "lo, ", "world"]))
    result = await run_stream(provider, request())
    assert result.text == "Hello, world"
    assert result.completed.message.text == "Hello, world"
    assert result.completed.stop_reason == "end_turn"
    path, headers, body = fake_llm.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer sk-test-fake-key-0123456789"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert body["max_tokens"] == 16_000
    assert body["tools"][0]["function"]["parameters"]["required"] == ["path"]
    assert body["tool_choice"] == "auto"


async def test_tool_choice_none_is_sent_and_omitted_without_tools(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text("a"), openai_text("b"))
    await run_stream(provider, request(tool_choice="none"))
    await run_stream(provider, request(tools=[]))
    assert fake_llm.requests[0].json["tool_choice"] == "none"
    assert "tool_choice" not in fake_llm.requests[1].json and "tools" not in fake_llm.requests[1].json


async def test_one_client_is_reused_across_calls(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text("a"), openai_text("b"))
    assert (await run_stream(provider, request())).completed
    assert (await run_stream(provider, request())).completed
    assert fake_llm.client_ports[0] == fake_llm.client_ports[1]  # same keep-alive connection


async def test_keep_alive_comments_are_ignored(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text("steady", keepalive=True))
    assert (await run_stream(provider, request())).completed.message.text == "steady"


# ---- tool calls ----

async def test_tool_calls_assembled_by_index_with_repeated_ids_and_interleaving(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_tool_calls(
        [("read_file", {"path": "src/main.py"}, "call_a"), ("read_file", {"path": "README.md"}, "call_b")],
        text="Reading both.", repeat_ids=True, interleave=True, fragments=4))
    result = await run_stream(provider, request())
    message = result.completed.message
    assert result.completed.stop_reason == "tool_use"
    assert message.text == "Reading both."
    assert [(t.id, t.name, t.input) for t in message.tool_uses] == [
        ("call_a", "read_file", {"path": "src/main.py"}), ("call_b", "read_file", {"path": "README.md"})]
    starts = [e for e in result.events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [(0, "call_a", "read_file"), (1, "call_b", "read_file")]
    by_index: dict[int, str] = {}
    for e in result.events:
        if isinstance(e, ToolCallDelta):
            by_index[e.index] = by_index.get(e.index, "") + e.partial_json
    assert json.loads(by_index[0]) == {"path": "src/main.py"}


async def test_invalid_arguments_keep_the_raw_text(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_tool_calls([("read_file", '{"path": "a.txt"')]))
    message = (await run_stream(provider, request())).completed.message
    assert message.tool_uses[0].input == {"_raw_arguments": '{"path": "a.txt"'}


async def test_stop_with_tool_calls_still_means_tool_use(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "a"})], finish_reason="stop"))
    assert (await run_stream(provider, request())).completed.stop_reason == "tool_use"


@pytest.mark.parametrize("finish, expected", [("length", "max_tokens"), ("content_filter", "content_filter")])
async def test_finish_reason_mapping(fake_llm, provider, finish, expected) -> None:
    fake_llm.enqueue(openai_text("cut", finish_reason=finish))
    assert (await run_stream(provider, request())).completed.stop_reason == expected


# ---- usage ----

async def test_cached_tokens_are_split_out_of_prompt_tokens(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text("ok", usage=dict(prompt=120, completion=5, cached=64)))
    result = await run_stream(provider, request())
    usage = result.completed.usage
    assert usage == Usage(input_tokens=56, cache_read_tokens=64, cache_write_tokens=0, output_tokens=5)
    assert usage.total_input == 120 and usage.context_tokens == 125
    assert [e.usage for e in result.events if isinstance(e, UsageUpdate)] == [usage]


async def test_deepseek_hit_and_miss_take_precedence(fake_llm) -> None:
    provider = fake_llm.provider("deepseek")
    fake_llm.enqueue(openai_text("ok", usage=dict(prompt=1000, completion=7, cached=3, hit=900, miss=100)))
    usage = (await run_stream(provider, request())).completed.usage
    await provider.aclose()
    assert (usage.input_tokens, usage.cache_read_tokens, usage.context_tokens) == (100, 900, 1007)


async def test_a_server_without_usage_reports_it_unknown(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text("no usage here", usage=None))
    result = await run_stream(provider, request())
    assert result.completed.message.text == "no usage here"
    assert result.completed.usage == Usage() and not result.completed.usage.known
    assert result.completed.usage.context_tokens is None


# ---- history conversion ----

def tool_history() -> list[Message]:
    return [
        Message.user("look at two files"),
        Message(role="assistant", content=[
            ThinkingBlock(thinking="I should read both."),
            TextBlock(text="Reading."),
            ToolUseBlock(id="c1", name="read_file", input={"path": "a"}),
            ToolUseBlock(id="c2", name="read_file", input={"path": "b"}),
        ]),
        Message(role="user", content=[
            ToolResultBlock(tool_use_id="c1", content="AAA"),
            ToolResultBlock(tool_use_id="c2", content="no such file", is_error=True),
            TextBlock(text="also check c"),
        ]),
        Message(role="assistant", content=[ToolUseBlock(id="c3", name="read_file", input={"path": "c"})]),
        Message(role="user", content=[ToolResultBlock(tool_use_id="c3", content="CCC")]),
        Message(role="assistant", content=[ThinkingBlock(thinking="done"), TextBlock(text="All read.")]),
        Message.user("thanks"),
    ]


async def test_history_becomes_valid_chat_completions_messages(fake_llm, provider) -> None:
    fake_llm.enqueue(openai_text("ok"))
    await run_stream(provider, request(*tool_history()))
    sent = fake_llm.requests[0].json["messages"]
    assert openai_history_problems(sent) == []
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "user",
                                         "assistant", "tool", "assistant", "user"]
    assistant = sent[2]
    assert assistant["content"] == "Reading."
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [{"path": "a"}, {"path": "b"}]
    assert sent[3] == {"role": "tool", "tool_call_id": "c1", "content": "AAA"}
    assert sent[4]["content"].startswith("Error:") and "no such file" in sent[4]["content"]
    assert sent[5] == {"role": "user", "content": "also check c"}
    assert sent[6]["content"] == ""  # not null: llama.cpp's server answers a null content with HTTP 500
    # plain OpenAI never gets reasoning_content
    assert all("reasoning_content" not in m for m in sent)


async def test_deepseek_gets_reasoning_content_back_on_tool_turns_only(fake_llm) -> None:
    provider = fake_llm.provider("deepseek")
    fake_llm.enqueue(openai_text("ok"))
    await run_stream(provider, request(*tool_history()))
    await provider.aclose()
    path, _, body = fake_llm.requests[0]
    assert path == "/chat/completions"  # DeepSeek's base has no /v1
    assistants = [m for m in body["messages"] if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == "I should read both."
    assert assistants[1]["reasoning_content"] == ""  # a tool turn without thinking still sends it
    assert "reasoning_content" not in assistants[2]  # no tool calls: not sent


async def test_deepseek_reasoning_streams_as_thinking_and_is_kept(fake_llm) -> None:
    provider = fake_llm.provider("deepseek")
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "x"})], reasoning="Need the file first."))
    result = await run_stream(provider, request())
    await provider.aclose()
    assert result.thinking == "Need the file first."
    thinking = [b for b in result.completed.message.content if isinstance(b, ThinkingBlock)]
    assert thinking[0].thinking == "Need the file first."
    # round trip: the next request carries it back
    fake_llm.enqueue(openai_text("ok"))
    provider = fake_llm.provider("deepseek")
    history = [Message.user("go"), result.completed.message,
               Message(role="user", content=[ToolResultBlock(tool_use_id=result.completed.message.tool_uses[0].id,
                                                             content="data")])]
    await run_stream(provider, request(*history))
    await provider.aclose()
    assistant = fake_llm.requests[1].json["messages"][2]
    assert assistant["reasoning_content"] == "Need the file first."
    assert openai_history_problems(fake_llm.requests[1].json["messages"]) == []


# ---- failures ----

async def test_stream_cut_mid_body_is_a_stream_cut_error(fake_llm, provider) -> None:
    fake_llm.enqueue(cut_after(openai_tool_calls([("read_file", {"path": "a"})]), 4))
    result = await run_stream(provider, request())
    assert isinstance(result.error, StreamCutError) and result.completed is None


async def test_stream_ending_cleanly_without_finish_reason_is_cut(fake_llm, provider) -> None:
    fake_llm.enqueue(cut_after(openai_text("half an ans"), 3, abort=False),
                     openai_events([openai_chunk({"content": "no finish"})], done=True))
    first = await run_stream(provider, request())
    second = await run_stream(provider, request())
    assert isinstance(first.error, StreamCutError) and "finish_reason" in str(first.error)
    assert isinstance(second.error, StreamCutError) and "[DONE]" in str(second.error)


async def test_a_drop_after_finish_reason_keeps_the_answer_with_usage_unknown(fake_llm, provider) -> None:
    reply = openai_text("complete answer", usage=dict(prompt=50, completion=3))
    fake_llm.enqueue(cut_after(reply, len(reply.events) - 2))  # finish chunk sent; usage and [DONE] lost
    result = await run_stream(provider, request())
    assert result.error is None
    assert result.completed.message.text == "complete answer" and not result.completed.usage.known


async def test_empty_200_body_is_a_stream_cut_error(fake_llm, provider) -> None:
    fake_llm.enqueue(empty_200())
    result = await run_stream(provider, request())
    assert isinstance(result.error, StreamCutError) and "empty" in str(result.error)


async def test_error_inside_the_stream_carries_the_servers_message(fake_llm, provider) -> None:
    fake_llm.enqueue(stream_error("openai", "upstream model crashed", "server_error"))
    result = await run_stream(provider, request())
    assert isinstance(result.error, APIError) and result.completed is None
    assert result.error.message == "upstream model crashed" and result.error.error_type == "server_error"
    assert result.text == "Partial "  # what streamed before is shown, but never completed
    assert result.error.retryable  # it failed while generating: worth another try


async def test_an_in_stream_error_about_the_request_is_not_retried(fake_llm, provider) -> None:
    fake_llm.enqueue(stream_error("openai", "Invalid tool schema", "invalid_request_error"))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, APIError) and not error.retryable


async def test_non_2xx_gives_the_servers_message_and_status(fake_llm, provider) -> None:
    fake_llm.enqueue(http_error(401, openai_error_body("Incorrect API key provided", "invalid_request_error",
                                                       "invalid_api_key")))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, APIError) and not isinstance(error, ContextTooLongError)
    assert (error.status, error.message, error.retryable) == (401, "Incorrect API key provided", False)
    assert "401" in str(error)


async def test_non_json_error_body_is_still_reported(fake_llm, provider) -> None:
    fake_llm.enqueue(http_error(502, "<html>Bad Gateway</html>"))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, APIError) and error.status == 502 and "Bad Gateway" in error.message
    assert error.retryable


async def test_retry_after_seconds_and_http_date(fake_llm, provider) -> None:
    body = openai_error_body("Rate limit reached", "requests", "rate_limit_exceeded")
    date = email.utils.formatdate(time.time() + 40, usegmt=True)
    fake_llm.enqueue(http_error(429, body, {"Retry-After": "7"}), http_error(503, body, {"Retry-After": date}))
    first = (await run_stream(provider, request())).error
    second = (await run_stream(provider, request())).error
    assert first.retry_after == 7.0 and first.retryable
    assert 20 < second.retry_after <= 40 and second.retryable


@pytest.mark.parametrize("status, body, actual, limit", [
    (400, openai_error_body("This model's maximum context length is 128000 tokens. However, your messages "
                            "resulted in 130000 tokens. Please reduce the length of the messages.",
                            "invalid_request_error", "context_length_exceeded"), 130000, 128000),
    (400, openai_error_body("This model's maximum context length is 131072 tokens. However, you requested "
                            "131134 tokens (122942 in the messages, 8192 in the completion). Please reduce "
                            "the length of the messages or completion.", "invalid_request_error",
                            "invalid_request_error"), 131134, 131072),
    (400, openai_error_body("Your input exceeds the context window of this model. Please adjust your input "
                            "and try again.", "invalid_request_error", "context_length_exceeded"), None, None),
    (400, openai_error_body("Request too large", "invalid_request_error", "context_length_exceeded"), None, None),
])
async def test_too_long_becomes_context_too_long_with_counts(fake_llm, provider, status, body, actual,
                                                            limit) -> None:
    fake_llm.enqueue(http_error(status, body))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, ContextTooLongError)
    assert (error.actual_tokens, error.limit_tokens) == (actual, limit)
    assert not error.retryable


async def test_stall_past_the_read_timeout_is_a_stream_cut_error(fake_llm) -> None:
    provider = fake_llm.provider("openai", timeout_read=0.3)
    fake_llm.enqueue(stall_after(openai_text("thinking very hard"), 2))
    result = await run_stream(provider, request())
    await provider.aclose()
    assert isinstance(result.error, StreamCutError) and "stalled" in str(result.error)
    assert result.completed is None


async def test_unreachable_server_is_a_connect_error(fake_llm) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = fake_llm.provider("openai", base_url=f"http://127.0.0.1:{port}/v1", timeout_connect=2)
    result = await run_stream(provider, request())
    await provider.aclose()
    assert isinstance(result.error, ConnectError) and result.error.retryable


async def test_the_api_key_never_appears_in_an_error(fake_llm) -> None:
    key = "sk-live-SECRET-abcdef0123456789"
    provider = fake_llm.provider("openai", api_key=key)
    fake_llm.enqueue(
        http_error(401, openai_error_body(f"Incorrect API key provided: {key}.", "invalid_request_error")),
        stream_error("openai", f"bad key {key}", "auth_error"),
    )
    errors = [(await run_stream(provider, request())).error for _ in range(2)]
    await provider.aclose()
    for error in errors:
        assert isinstance(error, APIError)
        assert key not in str(error) and key not in error.message and key not in repr(error.args)


async def test_a_server_ignoring_stream_true_is_understood(fake_llm, provider) -> None:
    body = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"q\"}"}}]}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 9}}
    fake_llm.enqueue(Reply(body=json.dumps(body).encode(), content_type="application/json"))
    completed = (await run_stream(provider, request())).completed
    assert completed.message.text == "Let me look."
    assert completed.message.tool_uses[0].input == {"path": "q"}
    assert completed.usage.context_tokens == 59


async def test_a_json_error_in_a_200_body_is_an_api_error(fake_llm, provider) -> None:
    fake_llm.enqueue(Reply(body=json.dumps(openai_error_body("model is loading", "server_error")).encode(),
                           content_type="text/event-stream"))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, APIError) and error.message == "model is loading"


async def test_unscripted_request_fails_loudly(fake_llm, provider) -> None:
    fake_llm.allow_unscripted = True  # this test is about the message itself
    error = (await run_stream(provider, request())).error
    assert isinstance(error, APIError) and error.status == 500
    assert "no scripted reply left" in error.message
    assert fake_llm.unscripted


def test_reasoning_tokens_are_read_from_completion_tokens_details() -> None:
    """Issue 28: OpenAI reasoning models and DeepSeek's reasoner report the reasoning share of the
    output under completion_tokens_details; it reaches the usage line like Responses' does."""
    from app.providers.openai import parse_openai_usage

    openai_o = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
    usage = parse_openai_usage(openai_o)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        176, 1024, 300, 192)
    deepseek = {"prompt_tokens": 40, "completion_tokens": 900, "prompt_cache_hit_tokens": 0,
                "prompt_cache_miss_tokens": 40, "completion_tokens_details": {"reasoning_tokens": 850}}
    assert parse_openai_usage(deepseek).reasoning_tokens == 850
    # absent, or not a count: unknown, never a guess
    assert parse_openai_usage({"prompt_tokens": 5, "completion_tokens": 2}).reasoning_tokens is None
    for bad in (True, -1, "7", None, 1.5):
        shaped = {"prompt_tokens": 5, "completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": bad}}
        assert parse_openai_usage(shaped).reasoning_tokens is None

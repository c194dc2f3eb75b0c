"""The Anthropic Messages provider against the local fake server."""

from __future__ import annotations

from typing import Any

import pytest

from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.providers.base import (
    APIError,
    ContextTooLongError,
    StreamCutError,
    ThinkingDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.providers.too_long import parse_too_long
from app.kernel.usage import Usage
from fake_llm_server import (
    anthropic_error_body,
    anthropic_events,
    anthropic_text,
    anthropic_tool_calls,
    cut_after,
    empty_200,
    http_error,
    run_stream,
    stall_after,
    stream_error,
)
from provider_helpers import READ_FILE, provider_fixture, request

provider = provider_fixture("anthropic")


def anthropic_history_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What the Messages API would reject: roles not alternating, results not right after their calls."""
    problems = []
    if messages and messages[0]["role"] != "user":
        problems.append("first message is not from the user")
    for i, m in enumerate(messages):
        if i and messages[i - 1]["role"] == m["role"]:
            problems.append(f"message {i}: two {m['role']} messages in a row")
        if any(b["type"] == "text" and not b["text"] for b in m["content"]):
            problems.append(f"message {i}: empty text block")
        calls = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        if calls:
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else []
            leading = [b["tool_use_id"] for b in nxt[:len(calls)] if b["type"] == "tool_result"]
            if sorted(leading) != sorted(calls):
                problems.append(f"message {i}: tool calls {calls} not answered first in the next message")
    return problems


# ---- streaming, request shape ----

async def test_text_and_signed_thinking_stream_and_complete(fake_llm, provider) -> None:
    provider.prompt_caching = False  # the wire shape without cache marks (they are tested in test_providers_params)
    fake_llm.enqueue(anthropic_text(["Hel", "lo"], thinking="Simple greeting.", signature="sig-123"))
    result = await run_stream(provider, request())
    assert result.text == "Hello" and result.thinking == "Simple greeting."
    content = result.completed.message.content
    assert content[0] == ThinkingBlock(thinking="Simple greeting.", signature="sig-123")
    assert content[1] == TextBlock(text="Hello")
    assert result.completed.stop_reason == "end_turn"
    path, headers, body = fake_llm.requests[0]
    assert path == "/v1/messages"
    assert headers["x-api-key"] == "sk-test-fake-key-0123456789"
    assert headers["anthropic-version"] == "2023-06-01"
    assert body["system"] == "You are terse." and body["stream"] is True and body["max_tokens"] == 16_000
    assert body["tools"] == [{"name": "read_file", "description": "Read a file",
                              "input_schema": READ_FILE.input_schema}]
    assert body["tool_choice"] == {"type": "auto"}


async def test_tool_choice_none_and_no_tools(fake_llm, provider) -> None:
    fake_llm.enqueue(anthropic_text("a"), anthropic_text("b"))
    await run_stream(provider, request(tool_choice="none"))
    await run_stream(provider, request(tools=[]))
    assert fake_llm.requests[0].json["tool_choice"] == {"type": "none"}
    assert "tool_choice" not in fake_llm.requests[1].json


async def test_tool_use_input_assembled_from_json_fragments(fake_llm, provider) -> None:
    fake_llm.enqueue(anthropic_tool_calls(
        [("read_file", {"path": "README.md"}, "toolu_1"), ("read_file", {"path": "日本語.txt"}, "toolu_2")],
        text="Two files.", fragments=5))
    result = await run_stream(provider, request())
    message = result.completed.message
    assert result.completed.stop_reason == "tool_use"
    assert message.text == "Two files."
    assert [(t.id, t.input) for t in message.tool_uses] == [("toolu_1", {"path": "README.md"}),
                                                             ("toolu_2", {"path": "日本語.txt"})]
    assert [(e.id, e.name) for e in result.events if isinstance(e, ToolCallStart)] == [
        ("toolu_1", "read_file"), ("toolu_2", "read_file")]


async def test_cached_usage_adds_up_and_the_last_message_delta_wins(fake_llm, provider) -> None:
    reply = anthropic_tool_calls([("read_file", {"path": "a"})],
                                 usage=dict(input=472, output=89, cache_read=2048, cache_write=0))
    fake_llm.enqueue(reply)
    result = await run_stream(provider, request())
    usage = result.completed.usage
    assert usage == Usage(input_tokens=472, cache_read_tokens=2048, cache_write_tokens=0, output_tokens=89)
    assert usage.total_input == 2520 and usage.context_tokens == 2609
    updates = [e.usage.output_tokens for e in result.events if isinstance(e, UsageUpdate)]
    assert updates == [1, 89]  # message_start's placeholder, then the cumulative figure


async def test_cumulative_message_deltas_are_not_summed(fake_llm, provider) -> None:
    start = {"type": "message_start", "message": {"id": "m", "role": "assistant", "content": [],
             "usage": {"input_tokens": 10, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 0,
                       "output_tokens": 1}}}
    fake_llm.enqueue(anthropic_events([
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 30}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 45}},
        {"type": "message_stop"},
    ]))
    usage = (await run_stream(provider, request())).completed.usage
    assert (usage.output_tokens, usage.cache_write_tokens, usage.total_input) == (45, 300, 310)


async def test_no_usage_at_all_is_unknown(fake_llm, provider) -> None:
    fake_llm.enqueue(anthropic_text("quiet server", usage=None))
    completed = (await run_stream(provider, request())).completed
    assert completed.message.text == "quiet server" and completed.usage == Usage()


async def test_unknown_events_and_delta_types_are_tolerated(fake_llm, provider) -> None:
    reply = anthropic_text("fine")
    extra = anthropic_events([
        {"type": "brand_new_event", "whatever": 1},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta", "citation": {}}},
    ])
    reply.events[2:2] = extra.events  # after message_start and ping
    fake_llm.enqueue(reply)
    assert (await run_stream(provider, request())).completed.message.text == "fine"


async def test_deepseek_anthropic_compatible_base_url(fake_llm) -> None:
    provider = fake_llm.provider("anthropic", base_url=f"{fake_llm.url}/anthropic")
    fake_llm.enqueue(anthropic_text("from deepseek", thinking="unsigned", signature=None))
    result = await run_stream(provider, request())
    assert fake_llm.requests[0].path == "/anthropic/v1/messages"
    # DeepSeek's thinking carries no signature and is sent back anyway
    fake_llm.enqueue(anthropic_text("again"))
    await run_stream(provider, request(Message.user("hi"), result.completed.message, Message.user("more")))
    await provider.aclose()
    sent = fake_llm.requests[1].json["messages"][1]["content"]
    assert sent[0] == {"type": "thinking", "thinking": "unsigned"}


def test_unsigned_thinking_is_not_sent_to_anthropic_itself() -> None:
    from app.providers.anthropic import AnthropicProvider

    history = [Message.user("hi"), Message(role="assistant", content=[ThinkingBlock(thinking="from elsewhere"),
                                                                     TextBlock(text="hello")]), Message.user("more")]
    body = AnthropicProvider("m", "https://api.anthropic.com", "k").build_body(request(*history))
    assert body["messages"][1]["content"] == [{"type": "text", "text": "hello"}]


# ---- history conversion ----

async def test_history_is_valid_for_the_messages_api(fake_llm, provider) -> None:
    history = [
        Message.user("task"),
        Message.user("and one more thing"),  # two user messages in a row: merged
        Message(role="assistant", content=[
            ThinkingBlock(thinking="plan", signature="sig-a"),
            TextBlock(text=""),  # Anthropic rejects empty text: dropped
            ToolUseBlock(id="t1", name="read_file", input={"path": "a"}),
        ]),
        # text before the result in our message: the wire puts the result first
        Message(role="user", content=[TextBlock(text="note"),
                                      ToolResultBlock(tool_use_id="t1", content="boom", is_error=True)]),
    ]
    fake_llm.enqueue(anthropic_text("ok"))
    provider.prompt_caching = False  # the blocks as converted, without cache marks
    await run_stream(provider, request(*history))
    sent = fake_llm.requests[0].json["messages"]
    assert anthropic_history_problems(sent) == []
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["text"] for b in sent[0]["content"]] == ["task", "and one more thing"]
    assert sent[1]["content"] == [
        {"type": "thinking", "thinking": "plan", "signature": "sig-a"},
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
    ]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
        {"type": "text", "text": "note"},
    ]


async def test_round_trip_of_an_assembled_tool_turn(fake_llm, provider) -> None:
    fake_llm.enqueue(anthropic_tool_calls([("read_file", {"path": "x"})], thinking="Check x.", signature="s1"),
                     anthropic_text("x is fine"))
    first = (await run_stream(provider, request(Message.user("check x")))).completed.message
    result = ToolResultBlock(tool_use_id=first.tool_uses[0].id, content="contents of x")
    second = await run_stream(provider, request(Message.user("check x"), first,
                                                Message(role="user", content=[result])))
    assert second.completed.message.text == "x is fine"
    sent = fake_llm.requests[1].json["messages"]
    assert anthropic_history_problems(sent) == []
    assert sent[1]["content"][0] == {"type": "thinking", "thinking": "Check x.", "signature": "s1"}


# ---- failures ----

async def test_overloaded_error_event_inside_the_stream(fake_llm, provider) -> None:
    fake_llm.enqueue(stream_error("anthropic", "Overloaded", "overloaded_error"))
    result = await run_stream(provider, request())
    assert isinstance(result.error, APIError) and result.completed is None
    assert (result.error.error_type, result.error.message) == ("overloaded_error", "Overloaded")
    assert result.error.retryable


async def test_stream_without_message_stop_is_cut(fake_llm, provider) -> None:
    reply = anthropic_text("almost there")
    fake_llm.enqueue(cut_after(reply, len(reply.events) - 1, abort=False), cut_after(reply, 3))
    clean_end = await run_stream(provider, request())
    dropped = await run_stream(provider, request())
    assert isinstance(clean_end.error, StreamCutError) and "message_stop" in str(clean_end.error)
    assert isinstance(dropped.error, StreamCutError)


async def test_empty_200_is_cut(fake_llm, provider) -> None:
    fake_llm.enqueue(empty_200())
    assert isinstance((await run_stream(provider, request())).error, StreamCutError)


async def test_http_529_overloaded_with_retry_after(fake_llm, provider) -> None:
    fake_llm.enqueue(http_error(529, anthropic_error_body("overloaded_error", "Overloaded"), {"retry-after": "3"}))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, APIError)
    assert (error.status, error.error_type, error.message, error.retry_after) == (529, "overloaded_error",
                                                                                 "Overloaded", 3.0)
    assert error.retryable


async def test_invalid_request_is_not_retryable(fake_llm, provider) -> None:
    # a gateway's first cached request is tried once more without cache marks: both refused
    refusal = http_error(400, anthropic_error_body("invalid_request_error", "messages: roles must alternate"))
    fake_llm.default = lambda body, path: refusal
    error = (await run_stream(provider, request())).error
    assert error.message == "messages: roles must alternate" and not error.retryable


@pytest.mark.parametrize("message, actual, limit", [
    ("prompt is too long: 200251 tokens > 200000 maximum", 200251, 200000),
    ("input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length "
     "or `max_tokens` and try again", 207951, 200000),
])
async def test_too_long_is_parsed(fake_llm, provider, message, actual, limit) -> None:
    fake_llm.enqueue(http_error(400, anthropic_error_body("invalid_request_error", message)))
    error = (await run_stream(provider, request())).error
    assert isinstance(error, ContextTooLongError)
    assert (error.actual_tokens, error.limit_tokens, error.gap_tokens) == (actual, limit, actual - limit)


async def test_stall_is_a_stream_cut_error(fake_llm) -> None:
    provider = fake_llm.provider("anthropic", timeout_read=0.3)
    fake_llm.enqueue(stall_after(anthropic_text("slow", thinking="hmm"), 4))
    result = await run_stream(provider, request())
    await provider.aclose()
    assert isinstance(result.error, StreamCutError) and "stalled" in str(result.error)
    assert any(isinstance(e, ThinkingDelta) for e in result.events)


# ---- too-long messages of every provider (pure) ----

@pytest.mark.parametrize("message, expected", [
    ("prompt is too long: 200251 tokens > 200000 maximum", (200251, 200000)),
    ("input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000", (207951, 200000)),
    ("This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
     (130000, 128000)),
    ("This model's maximum context length is 131072 tokens. However, you requested 131134 tokens "
     "(122942 in the messages, 8192 in the completion).", (131134, 131072)),
    ("Your input exceeds the context window of this model. Please adjust your input and try again.", (None, None)),
    ("request (8000 tokens) exceeds the available context size (4096 tokens), try increasing it", (8000, 4096)),
    ("Rate limit reached for requests", None),
    ("Overloaded", None),
    ("", None),
])
def test_parse_too_long(message, expected) -> None:
    assert parse_too_long(message) == expected

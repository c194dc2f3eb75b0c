"""The OpenAI Responses provider against the local fake server (real HTTP, real SSE framing)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_providers_fuzz import _calls, _mutations, _shaped, _text, mutate, split, terminated

from app.kernel.messages import Message, OpaqueBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.providers.anthropic import to_anthropic_messages
from app.providers.base import (
    APIError,
    Completed,
    ContextTooLongError,
    ProviderError,
    StreamCutError,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.providers.openai import to_openai_messages
from app.providers.responses import assemble_responses_stream, to_responses_input
from fake_llm_server import Reply, cut_after, http_error, openai_error_body, run_stream
from fake_responses_server import (
    response_object,
    responses_error,
    responses_events,
    responses_failed,
    responses_text,
    responses_tool_calls,
)
from provider_helpers import READ_FILE, provider_fixture, request

provider = provider_fixture("responses")


def responses_input_problems(items: list[dict[str, Any]]) -> list[str]:
    """What the Responses API would reject in a stateless input: an output without its call,
    a call never answered, arguments that are not a JSON object, a reasoning item without
    its encrypted content (with store=false nothing else can restore it)."""
    problems = []
    calls: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
            if not isinstance(json.loads(item["arguments"]), dict):
                problems.append(f"item {i}: arguments not a JSON object")
        elif kind == "function_call_output":
            if item["call_id"] not in calls:
                problems.append(f"item {i}: output for unknown call {item['call_id']}")
            answered.add(item["call_id"])
        elif kind == "reasoning" and not item.get("encrypted_content"):
            problems.append(f"item {i}: reasoning item without encrypted_content")
    problems += [f"call {c} never answered" for c in sorted(calls - answered)]
    return problems


# ---- streaming text, request shape ----

async def test_text_streams_in_deltas_and_the_request_is_stateless(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_text(["Hel", "lo, ", "world"], usage=dict(input=40, output=3)))
    result = await run_stream(provider, request())
    assert result.error is None
    assert result.text == "Hello, world"
    assert result.completed.message.text == "Hello, world"
    assert result.completed.stop_reason == "end_turn"
    sent = fake_llm.requests[0]
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == "Bearer sk-test-fake-key-0123456789"
    body = sent.json
    assert body["stream"] is True and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["instructions"] == "You are terse."
    assert body["input"] == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert body["tools"] == [{"type": "function", "name": "read_file", "description": "Read a file",
                              "parameters": READ_FILE.input_schema, "strict": False}]
    assert "context_management" not in body  # server compaction is off unless chosen


async def test_function_calls_stream_their_arguments(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_tool_calls([("read_file", {"path": "a.txt"}, "call_A"),
                                           ("read_file", {"path": "b.txt"}, "call_B")], fragments=4))
    result = await run_stream(provider, request())
    starts = [e for e in result.events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name) for s in starts] == [("call_A", "read_file"), ("call_B", "read_file")]
    for start in starts:
        fragments = [e.partial_json for e in result.events if isinstance(e, ToolCallDelta) and e.index == start.index]
        assert len(fragments) > 1
    uses = result.completed.message.tool_uses
    assert [(u.id, u.input) for u in uses] == [("call_A", {"path": "a.txt"}), ("call_B", {"path": "b.txt"})]
    assert result.completed.stop_reason == "tool_use"


async def test_invalid_arguments_keep_the_raw_text(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_tool_calls([("read_file", '{"path": "a.t')]))
    result = await run_stream(provider, request())
    assert result.completed.message.tool_uses[0].input == {"_raw_arguments": '{"path": "a.t'}


async def test_usage_splits_the_cache_out_and_keeps_reasoning_tokens(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_text("ok", usage=dict(input=1200, cached=1024, output=50, reasoning=30)))
    result = await run_stream(provider, request())
    usage = result.completed.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1200 - 1024, 1024, 50)
    assert usage.total_input == 1200 and usage.reasoning_tokens == 30
    assert [e.usage for e in result.events if isinstance(e, UsageUpdate)] == [usage]


async def test_usage_null_is_unknown(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_text("ok", usage=None))
    result = await run_stream(provider, request())
    assert not result.completed.usage.known


# ---- reasoning items: kept opaque, sent back verbatim ----

async def test_reasoning_streams_as_thinking_and_its_item_goes_back_verbatim(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_tool_calls([("read_file", {"path": "a.txt"}, "call_1")], reasoning=["Look ", "first"]),
                     responses_text("done"))
    first = await run_stream(provider, request(Message.user("read a")))
    assert first.thinking == "Look first"
    reasoning = [b for b in first.completed.message.content if isinstance(b, OpaqueBlock)]
    assert len(reasoning) == 1 and reasoning[0].kind == "reasoning"
    # the done item's encrypted_content, not the (possibly partial) one of output_item.added
    assert reasoning[0].item["encrypted_content"].startswith("gAAAAAB-fake-encrypted-")
    assert len(reasoning[0].item["encrypted_content"]) > 20  # the fake's added item carries only 20 chars
    history = [Message.user("read a"), first.completed.message,
               Message(role="user", content=[ToolResultBlock(tool_use_id="call_1", content="A")])]
    await run_stream(provider, request(*history))
    items = fake_llm.requests[1].json["input"]
    assert [i["type"] for i in items] == ["message", "reasoning", "function_call", "function_call_output"]
    assert items[1] == reasoning[0].item
    assert items[3] == {"type": "function_call_output", "call_id": "call_1", "output": "A"}
    assert responses_input_problems(items) == []


def test_other_protocols_skip_opaque_items_and_the_transcript_keeps_them() -> None:
    opaque = OpaqueBlock(provider="responses", item={"id": "rs_1", "type": "reasoning",
                                                    "encrypted_content": "gAAA", "summary": []})
    history = [Message.user("q"), Message(role="assistant", content=[opaque, TextBlock(text="a")]),
               Message.user("next")]
    assert all("rs_1" not in json.dumps(m) for m in to_openai_messages("sys", history))
    assert all("rs_1" not in json.dumps(m) for m in to_anthropic_messages(history))
    restored = Message.model_validate_json(history[1].model_dump_json())
    assert restored.content[0] == opaque
    # and thinking from another provider is not sent here (no plain-text reasoning input exists)
    other = [Message.user("q"), Message(role="assistant", content=[ThinkingBlock(thinking="t", signature="s"),
                                                                   TextBlock(text="a")]), Message.user("n")]
    assert [i["type"] for i in to_responses_input(other)] == ["message", "message", "message"]


def test_an_error_result_says_so_in_its_output() -> None:
    history = [Message.user("q"),
               Message(role="assistant", content=[ToolUseBlock(id="c1", name="read_file", input={"path": "x"})]),
               Message(role="user", content=[ToolResultBlock(tool_use_id="c1", content="no such file", is_error=True)])]
    items = to_responses_input(history)
    assert items[-1]["output"] == "Error: no such file"


# ---- server-side compaction on the wire ----

async def test_compaction_threshold_is_sent_and_the_input_starts_at_the_compaction_item(fake_llm) -> None:
    provider = fake_llm.provider("responses", compact_threshold=167_000)
    try:
        fake_llm.enqueue(responses_text("short now", compaction="gAAAA-compacted"), responses_text("ok"))
        first = await run_stream(provider, request(Message.user("long task")))
        compaction = [b for b in first.completed.message.content if isinstance(b, OpaqueBlock)]
        assert [b.kind for b in compaction] == ["compaction"]
        assert fake_llm.requests[0].json["context_management"] == [{"type": "compaction",
                                                                     "compact_threshold": 167_000}]
        history = [Message.user("long task"), first.completed.message, Message.user("go on")]
        await run_stream(provider, request(*history))
        items = fake_llm.requests[1].json["input"]
        assert items[0]["type"] == "compaction" and items[0]["encrypted_content"] == "gAAAA-compacted"
        assert [i.get("role") for i in items[1:]] == ["assistant", "user"]
    finally:
        await provider.aclose()


# ---- failures ----

@pytest.mark.parametrize("reply", [
    responses_failed("context_length_exceeded",
                     "Your input exceeds the context window of this model. Please adjust your input and try again."),
    http_error(400, openai_error_body("Your input exceeds the context window of this model.",
                                      code="context_length_exceeded", param="input")),
], ids=["response.failed", "http_400"])
async def test_too_long_becomes_context_too_long(fake_llm, provider, reply: Reply) -> None:
    fake_llm.enqueue(reply)
    result = await run_stream(provider, request())
    assert isinstance(result.error, ContextTooLongError)
    assert "context window" in result.error.message


async def test_a_failed_response_for_load_is_retryable_and_names_the_code(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_failed("server_error", "The server had an error processing your request."))
    result = await run_stream(provider, request())
    assert isinstance(result.error, APIError) and result.error.retryable
    assert "server had an error" in str(result.error) and "server_error" in str(result.error)


async def test_an_error_event_mid_message_fails_the_call(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_error("rate_limit_exceeded", "Rate limit reached for requests", after_text="Partial answer"))
    result = await run_stream(provider, request())
    assert result.text  # some text had streamed
    assert isinstance(result.error, APIError) and result.error.retryable
    assert "Rate limit reached" in result.error.message


async def test_incomplete_for_output_limit_means_max_tokens(fake_llm, provider) -> None:
    fake_llm.enqueue(responses_text("cut sho", status="incomplete"))
    result = await run_stream(provider, request())
    assert result.completed.stop_reason == "max_tokens"
    assert result.completed.message.text == "cut sho"


async def test_a_stream_cut_before_response_completed_is_a_stream_cut(fake_llm, provider) -> None:
    reply = responses_text("some words here")
    fake_llm.enqueue(cut_after(reply, len(reply.events) - 1))
    result = await run_stream(provider, request())
    assert isinstance(result.error, StreamCutError)


async def test_a_drop_after_response_completed_keeps_the_answer(fake_llm, provider) -> None:
    reply = responses_text("all here")
    fake_llm.enqueue(cut_after(reply, len(reply.events)))
    result = await run_stream(provider, request())
    assert result.error is None and result.completed.message.text == "all here"


async def test_a_server_ignoring_stream_true_is_understood(fake_llm, provider) -> None:
    output = [{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "annotations": [], "text": "plain json"}]}]
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12}
    body = json.dumps(response_object("resp_1", "completed", output, usage)).encode()
    fake_llm.enqueue(Reply(body=body, content_type="application/json"))
    result = await run_stream(provider, request())
    assert result.completed.message.text == "plain json"
    assert result.completed.usage.total_input == 10


async def test_unknown_events_are_tolerated(fake_llm, provider) -> None:
    reply = responses_text("fine")
    extra = responses_events([{"type": "response.future_thing", "x": 1}]).events
    fake_llm.enqueue(Reply(events=reply.events[:2] + extra + reply.events[2:]))
    result = await run_stream(provider, request())
    assert result.completed.message.text == "fine"


# ---- fuzz: mutated, re-split and garbage streams give a message or a typed error ----


@st.composite
def responses_streams(draw: Any) -> tuple[Reply, dict[str, Any]]:
    calls = draw(_calls)
    text = draw(_text)
    reasoning = draw(st.one_of(st.none(), _text))
    compaction = draw(st.one_of(st.none(), st.just("gAAAA-fuzz")))
    usage = draw(st.one_of(st.none(), st.builds(dict, input=st.integers(10, 1000), output=st.integers(0, 50),
                                                cached=st.integers(0, 10))))
    if calls:
        reply = responses_tool_calls(calls, text=text or None, reasoning=reasoning, compaction=compaction,
                                     usage=usage, fragments=draw(st.integers(1, 5)))
    else:
        reply = responses_text(text, reasoning=reasoning, compaction=compaction, usage=usage)
    opaque = [k for k, on in (("compaction", compaction is not None), ("reasoning", reasoning is not None)) if on]
    return reply, {"text": text, "inputs": [a for _, a in calls], "opaque": opaque,
                   "terminator": len(reply.events) - 1}  # response.completed is last


def outcome(run) -> tuple[Completed | None, BaseException | None]:
    """A Completed with a well-formed message, or a ProviderError; anything else fails."""
    try:
        events = run()
    except ProviderError as exc:
        return None, exc
    completed = events[-1]
    assert isinstance(completed, Completed) and not any(isinstance(e, Completed) for e in events[:-1])
    message = completed.message
    assert Message.model_validate(message.model_dump()) == message
    for use in message.tool_uses:
        assert use.id and use.name and isinstance(use.input, dict)
    return completed, None


@settings(max_examples=60)
@given(stream=responses_streams(), mutation=_mutations, cuts=st.lists(st.integers(0, 20_000), max_size=8))
def test_responses_assembly_on_mutated_streams(stream, mutation, cuts) -> None:
    reply, expected = stream
    data = mutate(reply.events, mutation)
    completed, error = outcome(lambda: assemble_responses_stream(split(data, cuts)))
    complete = terminated(reply.events, expected["terminator"], mutation)
    if complete is True:
        assert error is None, f"a complete stream failed: {error!r}"
        message = completed.message
        assert message.text == expected["text"]
        assert [u.input for u in message.tool_uses] == expected["inputs"]
        assert [b.kind for b in message.content if isinstance(b, OpaqueBlock)] == expected["opaque"]
        assert completed.stop_reason == ("tool_use" if expected["inputs"] else "end_turn")
    elif complete is False:
        assert isinstance(error, StreamCutError), f"expected a cut, got {error!r}"


@settings(max_examples=60)
@given(payloads=st.lists(_shaped, max_size=8), data=st.binary(max_size=300),
       names=st.lists(st.sampled_from(["response.completed", "response.output_item.added", "error",
                                       "response.failed", "response.output_text.delta"]), max_size=3))
def test_garbage_gives_a_message_or_a_typed_error(payloads, data, names) -> None:
    frames = "".join(f"event: {names[i % len(names)] if names else 'x'}\ndata: {json.dumps(p)}\n\n"
                     for i, p in enumerate(payloads)).encode()
    outcome(lambda: assemble_responses_stream([frames]))
    outcome(lambda: assemble_responses_stream([data]))


async def test_a_compatible_server_without_indexes_or_final_output_still_works(fake_llm, provider) -> None:
    # what some Responses-compatible servers send: no output_index, no item events, a bare completion
    fake_llm.enqueue(responses_events([
        {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}},
        {"type": "response.output_text.delta", "item_id": "m1", "delta": "Hello "},
        {"type": "response.output_text.delta", "item_id": "m1", "delta": "there"},
        {"type": "response.completed", "response": {"id": "r1", "status": "completed", "output": [],
                                                    "usage": {"input_tokens": 4, "output_tokens": 2}}},
    ]))
    result = await run_stream(provider, request())
    assert result.text == "Hello there" and result.completed.message.text == "Hello there"
    assert result.completed.usage.total_input == 4

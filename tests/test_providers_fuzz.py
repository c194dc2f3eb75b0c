"""Property tests (issue 6): both stream assemblers fed valid, truncated, reordered and garbage streams.

The promise: a Completed whose message is well formed and matches exactly what
was streamed, or a typed ProviderError; never another exception, never a hang,
never a Completed for a stream that stopped before its terminator.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.kernel.messages import Message, ThinkingBlock, ToolUseBlock
from app.providers.anthropic import assemble_anthropic_stream
from app.providers.base import (
    Completed,
    ModelRequest,
    ProviderError,
    StreamCutError,
    TextDelta,
    ThinkingDelta,
    ToolCallStart,
)
from app.providers.openai import assemble_openai_stream
from fake_llm_server import (
    FakeLLMServer,
    Reply,
    anthropic_text,
    anthropic_tool_calls,
    cut_after,
    openai_text,
    openai_tool_calls,
    rechunk,
    run_stream,
)

# ---- generated valid streams ----

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.text(max_size=8))
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=5), inner, max_size=3), max_leaves=6)
_args = st.dictionaries(st.text(max_size=6), _json, max_size=3)
_calls = st.lists(st.tuples(st.sampled_from(["read_file", "run_bash", "list_files"]), _args), max_size=3)
_text = st.text(max_size=30)


@st.composite
def openai_streams(draw: Any) -> tuple[Reply, dict[str, Any]]:
    calls = draw(_calls)
    text = draw(_text)
    reasoning = draw(st.one_of(st.none(), _text))
    usage = draw(st.one_of(st.none(), st.builds(dict, prompt=st.integers(10, 1000), completion=st.integers(0, 50),
                                                cached=st.integers(0, 10))))
    if calls:
        reply = openai_tool_calls(calls, text=text, reasoning=reasoning, usage=usage,
                                  fragments=draw(st.integers(1, 5)), repeat_ids=draw(st.booleans()),
                                  interleave=draw(st.booleans()))
    else:
        reply = openai_text(text, reasoning=reasoning, usage=usage)
    # the finish chunk is followed by the usage chunk (when any) and [DONE]
    terminator = len(reply.events) - (3 if usage is not None else 2)
    return reply, {"text": text, "thinking": reasoning or "", "inputs": [a for _, a in calls],
                   "terminator": terminator}


@st.composite
def anthropic_streams(draw: Any) -> tuple[Reply, dict[str, Any]]:
    calls = draw(_calls)
    text = draw(_text)
    thinking = draw(st.one_of(st.none(), st.text(min_size=1, max_size=20)))
    usage = draw(st.one_of(st.none(), st.builds(dict, input=st.integers(1, 1000), output=st.integers(1, 50),
                                                cache_read=st.integers(0, 5000), cache_write=st.integers(0, 100))))
    if calls:
        reply = anthropic_tool_calls(calls, text=text, thinking=thinking, usage=usage,
                                     fragments=draw(st.integers(1, 5)))
    else:
        reply = anthropic_text(text, thinking=thinking, usage=usage)
    return reply, {"text": text, "thinking": thinking or "", "inputs": [a for _, a in calls],
                   "terminator": len(reply.events) - 1}  # message_stop is last


# ---- mutations ----

_mutations = st.one_of(
    st.just(("intact",)),
    st.tuples(st.just("truncate"), st.integers(0, 60)),
    st.tuples(st.just("cut_bytes"), st.integers(0, 20_000)),
    st.tuples(st.just("drop"), st.integers(0, 60)),
    st.tuples(st.just("swap"), st.integers(0, 60), st.integers(0, 60)),
    st.tuples(st.just("duplicate"), st.integers(0, 60)),
)


def mutate(frames: list[bytes], mutation: tuple) -> bytes:
    frames = list(frames)
    kind = mutation[0]
    if kind == "truncate":
        frames = frames[: mutation[1] % (len(frames) + 1)]
    elif kind == "drop" and frames:
        del frames[mutation[1] % len(frames)]
    elif kind == "swap" and frames:
        i, j = mutation[1] % len(frames), mutation[2] % len(frames)
        frames[i], frames[j] = frames[j], frames[i]
    elif kind == "duplicate" and frames:
        i = mutation[1] % len(frames)
        frames.insert(i, frames[i])
    data = b"".join(frames)
    if kind == "cut_bytes":
        data = data[: mutation[1] % (len(data) + 1)]
    return data


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0] + points, points + [len(data)])]


def terminated(frames: list[bytes], terminator: int, mutation: tuple) -> bool | None:
    """For truncations: does what was kept include the terminating event's data line? None: not a truncation."""
    if mutation[0] == "intact":
        return True
    if mutation[0] == "truncate":
        return mutation[1] % (len(frames) + 1) > terminator
    if mutation[0] == "cut_bytes":
        total = sum(len(f) for f in frames)
        kept = mutation[1] % (total + 1)
        # The terminating event counts once its data line's text arrived: the blank line after it
        # and the line's own "\n" may be missing, since the decoder takes an unterminated last
        # line whose data parses (SSEEvent.unterminated). One byte shorter and it does not parse.
        line_end = sum(len(f) for f in frames[: terminator + 1]) - 1
        return kept >= line_end - 1
    return None


# ---- the invariants ----

def check_outcome(run: Callable[[], list[Any]]) -> tuple[list[Any] | None, BaseException | None]:
    """Run the assembly; it must give events ending in one Completed, or raise a ProviderError."""
    try:
        events = run()
    except ProviderError as exc:
        return None, exc
    completed = events[-1]
    assert isinstance(completed, Completed)
    assert not any(isinstance(e, Completed) for e in events[:-1])
    check_message(events[:-1], completed)
    return events, None


def check_message(streamed: list[Any], completed: Completed) -> None:
    """Well formed, and exactly what the user saw stream by."""
    message = completed.message
    assert message.role == "assistant"
    assert Message.model_validate(message.model_dump()) == message
    assert message.text == "".join(e.text for e in streamed if isinstance(e, TextDelta))
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingBlock))
    assert thinking == "".join(e.text for e in streamed if isinstance(e, ThinkingDelta))
    tool_uses = [b for b in message.content if isinstance(b, ToolUseBlock)]
    assert len(tool_uses) == len([e for e in streamed if isinstance(e, ToolCallStart)])
    for block in tool_uses:
        assert block.id and block.name and isinstance(block.input, dict)
    assert isinstance(completed.stop_reason, str) and completed.stop_reason


def check_expected(completed: Completed, expected: dict[str, Any]) -> None:
    message = completed.message
    assert message.text == expected["text"]
    thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingBlock))
    assert thinking == expected["thinking"]
    assert [t.input for t in message.tool_uses] == expected["inputs"]
    assert completed.stop_reason == ("tool_use" if expected["inputs"] else "end_turn")


def property_run(assemble: Callable[..., list[Any]], reply: Reply, expected: dict[str, Any], mutation: tuple,
                 cuts: list[int]) -> None:
    data = mutate(reply.events, mutation)
    events, error = check_outcome(lambda: assemble(split(data, cuts)))
    complete = terminated(reply.events, expected["terminator"], mutation)
    if complete is True:
        assert error is None, f"a complete stream failed: {error!r}"
        check_expected(events[-1], expected)  # type: ignore[index]
    elif complete is False:
        # a prefix that stops before the terminator is never a message
        assert isinstance(error, StreamCutError), f"expected a cut, got {error!r} / {events and events[-1]!r}"


@settings(max_examples=60)
@given(stream=openai_streams(), mutation=_mutations, cuts=st.lists(st.integers(0, 20_000), max_size=8))
def test_openai_assembly_on_mutated_streams(stream, mutation, cuts) -> None:
    reply, expected = stream
    property_run(assemble_openai_stream, reply, expected, mutation, cuts)


@settings(max_examples=60)
@given(stream=anthropic_streams(), mutation=_mutations, cuts=st.lists(st.integers(0, 20_000), max_size=8))
def test_anthropic_assembly_on_mutated_streams(stream, mutation, cuts) -> None:
    reply, expected = stream
    property_run(assemble_anthropic_stream, reply, expected, mutation, cuts)


# ---- garbage: plausible-looking events with the wrong shapes, and raw bytes ----

_keys = st.sampled_from(["choices", "delta", "index", "tool_calls", "id", "function", "name", "arguments",
                         "content", "reasoning_content", "finish_reason", "usage", "prompt_tokens",
                         "completion_tokens", "prompt_tokens_details", "cached_tokens", "type", "message",
                         "content_block", "partial_json", "text", "thinking", "signature", "stop_reason",
                         "input", "input_tokens", "output_tokens", "error"])
_values = st.one_of(_json_leaf, st.sampled_from(["message_start", "content_block_start", "content_block_delta",
                                                 "message_delta", "message_stop", "text_delta", "tool_use",
                                                 "input_json_delta", "thinking", "text", "stop", "tool_calls",
                                                 "[DONE]"]))
_shaped = st.recursive(_values, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner,
                                                                                            max_size=4),
                       max_leaves=12)


def _frames(payloads: list[Any], names: list[str | None]) -> bytes:
    out = []
    for i, payload in enumerate(payloads):
        name = names[i % len(names)] if names else None
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(payload)}\n\n")
    return "".join(out).encode()


@settings(max_examples=80)
@given(payloads=st.lists(_shaped, max_size=8),
       names=st.lists(st.one_of(st.none(), st.sampled_from(["error", "message_stop", "ping", "x"])), max_size=3))
def test_wrongly_shaped_events_give_a_message_or_a_typed_error(payloads, names) -> None:
    data = _frames(payloads, names)
    check_outcome(lambda: assemble_openai_stream([data]))
    check_outcome(lambda: assemble_anthropic_stream([data]))


@settings(max_examples=60)
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=5))
def test_random_bytes_give_a_message_or_a_typed_error(data, cuts) -> None:
    check_outcome(lambda: assemble_openai_stream(split(data, cuts)))
    check_outcome(lambda: assemble_anthropic_stream(split(data, cuts)))


# ---- the same promise end to end, over real HTTP ----

@pytest.fixture(scope="module")
def shared_server():
    with FakeLLMServer() as server:
        yield server


_wire_mutations = st.one_of(st.just(("intact",)), st.tuples(st.just("cut"), st.integers(0, 40), st.booleans()))


@settings(max_examples=15)
@given(protocol=st.sampled_from(["openai", "anthropic"]), data=st.data(), mutation=_wire_mutations,
       sizes=st.lists(st.integers(1, 64), min_size=1, max_size=4))
def test_over_http_a_message_or_a_typed_error(shared_server, protocol, data, mutation, sizes) -> None:
    reply, expected = data.draw(openai_streams() if protocol == "openai" else anthropic_streams())
    if mutation[0] == "cut":
        reply = cut_after(reply, mutation[1] % (len(reply.events) + 1), abort=mutation[2])
    shared_server.enqueue(rechunk(reply, sizes))

    async def call():
        # read timeout: a safety net against a hang, never reached when all is well
        provider = shared_server.provider(protocol, timeout_read=10)
        try:
            return await run_stream(provider, ModelRequest(system="", messages=[Message.user("go")], tools=[]))
        finally:
            await provider.aclose()

    result = asyncio.run(call())
    if result.completed is not None:
        check_message(result.events, result.completed)
    else:
        assert isinstance(result.error, ProviderError)
    complete = len(reply.events) > expected["terminator"]
    if complete:
        assert result.completed is not None, f"{result.error!r}"
        check_expected(result.completed, expected)
    else:
        assert isinstance(result.error, StreamCutError)
    assert shared_server.pending == 0

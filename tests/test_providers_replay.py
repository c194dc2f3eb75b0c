"""Replay of streams shaped like the real services', with the official SDKs as the oracle.

Each file under tests/replay/<protocol>/ is served byte for byte by the loopback server
twice: once to our provider (re-split into odd HTTP chunks, as a network would), once
to the official ``openai`` or ``anthropic`` SDK. What the SDK assembles from the same
bytes (text, thinking, tool calls, stop reason, usage, in-stream errors) is what ours
must assemble; and after a tool call, the request we send back must carry the assistant
turn the way the API requires it (the SDK's own message passed back, as its docs do).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.kernel.messages import Message, RedactedThinkingBlock, ThinkingBlock, ToolResultBlock, ToolSpec
from app.providers.base import Completed, ModelRequest
from app.providers.openai import _STOP_REASONS
from fake_llm_server import anthropic_text, openai_text, raw_sse, rechunk, run_stream

REPLAY = Path(__file__).parent / "replay"
CASES = sorted((p.parent.name, p) for p in REPLAY.glob("*/*.sse"))
KEY = "sk-test-fake-key-0123456789"
TOOLS = [ToolSpec(name=n, description=n, input_schema={"type": "object"})
         for n in ("read_file", "write_file", "list_files", "grep", "run_bash")]


def test_the_suite_covers_the_three_protocols() -> None:
    by_protocol = {name: sum(1 for proto, _ in CASES if proto == name) for name in ("openai", "deepseek", "anthropic")}
    assert sum(by_protocol.values()) >= 20 and all(by_protocol.values()), by_protocol


def _request() -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user("go")], tools=TOOLS, max_tokens=1024)


async def _ours(fake_llm, protocol: str, raw: bytes) -> Any:
    # re-split at odd sizes: inside lines, CRLF-free UTF-8 included, as TCP would
    fake_llm.enqueue(rechunk(raw_sse(raw), [7, 1, 64, 3, 300]))
    provider = fake_llm.provider(protocol)
    try:
        return await run_stream(provider, _request()), provider
    finally:
        pass


# ---- the OpenAI SDK's view ----

async def _sdk_openai(fake_llm, raw: bytes) -> dict[str, Any]:
    import openai  # here, not at the top: every xdist worker collects this file, few run it
    from openai.lib.streaming.chat import ChatCompletionStreamState

    fake_llm.enqueue(raw_sse(raw))
    client = openai.AsyncOpenAI(base_url=fake_llm.base_url("openai"), api_key=KEY, max_retries=0)
    state = ChatCompletionStreamState()
    try:
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                                      stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            state.handle_chunk(chunk)
    except openai.APIError as err:
        return {"error": err.message}
    finally:
        await client.close()
    # the accumulated snapshot: get_final_completion() would refuse "length" and "content_filter"
    completion = state.current_completion_snapshot
    choice = completion.choices[0]
    message = choice.message
    extra = message.model_extra or {}
    usage = completion.usage
    return {
        "error": None,
        "content": message.content or "",
        "refusal": message.refusal or "",
        "reasoning": extra.get("reasoning_content") or "",
        "tool_calls": [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []],
        "finish_reason": choice.finish_reason,
        "usage": usage.model_dump() if usage is not None else None,
    }


def _check_openai(ours: Any, sdk: dict[str, Any]) -> None:
    if sdk["error"] is not None:
        assert ours.error is not None and ours.error.message == sdk["error"]
        return
    assert ours.error is None, ours.error
    done: Completed = ours.completed
    message = done.message
    assert message.text == "\n\n".join(t for t in (sdk["content"], sdk["refusal"]) if t)
    assert "".join(b.thinking for b in message.content if isinstance(b, ThinkingBlock)) == sdk["reasoning"]
    uses = message.tool_uses
    assert [(u.id, u.name) for u in uses] == [(i, n) for i, n, _ in sdk["tool_calls"]]
    for use, (_, _, arguments) in zip(uses, sdk["tool_calls"]):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            # only a call cut by the output limit may fail to parse, and it is marked, never run
            assert sdk["finish_reason"] == "length" and use.cut_at_output_limit and use.input == {}
        else:
            assert use.input == parsed and not use.cut_at_output_limit
    expected_stop = _STOP_REASONS.get(sdk["finish_reason"], sdk["finish_reason"])
    if uses and expected_stop == "end_turn":
        expected_stop = "tool_use"
    if sdk["refusal"] and not uses and expected_stop == "end_turn":
        expected_stop = "refusal"
    assert done.stop_reason == expected_stop
    usage, got = sdk["usage"], done.usage
    if usage is None:
        assert not got.known
        return
    details = usage.get("prompt_tokens_details") or {}
    read = usage.get("prompt_cache_hit_tokens", details.get("cached_tokens") or 0)
    assert got.total_input == usage["prompt_tokens"] and got.output_tokens == usage["completion_tokens"]
    assert got.cache_read_tokens == read
    assert got.cache_write_tokens == (details.get("cache_write_tokens") or 0)


# ---- the Anthropic SDK's view ----

async def _sdk_anthropic(fake_llm, raw: bytes) -> dict[str, Any]:
    import anthropic  # here, not at the top: every xdist worker collects this file, few run it

    fake_llm.enqueue(raw_sse(raw))
    client = anthropic.AsyncAnthropic(base_url=fake_llm.url, api_key=KEY, max_retries=0)
    try:
        async with client.messages.stream(model="m", max_tokens=1024,
                                          messages=[{"role": "user", "content": "go"}]) as stream:
            final = await stream.get_final_message()
    except anthropic.APIError as err:
        body = err.body if isinstance(err.body, dict) else {}
        inner = body.get("error", body) if isinstance(body, dict) else {}
        return {"error": inner.get("message") if isinstance(inner, dict) else str(err),
                "error_type": inner.get("type") if isinstance(inner, dict) else None}
    finally:
        await client.close()
    return {"error": None, "message": final}


def _check_anthropic(ours: Any, sdk: dict[str, Any]) -> None:
    if sdk["error"] is not None:
        assert ours.error is not None and ours.error.message == sdk["error"]
        assert ours.error.error_type == sdk["error_type"] and ours.error.retryable
        return
    assert ours.error is None, ours.error
    done: Completed = ours.completed
    final = sdk["message"]
    ours_blocks = [b for b in done.message.content]
    sdk_blocks = [b for b in final.content if not (b.type == "text" and not b.text)]
    assert [b.type for b in ours_blocks] == [b.type for b in sdk_blocks]
    for mine, theirs in zip(ours_blocks, sdk_blocks):
        if theirs.type == "text":
            assert mine.text == theirs.text
        elif theirs.type == "thinking":
            assert (mine.thinking, mine.signature) == (theirs.thinking, theirs.signature or None)
        elif theirs.type == "redacted_thinking":
            assert isinstance(mine, RedactedThinkingBlock) and mine.data == theirs.data
        elif theirs.type == "tool_use":
            assert (mine.id, mine.name) == (theirs.id, theirs.name)
            if mine.cut_at_output_limit:
                assert final.stop_reason == "max_tokens" and mine.input == {}
            else:
                assert mine.input == theirs.input
    assert done.stop_reason == final.stop_reason
    usage, got = final.usage, done.usage
    assert got.input_tokens == usage.input_tokens and got.output_tokens == usage.output_tokens
    assert got.cache_read_tokens == (usage.cache_read_input_tokens or 0)
    assert got.cache_write_tokens == (usage.cache_creation_input_tokens or 0)


# ---- the request sent back after a tool call ----

async def _sent_back(fake_llm, protocol: str, provider: Any, done: Completed) -> dict[str, Any]:
    results = [ToolResultBlock(tool_use_id=u.id, content=f"result of {u.name}") for u in done.message.tool_uses]
    fake_llm.enqueue(anthropic_text("ok") if protocol == "anthropic" else openai_text("ok"))
    history = [Message.user("go"), done.message, Message(role="user", content=results)]
    await run_stream(provider, ModelRequest(system="You are terse.", messages=history, tools=TOOLS))
    return fake_llm.requests[-1].json


def _without_cache_marks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


def _check_anthropic_round_trip(sent: dict[str, Any], sdk: dict[str, Any]) -> None:
    # what the SDK's docs pass back: the response content as it came (empty text excepted)
    expected = []
    for block in sdk["message"].content:
        if block.type == "text" and block.text:
            expected.append({"type": "text", "text": block.text})
        elif block.type == "thinking":
            expected.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        elif block.type == "redacted_thinking":
            expected.append({"type": "redacted_thinking", "data": block.data})
        elif block.type == "tool_use":
            expected.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
    messages = sent["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert _without_cache_marks(messages[1]["content"]) == expected
    answers = [b["tool_use_id"] for b in messages[2]["content"] if b["type"] == "tool_result"]
    assert answers == [b["id"] for b in expected if b["type"] == "tool_use"]


def _check_openai_round_trip(sent: dict[str, Any], sdk: dict[str, Any], protocol: str) -> None:
    messages = sent["messages"]
    assistant = messages[2]
    assert [m["role"] for m in messages] == ["system", "user", "assistant"] + ["tool"] * len(sdk["tool_calls"])
    assert assistant["content"] == (sdk["content"] or "")  # "" for no text: llama.cpp's server refuses null
    calls = assistant["tool_calls"]
    assert [(c["id"], c["type"], c["function"]["name"]) for c in calls] == [
        (i, "function", n) for i, n, _ in sdk["tool_calls"]]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [json.loads(a) for _, _, a in sdk["tool_calls"]]
    assert [m["tool_call_id"] for m in messages[3:]] == [i for i, _, _ in sdk["tool_calls"]]
    if protocol == "deepseek":
        # DeepSeek rejects a tool turn whose reasoning_content is not sent back
        assert assistant["reasoning_content"] == sdk["reasoning"]


# One worker imports the official SDKs (~4 CPU-s of pydantic models): not every worker, as the
# cases spread one by one would make them.
@pytest.mark.xdist_group("official-sdks")
@pytest.mark.parametrize("protocol, path", CASES, ids=[f"{p}/{f.stem}" for p, f in CASES])
async def test_replay_assembles_what_the_official_sdk_assembles(fake_llm, protocol: str, path: Path) -> None:
    raw = path.read_bytes()
    ours, provider = await _ours(fake_llm, protocol, raw)
    try:
        if protocol == "anthropic":
            sdk = await _sdk_anthropic(fake_llm, raw)
            _check_anthropic(ours, sdk)
        else:
            sdk = await _sdk_openai(fake_llm, raw)
            _check_openai(ours, sdk)
        done = ours.completed
        if done is not None and done.message.tool_uses and not done.cut_tool_ids:
            sent = await _sent_back(fake_llm, protocol, provider, done)
            if protocol == "anthropic":
                _check_anthropic_round_trip(sent, sdk)
            else:
                _check_openai_round_trip(sent, sdk, protocol)
    finally:
        await provider.aclose()


def test_every_stream_is_described_in_the_readme() -> None:
    readme = (REPLAY / "README.md").read_text(encoding="utf-8")
    missing = [f"{p}/{f.name}" for p, f in CASES if f"{p}/{f.name}" not in readme]
    assert not missing, f"not in tests/replay/README.md: {missing}"

"""Model parameters real models require, and Anthropic prompt-cache breakpoints, as sent on the wire."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_helpers import make_agent
from app.wiring.cli import FLAG_FIELDS, build_parser
from app.wiring.config import load_settings
from app.kernel.errors import ConfigError
from app.kernel.messages import Message, RedactedThinkingBlock, ThinkingBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from app.providers.anthropic import MAX_CACHE_BREAKPOINTS, AnthropicProvider
from app.providers.base import ModelRequest
from app.providers.factory import create_provider, provider_options
from fake_llm_server import anthropic_events, anthropic_text, openai_text, run_stream

READ_FILE = ToolSpec(name="read_file", description="Read a file", input_schema={
    "type": "object", "properties": {"path": {"type": "string"}}})
LIST_FILES = ToolSpec(name="list_files", description="List files", input_schema={"type": "object"})


def request(*messages: Message, max_tokens: int = 16_000) -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=list(messages) or [Message.user("hi")],
                        tools=[READ_FILE, LIST_FILES], max_tokens=max_tokens)


# ---- max_completion_tokens ----

@pytest.mark.parametrize("model, field", [
    ("o3-mini", "max_completion_tokens"), ("gpt-5", "max_completion_tokens"),
    ("openai/o4-mini", "max_completion_tokens"), ("gpt-4.1", "max_tokens"), ("qwen2.5-coder-7b", "max_tokens"),
])
async def test_reasoning_models_get_max_completion_tokens(fake_llm, model, field) -> None:
    fake_llm.enqueue(openai_text("ok"))
    provider = fake_llm.provider("openai", model=model)
    try:
        await run_stream(provider, request())
    finally:
        await provider.aclose()
    body = fake_llm.requests[0].json
    other = {"max_tokens", "max_completion_tokens"} - {field}
    assert body[field] == 16_000 and not other & set(body)


async def test_the_setting_overrides_the_model_table(fake_llm, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    settings = load_settings({"max_completion_tokens": True})
    fake_llm.enqueue(openai_text("ok"))
    provider = create_provider("openai", "my-local-model", fake_llm.base_url("openai"), "k",
                               **provider_options(settings, "openai"))
    try:
        await run_stream(provider, request())
    finally:
        await provider.aclose()
    assert "max_completion_tokens" in fake_llm.requests[0].json


# ---- extended thinking ----

def test_thinking_budget_flag_reaches_the_settings(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    args = build_parser().parse_args(["--thinking-budget", "4096"])
    settings = load_settings({name: getattr(args, name) for name in FLAG_FIELDS})
    assert provider_options(settings, "anthropic")["thinking_budget"] == 4096


def test_a_thinking_budget_under_the_api_minimum_is_one_clear_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_settings({"thinking_budget": 500})
    message = str(err.value)
    assert "thinking_budget" in message and "1024" in message and "\n" not in message


async def test_thinking_is_requested_and_a_small_capped_call_goes_without(fake_llm) -> None:
    fake_llm.enqueue(anthropic_text("a"), anthropic_text("b"))
    provider = fake_llm.provider("anthropic", thinking_budget=4096)
    try:
        await run_stream(provider, request())
        await run_stream(provider, request(max_tokens=4096))  # e.g. the compaction summary's cap
    finally:
        await provider.aclose()
    assert fake_llm.requests[0].json["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert "thinking" not in fake_llm.requests[1].json  # budget_tokens must stay below max_tokens


def _thinking_tool_turn(call_id: str, path: str) -> Any:
    return anthropic_events([
        {"type": "message_start", "message": {"id": "msg_t", "type": "message", "role": "assistant", "model": "m",
                                              "content": [], "stop_reason": None,
                                              "usage": {"input_tokens": 80, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": f"Read {path}."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": f"sig-{call_id}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": f"enc-{call_id}"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": call_id, "name": "read_file", "input": {}}},
        {"type": "content_block_delta", "index": 2,
         "delta": {"type": "input_json_delta", "partial_json": json.dumps({"path": path})}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ])


async def test_thinking_and_redacted_blocks_round_trip_through_a_two_call_tool_loop(
        fake_llm, tmp_path, monkeypatch) -> None:
    fake_llm.enqueue(_thinking_tool_turn("toolu_a", "a.txt"), _thinking_tool_turn("toolu_b", "b.txt"),
                     anthropic_text("Both read."))
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    (tmp_path / "work" / "a.txt").write_text("A")
    (tmp_path / "work" / "b.txt").write_text("B")
    agent.provider = fake_llm.provider("anthropic", thinking_budget=2048)
    try:
        result = await agent.run_turn("read a.txt then b.txt")
    finally:
        await agent.aclose()
    assert result.stop_reason == "end_turn"
    last = fake_llm.requests[2].json
    assert last["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assistants = [m["content"] for m in last["messages"] if m["role"] == "assistant"]
    for content, call_id in zip(assistants, ["toolu_a", "toolu_b"]):
        assert [b["type"] for b in content] == ["thinking", "redacted_thinking", "tool_use"]
        assert content[0]["signature"] == f"sig-{call_id}" and content[1] == {"type": "redacted_thinking",
                                                                            "data": f"enc-{call_id}"}


# ---- prompt caching breakpoints ----

def _marks(body: dict[str, Any]) -> list[str]:
    """Where the cache_control marks are, as readable places."""
    found = [f"tool:{t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    if isinstance(body.get("system"), list):
        found += ["system" for b in body["system"] if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        for b in m["content"]:
            if "cache_control" in b:
                assert b["type"] not in ("thinking", "redacted_thinking"), "the API rejects a mark on thinking"
                found.append(f"message:{i}:{b['type']}")
    return found


def _tool_round(i: int) -> list[Message]:
    return [Message(role="assistant", content=[ThinkingBlock(thinking="t", signature="s"),
                                               RedactedThinkingBlock(data="r"),
                                               ToolUseBlock(id=f"t{i}", name="read_file", input={"path": str(i)})]),
            Message(role="user", content=[ToolResultBlock(tool_use_id=f"t{i}", content=f"content {i}")])]


def _body(history: list[Message]) -> dict[str, Any]:
    return AnthropicProvider("claude-sonnet-4-5", "https://api.anthropic.com", "k").build_body(request(*history))


def test_breakpoints_on_tools_system_and_the_two_latest_user_turns() -> None:
    history = [Message.user("task")] + [m for i in range(6) for m in _tool_round(i)]
    marks = _marks(_body(history))
    last = len(history) - 1
    assert marks == ["tool:list_files", "system", f"message:{last - 2}:tool_result", f"message:{last}:tool_result"]


@pytest.mark.parametrize("rounds", [0, 1, 2, 9])
def test_never_more_than_four_marks_and_the_latest_message_always_has_one(rounds: int) -> None:
    history = [Message.user("task")] + [m for i in range(rounds) for m in _tool_round(i)]
    marks = _marks(_body(history))
    assert len(marks) <= MAX_CACHE_BREAKPOINTS
    assert marks[-1].startswith(f"message:{len(history) - 1}:")


def test_marks_stay_valid_after_compaction_and_micro_compaction() -> None:
    from app.context.compaction import build_summary_history
    from app.context.pruning import prune_by_size

    history = [Message.user("task")] + [m for i in range(8) for m in _tool_round(i)]
    compacted = build_summary_history("## Task goal\nread files", history)
    assert _marks(_body(compacted)) == ["tool:list_files", "system", "message:0:text"]
    compacted_then_more = compacted + _tool_round(99)
    assert _marks(_body(compacted_then_more))[-2:] == ["message:0:text", "message:2:tool_result"]
    big = [Message.user("task")] + [
        m for i in range(8) for m in
        [_tool_round(i)[0], Message(role="user", content=[ToolResultBlock(tool_use_id=f"t{i}", content="x " * 20_000)])]]
    pruned = prune_by_size(big, keep_tokens=25_000, min_free=1_000).history
    assert pruned != big
    marks = _marks(_body(pruned))
    assert len(marks) == 4 and marks[-1] == f"message:{len(pruned) - 1}:tool_result"


def test_empty_text_and_no_tools_or_system_still_give_a_valid_body() -> None:
    provider = AnthropicProvider("claude-sonnet-4-5", "https://api.anthropic.com", "k")
    body = provider.build_body(ModelRequest(system="", messages=[Message.user("hi")], tools=[]))
    assert _marks(body) == ["message:0:text"] and "system" not in body


def test_prompt_caching_can_be_turned_off() -> None:
    provider = AnthropicProvider("claude-sonnet-4-5", "https://api.anthropic.com", "k", prompt_caching=False)
    body = provider.build_body(request(Message.user("hi")))
    assert _marks(body) == [] and body["system"] == "You are terse."


async def test_caching_is_on_for_every_anthropic_protocol_server_unless_turned_off(fake_llm) -> None:
    # issue 28: gateways in front of Anthropic cache too; one that rejects the marks turns them off itself
    assert AnthropicProvider("m", "https://api.anthropic.com", "k").prompt_caching
    assert AnthropicProvider("m", "https://api.deepseek.com/anthropic", "k").prompt_caching
    fake_llm.enqueue(anthropic_text("a"), anthropic_text("b"))
    for caching in (False, None):
        provider = fake_llm.provider("anthropic", prompt_caching=caching)
        try:
            await run_stream(provider, request())
        finally:
            await provider.aclose()
    off, on = (fake_llm.requests[0].json, fake_llm.requests[1].json)
    assert _marks(off) == [] and off["system"] == "You are terse."
    assert _marks(on)[:2] == ["tool:list_files", "system"]


def test_a_thinking_budget_not_below_max_tokens_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_settings({"thinking_budget": 16_000, "max_tokens": 16_000})
    assert "thinking_budget" in str(err.value) and "max_tokens" in str(err.value)
    assert load_settings({"thinking_budget": 8_000, "max_tokens": 16_000}).thinking_budget == 8_000


@pytest.mark.parametrize("name", ["openai", "deepseek", "anthropic", "responses"])  # plug-ins take no options
def test_provider_options_fit_every_provider_constructor(name, tmp_path, monkeypatch) -> None:
    # the host passes them straight to create_provider: a wrong keyword would break start-up
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    settings = load_settings({"thinking_budget": 2048, "max_completion_tokens": True})
    provider = create_provider(name, None, None, "k", **provider_options(settings, name))
    if name == "anthropic":
        assert provider.thinking_budget == 2048  # type: ignore[attr-defined]
    elif name in ("openai", "deepseek"):
        assert provider.max_tokens_param == "max_completion_tokens"  # type: ignore[attr-defined]

"""Anthropic prompt caching: the fake server bills like the prefix cache, and a real session pays less."""

from __future__ import annotations

from typing import Any

from app.kernel.messages import Message, ToolResultBlock, ToolSpec, ToolUseBlock
from app.providers.anthropic import AnthropicProvider
from app.providers.base import ModelRequest
from fake_llm_server import AnthropicPromptCache
from prompt_cache_session import run_session

TOOLS = [ToolSpec(name=f"tool_{i}", description="d " * 400, input_schema={"type": "object"}) for i in range(4)]


def _body(history: list[Message], *, caching: bool = True, system: str = "You are terse. " * 50) -> dict[str, Any]:
    provider = AnthropicProvider("claude-sonnet-4-5", "https://api.anthropic.com", "k", prompt_caching=caching)
    return provider.build_body(ModelRequest(system=system, messages=history, tools=TOOLS))


def _round(i: int) -> list[Message]:
    return [Message(role="assistant", content=[ToolUseBlock(id=f"t{i}", name="tool_0", input={"i": i})]),
            Message(role="user", content=[ToolResultBlock(tool_use_id=f"t{i}", content=f"result {i} " * 300)])]


def test_the_fake_cache_writes_then_reads_the_marked_prefix() -> None:
    cache = AnthropicPromptCache()
    history = [Message.user("task " * 50)]
    first = cache.usage(_body(history))
    assert first["cache_read"] == 0 and first["cache_write"] > 0
    history += _round(1)
    second = cache.usage(_body(history))
    assert second["cache_read"] == first["cache_write"]  # everything the first call wrote is read back
    assert second["cache_write"] > 0  # and the new turn is written for the next call


def test_without_marks_nothing_is_cached_and_a_changed_system_prompt_misses() -> None:
    cache = AnthropicPromptCache()
    history = [Message.user("task " * 50)]
    for _ in range(2):
        usage = cache.usage(_body(history, caching=False))
        assert usage["cache_read"] == usage["cache_write"] == 0
    cache.usage(_body(history))
    changed = cache.usage(_body(history, system="Another prompt. " * 50))
    assert changed["cache_read"] < sum(changed.values()) // 2  # the tools alone may still hit


def test_a_prefix_under_the_minimum_is_never_cached() -> None:
    cache = AnthropicPromptCache(min_tokens=1_000_000)
    history = [Message.user("hi")]
    for _ in range(2):
        assert cache.usage(_body(history))["cache_read"] == 0


async def test_a_cached_session_costs_a_fraction_of_an_uncached_one(tmp_path) -> None:
    without = await run_session(8, caching=False, workdir=tmp_path / "off")
    with_cache = await run_session(8, caching=True, workdir=tmp_path / "on")
    assert without.model_calls == with_cache.model_calls == 16
    assert with_cache.max_breakpoints <= 4 and without.max_breakpoints == 0
    assert with_cache.cache_read_tokens > with_cache.cache_write_tokens > 0
    assert with_cache.cost_usd < 0.5 * without.cost_usd


async def test_caching_keeps_working_across_compactions(tmp_path) -> None:
    # a budget this small compacts every few turns: the marks must stay valid (at most 4,
    # on the rebuilt history) and the tools + system prefix keeps being read from the cache
    session = await run_session(10, caching=True, budget=12_000, workdir=tmp_path)
    assert session.compactions >= 1
    assert session.max_breakpoints <= 4
    baseline = await run_session(10, caching=False, budget=12_000, workdir=tmp_path / "off")
    assert session.cost_usd < baseline.cost_usd

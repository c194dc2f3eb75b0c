"""Provider-side context management (issue 17), end to end on a real agent and the fake server:
what is sent, what the server reports, and that the gauge says exactly what the server said."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent_helpers import make_agent
from fake_anthropic_context import anthropic_compacted, clear_thinking, clear_tool_uses, with_context_management
from fake_llm_server import anthropic_text, anthropic_tool_calls
from fake_responses_server import responses_text, responses_tool_calls
from test_engine_support import (
    is_compaction,
    next_request_problems,
    transcript_messages,
    wire_problems,
    write_words,
)

from app.context.accounting import ContextAccounting
from app.agent.server_context import configure_server_context, context_editing
from app.context.thresholds import Thresholds, compute_thresholds
from app.kernel.describe import describe
from app.kernel.messages import OpaqueBlock, ToolResultBlock
from app.providers.anthropic import ANTHROPIC_MIN_COMPACT_TRIGGER, AnthropicProvider
from app.session.transcript import restore


def server_settings(**chosen: Any) -> SimpleNamespace:
    """The issue-17 settings with their defaults (as in app.wiring.config.Settings), some chosen."""
    values: dict[str, Any] = dict(
        server_compaction=False, anthropic_clear_tool_uses=False, anthropic_clear_tool_uses_trigger=None,
        anthropic_clear_tool_uses_keep=None, anthropic_clear_tool_uses_clear_at_least=None,
        anthropic_clear_tool_uses_exclude=[], anthropic_clear_thinking=False, anthropic_clear_thinking_keep=None)
    values.update(chosen)
    return SimpleNamespace(**values)


def local_breakdown(agent) -> dict[str, int]:
    """The breakdown of the whole local history, as if the server had cleared nothing."""
    engine = agent.engine
    return ContextAccounting().breakdown(engine.system_prompt, engine.memory.text, engine.tools, engine.history)


# ---- the settings become the request ----

def anthropic_context_edits(settings: SimpleNamespace, thresholds: Thresholds) -> list[dict[str, Any]]:
    """What an Anthropic provider sends as ``context_management.edits`` for these settings."""
    provider = AnthropicProvider("claude-sonnet-4-5", "https://api.anthropic.com", None)
    server = provider.server_context()
    server.set_editing(context_editing(settings))
    if settings.server_compaction:
        server.set_compaction(thresholds.auto_compact_line)
    return provider.context_edits


def test_anthropic_edits_carry_every_chosen_parameter_and_the_auto_compact_line() -> None:
    thresholds = compute_thresholds(200_000, 0, 8_000)
    edits = anthropic_context_edits(server_settings(
        server_compaction=True, anthropic_clear_tool_uses=True, anthropic_clear_tool_uses_trigger=30_000,
        anthropic_clear_tool_uses_keep=2, anthropic_clear_tool_uses_clear_at_least=5_000,
        anthropic_clear_tool_uses_exclude=["write_file"], anthropic_clear_thinking=True,
        anthropic_clear_thinking_keep=1), thresholds)
    assert edits == [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
        {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30_000},
         "keep": {"type": "tool_uses", "value": 2}, "clear_at_least": {"type": "input_tokens", "value": 5_000},
         "exclude_tools": ["write_file"]},
        {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": thresholds.auto_compact_line}},
    ]
    # a small window's line is below what the API accepts: the API's minimum is sent instead
    small = compute_thresholds(20_000, 0, 8_000)
    assert small.auto_compact_line < ANTHROPIC_MIN_COMPACT_TRIGGER
    compact = anthropic_context_edits(server_settings(server_compaction=True), small)[-1]
    assert compact["trigger"]["value"] == ANTHROPIC_MIN_COMPACT_TRIGGER
    assert anthropic_context_edits(server_settings(), thresholds) == []


async def test_a_provider_without_server_management_says_so_and_ours_stays_on(fake_llm, tmp_path, monkeypatch):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, memory_update_tokens=0, provider="openai")
    try:
        problems = configure_server_context(agent.provider, agent.engine,
                                            server_settings(server_compaction=True, anthropic_clear_tool_uses=True))
        assert len(problems) == 2 and "server_compaction" in problems[0] and "openai" in problems[0]
        assert agent.engine._auto_compaction_is_ours()
    finally:
        await agent.aclose()


# ---- Anthropic context editing: the gauge tells the truth ----

async def test_anthropic_tool_clearing_gauge_agrees_with_what_the_server_reported(
        fake_llm, tmp_path: Path, monkeypatch) -> None:
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, memory_update_tokens=0, provider="anthropic", window=200_000, budget=0)
    configure_server_context(agent.provider, agent.engine,
                             server_settings(anthropic_clear_tool_uses=True, anthropic_clear_tool_uses_keep=1))
    for name in ("a.txt", "b.txt", "c.txt"):
        write_words(agent.workspace / name, 1_500, name[0])
    state: dict[str, Any] = {}

    def reply_for(body: dict, path: str):
        # what the server would report: the local size of the request minus what it cleared
        number = len(fake_llm.requests)
        if number <= 3:
            return anthropic_tool_calls([("read_file", {"path": f"{'abc'[number - 1]}.txt"})],
                                        usage=dict(input=2_000 * number, output=10))
        before = local_breakdown(agent)["tool_results"]
        results = [b for m in agent.history for b in m.content if isinstance(b, ToolResultBlock)]
        cleared = results[:-1]  # keep 1: the older results are cleared
        freed = sum(len(b.content) for b in cleared) // 4
        state.update(uses=len(cleared), freed=freed, before=before)
        reply = anthropic_text("three files read", usage=dict(input=6_000 + 1_000 - freed, output=12))
        return with_context_management(reply, [clear_tool_uses(len(cleared), freed)])

    fake_llm.default = reply_for
    try:
        result = await agent.run_turn("read a, b and c")
        assert result.stop_reason == "end_turn"
        body = fake_llm.requests[-1].json
        assert body["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919",
                                                          "keep": {"type": "tool_uses", "value": 1}}]}
        assert "context-management-2025-06-27" in fake_llm.requests[-1].headers["anthropic-beta"]
        assert wire_problems(body, "anthropic") == []

        micro = [e for e in events.of("micro_compaction") if e.trigger == "server"]
        assert [(e.results_cleared, e.tokens_freed) for e in micro] == [(state["uses"], state["freed"])]
        usage = events.of("usage")[-1]
        context = events.of("context")[-1]
        assert context.exact_tokens == usage.context_tokens == 6_000 + 1_000 - state["freed"] + 12
        assert context.projected_tokens == context.exact_tokens
        # the breakdown shows what was sent: the tool results less what the server cleared
        assert context.breakdown["tool_results"] == max(0, state["before"] - state["freed"])
        whole = local_breakdown(agent)
        assert {k: v for k, v in context.breakdown.items() if k != "tool_results"} == \
               {k: v for k, v in whole.items() if k != "tool_results"}
        # the gauge's history drops where the server cleared
        points = agent.engine.accounting.points
        assert points[-1] == context.exact_tokens and points[-1] < points[-2]
        # the local history stays whole (the API expects it): every result still goes out
        assert all(f"BEGIN {tag}" in str(body) for tag in ("a", "b", "c"))

        # the same edits reported again: no new event; more cleared: one more
        fake_llm.default = None
        same = with_context_management(anthropic_text("again", usage=dict(input=6_100 - state["freed"], output=5)),
                                       [clear_tool_uses(state["uses"], state["freed"])])
        more = with_context_management(anthropic_text("more", usage=dict(input=3_000, output=5)),
                                       [clear_tool_uses(state["uses"] + 1, state["freed"] + 900),
                                        clear_thinking(1, 100)])
        fake_llm.enqueue(same, more)
        await agent.run_turn("again")
        assert len([e for e in events.of("micro_compaction") if e.trigger == "server"]) == 1
        await agent.run_turn("more")
        last = [e for e in events.of("micro_compaction") if e.trigger == "server"][-1]
        assert (last.results_cleared, last.tokens_freed) == (state["uses"] + 1, state["freed"] + 1_000)
        assert events.of("context")[-1].exact_tokens == 3_000 + 5
        assert not any(is_compaction(r.json) for r in fake_llm.requests)
    finally:
        await agent.aclose()


# ---- server-side compaction ----

async def test_responses_server_compaction_replaces_the_history_and_ours_stands_down(
        fake_llm, tmp_path: Path, monkeypatch) -> None:
    # a tiny budget: the projection crosses the auto-compact line at once; with server compaction
    # on, tidegauge makes no compaction call of its own
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, memory_update_tokens=0, provider="responses", window=400_000, budget=2_000)
    configure_server_context(agent.provider, agent.engine, server_settings(server_compaction=True))
    for name in ("a.txt", "b.txt"):
        write_words(agent.workspace / name, 1_500, name[0])
    line = agent.engine.thresholds.auto_compact_line
    fake_llm.enqueue(
        responses_tool_calls([("read_file", {"path": "a.txt"})], reasoning="", usage=dict(input=1_900, output=10)),
        responses_tool_calls([("read_file", {"path": "b.txt"})], reasoning="", usage=dict(input=4_100, output=10)),
        # the compacting call's usage is the request the server compacted (the size before), as the service reports it
        responses_text("both read", compaction="gAAAAAB-compacted-fake", usage=dict(input=4_600, cached=0, output=8)),
        responses_text("next answer", usage=dict(input=1_550, output=4)),
    )
    try:
        result = await agent.run_turn("read a and b")
        assert result.stop_reason == "end_turn"
        bodies = [r.json for r in fake_llm.requests]
        assert all(b["context_management"] == [{"type": "compaction", "compact_threshold": line}] for b in bodies)
        assert not any(is_compaction(b) for b in bodies)  # ours stood down
        compaction = events.of("compaction")
        contexts_before = events[:events.index(compaction[0])]
        assert [c.trigger for c in compaction] == ["server"]
        event = compaction[0]
        usage = events.of("usage")[-1]
        # before: the server's figure for the request it compacted; after: our estimate of what was
        # kept (the call's usage is not it), said to be one, until the next call's usage
        assert event.tokens_before == usage.context_tokens == 4_600 + 8
        assert contexts_before and event.tokens_after_estimated
        assert 0 < event.tokens_after < 1_500, event.tokens_after
        assert "estimated" in describe(event).text and "as reported" not in describe(event).text
        assert event.messages_before == 5 and event.messages_after == len(agent.history) == 2
        gauge = events.of("context")[-1]
        assert gauge.exact_tokens is None and gauge.projected_tokens == event.tokens_after
        assert agent.engine.accounting.points[-1] == event.tokens_after

        # the item is kept in place of what it replaced, persisted, and goes back first
        assert [b.kind for b in agent.history[1].content if isinstance(b, OpaqueBlock)] == ["compaction"]
        assert next_request_problems(agent.history) == []
        on_disk = transcript_messages(tmp_path)
        assert any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for m in on_disk for b in m.content)
        assert any("a0" in m.model_dump_json() for m in on_disk)  # the replaced messages stay on disk
        await agent.run_turn("and then?")
        assert events.of("context")[-1].exact_tokens == 1_550 + 4  # the next figure is the server's again
        sent = fake_llm.requests[-1].json["input"]
        assert sent[0] == {"id": sent[0]["id"], "type": "compaction", "encrypted_content": "gAAAAAB-compacted-fake"}
        assert wire_problems(fake_llm.requests[-1].json, "responses") == []
        # a resumed session starts from the compaction item too
        restored = restore(next((tmp_path / "data").rglob("transcript.jsonl")))
        assert any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for m in restored.history for b in m.content)
    finally:
        await agent.aclose()


async def test_anthropic_server_compaction_counts_its_run_apart_and_sends_the_block_back(
        fake_llm, tmp_path: Path, monkeypatch) -> None:
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, memory_update_tokens=0, provider="anthropic", window=200_000, budget=0)
    configure_server_context(agent.provider, agent.engine, server_settings(server_compaction=True))
    fake_llm.enqueue(
        anthropic_text("first", usage=dict(input=60_000, output=30)),
        anthropic_compacted("Summary: the user asked twice.", "second", usage=dict(input=2_500, output=20),
                            compaction_usage=dict(input=61_000, output=400)),
        anthropic_text("third", usage=dict(input=2_600, output=10)),
    )
    try:
        await agent.run_turn("one")
        await agent.run_turn("two")
        request = fake_llm.requests[1]
        assert request.json["context_management"]["edits"] == [
            {"type": "compact_20260112",
             "trigger": {"type": "input_tokens",
                         "value": max(ANTHROPIC_MIN_COMPACT_TRIGGER, agent.engine.thresholds.auto_compact_line)}}]
        assert "compact-2026-01-12" in request.headers["anthropic-beta"]
        [event] = events.of("compaction")
        assert event.trigger == "server" and event.tokens_after == 2_500 + 20
        compact_usage = [e for e in events.of("usage") if e.agent == "compact"]
        assert [(u.input_tokens, u.output_tokens) for u in compact_usage] == [(61_000, 400)]
        assert events.of("context")[-1].exact_tokens == 2_500 + 20
        await agent.run_turn("three")
        sent = fake_llm.requests[2].json["messages"]
        assert sent[1]["content"][0] == {"type": "compaction", "content": "Summary: the user asked twice."}
        assert wire_problems(fake_llm.requests[2].json, "anthropic") == []
    finally:
        await agent.aclose()

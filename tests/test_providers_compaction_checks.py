"""Compaction checked against what small real models do (issue 14, item 4).

A summary over its output cap (the server ignored max_tokens) or one that does not
make the context smaller is a failed compaction: history untouched, the breaker
counts it, the event says why. A budget below the fixed part of every request
does not compact on every turn.
"""

from __future__ import annotations

from typing import Any
from agent_helpers import make_agent
from app.context.thresholds import budget_floor_warning, compaction_floor, compute_thresholds
from app.kernel.messages import Message
from fake_llm_server import openai_events, openai_chunk, openai_text, openai_tool_calls, openai_usage
from test_engine_support import dump, is_compaction, summary_text

SMALL: dict[str, Any] = dict(budget=2_000, window=20_000)


def _summary_reply(text: str, output_tokens: int | None):
    chunks = [openai_chunk({"role": "assistant", "content": text}), openai_chunk({}, "stop")]
    if output_tokens is not None:
        chunks.append(openai_chunk(usage=openai_usage(900, output_tokens), choices=False))
    return openai_events(chunks)


def _seed(agent, answer_words: int = 600) -> None:
    agent.engine.append(Message.user("summarize the tide tables"))
    agent.engine.append(Message.assistant_text(" ".join(f"tide{i % 97}" for i in range(answer_words))))


async def test_a_summary_over_its_output_cap_fails_and_leaves_the_history(fake_llm, tmp_path, monkeypatch) -> None:
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, compact_max_output=1_000)
    _seed(agent)
    before = dump(agent.history)
    # a small server ignoring max_tokens: its own count says 2,400 tokens for a 1,000 cap
    fake_llm.enqueue(_summary_reply(summary_text("long"), output_tokens=2_400))
    event = await agent.compact()
    assert not event.ok and dump(agent.history) == before
    assert "2,400" in event.reason and "1,000" in event.reason and "max_tokens" in event.reason
    assert any("compaction failed" in n.text for n in events.notices())


async def test_without_usage_the_summary_is_measured_by_estimate(fake_llm, tmp_path, monkeypatch) -> None:
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, compact_max_output=200)
    _seed(agent, answer_words=3_000)
    fake_llm.enqueue(_summary_reply(summary_text("wordy") + " more detail" * 400, output_tokens=None))
    event = await agent.compact()
    assert not event.ok and "over its output cap of 200" in event.reason


async def test_a_summary_bigger_than_the_context_fails_and_the_breaker_counts_it(
        fake_llm, tmp_path, monkeypatch) -> None:
    # the case: a ~1,000-token context "summarized" into several thousand tokens
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, **SMALL)
    (agent.workspace / "notes.txt").write_text("\n".join(f"note{i}" for i in range(600)))
    bloated = summary_text("bloat") + "\n" + " ".join(f"restated{i}" for i in range(1_800))

    def reply(body, path):
        if is_compaction(body):
            return openai_text(bloated, usage=None)
        last = body["messages"][-1]
        # no usage (as small local servers send): the projection is the estimate
        if last["role"] == "tool":
            return openai_text("read it", usage=None)
        return openai_tool_calls([("read_file", {"path": "notes.txt"})], usage=None)

    fake_llm.default = reply
    # the file's result crosses the auto-compact line inside the turn: the compaction runs and fails
    result = await agent.run_turn("read notes.txt")
    assert result.stop_reason == "end_turn"
    failed = [e for e in events.of("compaction") if not e.ok]
    assert failed and failed[0].trigger == "auto" and "does not make the context smaller" in failed[0].reason
    assert not any(e.ok for e in events.of("compaction"))
    assert any("note599" in r.content for m in agent.history for r in m.tool_results)  # nothing was replaced
    assert agent.engine.breaker.failures == len(failed)


async def test_a_budget_below_the_fixed_part_does_not_compact_every_turn(fake_llm, tmp_path, monkeypatch) -> None:
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, budget=300, window=20_000)
    fixed = agent.engine.fixed_tokens()
    assert fixed > 300  # the system prompt and the tool schemas alone are over this budget
    warning = agent.engine.budget_floor_warning()
    assert warning is not None and "300" in warning and f"{fixed:,}" in warning and "\n" not in warning
    line = agent.engine.thresholds.auto_compact_line
    assert line == compaction_floor(fixed, 20_000, agent.engine.config.compact_max_output)
    assert agent.context_event().thresholds.auto_compact_line == line  # the gauge draws the line that acts
    fake_llm.default = lambda body, path: openai_text(summary_text("x") if is_compaction(body) else "short answer")
    for turn in range(6):
        await agent.run_turn(f"question {turn}?")
    assert not [e for e in events.of("compaction")]  # six small turns, not six compactions


def test_the_floor_only_moves_a_budget_that_is_below_it() -> None:
    plain = compute_thresholds(200_000, 150_000, 8_000)
    assert compute_thresholds(200_000, 150_000, 8_000, fixed_tokens=950) == plain
    low = compute_thresholds(200_000, 300, 8_000, fixed_tokens=950)
    assert low.auto_compact_line == compaction_floor(950, 200_000, 8_000) > 950
    assert low.warning_line <= low.auto_compact_line <= low.blocking_line
    assert budget_floor_warning(150_000, 950, 200_000, 8_000) is None
    assert budget_floor_warning(0, 950, 200_000, 8_000) is None  # no budget: only the window line


def test_a_generous_budget_is_not_even_counted(fake_llm, tmp_path, monkeypatch) -> None:
    # the default budget is far above any floor: start-up must not wait for the tokenizer
    from app.context import core as engine_module  # the core counts the fixed part

    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch)
    calls: list[str] = []
    real = engine_module.count_tokens  # type: ignore[attr-defined]
    monkeypatch.setattr(engine_module, "count_tokens", lambda text: calls.append(text) or real(text))  # type: ignore[func-returns-value]
    assert agent.engine.budget_floor_warning() is None and not calls
    agent.engine.config.budget = 300  # near the floor: now it is counted, and said
    assert agent.engine.budget_floor_warning() is not None and calls


def test_setting_a_budget_below_the_floor_moves_the_line_and_says_so(fake_llm, tmp_path, monkeypatch) -> None:
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, window=20_000)
    assert agent.engine.set_budget(5_000) is None
    assert agent.engine.thresholds.auto_compact_line == 5_000
    warning = agent.engine.set_budget(200)
    assert warning is not None and "200" in warning
    assert agent.engine.thresholds.auto_compact_line > agent.engine.fixed_tokens() > 200
    assert agent.context_event().thresholds.auto_compact_line == agent.engine.thresholds.auto_compact_line

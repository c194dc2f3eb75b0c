"""Overflow recovery (reactive compact) through the agent loop: a main request
rejected as too long drops the oldest rounds, keeps the task, and retries."""

from __future__ import annotations

from typing import Any
import pytest
from agent_helpers import make_agent
from test_engine_support import (
    all_text,
    bodies,
    counted,
    next_request_problems,
    text_reply,
    too_long_error,
    tool_outputs,
    tool_reply,
    transcript_text,
    wire_messages,
    wire_problems,
    write_words,
)

from app.context.overflow import DROPPED_NOTE
from app.context.tokens import estimate_messages

# No budget line and a roomy window: nothing but the server's rejection shrinks the history.
# Session memory off: these tests script every request the server gets, in order.
ROOMY: dict[str, Any] = dict(budget=0, window=100_000, memory_update_tokens=0)
TASK = "task: read a.txt, b.txt, c.txt and d.txt, then compare them"


@pytest.mark.parametrize("provider", ["openai", "anthropic", "deepseek"])
async def test_too_long_main_request_drops_the_oldest_rounds_and_retries(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **ROOMY)
    for name in "abcd":
        write_words(agent.workspace / f"{name}.txt", 1_500, f"file{name.upper()}")
    for name in "abcd":
        fake_llm.enqueue(counted(provider, lambda u, n=name: tool_reply(provider, [("read_file", {"path": f"{n}.txt"})],  # type: ignore[misc]
                                                                        usage=u)))
    gap: list[int] = []

    def reject(body: dict, path: str):
        # Over by one and a half rounds (as the engine estimates them): two rounds must go.
        first, second = agent.history[1:3], agent.history[3:5]
        gap.append(estimate_messages(first) + estimate_messages(second) // 2)
        return too_long_error(provider, 100_000 + gap[0], 100_000)

    fake_llm.enqueue(reject, counted(provider, lambda u: text_reply(provider, "compared", usage=u)))

    result = await agent.run_turn(TASK)

    assert result.stop_reason == "end_turn" and result.text == "compared"
    assert result.steps == 5  # the rejected request did no work
    sent = bodies(fake_llm)
    assert len(sent) == 6
    rejected, retried = sent[4], sent[5]
    assert len(tool_outputs(rejected)) == 4
    outputs = tool_outputs(retried)
    assert len(outputs) == 2
    assert "BEGIN fileC" in outputs[0] and "BEGIN fileD" in outputs[1]
    retried_text = all_text(retried["messages"])
    assert "BEGIN fileA" not in retried_text and "BEGIN fileB" not in retried_text
    first = all_text(wire_messages(retried)[0]["content"])
    assert first.startswith(TASK) and DROPPED_NOTE in first  # the task is kept, with a note
    assert wire_problems(retried, provider) == []

    reactive = [e for e in events.of("compaction") if e.trigger == "reactive"]
    assert len(reactive) == 1
    ev = reactive[0]
    assert ev.ok and ev.messages_before == 9 and ev.messages_after == 5
    assert ev.tokens_after < ev.tokens_before
    assert any("prompt too long" in n.text and f"{gap[0]:,} tokens over" in n.text for n in events.notices())
    assert next_request_problems(agent.history) == []
    # the dropped rounds stay in the transcript on disk
    on_disk = transcript_text(tmp_path)
    assert "BEGIN fileA" in on_disk and "BEGIN fileB" in on_disk
    await agent.aclose()


@pytest.mark.parametrize("provider", ["openai", "anthropic", "deepseek"])
async def test_overflow_gives_up_after_three_recoveries_with_a_clear_error(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **ROOMY)
    (agent.workspace / "x.txt").write_text("x\n")
    for _ in range(6):
        fake_llm.enqueue(tool_reply(provider, [("list_files", {})]))
    # From here on every request is rejected, without numbers (OpenAI's newer wording,
    # Anthropic's bare "prompt is too long"): each recovery drops a share of the rounds.
    fake_llm.default = lambda body, path: too_long_error("anthropic" if provider == "anthropic" else "openai")

    result = await agent.run_turn("list the files six times")

    assert result.stop_reason == "error"
    assert "prompt too long" in result.text and "3 attempts" in result.text
    assert events.of("error") and "prompt too long" in events.of("error")[-1].message
    sent = bodies(fake_llm)
    rejected = sent[6:]
    assert len(rejected) == 4  # the first rejection and three retries after drops
    sizes = [len(wire_messages(b)) for b in rejected]
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3]
    for body in rejected:
        assert all_text(wire_messages(body)[0]["content"]).startswith("list the files six times")
        assert wire_problems(body, provider) == []
    reactive = [e for e in events.of("compaction") if e.trigger == "reactive"]
    assert [e.ok for e in reactive] == [True, True, True]
    assert next_request_problems(agent.history) == []
    await agent.aclose()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_overflow_with_nothing_left_to_drop_stops_with_an_error(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **ROOMY)
    fake_llm.enqueue(too_long_error(provider, 120_000, 100_000))
    result = await agent.run_turn("a single huge message")
    assert result.stop_reason == "error" and "prompt too long" in result.text
    assert len(fake_llm.requests) == 1
    failed = events.of("compaction")
    assert len(failed) == 1 and failed[0].trigger == "reactive" and not failed[0].ok
    assert [m.role for m in agent.history] == ["user"]
    await agent.aclose()

"""The agent loop end to end: real runtime, real tools, real engine, fake server on loopback."""

from __future__ import annotations

import asyncio
import json

from agent_helpers import make_agent
from fake_llm_server import (
    anthropic_text,
    anthropic_tool_calls,
    cut_after,
    http_error,
    openai_error_body,
    openai_text,
    openai_tool_calls,
    stall_after,
    stream_error,
)

from app.context.validate import history_problems
from app.kernel.describe import describe
from app.kernel.messages import Message
from app.kernel.markers import INTERRUPTED_RESULT, NOT_RUN_RESULT


def _next_request_problems(history: list[Message]) -> list[str]:
    """Problems of the request the next user message would make (merged into a trailing user message)."""
    if history and history[-1].role == "user":
        return history_problems(history)
    return history_problems(history + [Message.user("next")])


def _tool_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def test_tool_round_trip_reaches_the_model_and_ends(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    (agent.workspace / "notes.txt").write_text("alpha\nbeta\n")
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "notes.txt"})], usage=dict(prompt=900, completion=20, cached=600)),
        openai_text("The file has two lines.", usage=dict(prompt=1000, completion=8, cached=900)),
    )
    result = await agent.run_turn("what is in notes.txt?")
    assert result.stop_reason == "end_turn"
    assert result.text == "The file has two lines."
    second = fake_llm.requests[1].json
    tool_msgs = _tool_messages(second)
    assert len(tool_msgs) == 1 and "alpha" in tool_msgs[0]["content"] and "beta" in tool_msgs[0]["content"]
    # context_tokens = all input including cache + output (never the uncached part alone)
    usage = events.of("usage")
    assert [u.context_tokens for u in usage] == [920, 1008]
    assert usage[0].cache_read_tokens == 600 and usage[0].input_tokens == 300
    assert _next_request_problems(agent.history) == []
    await agent.aclose()


async def test_seed_story_cat_of_a_15mb_log_keeps_head_tail_and_notice(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, yes=True)
    lines = [f"2026-10-18 12:00:00 INFO request handled id={i}" for i in range(1, 300_001)]
    lines.append("2026-10-18 12:00:01 ERROR database connection refused")
    (agent.workspace / "app.log").write_text("\n".join(lines) + "\n")
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "cat app.log"})]),
        openai_text("The log ends with: ERROR database connection refused."),
    )
    result = await agent.run_turn("look at app.log and find errors")
    assert result.stop_reason == "end_turn"
    content = _tool_messages(fake_llm.requests[1].json)[0]["content"]
    assert len(content) < 45_000  # 40,000 limit + the notice
    assert content.startswith("2026-10-18 12:00:00 INFO request handled id=1\n")
    assert "2026-10-18 12:00:01 ERROR database connection refused" in content[-2_000:]
    assert "output truncated" in content and "grep" in content
    tool_result = events.of("tool_result")[0]
    assert tool_result.truncated and tool_result.original_chars > 14_000_000
    saved = tool_result.full_output_path
    assert saved and saved in content
    with open(saved, encoding="utf-8") as fh:
        assert fh.read().count("\n") >= 300_001
    await agent.aclose()


async def test_step_limit_stops_with_a_clear_result(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, max_steps=3)
    fake_llm.default = lambda body, path: openai_tool_calls([("list_files", {})])
    result = await agent.run_turn("loop forever")
    assert result.stop_reason == "max_steps"
    assert result.steps == 3
    assert len(fake_llm.requests) == 3
    assert "step limit" in result.text
    await agent.aclose()


async def test_stream_cut_mid_tool_call_is_retried_and_never_half_written(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(
        cut_after(openai_tool_calls([("list_files", {})]), 2),
        openai_text("recovered"),
    )
    result = await agent.run_turn("hi")
    assert result.stop_reason == "end_turn" and result.text == "recovered"
    assert len(events.of("retry")) == 1
    # exactly one assistant message entered the history: the good one
    assert [m.role for m in agent.history] == ["user", "assistant"]
    await agent.aclose()


async def test_error_event_inside_stream_without_retries_leaves_history_as_it_was(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic", max_retries=0)
    fake_llm.enqueue(stream_error("anthropic", "Overloaded", error_type="overloaded_error", after_text="Partial "))
    result = await agent.run_turn("hi")
    assert result.stop_reason == "error"
    assert "Overloaded" in result.text
    assert [m.role for m in agent.history] == ["user"]
    assert any("discarded" in n.text for n in events.notices())
    await agent.aclose()


async def test_non_retryable_http_error_shows_the_server_message(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(http_error(401, openai_error_body("Incorrect API key provided", type="invalid_request_error",
                                                       code="invalid_api_key")))
    result = await agent.run_turn("hi")
    assert result.stop_reason == "error"
    assert "Incorrect API key provided" in result.text
    assert len(fake_llm.requests) == 1  # a 401 is not retried
    await agent.aclose()


async def test_mutating_tools_are_refused_without_yes(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "touch created.txt"})]),
        openai_text("ok"),
    )
    await agent.run_turn("make a file")
    assert not (agent.workspace / "created.txt").exists()
    refusal = _tool_messages(fake_llm.requests[1].json)[0]["content"]
    assert "--yes" in refusal
    await agent.aclose()


async def test_interrupt_while_waiting_for_approval_leaves_a_valid_history_and_runs_nothing(fake_llm, tmp_path, monkeypatch):
    # The dashboard's escape in the approval modal cancels the turn while the approver waits.
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    asked = asyncio.Event()

    async def approver(use):
        asked.set()
        await asyncio.Event().wait()  # the user is reading the command

    agent.approver = approver
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "touch a.txt"})]))
    task = asyncio.ensure_future(agent.run_turn("make a file"))
    await asked.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert not (agent.workspace / "a.txt").exists()
    assert events.of("result")[-1].stop_reason == "interrupted"
    # The line says the call never ran (it said "while run_bash ran": issue 29).
    assert describe(events.of("interrupted")[-1]).text == (
        "interrupted by the user at the approval of run_bash (it did not run)")
    # The model and the tool panel are told the same: it did nothing (it said "Interrupted
    # before this tool finished", as if a half-run command might have changed things).
    [result] = agent.history[-1].tool_results
    assert result.content == NOT_RUN_RESULT
    assert events.of("tool_result")[-1].content == NOT_RUN_RESULT
    assert _next_request_problems(agent.history) == []
    fake_llm.enqueue(openai_text("fine"))
    assert (await agent.run_turn("go on")).stop_reason == "end_turn"
    await agent.aclose()


async def test_interrupt_during_a_stalled_stream_keeps_history_valid(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(
        openai_tool_calls([("list_files", {})]),
        stall_after(openai_text("never finished"), 1),
    )
    task = asyncio.ensure_future(agent.run_turn("list things"))
    # wait (without sleeping) until the second request is on the wire
    while len(fake_llm.requests) < 2:
        await asyncio.sleep(0)
        if task.done():
            break
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    fake_llm.release()
    assert events.of("result")[-1].stop_reason == "interrupted"
    assert _next_request_problems(agent.history) == []
    # the next turn is a valid request
    fake_llm.enqueue(openai_text("fine"))
    result = await agent.run_turn("go on")
    assert result.stop_reason == "end_turn"
    await agent.aclose()


async def test_interrupt_while_a_tool_runs_gives_synthetic_results(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, yes=True)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "sleep 60"}), ("list_files", {})]))
    started = asyncio.Event()
    original = agent.registry.run

    async def run_and_signal(name, args, ctx):
        started.set()
        return await original(name, args, ctx)

    agent.registry.run = run_and_signal
    task = asyncio.ensure_future(agent.run_turn("sleep"))
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    last = agent.history[-1]
    assert last.role == "user" and len(last.tool_results) == 2
    # the running call may have done something; list_files, queued behind it, did nothing
    assert [r.content for r in last.tool_results] == [INTERRUPTED_RESULT, NOT_RUN_RESULT]
    assert history_problems(agent.history) == []
    # the running call's line ends (as interrupted); list_files never started, never shown
    (ended,) = events.of("tool_result")
    assert ended.name == "run_bash" and ended.is_error and "Interrupted before this tool finished" in ended.content
    assert [e.name for e in events.of("tool_start")] == ["run_bash"]
    fake_llm.enqueue(openai_text("ok"))
    assert (await agent.run_turn("what happened?")).stop_reason == "end_turn"
    sent = fake_llm.requests[-1].json["messages"]
    assert [m["role"] for m in sent[-4:]] == ["assistant", "tool", "tool", "user"]
    await agent.aclose()


async def test_anthropic_round_trip_sends_tool_results_first_in_the_next_user_message(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    fake_llm.enqueue(
        anthropic_tool_calls([("list_files", {})], usage=dict(input=50, output=10, cache_read=2000, cache_write=100)),
        anthropic_text("done", usage=dict(input=80, output=5, cache_read=2100, cache_write=0)),
    )
    result = await agent.run_turn("list")
    assert result.stop_reason == "end_turn"
    usage = events.of("usage")
    assert usage[0].context_tokens == 50 + 2000 + 100 + 10
    body = fake_llm.requests[1].json
    assert body["messages"][-1]["role"] == "user"
    assert body["messages"][-1]["content"][0]["type"] == "tool_result"
    await agent.aclose()


async def test_transcript_keeps_every_message_and_no_key(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(openai_text("hello there"))
    await agent.run_turn("say hello; my key is sk-test-fake-key-0123456789")
    await agent.aclose()
    sessions = list((tmp_path / "data").rglob("transcript.jsonl"))
    assert len(sessions) == 1
    text = sessions[0].read_text()
    assert "hello there" in text
    assert "sk-test-fake-key-0123456789" not in text
    kinds = [json.loads(line)["kind"] for line in text.splitlines()]
    assert "message" in kinds and "turn_end" in kinds

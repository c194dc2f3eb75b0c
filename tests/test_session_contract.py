"""The session contract: commands in through ``submit``, typed events out, in order.

Real sessions (runtime wiring, real engine and tools) against the loopback fake LLM server.
"""

from __future__ import annotations

from typing import Any

import asyncio
import json
import typing

import pytest

from agent_helpers import make_session
from app.kernel import events as ev
from app.session.agent_session import AgentSession, replayable
from app.kernel.commands import (
    EvictResult,
    ManageMcpServer,
    PinResult,
    Approve,
    AnswerElicitation,
    ApproveImport,
    Command,
    Compact,
    Interrupt,
    Preview,
    PreviewRestore,
    PreviewRewind,
    Report,
    Reset,
    RestoreResult,
    Rewind,
    ServerCompaction,
    Shutdown,
    UserInput,
    WhatIf,
)
from app.kernel.describe import DESCRIBERS, describe
from app.kernel.protocol import SessionSurface
from fake_llm_server import anthropic_text, openai_text, openai_tool_calls
from snapshot_apps.fake_agent import FakeSession


async def _run(session: AgentSession, *commands) -> None:
    """Submit, then stop after what is queued; returns when the session has stopped."""
    for command in commands:
        session.submit(command)
    session.submit(Shutdown())
    await session.run()


def test_every_event_type_has_words_or_is_declared_silent():
    union = typing.get_args(typing.get_args(ev.Event)[0])
    types = {cls.model_fields["type"].default for cls in union}
    assert types == set(DESCRIBERS), "a new event type needs an entry in app.kernel.describe.DESCRIBERS"


async def test_a_turn_runs_and_its_events_arrive_in_order_after_the_session_info(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    assert isinstance(session, SessionSurface)
    fake_llm.enqueue(openai_text("hello there"))
    await _run(session, UserInput("hi"))  # type: ignore[arg-type]
    kinds = [e.type for e in events]
    assert kinds[0] == "session" and events[0].session_id == session.info.session_id  # type: ignore[attr-defined]
    assert kinds.index("user_message") < kinds.index("assistant_message") < kinds.index("result")
    assert events.of("result")[-1].stop_reason == "end_turn"
    # the gauge's history gets its point from the core, after the call
    points = events.of("chart_point")
    assert [p.kind for p in points] == ["call"] and points[0].tokens > 0


async def test_approvals_are_answered_through_submit_and_always_is_remembered_by_the_session(
        fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    answers = iter(["no", "always"])
    asked: list[str] = []

    def answer(envelope):
        event = envelope.event
        if event.type == "approval_request":
            asked.append(event.input["command"])
            session.submit(Approve(event.request_id, next(answers)))  # type: ignore[arg-type]

    session.subscribe(answer)
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "touch a.txt"})]),
        openai_tool_calls([("run_bash", {"command": "touch b.txt"})]),
        openai_tool_calls([("run_bash", {"command": "touch c.txt"})]),
        openai_text("done"),
    )
    await _run(session, UserInput("make files"))
    assert asked == ["touch a.txt", "touch b.txt"]  # "always" stops the asking
    workspace = session.agent.workspace
    assert not (workspace / "a.txt").exists()
    assert (workspace / "b.txt").exists() and (workspace / "c.txt").exists()
    assert [e.decision for e in events.of("approval_resolved")] == ["no", "always"]
    waiting = [e for e in events.of("state") if e.state == "waiting_approval"]
    assert [(s.tool_name, s.tool_index, s.tool_count) for s in waiting] == [("run_bash", 1, 1)] * 2


async def test_a_prompt_given_while_busy_is_queued_says_so_and_runs_after(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)

    def answer_later(envelope):
        event = envelope.event
        if event.type == "approval_request":
            session.submit(UserInput("second task"))  # the first turn is busy, waiting for the user
            session.submit(Compact("focus"))
            session.submit(Approve(event.request_id, "yes"))

    session.subscribe(answer_later)
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "true"})]),
        openai_text("first done"),
        openai_text("second done"),
        openai_text("<summary>the summary</summary>"),
    )
    await _run(session, UserInput("first task"))
    queued = events.of("queued")
    assert [(q.command, q.position) for q in queued] == [("prompt", 1), ("compact", 2)]
    assert [describe(q).text for q in queued] == ["prompt queued, runs when this turn ends: second task",
                                                  "compaction queued, runs when this turn ends (#2 in the queue)"]
    assert [r.text for r in events.of("result")] == ["first done", "second done"]
    assert [e.text for e in events.of("user_message")] == ["first task", "second task"]
    assert events.of("compaction")[-1].trigger == "manual"


async def test_interrupt_ends_the_turn_clears_the_queue_and_leaves_a_valid_history(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)

    def interrupt(envelope):
        if envelope.event.type == "approval_request":
            session.submit(UserInput("never runs"))
            session.submit(Interrupt())

    session.subscribe(interrupt)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "touch x.txt"})]))
    await _run(session, UserInput("make a file"))
    assert events.of("result")[-1].stop_reason == "interrupted"
    assert [e.text for e in events.of("user_message")] == ["make a file"]
    assert events.of("interrupted")[0].tool_name == "run_bash"
    (result,) = events.of("tool_result")
    assert result.interrupted and result.is_error
    assert [e.decision for e in events.of("approval_resolved")] == ["interrupted"]
    assert any(s.state == "interrupting" for s in events.of("state"))
    assert not (session.agent.workspace / "x.txt").exists()
    # the next request is valid: every call has its result
    history = session.agent.history
    calls = {u.id for m in history for u in m.tool_uses}
    answered = {r.tool_use_id for m in history for r in m.tool_results}
    assert calls == answered


async def test_report_command_answers_with_figures_worded_in_one_place(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(openai_text("ok"))
    await _run(session, UserInput("hi"))
    session.submit(Report("usage"))  # reports answer at once, busy or not
    session.submit(Report("context"))
    usage, context = events.of("report")
    assert usage.messages == 2 and usage.context.cumulative_input == 100
    assert describe(usage).text.startswith("2 messages, context ~")
    assert "by part: system" in describe(context).text


async def test_every_event_is_in_the_transcript_before_any_surface_sees_it(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    path = session.agent.transcript.path if hasattr(session.agent.transcript, "path") else None
    path = path or session.info.transcript_path
    seen_before: list[bool] = []

    def check(envelope):
        if envelope.event.type in ("text_delta", "thinking_delta"):
            return
        lines = open(path, encoding="utf-8").read().splitlines()
        recorded = [json.loads(line).get("event") for line in lines if '"event"' in line]
        # the line as written: the envelope's seq and command id beside the event's fields
        seen_before.append(bool(recorded) and recorded[-1] == envelope.to_json())

    session.subscribe(check)
    fake_llm.enqueue(openai_tool_calls([("list_files", {})]), openai_text("done"))
    await _run(session, UserInput("look"))
    assert len(seen_before) > 10 and all(seen_before)


async def test_the_gauge_moves_during_a_stream_from_the_servers_usage(fake_llm, tmp_path, monkeypatch):
    # Anthropic's message_start says the prompt size before any text: a live context event.
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    fake_llm.enqueue(anthropic_text(["one ", "two ", "three"], usage={"input": 3_000, "output": 9,
                                                                     "cache_read": 1_000}))
    await _run(session, UserInput("hi"))
    kinds = [e.type for e in events]
    live = [e for e in events.of("context") if e.live]
    assert live and live[0].exact_tokens >= 4_000  # input + cache reads, before the call ended
    first_live = next(i for i, e in enumerate(events) if e.type == "context" and e.live)
    assert first_live < kinds.index("assistant_message")


async def test_a_failing_stream_discards_its_partial_reply_and_retry_numbers_agree(fake_llm, tmp_path, monkeypatch):
    from fake_llm_server import stream_error

    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="anthropic", max_retries=2)
    fake_llm.enqueue(stream_error("anthropic", "Overloaded", error_type="overloaded_error", after_text="Partial "),
                     anthropic_text("fine"))
    await _run(session, UserInput("hi"))
    (retry,) = events.of("retry")
    (state,) = [s for s in events.of("state") if s.state == "retrying"]
    assert (retry.attempt, retry.max_attempts) == (state.attempt, state.max_attempts) == (1, 2)
    assert describe(retry).text.startswith("retry 1 of 2 in ")
    kinds = [e.type for e in events]
    shown = sum(len(e.text) for e in events[:kinds.index("retry")] if e.type == "text_delta")
    assert shown > 0 and events.of("partial_discarded")[0].chars == shown
    assert events.of("result")[-1].text == "fine"


async def test_repeated_tool_call_ids_are_made_unique_before_anything_runs(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch, yes=True)
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "echo one"}, "call_0"),
                           ("run_bash", {"command": "echo two"}, "call_0")]),
        openai_tool_calls([("run_bash", {"command": "echo three"}, "call_0")]),
        openai_text("done"),
    )
    await _run(session, UserInput("echo"))
    ids = [e.id for e in events.of("tool_start")]
    assert len(set(ids)) == 3
    results = {e.id: e.content for e in events.of("tool_result")}
    assert ["one" in results[ids[0]], "two" in results[ids[1]], "three" in results[ids[2]]] == [True] * 3


def test_replay_derives_chart_points_for_sessions_recorded_before_they_were_events():
    th = ev.ThresholdsModel(window=100, reserve=1, effective_window=99, auto_compact_line=80, warning_line=60,
                            blocking_line=90)

    def ctx(projected):
        return ev.ContextEvent(exact_tokens=projected, estimated_tokens=0, projected_tokens=projected, thresholds=th,
                               breakdown={}, level="ok")

    old = [ev.UsageEvent(input_tokens=50, cache_read_tokens=0, cache_write_tokens=0, output_tokens=5,
                         context_tokens=55), ctx(55),
           ev.NoticeEvent(text="context compacted: 3 messages → 1 summary"),
           ev.CompactionEvent(trigger="auto", ok=True, messages_before=3, messages_after=1, tokens_before=55,
                              tokens_after=10), ctx(10),
           ev.ResetEvent(messages_before=1), ctx(2)]
    replay = replayable(old)
    points = [(e.kind, e.tokens) for e in replay if e.type == "chart_point"]
    assert points == [("call", 55), ("compaction", 10), ("reset", 2)]
    assert not [e for e in replay if e.type == "notice"]  # the typed event before it already says it


async def test_the_dashboard_tests_session_speaks_the_same_contract():
    """The dashboard tests' session (the real one with a scripted model): a prompt ends idle, then in its result."""
    fake = FakeSession()
    seen: list[Any] = []
    fake.subscribe(seen.append)
    fake.submit(UserInput("hi"))
    await asyncio.wait_for(fake.idle(), 30)
    assert [e.event.type for e in seen][-2:] == ["state", "result"] and seen[-2].event.state == "idle"
    assert fake.snapshot().info.provider_label
    fake.submit(Shutdown())


# Commands answered at once with a typed event (issues 14-17): the real session answers each with
# one event, and so does the dashboard tests' session (the same session, its model scripted).
ANSWERED_AT_ONCE = [
    (Preview("compact"), "forecast"),
    (Preview("reset"), "forecast"),
    (PreviewRestore("call-nope"), "restore_preview"),
    (RestoreResult("call-nope"), "restore_preview"),
    (ServerCompaction(True), "server_compaction"),
    (WhatIf(100_000, 0.5), "whatif"),
    (Preview("evict", call_id="call-nope"), "forecast"),
    (EvictResult("call-nope"), "evict"),
    (PinResult("call-nope"), "pin"),
    (PreviewRewind(), "rewind_points"),
    (Rewind("plan-nope"), "rewind"),
    (ManageMcpServer("status"), "mcp_status"),
    (ManageMcpServer("reconnect", "nowhere"), "mcp_status"),
]


def test_every_command_is_answered_at_once_or_runs_in_turn():
    union = set(typing.get_args(Command))
    assert {type(c) for c, _ in ANSWERED_AT_ONCE} | {UserInput, Compact, Reset, Interrupt, Approve, Report,
                                                      Shutdown, ApproveImport, AnswerElicitation} == union


@pytest.mark.parametrize("command,answer", ANSWERED_AT_ONCE, ids=lambda v: getattr(v, "__name__", str(v))[:40])
async def test_the_real_and_the_dashboard_tests_session_answer_a_question_with_the_same_event(
        command, answer, fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    command_id = session.submit(command)  # before run: answered when the session starts, with its id
    await _run(session)
    assert [e.type for e in events.caused_by(command_id)] == [answer]
    fake, seen = FakeSession(), list[Any]()
    fake.subscribe(seen.append)
    fake_id = fake.submit(command)

    async def answered() -> None:
        while not any(e.command_id == fake_id for e in seen):
            await asyncio.sleep(0.005)  # polls the condition above

    await asyncio.wait_for(answered(), 30)
    assert [e.event.type for e in seen if e.command_id == fake_id] == [answer]
    fake.submit(Shutdown())

"""Rewind through the real session (runtime wiring, the fake LLM server): the list answers at once
with a plan per message, ``Rewind(plan_id)`` runs that plan, its event carries the forecast beside
the actual size, the gauge's next figure is the size after, and the next request holds no abandoned
turn; the files the abandoned turns changed come back when asked."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_helpers import make_session
from fake_llm_server import openai_text, openai_tool_calls

from app.kernel.envelope import EventEnvelope
from app.kernel import events as ev
from app.kernel.commands import PreviewRewind, Rewind, Shutdown, UserInput


async def _until(session: Any, events: list[Any], wanted: str, count: int = 1) -> None:
    """Until ``count`` events of type ``wanted`` have arrived (told by the session's own stream)."""
    arrived = asyncio.Event()

    def listener(envelope: EventEnvelope) -> None:  # after the log's own listener: ``events`` holds its event
        if envelope.event.type == wanted and sum(e.type == wanted for e in events) >= count:
            arrived.set()

    unsubscribe = session.subscribe(listener)
    try:
        if sum(e.type == wanted for e in events) < count:
            await arrived.wait()
    finally:
        unsubscribe()


async def test_rewind_runs_the_plan_shown_and_the_next_request_starts_before_that_message(
        fake_llm, tmp_path, monkeypatch) -> None:
    session, events = make_session(fake_llm, tmp_path, monkeypatch, yes=True)
    work = tmp_path / "work"
    fake_llm.enqueue(openai_tool_calls([("write_file", {"path": "plan.md", "content": "v1\n"})]), openai_text("one done"),
                     openai_tool_calls([("write_file", {"path": "plan.md", "content": "v2\n"})]), openai_text("two done"))
    running = asyncio.create_task(session.run())
    session.submit(UserInput("write the plan"))
    session.submit(UserInput("rewrite the plan " + "with many more words " * 200))
    await _until(session, events, "result", 2)

    session.submit(PreviewRewind())
    await _until(session, events, "rewind_points")
    listed = events.of("rewind_points")[-1]
    assert [(p.turn, p.text[:16]) for p in listed.points] == [(2, "rewrite the plan"), (1, "write the plan")]
    assert listed.points[0].files == ["plan.md"] and listed.points[0].tokens_after < listed.tokens_before

    chosen = listed.points[0]
    session.submit(Rewind(chosen.plan_id, files=True))
    await _until(session, events, "rewind")
    done_in = events.enveloped("rewind")[-1]
    done = done_in.event
    assert isinstance(done, ev.RewindEvent)
    assert done.ok and not done.replanned and done.text.startswith("rewrite the plan")
    assert done.forecast_tokens_after == chosen.tokens_after
    assert abs(done.tokens_after - chosen.tokens_after) <= 0.02 * done.tokens_after
    assert done.files_restored == ["plan.md"] and (work / "plan.md").read_text() == "v1\n"
    context_after = [e.event for e in events.envelopes if e.event.type == "context" and e.seq > done_in.seq][0]
    assert context_after.projected_tokens == done.tokens_after  # the gauge shows the size after

    fake_llm.enqueue(openai_text("shorter done"))
    session.submit(UserInput("rewrite the plan, shorter"))
    session.submit(Shutdown())
    await running
    sent = str(fake_llm.requests[-1].json["messages"])
    assert "write the plan" in sent and "one done" in sent
    assert "many more words" not in sent and "two done" not in sent


async def test_a_rewind_command_from_a_surface_that_names_no_plan_of_this_session_is_one_line(
        fake_llm, tmp_path, monkeypatch) -> None:
    """A web tab or a pipe sends what it likes: an id of another session's list, or not a string at all."""
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(openai_text("one done"))
    await_run = asyncio.create_task(session.run())
    session.submit(UserInput("write the plan"))
    await _until(session, events, "result")
    session.submit(Rewind("plan-1"))
    session.submit(Rewind(["not", "an", "id"], files=True))  # type: ignore[arg-type]
    session.submit(Shutdown())
    await await_run
    refused = events.of("rewind")
    assert [e.ok for e in refused] == [False, False]
    assert all(e.reason and "\n" not in e.reason for e in refused)
    assert "write the plan" in str(session.agent.history[0].content)  # nothing lost

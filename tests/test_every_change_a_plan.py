"""Every change to the context is a plan: the core makes it, the dialog shows it, the service
runs exactly the one named, and the event carries the forecast beside what happened.

Reset made a plan that nothing ran (``Reset`` carried no id; the session called ``reset()``),
and clearing and restore were no plans at all. The engine-level tests drive the real engine
with a log for a transcript; the session-level ones the real session and the fake server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from test_context_core_is_pure import Log, engine_with
from test_ctx_support import history_of, tool_round

from app.context.engine import ContextEngine
from app.kernel.describe import describe
from app.kernel.events import ForecastEvent, MicroCompactionEvent, ResetEvent, RestoreEvent, event_adapter
from app.kernel.messages import Message
from app.kernel.usage import Usage


async def _no_model(request: Any) -> tuple[Message, Usage]:
    raise AssertionError("no model call was planned")


def _evicted_engine(tmp_path: Path, log: Log) -> tuple[ContextEngine, str]:
    """An engine whose history holds one result taken out of the context (saved, restorable)."""
    history = [Message.user("read the sources")]
    for _ in range(4):
        history += tool_round(1, 300, save_path=False)  # never saved: the eviction saves it
    engine = engine_with(history, log)
    engine.tool_results_dir = tmp_path / "tool-results"
    engine.tool_results_dir.mkdir()
    call_id = engine.history[1].tool_uses[0].id
    engine.evict_result(call_id)
    log.entries.clear()
    return engine, call_id


# ---- reset ----

def test_a_reset_runs_the_plan_it_was_given_and_its_event_carries_the_forecast() -> None:
    log = Log()
    engine = engine_with(history_of(6, result_words=300), log)
    shown = engine.plan_reset()  # what the dialog showed
    engine.reset(engine.take_reset_plan(shown.id))
    (event,) = log.events(ResetEvent)
    assert event.plan_id == shown.id and not event.replanned
    assert event.tokens_before == shown.forecast.tokens_before > event.tokens_after
    assert event.forecast_tokens_after == shown.forecast.tokens_after
    assert event.tokens_after == shown.forecast.tokens_after, "a reset's size after is known exactly"
    assert event.cache_tokens_invalidated == shown.forecast.cache_tokens_invalidated
    # and it says both: what happened, and what was forecast
    line = describe(event)
    assert line is not None and "forecast ~" in line.text and "→" in line.text, line
    # the stream-json and transcript line carries them too
    assert event_adapter().validate_json(event.model_dump_json()) == event


def test_a_reset_plan_made_before_the_conversation_moved_on_is_made_again_and_says_so() -> None:
    log = Log()
    engine = engine_with(history_of(3, result_words=200), log)
    shown = engine.plan_reset()
    for message in tool_round(1, 400):
        engine.append(message)
    engine.reset(engine.take_reset_plan(shown.id))
    (event,) = log.events(ResetEvent)
    assert event.replanned and event.plan_id != shown.id
    assert event.tokens_before > shown.forecast.tokens_before, "it ran on the conversation as it is now"
    line = describe(event)
    assert line is not None and "re-planned: the conversation changed after the confirmation" in line.text


def test_a_reset_line_written_before_resets_were_plans_still_loads_and_reads() -> None:
    old = event_adapter().validate_json('{"type": "reset", "messages_before": 12}')
    assert isinstance(old, ResetEvent) and old.plan_id is None and not old.replanned
    line = describe(old)
    assert line is not None and "12 messages cleared" in line.text and "forecast" not in line.text


# ---- clearing ----

def test_a_clearing_runs_as_a_plan_and_its_event_carries_what_was_forecast() -> None:
    log = Log()
    engine = engine_with(history_of(10, result_words=300), log, micro_idle_minutes=60.0, micro_keep_latest=2)
    engine.clock = lambda: time.time() + 2 * 3600  # two hours since the last reply: the cache is cold
    asyncio.run(engine.before_request(_no_model))
    (cleared,) = log.events(MicroCompactionEvent)
    assert cleared.plan_id and cleared.trigger == "time" and cleared.results_cleared == 8
    assert cleared.forecast_tokens_freed is not None and cleared.tokens_freed > 0
    # the stubs name the files the results were saved to before: the forecast is what happened
    assert cleared.forecast_tokens_freed == cleared.tokens_freed
    line = describe(cleared)
    assert line is not None and "forecast ~" in line.text


# ---- restore ----

def test_a_restore_runs_the_plan_its_dialog_showed(tmp_path: Path) -> None:
    log = Log()
    engine, call_id = _evicted_engine(tmp_path, log)
    shown = engine.preview_restore(call_id)
    assert shown.plan_id, "the restore dialog's figures name no plan"
    engine.restore_result(call_id, plan_id=shown.plan_id)
    (event,) = log.events(RestoreEvent)
    assert event.plan_id == shown.plan_id and not event.replanned
    assert event.forecast_projected_after == shown.projected_after
    assert event.projected_before == shown.projected_before


def test_a_restore_plan_made_on_another_history_is_made_again_and_says_so(tmp_path: Path) -> None:
    log = Log()
    engine, call_id = _evicted_engine(tmp_path, log)
    shown = engine.preview_restore(call_id)
    for message in tool_round(1, 200):
        engine.append(message)
    engine.restore_result(call_id, plan_id=shown.plan_id)
    (event,) = log.events(RestoreEvent)
    assert event.replanned and event.plan_id != shown.plan_id
    line = describe(event)
    assert line is not None and "re-planned" in line.text


# ---- through the real session: Reset(plan_id) runs the plan the forecast showed ----

async def _settled(session: Any) -> None:
    async def done() -> None:
        while session.pending or session.busy:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(done(), 120)


async def test_the_session_runs_the_reset_plan_a_forecast_showed_and_makes_a_stale_one_again(
        fake_llm, tmp_path, monkeypatch) -> None:
    from agent_helpers import make_session
    from test_engine_features import Router

    from app.kernel.commands import Preview, Reset, Shutdown, UserInput

    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai")
    router = Router("openai")
    router.main.extend(["first answer " * 200, "second answer " * 200])
    fake_llm.default = router
    running = asyncio.ensure_future(session.run())
    try:
        session.submit(UserInput("first question"))
        await _settled(session)
        session.submit(Preview("reset"))
        (shown,) = events.of("forecast")
        assert isinstance(shown, ForecastEvent) and shown.kind == "reset" and shown.plan_id
        session.submit(Reset(plan_id=shown.plan_id))
        await _settled(session)
        (reset,) = events.of("reset")
        assert reset.plan_id == shown.plan_id and not reset.replanned
        assert (reset.tokens_before, reset.forecast_tokens_after) == (shown.tokens_before, shown.tokens_after)

        session.submit(UserInput("second question"))
        await _settled(session)
        session.submit(Preview("reset"))
        stale = events.of("forecast")[-1]
        session.submit(UserInput("third question"))  # the conversation moves on before the answer
        router.main.append("third answer")
        await _settled(session)
        session.submit(Reset(plan_id=stale.plan_id))
        await _settled(session)
        again = events.of("reset")[-1]
        assert again.replanned and again.messages_before == 4 and again.tokens_before > stale.tokens_before
    finally:
        session.submit(Shutdown())
        await asyncio.wait_for(running, 60)


# ---- the compactions nobody confirms carry their forecast too ----

def test_the_extractive_fallback_and_an_overflow_drop_carry_their_forecast_beside_what_happened() -> None:
    from app.kernel.events import CompactionEvent

    log = Log()
    engine = engine_with(history_of(10, result_words=400), log)
    fallback = engine.fallback_compact()
    # its summary is written before it runs: the size after is known, and is what happened
    assert fallback.forecast_tokens_freed is not None
    assert fallback.forecast_tokens_after_low == fallback.forecast_tokens_after_high
    assert abs((fallback.forecast_tokens_after_low or 0) - fallback.tokens_after) <= 5, fallback

    engine = engine_with(history_of(10, result_words=400), log)
    ok, effects = engine.core.recover_overflow(3_000, "prompt is too long")
    (dropped,) = [e for e in effects if isinstance(e, CompactionEvent)]
    assert ok and dropped.trigger == "reactive" and dropped.forecast_tokens_freed is not None
    assert dropped.forecast_tokens_after_low == dropped.tokens_after

"""Issue 25: "plans are what runs", and the turns-to-compact figure.

What the user saw: a forecast describing another compaction than the one that ran, a reset
dialog with a cache figure from before the last compaction, and "auto-compact next turn"
right after a compaction with a figure that jumped. Everything here goes through the real
engine (and, where it says so, the real session and the fake server).
"""

from __future__ import annotations

from typing import Any

from agent_helpers import make_agent
from test_engine_support import counted, summary_text, text_reply, tool_reply, write_words

# A large line: no auto-compaction gets in the way of measuring the pace.
ROOMY: dict[str, Any] = dict(window=1_000_000, budget=200_000)


def reads_then_done(provider: str, names: list[str]) -> list[Any]:
    def read_of(name: str) -> Any:
        return lambda u: tool_reply(provider, [("read_file", {"path": name})], usage=u)

    steps = [counted(provider, read_of(n)) for n in names]
    return [*steps, counted(provider, lambda u: text_reply(provider, "read them", usage=u))]


# ---- calls to compact: one range, the engine's, restarted by every compaction ----

# A line a few reads ahead: the range is shown only when it lies within the calls measured.
NEAR_LINE: dict[str, Any] = dict(window=1_000_000, budget=16_000, memory_update_tokens=0)


async def test_right_after_a_compaction_the_calls_figure_starts_afresh(fake_llm, tmp_path, monkeypatch):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider="openai", **NEAR_LINE)
    names = [f"f{i}.txt" for i in range(5)]
    for i, name in enumerate(names):
        write_words(agent.workspace / name, 1_200, f"tag{i}")
    fake_llm.enqueue(*reads_then_done("openai", names))
    try:
        await agent.run_turn("read f0.txt to f4.txt")
        before = agent.context_event()
        assert before.projected_tokens < before.thresholds.auto_compact_line
        assert before.calls_to_compact_fewest is not None and before.calls_to_compact_most is not None, (
            f"no range at {before.projected_tokens:,} of {before.thresholds.auto_compact_line:,} after 6 calls")
        fake_llm.enqueue(counted("openai", lambda u: text_reply("openai", summary_text("R"), usage=u)))
        compaction = await agent.compact()
        assert compaction.ok, compaction.reason
        after = agent.context_event()
        # the old conversation's pace says nothing about the summary's: no figure until calls are seen
        assert after.turns_to_compact is None and after.calls_to_compact_most is None, (
            f"~{after.turns_to_compact} calls right after a compaction, at {after.projected_tokens:,} of "
            f"{after.thresholds.auto_compact_line:,}: the pace of the context before it")
    finally:
        await agent.aclose()


async def test_the_gauge_draws_the_engines_calls_range_as_it_is() -> None:
    """The gauge smoothed the engine's figure once more: readings from before a compaction
    kept it at "next turn" after one (the engine smooths and restarts it; the gauge only draws)."""
    from dashboard_helpers import send, settle
    from snapshot_apps.fake_agent import Ask, FakeSession, Text, context

    from app.surfaces.dashboard.app import TidegaugeApp
    from widgets.gauge_bar import GaugeBar

    # Reads of ~5K tokens each from just under the auto-compact line: readings of "next turn",
    # then the real engine's auto-compaction, then reads from the summary that make a new range.
    reads = [Ask("read_file", {"path": "app.log", "offset": 1 + 300 * n, "limit": 300}, id=f"call-{n + 1}")
             for n in range(5)]
    agent = FakeSession({"go": [*reads, Text("Read the log.")]}, start_context=context(141_000))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        said = [e.event for e in agent.snapshot().events]
        assert any(e.type == "compaction" and e.trigger == "auto" for e in said)
        assert any(e.type == "context" and e.calls_to_compact_fewest == 0 for e in said)  # "next turn" before it
        last = agent.context_event()
        fewest, most = last.calls_to_compact_fewest, last.calls_to_compact_most
        figures = app.query_one(GaugeBar).render().plain.split("\n")[0]
        assert "next turn" not in figures, figures
        if fewest is not None and most is not None:  # the engine's range, as it is
            drawn = f"{fewest}–{most}" if fewest != most else f"{fewest}"
            assert f"auto-compact in {drawn} model calls" in figures, figures


# ---- plans: the forecast is the compaction that runs ----

def compaction_calls(fake_llm: Any) -> int:
    from test_engine_features import is_memory_update
    from test_engine_support import bodies, is_compaction

    return sum(1 for body in bodies(fake_llm) if is_compaction(body) and not is_memory_update(body))


async def _settled(session: Any) -> None:
    """Until the running session has done every command it was given (a condition, polled)."""
    import asyncio

    async def done() -> None:
        while session.pending or session.busy:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(done(), 120)


def assert_ran_as_forecast(forecast: Any, compaction: Any, calls_made: int) -> None:
    """The compaction that ran is the one the forecast described, figure for figure."""
    ran = (compaction.trigger, calls_made)
    assert compaction.ok, compaction.reason
    assert (forecast.action == "memory_compact") == (compaction.trigger == "memory"), (forecast.action, ran)
    assert forecast.model_call == (calls_made == 1), (forecast.action, forecast.model_call, ran)
    assert compaction.forecast_tokens_freed == forecast.tokens_freed
    assert compaction.cache_tokens_invalidated == forecast.cache_tokens_invalidated
    assert compaction.messages_before == forecast.messages_before
    assert compaction.messages_after == forecast.messages_after


async def test_with_a_session_memory_the_confirmed_compaction_is_the_one_forecast(fake_llm, tmp_path, monkeypatch):
    import asyncio

    from agent_helpers import make_session
    from test_engine_features import MEMORY_SETUP, TAGS, Router, reads

    from app.kernel.commands import Compact, Preview, Shutdown, UserInput

    setup = {**MEMORY_SETUP, "budget": 0}  # no auto-compaction: the user compacts
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai", **setup)
    names = [f"f{i}.txt" for i in range(1, 7)]
    for i, name in enumerate(names, start=1):
        write_words(session.agent.workspace / name, 700, TAGS[i])
    router = Router("openai")
    router.main.extend([*reads(*names), "all read"])
    fake_llm.default = router
    running = asyncio.ensure_future(session.run())
    try:
        session.submit(UserInput("read f1.txt to f6.txt"))
        await _settled(session)
        await session.agent.engine.wait_memory_update()
        assert router.memory_updates >= 1
        session.submit(Preview("compact"))
        (forecast,) = events.of("forecast")
        assert forecast.action == "memory_compact" and not forecast.model_call and forecast.plan_id
        before = compaction_calls(fake_llm)
        session.submit(Compact(plan_id=forecast.plan_id))
        await _settled(session)
        (compaction,) = events.of("compaction")
        assert_ran_as_forecast(forecast, compaction, compaction_calls(fake_llm) - before)
        assert not compaction.replanned
    finally:
        session.submit(Shutdown())
        await asyncio.wait_for(running, 60)


async def test_a_plan_made_before_the_conversation_moved_on_is_made_again_and_said_so(
        fake_llm, tmp_path, monkeypatch):
    import asyncio

    from agent_helpers import make_session
    from test_engine_features import Router

    from app.kernel.commands import Compact, Preview, Shutdown, UserInput
    from app.kernel.describe import describe

    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai")
    router = Router("openai")
    router.main.extend(["first answer " * 200, "second answer " * 200])
    fake_llm.default = router
    running = asyncio.ensure_future(session.run())
    try:
        session.submit(UserInput("first question"))
        await _settled(session)
        session.submit(Preview("compact"))
        (shown,) = events.of("forecast")
        session.submit(UserInput("second question"))  # the conversation moves on before the answer
        await _settled(session)
        before = compaction_calls(fake_llm)
        session.submit(Compact(plan_id=shown.plan_id))
        await _settled(session)
        (compaction,) = events.of("compaction")
        assert compaction.ok and compaction.replanned and compaction_calls(fake_llm) - before == 1
        # it ran on the conversation as it is now, with the figures of the plan made for it
        assert compaction.messages_before == 4 != shown.messages_before
        assert compaction.tokens_before > shown.tokens_before
        line = describe(compaction).text
        assert "re-planned: the conversation changed after the confirmation" in line, line
    finally:
        session.submit(Shutdown())
        await asyncio.wait_for(running, 60)


async def test_ctrl_s_runs_the_plan_it_showed_then_says_at_once_there_is_nothing_to_compact(
        fake_llm, tmp_path, monkeypatch):
    """The real dashboard on a real session (its own thread) and the fake server."""
    from agent_helpers import EventLog, _settings
    from dashboard_helpers import engine_texts, send, settle
    from session_thread import SessionThread
    from test_engine_features import Router

    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.runtime import build_session
    from widgets.confirm_screen import ConfirmScreen, ForecastConfirmScreen
    from app.kernel.describe import human_tokens

    settings = _settings(fake_llm, tmp_path, monkeypatch, "openai", {})
    (tmp_path / "work").mkdir()
    session = build_session(settings, approvals=True, cwd=tmp_path / "work")
    events = EventLog()
    session.subscribe(events)
    router = Router("openai")
    router.main.extend(["an answer " * 300])
    fake_llm.default = router
    app = TidegaugeApp(SessionThread(session).start(), cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "a question")
        await settle(pilot)
        await pilot.press("ctrl+s")
        for _ in range(2_000):
            if isinstance(app.screen, ForecastConfirmScreen):
                break
            await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ForecastConfirmScreen) and screen.forecast is not None, screen
        shown = screen.forecast
        assert shown.action == "compact" and shown.model_call and shown.plan_id
        assert "messages: 2 → 1 summary" in (screen.detail or "")
        # the summary's length is not known before it is written: the size after is a range, what is
        # kept counted exactly and the summary up to its max_tokens
        low, high = shown.tokens_after_low, shown.tokens_after_high
        assert low is not None and high is not None and low < high
        assert f"→ {low:,}–{high:,})" in (screen.detail or "") and "kept (counted) + the summary, up to" in (
            screen.detail or ""), screen.detail
        await pilot.press("y")
        await settle(pilot)
        (compaction,) = events.of("compaction")
        assert_ran_as_forecast(shown, compaction, compaction_calls(fake_llm))
        assert low <= compaction.tokens_after <= high, (low, compaction.tokens_after, high)
        # the compaction line shows the forecast beside what happened
        assert any(f"forecast {human_tokens(low)}–{human_tokens(high)}" in text for text in engine_texts(app)), (
            engine_texts(app)[-3:])

        # Now the context is one summary: one line at once, no dialog, no model call.
        await pilot.press("ctrl+s")
        said = "nothing to compact: the context is already one summary"
        for _ in range(2_000):
            assert not isinstance(app.screen, ConfirmScreen), "a dialog opened for a compaction that does nothing"
            if said in engine_texts(app):
                break
            await pilot.pause()
        assert said in engine_texts(app), engine_texts(app)[-3:]
        assert compaction_calls(fake_llm) == 1 and len(events.of("compaction")) == 1


async def test_the_reset_forecast_after_a_compaction_counts_the_cache_as_it_is_now(
        fake_llm, tmp_path, monkeypatch):
    """The compaction already invalidated the cached conversation: a reset after it invalidates
    nothing more (the dialog said the figure of the request before the compaction)."""
    from collections import deque

    from agent_helpers import make_session
    from test_engine_support import usage_for

    from app.kernel.commands import Compact, Preview, Shutdown, UserInput

    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai", model="gpt-4.1")
    write_words(session.agent.workspace / "a.txt", 4_000, "big")

    def cached(body: dict[str, Any]) -> dict[str, int]:
        usage = usage_for("openai", body)
        return {**usage, "cached": usage["prompt"] - usage["prompt"] // 10}

    replies: deque[Any] = deque([[("read_file", {"path": "a.txt"})], "read it", summary_text("R")])

    def answer(body: dict[str, Any], path: str) -> Any:
        item = replies.popleft()
        if isinstance(item, list):
            return tool_reply("openai", item, usage=cached(body))
        return text_reply("openai", item, usage=cached(body))

    fake_llm.default = answer
    import asyncio

    running = asyncio.ensure_future(session.run())
    try:
        session.submit(UserInput("read a.txt"))
        await _settled(session)
        session.submit(Preview("reset"))
        assert events.of("forecast")[-1].cache_tokens_invalidated > 1_000  # the read is in the cache
        session.submit(Compact())
        await _settled(session)
        assert events.of("compaction")[-1].ok
        session.submit(Preview("reset"))
        after = events.of("forecast")[-1]
        assert after.cache_tokens_invalidated == 0, (
            f"the reset would invalidate {after.cache_tokens_invalidated:,} cached tokens: "
            "the cache of the request before the compaction")
    finally:
        session.submit(Shutdown())
        await asyncio.wait_for(running, 60)


async def test_a_plan_id_that_is_not_a_compaction_plan_of_this_history_never_runs_anything_else(
        fake_llm, tmp_path, monkeypatch):
    """Whoever drives the session names the plan (the dashboard, or a line on the session
    process's stdin): a reset's plan, an unknown id or a value that is not a string is made
    anew as a compaction and said so; nothing but a compaction runs, nothing crashes."""
    import asyncio

    from agent_helpers import make_session
    from test_engine_features import Router

    from app.kernel.commands import Compact, Preview, Shutdown, UserInput
    from app.session.process import decode_command, encode_command

    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai")
    router = Router("openai")
    router.main.extend(["an answer " * 200, "another answer " * 200, "a third " * 200])
    fake_llm.default = router
    running = asyncio.ensure_future(session.run())
    try:
        session.submit(UserInput("a question"))
        await _settled(session)
        session.submit(Preview("reset"))
        reset_plan = events.of("forecast")[-1].plan_id
        hostile = [reset_plan, "plan-" + "9" * 10_000]
        wire = decode_command(encode_command(Compact(plan_id=["not", "a", "string"])))  # type: ignore[arg-type]
        for index, plan_id in enumerate(hostile):
            session.submit(Compact(plan_id=plan_id))
            await _settled(session)
            session.submit(UserInput(f"question {index + 2}"))
            await _settled(session)
        session.submit(wire)
        await _settled(session)
        compactions = events.of("compaction")
        assert [(c.ok, c.replanned, c.trigger) for c in compactions] == [(True, True, "manual")] * 3, compactions
        assert not events.of("reset") and not events.of("error")
    finally:
        session.submit(Shutdown())
        await asyncio.wait_for(running, 60)


async def test_a_memory_that_would_free_next_to_nothing_is_not_the_plan(fake_llm, tmp_path, monkeypatch):
    """The user's case: a session memory covering only the start of a long conversation. The
    forecast said "compaction from the session memory: frees ~0 tokens … no model call" and a
    summary ran. The plan is now the summary, and the summary is what runs."""
    from test_engine_features import Router

    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="openai", window=100_000, budget=0,
                               memory_update_tokens=50_000, memory_keep_tokens=500)
    router = Router("openai")
    router.main.extend([f"answer {i} " + "word " * 600 for i in range(4)])
    fake_llm.default = router
    try:
        for i in range(4):
            await agent.run_turn(f"question {i}")
        engine = agent.engine
        # the memory covers the first exchange only, in about as many tokens as it replaces
        engine.session_memory.save("the first question was answered; " * 120, engine.history[1])
        assert engine.core.memory_plan() is not None  # a compaction from the memory is possible
        plan = engine.plan_compaction()
        assert plan.action == "compact" and plan.model_call, plan.describe()
        before = compaction_calls(fake_llm)
        compaction = await agent.compact(plan=engine.take_plan(plan.id))
        assert compaction.trigger == "manual" and compaction_calls(fake_llm) - before == 1
        assert compaction.forecast_tokens_freed == plan.forecast.tokens_freed > 0
    finally:
        await agent.aclose()


# ---- the engine's boundary: server-side compaction through the provider's method ----

def test_server_compaction_goes_through_the_providers_method_whatever_its_name() -> None:
    """A provider plug-in offering a ``ServerContext`` gets server-side compaction; nothing is
    set on a provider by attribute name (a plug-in called "anthropic" that offers none is told
    it has none)."""
    from app.agent.server_context import switch_server_compaction
    from app.context.engine import ContextEngine, EngineConfig
    from app.context.memory import MemoryBundle
    from app.demo.provider import DemoProvider
    from app.providers.base import ContextEditing

    class PluginServer:
        def __init__(self) -> None:
            self.thresholds: list[int | None] = []

        def set_compaction(self, threshold: int | None) -> int | None:
            self.thresholds.append(threshold)
            return threshold

        def set_editing(self, editing: ContextEditing) -> bool:
            return False

    server = PluginServer()

    class PluginProvider(DemoProvider):
        name = "my-plugin"

        def server_context(self) -> PluginServer:  # type: ignore[override]
            return server

    engine = ContextEngine(system_prompt="", memory=MemoryBundle([]), tools=[],
                           config=EngineConfig(window=200_000, budget=0))
    plugin = PluginProvider()
    assert switch_server_compaction(plugin, engine, True) == (engine.thresholds.auto_compact_line, None)
    assert engine.config.server_compaction and server.thresholds == [engine.thresholds.auto_compact_line]
    assert not engine._auto_compaction_is_ours()
    assert switch_server_compaction(plugin, engine, False) == (None, None)
    assert not engine.config.server_compaction and server.thresholds[-1] is None

    class Impostor(DemoProvider):
        name = "anthropic"

    threshold, problem = switch_server_compaction(Impostor(), engine, True)
    assert threshold is None and problem and "no server-side compaction" in problem
    assert not engine.config.server_compaction and engine._auto_compaction_is_ours()

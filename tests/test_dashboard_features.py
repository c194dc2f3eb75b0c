"""The dashboard side of issues 14-17: what the user sees of forecasts, restores, audited
summaries, session memory, prompt caching, sub-agents, MCP and server-side compaction.

Engine parts through a real session (runtime wiring, the loopback fake LLM server); the
widgets and flows under Pilot with the scripted FakeSession.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_helpers import make_agent, make_session
from app.kernel import events as ev
from app.session.agent_session import AgentSession
from app.kernel.commands import Preview, PreviewRestore, RestoreResult, ServerCompaction, Shutdown, UserInput
from app.surfaces.dashboard.app import TidegaugeApp
from app.kernel.describe import describe
from dashboard_helpers import engine_texts, send, settle
from snapshot_apps.fake_agent import Ask, FakeSession, Gate, Text, clearing_session, context
from test_engine_features import MEMORY_SETUP, TAGS, TASK, Router, _clear_everything, let_each_memory_update_land, reads
from test_engine_support import bodies, write_words
from fake_responses_server import responses_text, responses_tool_calls
from widgets.confirm_screen import FORECAST_PENDING, ConfirmScreen, ForecastConfirmScreen
from widgets.context_breakdown import ContextBreakdown
from widgets.context_history import ContextHistory
from widgets.sub_agent_line import SubAgentLine
from widgets.tool_call_line import ToolCallLine
from widgets.tool_call_list import ToolCallList

# A common terminal with room for every region: a frame costs its cells (160x50 cost ~8% more here).
SIZE = (120, 36)


async def _run(session: AgentSession, *commands) -> None:
    for command in commands:
        session.submit(command)
    session.submit(Shutdown())
    await session.run()


async def _settled(session: AgentSession) -> None:
    """Until the running session has done every command it was given (a condition, polled)."""

    async def done() -> None:
        while session.pending or session.busy:
            await asyncio.sleep(0.005)

    await asyncio.wait_for(done(), 120)


async def _stop(session: AgentSession, running: "asyncio.Task[None]") -> None:
    session.submit(Shutdown())
    await asyncio.wait_for(running, 60)


def _dialog_text(screen: ConfirmScreen) -> str:
    return f"{screen.question}\n{screen.detail or ''}"


# ---------------------------------------------------------------- through the real session


async def test_preview_answers_with_the_forecast_of_a_compaction_and_of_a_reset(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai")
    write_words(session.agent.workspace / "notes.txt", 3_000, "note")
    router = Router("openai")
    router.main.extend([*reads("notes.txt"), "read it"])
    fake_llm.default = router
    await _run(session, UserInput("read notes.txt"))
    projected = session.snapshot().context.projected_tokens

    session.submit(Preview("compact", focus="the notes"))
    session.submit(Preview("reset"))
    compact, reset = events.of("forecast")
    assert (compact.kind, compact.focus, reset.kind) == ("compact", "the notes", "reset")
    assert compact.tokens_before == reset.tokens_before == projected
    # a compaction keeps a summary, a reset only the fixed parts: both free tokens, the reset more
    assert 0 < compact.tokens_freed < reset.tokens_freed
    assert compact.tokens_after == compact.tokens_before - compact.tokens_freed
    assert compact.model_call and not reset.model_call
    # nothing happened to the conversation, and a preview is not part of the session's record
    assert session.snapshot().context.projected_tokens == projected
    assert not events.of("compaction") and not events.of("reset")
    transcript = next((tmp_path / "data").rglob("transcript.jsonl")).read_text()
    assert '"forecast"' not in transcript


async def test_cleared_results_are_announced_previewed_and_restored_through_the_session(
        fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai", memory_update_tokens=0)
    write_words(session.agent.workspace / "notes.txt", 600, "note")
    write_words(session.agent.workspace / "other.txt", 600, "other")
    router = Router("openai")
    router.main.extend([*reads("notes.txt"), "read it", *reads("other.txt"), "read that"])
    fake_llm.default = router
    running = asyncio.ensure_future(session.run())
    session.submit(UserInput("read notes.txt"))
    session.submit(UserInput("read other.txt"))
    await _settled(session)
    first_call = events.of("tool_start")[0].id
    latest_call = events.of("tool_start")[-1].id

    _clear_everything(session.agent)  # micro-compaction, as the engine does it past the warning line
    (announced,) = events.of("cleared_results")
    assert announced.call_ids == [first_call]

    session.submit(PreviewRestore(first_call))
    preview = events.of("restore_preview")[-1]
    assert preview.reason is None and preview.tool_name == "read_file" and preview.tokens > 0
    assert preview.projected_after == preview.projected_before + preview.tokens
    assert describe(preview) is None  # its figures are the dialog's question, not a line

    session.submit(PreviewRestore(latest_call))  # still in the context: one line saying why not
    refusal = events.of("restore_preview")[-1]
    assert refusal.call_id == latest_call and "not cleared" in refusal.reason
    # the call as the tool list shows it, not the provider's id
    assert describe(refusal).kind == "warning" and "read_file other.txt" in describe(refusal).text
    assert latest_call not in describe(refusal).text

    session.submit(RestoreResult(first_call))
    restore = events.of("restore")[-1]
    assert restore.id == first_call and restore.by == "user"
    assert events.of("cleared_results")[-1].call_ids == []  # the tool list drops its mark
    assert session.snapshot().context.projected_tokens > preview.projected_before
    await _stop(session, running)


async def test_server_compaction_is_switched_per_session_and_its_drop_is_marked_server(
        fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="responses", window=400_000,
                                   budget=2_000)
    engine = session.agent.engine
    line = engine.thresholds.auto_compact_line
    for name in ("a.txt", "b.txt"):
        write_words(session.agent.workspace / name, 1_500, name[0])
    fake_llm.enqueue(
        responses_tool_calls([("read_file", {"path": "a.txt"})], reasoning="", usage=dict(input=1_900, output=10)),
        responses_tool_calls([("read_file", {"path": "b.txt"})], reasoning="", usage=dict(input=4_100, output=10)),
        responses_text("both read", compaction="gAAAAAB-compacted-fake", usage=dict(input=900, cached=0, output=8)),
    )
    running = asyncio.ensure_future(session.run())
    session.submit(ServerCompaction(True))  # given before the session runs: handled first when it does
    session.submit(UserInput("read a and b"))
    await _settled(session)
    switched = events.of("server_compaction")[-1]
    assert (switched.on, switched.threshold, switched.reason) == (True, line, None)
    assert "stands down" in describe(switched).text
    assert all(b["context_management"] == [{"type": "compaction", "compact_threshold": line}]
               for b in bodies(fake_llm))
    (compaction,) = events.of("compaction")
    drop = [p for p in events.of("chart_point") if p.kind != "call"]
    assert [(p.kind, p.tokens) for p in drop] == [("server", compaction.tokens_after)]

    session.submit(ServerCompaction(False))
    assert events.of("server_compaction")[-1].on is False
    assert engine._auto_compaction_is_ours() and session.agent.provider.compact_threshold is None
    await _stop(session, running)


async def test_server_compaction_switched_in_a_session_stays_switched_when_it_is_resumed(
        fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="responses", window=400_000)
    session_id = session.info.session_id
    running = asyncio.ensure_future(session.run())
    session.submit(ServerCompaction(True))
    # something typed: a session in which nothing was typed is not kept
    fake_llm.enqueue(responses_text("hi", usage=dict(input=900, output=4)))
    session.submit(UserInput("hi"))
    await _settled(session)
    await _stop(session, running)  # the session ends: its transcript is closed, its lock let go
    assert events.of("server_compaction")[-1].on
    resumed, _ = make_session(fake_llm, tmp_path, monkeypatch, provider="responses", window=400_000,
                              resume=session_id)
    line = resumed.agent.engine.thresholds.auto_compact_line
    assert resumed.agent.engine.config.server_compaction and resumed.agent.provider.compact_threshold == line
    fake_llm.enqueue(responses_text("hello again", usage=dict(input=900, output=4)))
    running = asyncio.ensure_future(resumed.run())
    resumed.submit(UserInput("hello"))
    await _settled(resumed)
    assert bodies(fake_llm)[-1]["context_management"] == [{"type": "compaction", "compact_threshold": line}]
    await _stop(resumed, running)


async def test_server_compaction_on_a_provider_without_it_is_refused_in_one_line(fake_llm, tmp_path, monkeypatch):
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai")
    await _run(session, ServerCompaction(True))
    refused = events.of("server_compaction")[-1]
    assert refused.on is False and "openai" in refused.reason
    line = describe(refused)
    assert line.kind == "warning" and "\n" not in line.text
    assert session.agent.engine._auto_compaction_is_ours()


async def test_a_compaction_from_the_session_memory_is_a_memory_point_on_the_history(
        fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="openai", **MEMORY_SETUP)
    names = [f"f{i}.txt" for i in range(1, 7)]
    for i, name in enumerate(names, start=1):
        write_words(agent.workspace / name, 700, TAGS[i])
    router = Router("openai")
    router.main.extend([*reads(*names), "all read"])
    fake_llm.default = router
    let_each_memory_update_land(agent.engine, monkeypatch)
    try:
        await agent.run_turn(TASK)
        compactions = events.of("compaction")
        assert compactions and {c.trigger for c in compactions} == {"memory"}
        drops = [p for p in events.of("chart_point") if p.kind != "call"]
        assert [(p.kind, p.tokens) for p in drops] == [("memory", c.tokens_after) for c in compactions]
    finally:
        await agent.aclose()


# ---------------------------------------------------------------- on the dashboard


async def test_ctrl_s_asks_first_with_what_the_compaction_frees_and_costs() -> None:
    agent = FakeSession(start_context=context(120_000, 2_000))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ForecastConfirmScreen) and screen.forecast is not None
        forecast = screen.forecast
        shown = _dialog_text(screen)
        assert FORECAST_PENDING not in shown
        # a summary's length is known only as a range: what it frees too
        low, high = forecast.tokens_after_low, forecast.tokens_after_high
        assert low is not None and high is not None
        before = forecast.tokens_before
        assert f"frees {before - high:,}–{before - low:,} tokens" in shown
        assert f"invalidates {forecast.cache_tokens_invalidated:,} cached tokens" in shown
        assert f"~${forecast.next_request_cost_before_usd:.4f} → ~${forecast.next_request_cost_after_usd:.4f}" in shown
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert agent.calls == [] and "compaction cancelled" in engine_texts(app)

        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.press("enter")  # enter answers yes to a compaction
        await settle(pilot)
        assert agent.calls == [("compact", None)]


async def test_ctrl_r_shows_what_the_reset_frees_and_keeps_no_as_the_default() -> None:
    agent = FakeSession(start_context=context(60_000, 0))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ForecastConfirmScreen) and screen.forecast is not None
        assert screen.forecast.kind == "reset"
        assert f"reset: frees ~{screen.forecast.tokens_freed:,} tokens" in _dialog_text(screen)
        assert "no model call" in _dialog_text(screen)
        await pilot.press("enter")
        await settle(pilot)
        assert agent.calls == [] and "reset cancelled" in engine_texts(app)


async def test_the_tool_list_marks_cleared_calls_and_ctrl_t_restores_one_after_showing_its_cost() -> None:
    agent = clearing_session()  # a real clearing of call-1's result before the reply's request
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "read")
        await settle(pilot)
        tool_list = app.query_one(ToolCallList)
        assert [(c.id, c.cleared) for c in tool_list.calls] == [("call-1", True), ("call-2", False)]
        assert "cleared" in tool_list.render_line(0).text and "cleared" not in tool_list.render_line(1).text

        tool_list.focus()
        await pilot.press("home", "ctrl+t")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ConfirmScreen)
        [preview] = [e.event for e in agent.snapshot().events if e.event.type == "restore_preview"]
        adds, before = preview.tokens, preview.projected_before
        assert adds > 0 and before == agent.context_event().projected_tokens
        assert f"+~{adds:,} tokens: context ~{before:,} → ~{before + adds:,}" in _dialog_text(screen)
        await pilot.press("y")
        await settle(pilot)
        assert agent.calls[-1] == ("restore", "call-1")
        assert not tool_list.calls[0].cleared and "cleared" not in tool_list.render_line(0).text
        assert any(t.startswith("restored the read_file result call-1") for t in engine_texts(app))
        [restored] = [e.event for e in agent.snapshot().events if e.event.type == "restore"]
        # the gauge shows what the restore made (the stub it replaced no longer counted), about as planned
        assert app.context_panel.last_context.projected_tokens == restored.projected_after
        assert abs(restored.projected_after - (before + adds)) < 20

        await pilot.press("end", "ctrl+t")  # not cleared: no dialog, one line saying why
        for _ in range(200):  # the session's answer comes back as a message
            if any(t.startswith("cannot restore: ") for t in engine_texts(app, "warning")):
                break
            await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert any(t.startswith("cannot restore: ") and "read_file CHANGELOG.md" in t  # call-2, by what it read
                   for t in engine_texts(app, "warning")), (
            engine_texts(app)[-3:])


async def test_the_compaction_line_lists_the_checked_facts_added_to_the_summary() -> None:
    facts = ["wrote parser_fix.py", "ran pytest -q (exit code 1)", "the user said: do not touch setup.py"]
    compaction = ev.CompactionEvent(trigger="auto", ok=True, messages_before=12, messages_after=1,
                                    tokens_before=150_000, tokens_after=7_000, facts_added=len(facts),
                                    checked_facts=facts)
    agent = FakeSession({"go": [compaction, Text("carrying on")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        (line,) = [t for t in engine_texts(app, "compaction") if t.startswith("context compacted")]
        assert f"the audit added {len(facts)} checked facts" in line
        assert [row.strip() for row in line.splitlines()[1:]] == [f"✓ {fact}" for fact in facts]


async def test_memory_and_server_drops_are_drawn_apart_with_their_legend() -> None:
    steps = [ev.ChartPointEvent(tokens=90_000, kind="call"), ev.ChartPointEvent(tokens=9_000, kind="memory"),
             ev.ChartPointEvent(tokens=70_000, kind="call"), ev.ChartPointEvent(tokens=8_000, kind="server")]
    agent = FakeSession({"go": steps})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        history = app.query_one(ContextHistory)
        assert "memory" not in history.render().plain.splitlines()[0]
        await send(pilot, "go")
        await settle(pilot)
        # the script's four points, then the core's own for the turn's model call
        assert [p.kind for p in history.points][-5:] == ["call", "memory", "call", "server", "call"]
        legend = history.render().plain.splitlines()[0]
        assert " memory " in legend and " server " in legend
        styles = {kind: history.get_component_rich_style(f"history--{kind}")
                  for kind in ("compaction", "memory", "server", "prune")}
        assert len({str(s.color) for s in styles.values()}) == 4  # four drops, four colours


async def test_the_breakdown_names_memory_rules_and_mcp_servers_and_shows_savings_and_cached_share() -> None:
    """The parts a long session with MCP servers, path rules and a session memory has (not reached in a
    short scripted run: they are drawn from a context event said to the dashboard); the cached share
    of /usage is the real session's own, after two model calls."""
    agent = FakeSession({"go": [Ask("read_file", {"path": "README.md"}), Text("Read it.")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        real = agent.context_event()
        assert real.cumulative_input and real.cumulative_cached
        share = f"{real.cumulative_cached / real.cumulative_input:.0%}"
        await send(pilot, "/usage")
        await pilot.pause()
        await pilot.pause()
        assert any(f", {share} of input)" in t for t in engine_texts(app)), engine_texts(app)[-2:]

        base = context(40_000, 0)
        parts = dict(base.breakdown, session_memory=1_200, rules=300, **{"mcp:git": 2_900, "mcp:time": 350})
        drawn = base.model_copy(update={"breakdown": parts, "tool_tokens_saved": 12_000})
        agent.emit(drawn)
        await settle(pilot)
        text = app.query_one(ContextBreakdown).render().plain
        for label in ("session memory", "path rules", "MCP git", "MCP time"):
            assert label in text
        assert "mcp:" not in text
        assert "deferred tool definitions save ~12.0K tokens" in text
        assert f", {drawn.cumulative_cached / drawn.cumulative_input:.0%})" in text


async def test_a_sub_agent_is_folded_under_its_task_call_with_its_own_gauge_and_tool_calls() -> None:
    gate = Gate()
    steps = [
        ev.ToolStartEvent(id="call-task", name="task", input={"description": "find the importer bug"},
                          summary="find the importer bug"),
        ev.SubAgentEvent(call_id="call-task", status="started", summary="find the importer bug", max_steps=20,
                         window=200_000, auto_compact_line=150_000),
        ev.SubAgentEvent(call_id="call-task", status="tool", tool="grep", summary="reject importer/", step=1,
                         max_steps=20),
        ev.SubAgentEvent(call_id="call-task", status="context", step=1, max_steps=20, context_tokens=30_000,
                         window=200_000, auto_compact_line=150_000),
        ev.SubAgentEvent(call_id="call-task", status="tool", tool="read_file", summary="importer/rows.py",
                         step=2, max_steps=20),
        gate,
        ev.SubAgentEvent(call_id="call-task", status="finished", summary="end_turn", step=3, max_steps=20,
                         context_tokens=41_000, window=200_000, auto_compact_line=150_000),
        ev.ToolResultEvent(id="call-task", name="task", is_error=False, truncated=False, original_chars=900,
                           kept_chars=900, content="rows.py rejects empty ids"),
        Text("Found it."),
    ]
    agent = FakeSession({"delegate": steps})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "delegate")
        await gate.reached.wait()
        await pilot.pause()
        await pilot.pause()
        conversation = app.conversation
        children = list(conversation.children)
        (task_line,) = [w for w in children if isinstance(w, ToolCallLine)]
        (sub,) = app.query(SubAgentLine)
        assert children.index(sub) == children.index(task_line) + 1  # right under the task call
        running = sub.render().plain
        assert "find the importer bug" in running and "step 2/20" in running
        assert "30.0K / 200.0K" in running and "compacts at 150.0K" in running
        assert "grep reject importer/" in running and "read_file importer/rows.py" in running

        gate.open()
        await settle(pilot)
        done = sub.render().plain
        assert "end_turn" in done and "41.0K / 200.0K" in done
        assert "read_file importer/rows.py" not in done  # folded when it finished
        await pilot.click(sub)
        await pilot.pause()
        assert "read_file importer/rows.py" in sub.render().plain  # a click unfolds it


async def test_the_command_palette_switches_server_compaction_for_the_session() -> None:
    agent = FakeSession(server_compaction=False)  # a provider that has it (responses, anthropic)
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        def toggle() -> Any:
            (command,) = [c for c in app.get_system_commands(app.screen) if c.title.startswith("Server-side")]
            return command

        async def title_becomes(title: str) -> None:
            for _ in range(500):
                if toggle().title == title:
                    return
                await pilot.pause()
            raise AssertionError(f"the palette still offers {toggle().title!r}, not {title!r}")

        await title_becomes("Server-side compaction: off (turn on)")
        toggle().callback()
        await title_becomes("Server-side compaction: on (turn off)")  # the session said so
        assert agent.server_compaction is True
        assert any(t.startswith("server-side compaction on for this session") for t in engine_texts(app))
        toggle().callback()
        await title_becomes("Server-side compaction: off (turn on)")
        assert agent.server_compaction is False
        assert any(t.startswith("server-side compaction off") for t in engine_texts(app))


async def test_the_palette_offers_no_server_compaction_where_the_provider_has_none() -> None:
    app = TidegaugeApp(FakeSession(server_compaction=None), cursor_blink=False)  # chat completions, the demo
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert not [t for t in titles if "server-side" in t.lower()], titles


def test_an_auto_compaction_line_says_what_its_forecast_said_it_would_cost():
    event = ev.CompactionEvent(trigger="auto", ok=True, messages_before=30, messages_after=1, tokens_before=150_000,
                               tokens_after=7_000, forecast_tokens_freed=142_000, cache_tokens_invalidated=120_000,
                               next_request_cost_before_usd=0.45, next_request_cost_after_usd=0.021)
    text = describe(event).text
    assert "120.0K cached prompt tokens invalidated" in text and "next request ~$0.4500 → ~$0.0210" in text
    manual = event.model_copy(update={"trigger": "manual"})  # confirmed with these figures already
    assert "invalidated" not in describe(manual).text


def test_a_resumed_session_recorded_without_chart_points_still_marks_memory_and_server_drops():
    from app.session.agent_session import replayable

    def drop(trigger: str, after: int) -> ev.CompactionEvent:
        return ev.CompactionEvent(trigger=trigger, ok=True, messages_before=9, messages_after=3,
                                  tokens_before=after * 5, tokens_after=after)

    old: list[ev.Event] = [drop("memory", 900), drop("server", 800), drop("auto", 700)]
    points = [(e.kind, e.tokens) for e in replayable(old) if e.type == "chart_point"]
    assert points == [("memory", 900), ("server", 800), ("compaction", 700)]

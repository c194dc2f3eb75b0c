"""The dashboard on the demo provider: the flood scenario, and a session resumed with --continue."""

from __future__ import annotations

from pathlib import Path

from app.config import load_settings
from app.runtime import build_agent
from app.tui import TidegaugeApp
from widgets.context_history import ContextHistory
from widgets.engine_line import EngineLine
from widgets.user_prompt import UserPrompt

SIZE = (160, 50)


def demo_settings(tmp_path: Path):
    return load_settings({"provider": "demo", "demo_speed": 0, "yes": True, "data_dir": str(tmp_path / "data")})


async def run_prompt(app: TidegaugeApp, pilot, text: str) -> None:
    box = app.query_one("#prompt")
    box.value = text
    box.focus()
    await pilot.press("enter")
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_flood_shows_the_cut_and_the_recovery_lines(tmp_path):
    app = TidegaugeApp(build_agent(demo_settings(tmp_path), cwd=tmp_path), auto_approve=True, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await run_prompt(app, pilot, "flood")
        lines = {line.kind: str(line.render()) for line in app.conversation.query(EngineLine)}
        assert "cut before sending" in lines["cut"] and "blocking line" in lines["cut"]
        assert "15,188,963" in lines["cut"] and "tool-results" in lines["cut"]
        assert "dropped the oldest rounds" in lines["overflow"]
        # the gauge never showed a context above the blocking line
        event = app.agent.context_event()
        assert event.projected_tokens < event.thresholds.blocking_line


async def test_continue_restores_conversation_and_gauge_history(tmp_path):
    settings = demo_settings(tmp_path)
    first = TidegaugeApp(build_agent(settings, cwd=tmp_path), auto_approve=True, cursor_blink=False)
    async with first.run_test(size=SIZE) as pilot:
        await run_prompt(first, pilot, "find errors in app.log")
        points_before = len(first.query_one(ContextHistory).points)
        projected_before = first.agent.context_event().projected_tokens
    assert points_before >= 3

    resumed_agent = build_agent(settings, cwd=tmp_path, continue_latest=True)
    resumed = TidegaugeApp(resumed_agent, auto_approve=True, cursor_blink=False)
    async with resumed.run_test(size=SIZE) as pilot:
        await pilot.pause()
        prompts = [str(p.render()) for p in resumed.conversation.query(UserPrompt)]
        assert any("find errors in app.log" in p for p in prompts)
        assert len(resumed.query_one(ContextHistory).points) == points_before
        # the live context is back (estimated again, so near but not necessarily equal)
        assert resumed.agent.context_event().projected_tokens > projected_before * 0.8
        await run_prompt(resumed, pilot, "what did I ask first?")
        assert "find errors in app.log" in resumed.agent.history[-1].text


async def test_a_reset_drop_is_still_on_the_chart_after_continue(tmp_path):
    settings = demo_settings(tmp_path)
    first = TidegaugeApp(build_agent(settings, cwd=tmp_path), auto_approve=True, cursor_blink=False)
    async with first.run_test(size=SIZE) as pilot:
        await run_prompt(first, pilot, "find errors in app.log")
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("y")  # confirm the reset
        await pilot.pause()
        await first.workers.wait_for_complete()
        await pilot.pause()
        points_before = [(p.kind, p.tokens) for p in first.query_one(ContextHistory).points]
    assert points_before[-1][0] == "prune"
    assert points_before[-1][1] < points_before[-2][1]  # the drop to the fixed parts

    resumed = TidegaugeApp(build_agent(settings, cwd=tmp_path, continue_latest=True), auto_approve=True,
                           cursor_blink=False)
    async with resumed.run_test(size=SIZE) as pilot:
        await pilot.pause()
        points_after = [(p.kind, p.tokens) for p in resumed.query_one(ContextHistory).points]
    assert points_after == points_before

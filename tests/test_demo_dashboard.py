"""The dashboard on the demo provider: the flood scenario, and a session resumed with --continue."""

from __future__ import annotations

from pathlib import Path

from app.wiring.config import load_settings
from app.surfaces.dashboard.app import TidegaugeApp
from session_thread import SessionThread
from app.wiring.runtime import build_session
from dashboard_helpers import settle
from widgets.context_history import ContextHistory
from widgets.engine_line import EngineLine
from widgets.user_prompt import UserPrompt

SIZE = (160, 50)


def open_app(settings, tmp_path: Path, **options) -> TidegaugeApp:
    session = SessionThread(build_session(settings, approvals=True, cwd=tmp_path, **options)).start()
    return TidegaugeApp(session, cursor_blink=False)


def demo_settings(tmp_path: Path):
    return load_settings({"provider": "demo", "demo_speed": 0, "yes": True, "data_dir": str(tmp_path / "data")})


async def run_prompt(app: TidegaugeApp, pilot, text: str) -> None:
    box = app.query_one("#prompt")
    box.value = text  # type: ignore[attr-defined]
    box.focus()
    await pilot.press("enter")
    await settle(pilot)


async def test_flood_shows_the_cut_and_the_recovery_lines(tmp_path):
    app = open_app(demo_settings(tmp_path), tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await run_prompt(app, pilot, "flood")
        lines = {line.kind: str(line.render()) for line in app.conversation.query(EngineLine)}
        assert "cut before sending" in lines["cut"] and "blocking line" in lines["cut"]
        assert "15,188,963" in lines["cut"] and "tool-results" in lines["cut"]
        assert "dropped the oldest rounds" in lines["overflow"]
        # the gauge never showed a context above the blocking line
        event = app.session.agent.context_event()
        assert event.projected_tokens < event.thresholds.blocking_line


async def test_continue_restores_conversation_and_gauge_history(tmp_path):
    settings = demo_settings(tmp_path)
    first = open_app(settings, tmp_path)
    async with first.run_test(size=SIZE) as pilot:
        await run_prompt(first, pilot, "find errors in app.log")
        points_before = len(first.query_one(ContextHistory).points)
        projected_before = first.session.agent.context_event().projected_tokens
    assert points_before >= 3

    resumed = open_app(settings, tmp_path, continue_latest=True)
    async with resumed.run_test(size=SIZE) as pilot:
        await pilot.pause()
        prompts = [str(p.render()) for p in resumed.conversation.query(UserPrompt)]
        assert any("find errors in app.log" in p for p in prompts)
        assert len(resumed.query_one(ContextHistory).points) == points_before
        # the live context is back (estimated again, so near but not necessarily equal)
        assert resumed.session.agent.context_event().projected_tokens > projected_before * 0.8
        await run_prompt(resumed, pilot, "what did I ask first?")
        assert "find errors in app.log" in resumed.session.agent.history[-1].text


async def test_a_reset_drop_is_still_on_the_chart_after_continue(tmp_path):
    settings = demo_settings(tmp_path)
    first = open_app(settings, tmp_path)
    async with first.run_test(size=SIZE) as pilot:
        await run_prompt(first, pilot, "find errors in app.log")
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("y")  # confirm the reset
        await pilot.pause()
        await settle(pilot)
        points_before = [(p.kind, p.tokens) for p in first.query_one(ContextHistory).points]
    assert points_before[-1][0] == "reset"
    assert points_before[-1][1] < points_before[-2][1]  # the drop to the fixed parts

    resumed = open_app(settings, tmp_path, continue_latest=True)
    async with resumed.run_test(size=SIZE) as pilot:
        await pilot.pause()
        points_after = [(p.kind, p.tokens) for p in resumed.query_one(ContextHistory).points]
    assert points_after == points_before

"""The dashboard's keys and words at a first run, through the real widgets (Pilot, FakeSession).

ctrl+c as in Claude Code and Codex (interrupt, clear, twice quits); the palette's entries say the
state they change and offer only what can be done; each dialog's footer shows its own answers.
"""

from __future__ import annotations

from typing import Any

from app.surfaces.dashboard.app import QUIT_WINDOW_S, TidegaugeApp
from dashboard_helpers import engine_texts, send, settle
from snapshot_apps.fake_agent import FakeSession, Gate, Text

SIZE = (80, 24)


class StepClock:
    """The App's clock for ctrl+c's window: time moves only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _app(agent: Any) -> tuple[TidegaugeApp, StepClock]:
    app = TidegaugeApp(agent, cursor_blink=False)
    clock = StepClock()
    app.clock = clock
    return app, clock


def _notes(app: TidegaugeApp) -> list[str]:
    """The toasts shown now (Textual's "Do you want to quit?" was one, over the gauge)."""
    return [f"{note.title} {note.message}" for note in app._notifications]


async def test_ctrl_c_interrupts_a_running_turn_and_the_dashboard_stays() -> None:
    gate = Gate()
    agent = FakeSession({"slow": [Text("starting"), gate, Text("never shown")]})
    app, _clock = _app(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "slow")
        await gate.reached.wait()
        await pilot.press("ctrl+c")
        await settle(pilot)
        assert agent.history == ["slow", "[interrupted]"]
        assert any(t.startswith("interrupted by the user") for t in engine_texts(app, "interrupted"))
        assert app.is_running and app.return_code is None
        assert _notes(app) == []


async def test_ctrl_c_clears_the_prompt_when_idle_and_says_what_a_second_does() -> None:
    agent = FakeSession()
    app, clock = _app(agent)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"a draft")
        await pilot.press("ctrl+c")
        await pilot.pause()
        prompt = app.prompt_box
        assert prompt.value == ""
        assert "ctrl+c again quits" in str(prompt.border_subtitle)
        assert _notes(app) == []
        clock.now += QUIT_WINDOW_S + 0.5  # a second press later than the window does not quit
        await pilot.press(*"more", "ctrl+c")
        await pilot.pause()
        assert app.is_running and prompt.value == ""
        assert agent.calls == []  # nothing was sent or interrupted


async def test_ctrl_c_twice_within_a_second_quits() -> None:
    app, clock = _app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        clock.now += QUIT_WINDOW_S / 2
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0  # the App was asked to exit, as ctrl+q does


async def test_ctrl_c_with_a_selection_in_the_prompt_copies_it_and_keeps_the_text() -> None:
    app, _clock = _app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"keep me", "shift+home")
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.prompt_box.value == "keep me"
        assert app.clipboard == "keep me"
        await pilot.press("ctrl+c")  # the first press only copied: this one clears, it does not quit
        await pilot.pause()
        assert app.is_running

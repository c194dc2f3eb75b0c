"""The what-if on the dashboard: the palette's "What-if: overlay policy…" asks for a window and
an auto-compact fraction, the App sends ``WhatIf``, and the context chart draws the curve the
session answers with over its bars, with a legend entry. The session is the real one (its model
scripted): the curve is its own transcript replayed; the replay's figures are tests/test_whatif.py's."""

from __future__ import annotations

from app.kernel import events as ev
from app.kernel import commands as cmd
from app.surfaces.dashboard.app import TidegaugeApp
from snapshot_apps.fake_agent import Ask, FakeSession, Text
from test_tui_snapshots import SIZES, drive, until
from textual.widgets import Input, Static
from widgets.context_history import ContextHistory
from widgets.whatif_screen import WhatIfScreen


def make_app() -> tuple[TidegaugeApp, FakeSession]:
    # four real reads of 300 lines of the demo's log each: the context grows ~5K tokens a call
    reads = [Ask("read_file", {"path": "app.log", "offset": 1 + 300 * n, "limit": 300}, id=f"call-{n + 1}")
             for n in range(4)]
    agent = FakeSession({"over": [*reads, Text("Read the log.")]}).named_the_same_every_run()
    return TidegaugeApp(agent, cursor_blink=False), agent


async def ask_whatif(pilot, window: str, fraction: str) -> None:
    """Through the command palette, as a user does."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: pilot.app.screen.__class__.__name__ == "CommandPalette")
    await pilot.press(*"What-if")
    await pilot.pause()
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, WhatIfScreen))
    screen = pilot.app.screen
    screen.query_one("#whatif-window", Input).value = window
    screen.query_one("#whatif-auto-compact", Input).value = fraction
    screen.query_one("#whatif-window", Input).focus()
    await pilot.press("enter")
    await pilot.pause()


async def test_the_overlay_is_drawn_from_the_sessions_answer_and_bad_figures_keep_the_dialog_open() -> None:
    app, agent = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await drive("over")(pilot)
        await ask_whatif(pilot, "1e5", "0.5")
        # not a whole number: said on one line, the dialog stays with what was typed, nothing sent
        assert isinstance(app.screen, WhatIfScreen)
        problem = str(app.screen.query_one("#whatif-problem", Static).render())
        assert "window: '1e5' is not a whole number of tokens" in problem
        assert not [c for c in agent.submitted if isinstance(c, cmd.WhatIf)]
        app.screen.query_one("#whatif-window", Input).value = "8000"
        await pilot.press("enter")
        await until(pilot, lambda: app.query_one(ContextHistory).overlay)
        assert [c for c in agent.submitted if isinstance(c, cmd.WhatIf)] == [cmd.WhatIf(window=8_000, auto_compact=0.5)]
        [answer] = [e.event for e in agent.snapshot().events if isinstance(e.event, ev.WhatIfEvent)]
        history = app.query_one(ContextHistory)
        assert history.overlay == answer.points and answer.compactions > 0
        drawn = history.render().plain.splitlines()
        # the line the replay compacted at (the window less its reserve, times the fraction)
        assert f"• what-if 8.0K @{answer.auto_compact_line / answer.window:.0%}" in drawn[0]
        # one mark per call column, at the what-if's height: as many marks as calls in view
        assert sum(line.count("•") for line in drawn[1:]) >= len(answer.points)
        # the conversation says the figures in words
        assert any(item.kind == "engine" and "what-if window=8000,auto-compact=0.5" in item.text
                   for item in app.conversation.items)


def test_snapshot_whatif_overlay_at_80x24(snap_compare) -> None:
    app, _ = make_app()

    async def run_before(pilot) -> None:
        await drive("over", keys=("ctrl+g",))(pilot)
        await ask_whatif(pilot, "8000", "0.5")  # compacts where the recorded session did not
        await until(pilot, lambda: pilot.app.query_one(ContextHistory).overlay)

    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=run_before)

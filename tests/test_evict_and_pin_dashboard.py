"""Evict and pin on the dashboard: d and p in the tool list, the marks the list shows.

The keys are pressed as a user presses them (the tool list focused, a call highlighted); what
the App sends is checked, and the list's lines are snapshotted at 80x24 and 160x50 with one
result pinned and one evicted. The figures behind them are the real engine's
(tests/test_evict_and_pin.py); here the session is the scripted fake.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_tui_snapshots import SIZES, make_app, until

from app.kernel import commands as cmd
from widgets.confirm_screen import ForecastConfirmScreen
from widgets.tool_call_list import ToolCallList


async def pin_first_and_evict_second(pilot: Any) -> None:
    """Two tool calls; in the focused tool list, p on the first, then d on the second and yes."""
    from dashboard_helpers import send, settle

    app = pilot.app
    await send(pilot, "read two files")
    await settle(pilot)
    tools = app.query_one(ToolCallList)
    tools.focus()
    await pilot.press("home")
    await pilot.press("p")
    await until(pilot, lambda: tools.calls[0].pinned)
    await pilot.press("down")
    await pilot.press("d")
    await until(pilot, lambda: isinstance(app.screen, ForecastConfirmScreen) and app.screen.forecast is not None)
    await pilot.press("y")
    await until(pilot, lambda: tools.calls[1].evicted)


async def test_p_pins_the_highlighted_result_and_d_evicts_after_asking_with_its_plan() -> None:
    app, session = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pin_first_and_evict_second(pilot)
        first, second = app.query_one(ToolCallList).calls[:2]
        sent = [c for c in session.submitted if isinstance(c, (cmd.PinResult, cmd.EvictResult, cmd.Preview))]
        # the dialog showed a plan, and yes ran that plan, named by its id
        [plan] = [e.event for e in session.snapshot().events
                  if e.event.type == "forecast" and e.event.kind == "evict"]
        assert sent == [cmd.PinResult(first.id, pin=True), cmd.Preview("evict", None, second.id),
                        cmd.EvictResult(second.id, plan_id=plan.plan_id)]
        from dashboard_helpers import engine_texts

        said = engine_texts(app)
        assert any(f"pinned {first.name}(path='README.md')" in text for text in said), said[-3:]
        assert any(f"evicted the {second.name} result {second.id}" in text for text in said), said[-3:]

        # p again unpins; d on a pinned result is refused in one line by the session, not by the list
        await pilot.press("home")
        await pilot.press("p")
        await until(pilot, lambda: not app.query_one(ToolCallList).calls[0].pinned)
        assert session.submitted[-1] == cmd.PinResult(first.id, pin=False)


async def test_d_and_p_typed_with_nothing_highlighted_go_to_the_prompt() -> None:
    """A letter is taken from a sentence only when it means something to the list."""
    app, session = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        app.query_one(ToolCallList).focus()
        await pilot.press("d", "p")
        await pilot.pause()
        assert app.prompt_box.value == "dp"
        assert not any(isinstance(c, (cmd.PinResult, cmd.EvictResult, cmd.Preview)) for c in session.submitted)


@pytest.mark.parametrize("size", ["80x24", "160x50"])
def test_snapshot_tool_list_with_a_pinned_and_an_evicted_result(snap_compare, size: str) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=SIZES[size], run_before=pin_first_and_evict_second)

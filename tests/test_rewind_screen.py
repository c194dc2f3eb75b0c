"""Rewind on the dashboard: escape escape (idle) or /rewind opens the list of earlier messages, newest
first; choosing one runs its plan, puts the message back in the prompt, dims the abandoned turns and
the gauge shows the size after. Snapshots of the list at 80x24 and 160x50."""

from __future__ import annotations

import pytest
from test_tui_snapshots import drive, make_app, until
from textual.widgets import Input
from widgets.context_panel import ContextPanel
from widgets.rewind_screen import RewindScreen

from app.kernel.envelope import outside_log
from app.kernel import commands as cmd

PROMPTS = ("under", "fix the failing test in tests/test_api.py", "now update the docs")


def _open_rewind(*keys: str, by_slash: bool = False):
    async def run_before(pilot) -> None:
        await drive(*PROMPTS)(pilot)
        pilot.app.clock = lambda: 0.0  # both escapes at one instant: a double press, whatever the load
        if by_slash:
            await drive("/rewind", wait_workers=False)(pilot)
        else:
            await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(pilot.app.screen, RewindScreen))
        for key in keys:
            await pilot.press(key)
            await pilot.pause()

    return run_before


async def test_escape_escape_lists_the_messages_and_choosing_one_rewinds() -> None:
    app, session = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_rewind()(pilot)
        screen = app.screen
        assert isinstance(screen, RewindScreen)
        assert [p.text for p in screen.event.points] == list(reversed(PROMPTS))  # newest first
        before = app.query_one(ContextPanel).last_context
        assert before is not None
        await pilot.press("down", "enter")  # the second newest: "fix the failing test…"
        await until(pilot, lambda: not isinstance(app.screen, RewindScreen)
                    and app.query_one("#prompt", Input).value == PROMPTS[1])
        rewind = [c for c in session.submitted if isinstance(c, cmd.Rewind)]
        assert rewind == [cmd.Rewind(screen.event.points[1].plan_id, files=False, overwrite_changed=False)]
        after = app.query_one(ContextPanel).last_context
        assert after is not None and after.projected_tokens < before.projected_tokens
        conversation = app.conversation
        users = [index for index, item in enumerate(conversation.items) if item.kind == "user"]
        assert [conversation.items[index].abandoned for index in users] == [False, True, True]
        assert all((widget := conversation.widget_of(index)) is None or widget.has_class("-abandoned")
                   for index in users[1:])
        assert any("rewound to before turn 2" in item.text for item in conversation.items if item.kind == "engine")


async def test_f_rewinds_with_the_files_and_escape_cancels() -> None:
    app, session = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _open_rewind(by_slash=True)(pilot)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RewindScreen))
        assert not any(isinstance(c, cmd.Rewind) for c in session.submitted)
        app.clock = lambda: 0.0
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        await pilot.press("end", "f")  # the oldest message, with its files
        await until(pilot, lambda: app.query_one("#prompt", Input).value == PROMPTS[0])
        assert ("rewind", (1, True)) in session.calls


async def test_a_single_escape_when_idle_only_says_what_a_second_does() -> None:
    app, session = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await drive(*PROMPTS[:1])(pilot)
        ticks = iter([0.0, 10.0])  # the second escape comes too late to count as a double press
        app.clock = lambda: next(ticks)
        await pilot.press("escape")
        await pilot.pause()
        assert "escape again: rewind" in str(app.prompt_box.border_subtitle)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RewindScreen)
        assert not any(isinstance(c, cmd.PreviewRewind) for c in session.submitted)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_snapshot_rewind_list(snap_compare, size) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=size, run_before=_open_rewind("down"))


async def test_a_resumed_session_shows_the_abandoned_turns_dimmed() -> None:
    """What `tidegauge rewind` or an earlier run's Esc Esc recorded: on resume the turns are there, marked."""
    from snapshot_apps.fake_agent import FakeSession
    from textual.app import App

    from app.kernel import events as ev
    from app.surfaces.dashboard.app import TidegaugeApp

    restored: list[object] = []
    for n, words in enumerate(("write the plan", "rewrite it", "and again"), start=1):
        restored += [ev.UserMessageEvent(text=words), ev.AssistantMessageEvent(text=f"done {n}"),
                     ev.ResultEvent(stop_reason="end_turn", text=f"done {n}", steps=1)]
    restored.append(ev.RewindEvent(ok=True, turn=2, text="rewrite it", abandoned_turns=2, tokens_before=9_000,
                                   tokens_after=6_000, by="cli"))
    app: App[int] = TidegaugeApp(FakeSession(restored=restored), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        conversation = app.conversation  # type: ignore[attr-defined]
        await until(pilot, lambda: any(item.kind == "engine" and "rewound" in item.text for item in conversation.items))
        marked = [(item.text, item.abandoned) for item in conversation.items if item.kind in ("user", "assistant")]
        assert marked == [("write the plan", False), ("done 1", False), ("rewrite it", True), ("done 2", True),
                          ("and again", True), ("done 3", True)]
        assert app.query_one("#prompt", Input).value == ""  # an earlier run's rewind fills no prompt


def test_the_tool_list_marks_the_calls_of_the_abandoned_turns() -> None:
    """The view model (no Textual): the calls of the turns a rewind abandoned are marked, once; a later
    rewind counts only the turns still in the context."""
    from app.kernel import events as ev
    from app.surfaces.view_model import DashboardView
    from widgets.tool_call_line import tool_call_text

    view = DashboardView()
    for turn, calls in enumerate((["a1"], ["b1", "b2"], ["c1"]), start=1):
        view.apply(outside_log(ev.UserMessageEvent(text=f"prompt {turn}")))
        for call in calls:
            view.apply(outside_log(ev.ToolStartEvent(id=call, name="write_file", input={}, summary=call)))
            view.apply(outside_log(ev.ToolResultEvent(id=call, name="write_file", is_error=False, truncated=False,
                                          original_chars=5, kept_chars=5, content="done")))
    changed = view.apply(outside_log(ev.RewindEvent(ok=True, turn=2, abandoned_turns=2)))
    assert sorted(r.id for r in changed) == ["b1", "b2", "c1"]
    assert {i: r.rewound for i, r in view.tool_calls.items()} == {"a1": False, "b1": True, "b2": True, "c1": True}
    assert "rewound" in tool_call_text(view.tool_calls["c1"], {}).plain
    view.apply(outside_log(ev.UserMessageEvent(text="prompt 2, edited")))
    view.apply(outside_log(ev.ToolStartEvent(id="d1", name="read_file", input={}, summary="d1")))
    changed = view.apply(outside_log(ev.RewindEvent(ok=True, turn=2, abandoned_turns=1)))  # the edited prompt's turn
    assert [r.id for r in changed] == ["d1"] and not view.tool_calls["a1"].rewound
    assert view.apply(outside_log(ev.RewindEvent(ok=False, reason="busy"))) == ()

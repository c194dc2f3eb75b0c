"""First impressions at small sizes (issue 29): what a newcomer sees at 80x24 and 120x40.

The full output viewer's room, the narrow tool panel's long lines, the footer's keys at every
width, the header's project and session, /help at 80 columns, the palette's server-side
compaction toggle. Each is checked on the App as it runs (the header on the real demo session).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio

from app.surfaces.dashboard.app import TidegaugeApp
from dashboard_helpers import demo_app, send, settle
from snapshot_apps.fake_agent import Ask, FakeSession, big_log, session_steps
from widgets.engine_line import EngineLine
from widgets.header_bar import HeaderBar

# KeyFooter and help_text are imported where used: each test fails on its own assertion,
# not on the others' imports.


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cut output's full file: only read by the dashboards, so one for the module."""
    # a deep path, as the data directory's are: it must not take the viewer's rows
    path = (tmp_path_factory.mktemp("full-output") / "data" / "tidegauge" / "sessions" / "20261202-062137-996b"
            / "tool-results" / "call-1.txt")
    path.parent.mkdir(parents=True)
    path.write_text(big_log(3_000))
    return path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def after_the_calls_at_80x24(log_file: Path) -> AsyncIterator[tuple[TidegaugeApp, Any]]:
    """One dashboard at 80x24 after the scripted turn's tool calls, for the tests that only read what
    it drew (ON_THE_CALLS_AT_80X24): each start and turn is about a quarter CPU-second, and none of
    these tests presses, selects or resizes, so what one reads the others' runs did not change."""
    app = TidegaugeApp(FakeSession({"go": session_steps(str(log_file))[:13]}), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        yield app, pilot


ON_THE_CALLS_AT_80X24 = pytest.mark.asyncio(loop_scope="module")


def _app_started_in(folder: str) -> TidegaugeApp:
    """The dashboard on the fake session, as started in ``folder`` (what the header names)."""
    agent = FakeSession()
    agent.info = agent.info.model_copy(update={"started_in": folder})
    return TidegaugeApp(agent, cursor_blink=False)


async def _header_row(pilot: Any, app: TidegaugeApp, showing: str) -> str:
    """The header's row once it shows ``showing``."""
    header = app.query_one(HeaderBar)
    await until(pilot, lambda: showing in header.render().plain, f"{showing!r} in the header")
    return header.render().plain


async def until(pilot: Any, condition: Any, what: str, attempts: int = 1_000) -> None:
    for _ in range(attempts):
        if condition():
            return
        await pilot.pause()
    raise AssertionError(f"never happened: {what}")


async def open_full_output(pilot: Any, app: TidegaugeApp) -> None:
    await send(pilot, "go")
    await settle(pilot)
    await pilot.press("ctrl+o")
    await until(pilot, lambda: app.tool_panel.expanded, "the full output opened")
    await pilot.pause()


async def test_at_80x24_the_full_output_shows_12_lines_its_path_on_one_row(log_file: Path) -> None:
    app = TidegaugeApp(FakeSession({"go": session_steps(str(log_file))[:13]}), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_full_output(pilot, app)
        viewer, status = app.tool_panel.viewer, app.tool_panel.status_line
        rows = viewer.scrollable_content_region.height
        assert rows >= 12, f"the full output shows {rows} lines at 80x24"
        assert status.region.height == 1, f"the status takes {status.region.height} rows"
        shown = str(status.render())
        assert shown.startswith("…/") and shown.split(" · ")[0].endswith("/call-1.txt"), shown
        await pilot.press("ctrl+f")  # the whole path, on demand
        await until(pilot, lambda: str(log_file) in str(status.render()).replace("\n", ""), "the whole path shown")
        await pilot.press("ctrl+f")
        await until(pilot, lambda: str(status.render()).startswith("…"), "the path shortened again")
        from widgets.key_footer import KeyFooter

        footer = app.query_one(KeyFooter)
        await until(pilot, lambda: {"pageup", "home", "ctrl+o", "ctrl+f"} <= footer.shown_keys,
                    f"the viewer's keys in the footer (it shows {footer.render().plain!r})")


@ON_THE_CALLS_AT_80X24
async def test_a_long_line_in_the_narrow_tool_panel_wraps_whole(
        after_the_calls_at_80x24: tuple[TidegaugeApp, Any]) -> None:
    app, _pilot = after_the_calls_at_80x24
    panel = app.tool_panel
    assert panel.selected_id == "call-2"  # "300000:2026-10-18 12:00:01 ERROR database connection refused"
    viewer = panel.viewer
    width = viewer.scrollable_content_region.width
    assert width < 60  # narrower than the line
    drawn = "".join(viewer.render_line(y).text for y in range(viewer.size.height)).replace(" ", "")
    assert "300000:2026-10-1812:00:01ERRORdatabaseconnectionrefused" in drawn, drawn


@pytest.mark.parametrize("width", [60, 80, 100, 120, 142, 160, 220])
async def test_the_footer_never_cuts_a_word_and_keeps_the_keys_that_matter(width: int) -> None:
    from widgets.key_footer import KeyFooter

    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=(width, 24)) as pilot:
        footer = app.query_one(KeyFooter)
        await until(pilot, lambda: "ctrl+o" in footer.shown_keys, "the footer drawn")
        row = footer.render().plain
        assert len(row) <= width
        words = {"^o", "Output", "^s", "Compact", "^r", "Reset", "^g", "Chart", "^q", "Quit", "tab", "Region", "^n", "Inspect",
                 "↑", "↓", "History", "pgup", "pgdn", "Scroll", "^p", "palette"}
        assert set(row.split()) <= words, f"a cut word at {width} columns: {row!r}"
        if width >= 80:  # the App's keys, each whole
            for entry in ("^o Output", "^s Compact", "^r Reset", "^g Chart", "^q Quit", "^p palette"):
                assert entry in row, f"{entry!r} missing at {width} columns: {row!r}"


async def test_the_header_names_the_directory_started_in_and_the_session_not_the_scratch_workspace(
        tmp_path: Path) -> None:
    app = demo_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        header = app.query_one(HeaderBar)
        session_id = app.session.snapshot().info.session_id
        await until(pilot, lambda: header.session_id == session_id, "the session in the header")
        for size in ((80, 24), (120, 40)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            row = header.render().plain
            assert "workspace" not in row and "sessions/" not in row, row
            assert f"session {session_id.rsplit('-', 1)[-1]}" in row, row
            assert tmp_path.name[-6:] in row, f"the directory tidegauge was started in is not named: {row!r}"


async def test_help_reads_at_80_columns(tmp_path: Path) -> None:
    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "/help")
        await until(pilot, lambda: any(line.text.startswith("commands:") for line in app.query(EngineLine)),
                    "/help shown")
        (line,) = [line for line in app.query(EngineLine) if line.text.startswith("commands:")]
        room = app.conversation.content_region.width - 2  # the engine line's "· "
        too_long = [row for row in line.text.splitlines() if len(row) > room]
        assert not too_long, f"rows wider than the conversation ({room}): {too_long}"
        rows = line.text.splitlines()
        assert any(row.startswith("  ctrl+s ") for row in rows) and any(row.startswith("  ctrl+r ") for row in rows)
    from app.surfaces.dashboard.app import help_text

    wide = help_text(120).splitlines()
    assert any("ctrl+s" in row and "ctrl+r" in row for row in wide)  # two to a row where there is room


async def test_a_long_state_cuts_the_provider_label_not_the_session_id() -> None:
    agent = FakeSession({"approve": [Ask("run_bash", {"command": "make"})]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        header = app.query_one(HeaderBar)
        await send(pilot, "approve")  # the longest words the state has: waiting for approval: run_bash
        await until(pilot, lambda: "waiting for approval" in header.render().plain, "the approval's state")
        row = header.render().plain
        assert f"session {agent.info.session_id.rsplit('-', 1)[-1]}" in row, row
        assert "waiting for approval: run_bash" in row, row
        await pilot.press("n")
        await settle(pilot)


async def test_a_wrapped_output_longer_than_the_panel_needs_no_sideways_scrolling() -> None:
    """Rows enough for a vertical scrollbar: the wrapped lines still fit beside it."""
    from widgets.output_viewer import OutputViewer

    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=(220, 60)) as pilot:
        viewer = app.query_one(OutputViewer)
        text = "\n".join(f"{i:>5}  " + "x" * (i % 300) + "END" for i in range(200))
        viewer.set_text(text, wrap=True)
        await pilot.pause()
        await pilot.pause()
        assert viewer.show_vertical_scrollbar
        assert viewer.virtual_size.width <= viewer.scrollable_content_region.width, (
            viewer.virtual_size, viewer.scrollable_content_region)
        assert not viewer.show_horizontal_scrollbar


async def test_hostile_names_and_output_stay_inert_in_the_header_and_the_wrapped_view() -> None:
    """A directory name or a tool's output can hold escape sequences and markup: drawn, never run."""
    from widgets.output_viewer import WRAP_MAX_CHARS, OutputViewer

    app = _app_started_in("/tmp/\x1b]0;pwned\x07[bold]x[/bold]")
    async with app.run_test(size=(160, 24)) as pilot:
        row = await _header_row(pilot, app, "/tmp/")
        # the sequence is dropped whole (the one sanitizer), the markup shown as typed
        assert "\x1b" not in row and "\x07" not in row and "pwned" not in row and "[bold]x[/bold]" in row, row
        viewer = app.query_one(OutputViewer)
        viewer.set_text("\x1b[2J\x1b]52;c;aGk=\x07" + "z" * 300, wrap=True)
        await pilot.pause()
        drawn = "".join(viewer.render_line(y).text for y in range(viewer.size.height))
        assert "\x1b" not in drawn and "\x07" not in drawn and "z" * 20 in drawn
        viewer.set_text("q" * (WRAP_MAX_CHARS + 1), wrap=True)  # too big to wrap on the UI loop
        assert not viewer.wraps


def test_help_gives_a_long_command_name_its_own_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """An MCP server's prompt can have a long name: it must not widen the column for every row."""
    from app.surfaces.dashboard.app import help_text
    from widgets.prompt_box import SLASH_COMMANDS

    monkeypatch.setitem(SLASH_COMMANDS, "/mcp__github__summarize_pull_request", "a prompt from github: summarize a PR")
    rows = help_text(44).splitlines()
    assert all(len(row) <= 44 for row in rows if "/mcp__github" not in row), rows
    at = rows.index("  /mcp__github__summarize_pull_request")
    assert rows[at + 1].strip().startswith("a prompt from github")
    assert any(row.split()[:2] == ["/usage", "tokens"] for row in rows), rows  # the others keep one row


@ON_THE_CALLS_AT_80X24
async def test_at_80x24_a_call_line_keeps_its_badge_and_size_whole(
        after_the_calls_at_80x24: tuple[TidegaugeApp, Any]) -> None:
    """The 30-column tool list cut "32.3K/15.2M chars  70ms  truncated" to "32.3K/" and the
    conversation "58 chars" to "58": the duration goes first, then the size, then the arguments
    shorten (they tell one call from the next)."""
    from widgets.tool_call_line import ToolCallLine

    app, pilot = after_the_calls_at_80x24
    tool_list = app.tool_panel.tool_list
    width = tool_list.scrollable_content_region.width
    rows = [tool_list.render_line(y).text.rstrip() for y in range(tool_list.call_count)]
    assert width <= 30 and rows[0].endswith(" truncated"), (width, rows)  # cat app.log, cut
    assert rows[1].startswith("✓ run_bash grep -n") and len(rows[1]) <= width, rows  # shortened with "…"
    lines = {line.info.id: line for line in app.query(ToolCallLine)}
    await until(pilot, lambda: lines["call-2"].size.width > 0, "the call lines laid out")
    drawn = {call_id: line.render().plain for call_id, line in lines.items()}
    assert drawn["call-1"].endswith(" truncated "), drawn
    assert drawn["call-2"].endswith(" chars") and len(drawn["call-2"]) <= lines["call-2"].size.width, drawn


async def test_at_80_columns_the_header_names_the_project_whole_before_the_providers_label() -> None:
    """At 80x24 the header gave the project "…-project" or "…fl2-demo" and the provider label
    all its words: the project's own name is whole, the label is shortened first."""
    agent = FakeSession()
    agent.info = agent.info.model_copy(update={"started_in": "/home/someone/code/my-project"})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        short_id = agent.info.session_id.rsplit("-", 1)[-1]
        row = await _header_row(pilot, app, f"session {short_id}")
        assert f"…/my-project  session {short_id}" in row and len(row.rstrip()) <= 80, row
        label = FakeSession().info.provider_label
        assert f" {label[:5]}" in row, f"the provider label's start is gone: {row!r}"


async def test_at_80x24_the_cut_outputs_status_keeps_ctrl_o_in_view(log_file: Path) -> None:
    """The narrow panel's two status rows showed "showing 32,318 of 15,188,963 / characters (what
    the model" and lost "— ctrl+o to expand": shorter words where the long ones do not fit."""
    app = TidegaugeApp(FakeSession({"go": session_steps(str(log_file))[:13]}), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        panel = app.tool_panel
        panel.select_call("call-1")  # the cat, cut
        status = panel.status_line

        def drawn() -> str:
            return " ".join(status.render_line(y).text.strip() for y in range(status.size.height))

        await until(pilot, lambda: "ctrl+o" in drawn(), f"ctrl+o in the status at 80x24 (it shows {drawn()!r})")
        assert f"of {len(log_file.read_text()):,} chars" in drawn(), drawn()
        await pilot.resize_terminal(220, 60)  # room for the whole sentence
        await until(pilot, lambda: "(what the model saw) — ctrl+o to expand" in drawn(),
                    f"the long words at 220 columns (it shows {drawn()!r})")


async def test_at_220x60_the_cost_stays_in_view_when_the_session_memory_takes_a_row() -> None:
    """After a compaction from the session memory the breakdown has one row more than its
    panel (the README's 220x60 picture lost "cost"): the cost goes beside the tokens."""
    from snapshot_apps.fake_agent import context
    from widgets.context_breakdown import ContextBreakdown

    base = context(40_000, 0)
    # a session memory is not reached in a short scripted run: its part is said to the dashboard
    after = base.model_copy(update={"breakdown": dict(base.breakdown, session_memory=671)})
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(220, 60)) as pilot:
        breakdown = app.query_one(ContextBreakdown)
        await pilot.pause()
        agent.emit(after)

        def drawn() -> str:
            return "\n".join(breakdown.render_line(y).text.rstrip() for y in range(breakdown.size.height))

        await until(pilot, lambda: "session memory" in drawn(), "the breakdown drawn")
        assert "cost $" in drawn() and "compaction $" in drawn(), drawn()
        assert "tokens in " in drawn(), drawn()


def test_a_call_line_with_wide_characters_fits_its_width_and_keeps_its_badge() -> None:
    """Arguments in Chinese take two cells a character: measured in cells, not characters."""
    from rich.cells import cell_len

    from widgets.tool_call_line import ToolCallInfo, tool_call_text

    info = ToolCallInfo(id="a", name="run_bash", summary="cat 日志/应用程序错误记录.log", status="ok",
                        original_chars=15_188_963, kept_chars=32_300, truncated=True, duration_ms=101)
    for width in (30, 37, 46):
        line = tool_call_text(info, {}, summary_width=32, compact=True, width=width).plain
        assert cell_len(line) <= width and line.rstrip().endswith("truncated"), (width, line)


@ON_THE_CALLS_AT_80X24
async def test_a_long_thought_on_its_one_line_ends_in_an_ellipsis(
        after_the_calls_at_80x24: tuple[TidegaugeApp, Any]) -> None:
    """Drawn as is, the collapsed thinking line broke at a word ("…; the last is line") and
    read as the whole thought: it is cut where the row ends, with "…"."""
    from widgets.thinking_line import ThinkingLine

    app, _pilot = after_the_calls_at_80x24
    line = app.query(ThinkingLine).first()
    width = line.size.width
    assert len(f"✻ thinking ({len(line.text)} chars) {line.text}") > width  # it does not fit
    drawn = line.render_line(0).text.rstrip()
    assert drawn.endswith("…") and len(drawn) == width, (width, drawn)

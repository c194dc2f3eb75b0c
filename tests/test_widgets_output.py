"""The line-virtualized output viewer and the tool call list."""

from __future__ import annotations

from textual.app import App

from app.surfaces.dashboard.app import CSS_FILE
from snapshot_apps.fake_agent import big_log
from widgets.output_viewer import WRAP_AT, OutputViewer, prepare_lines
from widgets.tool_call_line import ToolCallInfo, tool_call_text
from widgets.tool_call_list import ToolCallList


class Host(App):
    CSS_PATH = str(CSS_FILE)

    def __init__(self) -> None:
        super().__init__()
        self.highlighted: list[str] = []

    def compose(self):
        yield ToolCallList()
        yield OutputViewer()

    def on_tool_call_list_highlighted(self, message: ToolCallList.Highlighted) -> None:
        self.highlighted.append(message.call_id)


def test_prepare_lines_wraps_long_lines_and_measures_width() -> None:
    lines, width = prepare_lines("short\n" + "x" * (WRAP_AT * 2 + 5) + "\n中文\n")
    assert lines == ["short", "x" * WRAP_AT, "x" * WRAP_AT, "x" * 5, "中文"]
    assert width >= WRAP_AT
    _, cjk_width = prepare_lines("中文中文")
    assert cjk_width >= 8  # two cells per character


async def test_viewer_shows_300000_lines_and_only_renders_what_is_visible() -> None:
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        viewer = app.query_one(OutputViewer)
        lines, width = prepare_lines(big_log(300_000))
        viewer.set_lines(lines, width)
        await pilot.pause()
        assert viewer.line_count == 300_000
        viewer.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        visible = [viewer.render_line(y).text for y in range(viewer.size.height)]
        assert any("ERROR database connection refused" in line for line in visible)
        assert len(viewer._cache) <= viewer.size.height * 3  # nothing like 300,000 strips


async def test_viewer_makes_escape_sequences_inert() -> None:
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        viewer = app.query_one(OutputViewer)
        viewer.set_text("\x1b[31mred\x1b[0m \x1b]0;title\x07 [b]x[/b] \x00\x08 tab\tend")
        await pilot.pause()
        drawn = viewer.render_line(0).text
        assert "\x1b" not in drawn and "\x07" not in drawn and "\x00" not in drawn
        assert "[b]x[/b]" in drawn and "red" in drawn and "tab" in drawn


async def test_tool_list_arrows_move_and_report_the_highlighted_call() -> None:
    app = Host()
    highlighted = app.highlighted
    async with app.run_test(size=(100, 30)) as pilot:
        tool_list = app.query_one(ToolCallList)
        for i in range(5_000):
            tool_list.add_call(ToolCallInfo(id=f"c{i}", name="read_file", summary=f"f{i}.py", status="ok"))
        tool_list.cursor = 4_999
        tool_list.focus()
        await pilot.pause()
        await pilot.press("up", "up")
        await pilot.pause()
        assert tool_list.cursor == 4_997
        assert highlighted[-1] == "c4997"
        await pilot.press("home")
        await pilot.pause()
        assert highlighted[-1] == "c0" and tool_list.scroll_offset.y == 0
        tool_list.update_call(ToolCallInfo(id="c0", name="read_file", summary="f0.py", status="error"))
        await pilot.pause()
        assert tool_list.render_line(0).text.startswith("✗ read_file f0.py")


def test_a_call_line_says_what_happened_to_the_call() -> None:
    done = ToolCallInfo(id="a", name="run_bash", summary="cat app.log", status="ok", original_chars=15_188_963,
                        kept_chars=40_000, truncated=True, duration_ms=117)
    line = tool_call_text(done, {}).plain
    assert line.startswith("✓ run_bash cat app.log") and "of 15.2M chars" in line and "truncated" in line
    stopped = ToolCallInfo(id="b", name="run_bash", summary="sleep 600", status="interrupted", original_chars=88)
    line = tool_call_text(stopped, {}).plain
    assert line == "⏹ run_bash sleep 600  interrupted"  # not the size and time of the stand-in result


async def test_the_tool_lists_thumb_is_where_the_list_is_when_its_bar_appears() -> None:
    """Calls can arrive faster than layouts: the list follows them (scrolls) before its bar is
    shown, and when the bar appears its thumb must show the list's place. It stayed at the top
    while the last call was on screen (1 run in 3 of the 80x24 snapshot under load). The bar's
    late arrival is made certain here by hiding it until the list has scrolled."""
    app = Host()
    async with app.run_test(size=(60, 30)) as pilot:
        tool_list = app.query_one(ToolCallList)
        tool_list.styles.height = 6
        tool_list.styles.overflow_y = "hidden"
        for i in range(11):
            tool_list.add_call(ToolCallInfo(id=f"c{i}", name="read_file", summary=f"f{i}.py", status="ok"))
            tool_list.cursor = i
        await pilot.pause()
        following = 11 - tool_list.scrollable_content_region.height  # the last call on the bottom row
        assert not tool_list.show_vertical_scrollbar and following > 0
        assert tool_list.scroll_offset.y == following
        tool_list.styles.overflow_y = "auto"
        for _ in range(3):
            await pilot.pause()
        assert tool_list.show_vertical_scrollbar
        assert tool_list.vertical_scrollbar.position == tool_list.scroll_offset.y == following

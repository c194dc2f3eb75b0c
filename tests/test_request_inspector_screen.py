"""The request inspector on the dashboard: ctrl+n (or /inspect) opens the last kept request, d its
diff against the one before; snapshots at 80x24 and 160x50, and a Pilot walk through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input
from test_tui_snapshots import make_app, until
from widgets.engine_line import EngineLine
from widgets.request_inspector import PartTable, RequestInspectorScreen

from app.context.request_parts import breakpoint_indexes, request_parts
from app.kernel.events import RequestRecordedEvent
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from app.kernel.request_store import RequestEnvelope, RequestStore, StoredRequests

TOOLS = [ToolSpec(name="read_file", description="Read a text file in the workspace.",
                  input_schema={"type": "object", "properties": {"path": {"type": "string"}}}),
         ToolSpec(name="run_bash", description="Run a bash command in the workspace.",
                  input_schema={"type": "object", "properties": {"command": {"type": "string"}}})]
SYSTEM = "You are tidegauge, a coding agent working in /work/demo."
MEMORY = "\n\n# Project and user rules (memory files)\nContents of AGENTS.md:\nRun the tests with pytest -q."


def _store(folder: Path) -> RequestRecordedEvent:
    """Two requests: a read of app.log, then the same turn after a compaction replaced it."""
    store = RequestStore(folder)
    words = TextBlock(text="find errors in app.log", user_message_id="u-1")
    use = ToolUseBlock(id="call-1", name="read_file", input={"path": "app.log"})
    log = "\n".join(f"2026-10-18 11:00:{i % 60:02d} INFO request {i} handled" for i in range(400))
    first = [Message(role="user", content=[words]),
             Message(role="assistant", content=[TextBlock(text="Reading the log."), use]),
             Message(role="user", content=[ToolResultBlock(tool_use_id="call-1", content=log)])]
    summary = [Message(role="user", content=[
        TextBlock(text="This is a summary of an earlier conversation that was compacted because the context grew "
                       "too long.\n\nThe log has one ERROR: database connection refused at 12:00:01.",
                  in_summary=True),
        TextBlock(text="find errors in app.log", user_message_id="u-1"),
        TextBlock(text="\n</user-message>\n\nContinue the task from here.", in_summary=True)])]
    number = 0
    for history, usage in ((first, (7_400, 0)), (summary, (65, 104))):
        parts = request_parts(SYSTEM, MEMORY, TOOLS, history)
        gauge = sum(p.tokens for p in parts)
        number = store.record(parts, RequestEnvelope(number=0, gauge_tokens=gauge, input_tokens=usage[0],
                                                     cache_read_tokens=usage[1], cache_write_tokens=0))
    return RequestRecordedEvent(request=number, total_tokens=gauge, parts=len(parts), store=str(folder))


@pytest.fixture
def recorded(tmp_path: Path) -> RequestRecordedEvent:
    # the session's id is drawn (the store's parent folder): fixed, whatever tmp_path is
    return _store(tmp_path / "20261018-110000-insp" / "requests")


def _cached_store(folder: Path) -> RequestRecordedEvent:
    """Two requests of one turn to an Anthropic-style cache: the marks Anthropic's provider puts
    (system prompt, last tool, the latest message, the user turn before), and the second request
    reading from the cache what the first wrote, up to the mark on the prompt."""
    store = RequestStore(folder)
    words = TextBlock(text="find errors in app.log", user_message_id="u-1")
    use = ToolUseBlock(id="call-1", name="read_file", input={"path": "app.log"})
    log = "\n".join(f"2026-10-18 11:00:{i % 60:02d} INFO request {i} handled" for i in range(400))
    asked = [Message(role="user", content=[words])]
    answered = [*asked, Message(role="assistant", content=[TextBlock(text="Reading the log."), use]),
                Message(role="user", content=[ToolResultBlock(tool_use_id="call-1", content=log)])]
    fixed_marks = [("system", ""), ("tool", "run_bash")]
    written = 0
    number = 0
    for history, marks in ((asked, [*fixed_marks, ("text", words.text)]),
                           (answered, [*fixed_marks, ("text", words.text), ("tool_result", "call-1")])):
        parts = request_parts(SYSTEM, MEMORY, TOOLS, history)
        gauge = sum(p.tokens for p in parts)
        read = written
        written = gauge - read
        number = store.record(parts, RequestEnvelope(number=0, gauge_tokens=gauge, input_tokens=0,
                                                     cache_read_tokens=read, cache_write_tokens=written,
                                                     breakpoints=breakpoint_indexes(parts, marks)))
    return RequestRecordedEvent(request=number, total_tokens=gauge, parts=len(parts), store=str(folder))


@pytest.fixture
def cached(tmp_path: Path) -> RequestRecordedEvent:
    return _cached_store(tmp_path / "20261018-110000-insp" / "requests")


def _open_inspector(recorded: RequestRecordedEvent, *keys: str):
    async def run_before(pilot) -> None:
        pilot.app.session.emit(recorded)
        await until(pilot, lambda: pilot.app._last_request is not None)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(pilot.app.screen, RequestInspectorScreen))
        for key in keys:
            await pilot.press(key)
            await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_snapshot_inspector_on_the_last_request(snap_compare, recorded, size) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=size, run_before=_open_inspector(recorded))


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_snapshot_inspector_diff_after_a_compaction(snap_compare, recorded, size) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=size, run_before=_open_inspector(recorded, "d"))


async def test_the_inspector_walks_parts_and_toggles_the_diff(recorded) -> None:
    app, session = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+n")  # before any request: said, nothing opens
        await pilot.pause()
        assert not isinstance(app.screen, RequestInspectorScreen)
        assert any("no request sent yet" in line.text for line in app.query(EngineLine))

        session.emit(recorded)
        await until(pilot, lambda: app._last_request is not None)
        box = app.query_one("#prompt", Input)
        box.value = "/inspect"
        box.focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RequestInspectorScreen))
        screen = app.screen
        table = screen.query_one(PartTable)
        origins = [row.origin for row in table.rows]
        assert origins[:4] == ["tidegauge", "memory files", "built-in", "built-in"]
        assert origins[4:] == ["summary", "kept user words", "summary frame"]
        assert sum(row.tokens for row in table.rows) == recorded.total_tokens
        assert [row.cached for row in table.rows][:2] == [True, True]

        for _ in range(4):
            await pilot.press("down")
        await pilot.pause()
        detail = str(screen.query_one("#inspector-detail").render())
        assert detail.startswith("summary · ") and "database connection refused" in detail

        await pilot.press("d")
        await pilot.pause()
        changes = {(row.change, row.origin.split(" · ")[0]) for row in table.rows}
        assert {("removed", "user"), ("removed", "model"), ("removed", "read_file"),
                ("added", "summary"), ("added", "kept user words")} <= changes
        assert "removed" in str(screen.query_one("#inspector-subtitle").render())

        await pilot.press("left")  # the request before: the read of app.log, its diff all added
        await pilot.pause()
        assert "request 1 of 2" in str(screen.query_one("#inspector-title").render())
        assert {row.change for row in table.rows} == {"added"}
        assert any(row.origin == "read_file · call call-1" and row.tokens > 5_000 for row in table.rows)
        await pilot.press("left")  # there is none before it: said, nothing changes
        await pilot.pause()
        assert "request 1 of 2" in str(screen.query_one("#inspector-title").render())

        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RequestInspectorScreen)


def test_the_table_and_the_detail_draw_a_hostile_part_inert() -> None:
    from widgets.request_inspector import _fit, part_row

    from app.kernel.request_store import PartView

    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2Jowned\r\n" + "x" * 1_000_000
    view = PartView("tool_result", "user", "run_bash · call c1\x1b[2J", 9, False, hostile, len(hostile))
    row = part_row(view, 1, 120)
    assert len(row) == 120 and "\x1b" not in row and "\x07" not in row and "owned" in row
    assert "\x1b" not in _fit(view.origin, 30)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_snapshot_inspector_shows_the_cache_breakpoints_and_what_was_served(snap_compare, cached, size) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=size, run_before=_open_inspector(cached))


async def test_the_parts_up_to_the_breakpoint_the_cache_read_are_the_cached_ones(cached) -> None:
    stored = StoredRequests.load(Path(cached.store))
    envelope = stored.envelope(2)
    app, session = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        session.emit(cached)
        await until(pilot, lambda: app._last_request is not None)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, RequestInspectorScreen))
        rows = app.screen.query_one(PartTable).rows
        # marks after the memory files (the system text), the last tool, the prompt and the result
        assert [row.origin for row in rows if row.breakpoint] == ["memory files", "built-in", "user",
                                                                   "read_file · call call-1"]
        served = [row.cached for row in rows].index(False)
        assert rows[served - 1].origin == "user" and rows[served - 1].breakpoint
        assert not any(row.cached for row in rows[served:])
        assert sum(row.tokens for row in rows[:served]) == envelope.cache_read_tokens
        subtitle = str(app.screen.query_one("#inspector-subtitle").render())
        title = str(app.screen.query_one("#inspector-title").render())
        assert "4 cache breakpoints" in subtitle and f"{envelope.cache_read_tokens:,} tokens" in subtitle
        assert f"{envelope.cache_write_tokens:,} written to cache" in title

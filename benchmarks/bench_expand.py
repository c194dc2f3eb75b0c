"""2. Expanding the 15 MB tool output in the dashboard (headless ``run_test``, 160×50).

Setup (not timed): the app's own agent runs one tool step whose tool prints
the seed's app.log, so the registry writes the full output to tool-results/
and the events reach the dashboard the usual way; the call is selected in the
tool-output panel.

2a. First paint: from pressing ctrl+o to the first frame showing the full
    output in the viewer. Baseline: an equivalent bare app (a ``Log`` widget
    filling the same 160×50 screen) whose ctrl+o reads the same file and
    writes its lines into the Log, to its first frame showing them.
2b. Then 20 page-downs in the viewer: each from the key press to the first
    frame showing the page scrolled to where it stops.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._dashboard import SIZE, FrameClock, build_app
from benchmarks._fixtures import FULL_LOG_LINES, QUICK_LOG_LINES, app_log_text, require
from benchmarks.harness import Check, interleaved_async, median, seconds

NAME_PAINT = "2a expand: first paint"
NAME_PAGE = "2b expand: page-down"
MAX_PAINT_RATIO = 1.5
MAX_PAGE_S = 0.050
PAGE_DOWNS = 20


def _bare_log_app(path: Path) -> Any:
    from textual.app import App
    from textual.widgets import Log

    class BareLogApp(App[None]):
        """The baseline: only a Log, loading the same file on ctrl+o."""

        BINDINGS = [("ctrl+o", "load", "Load")]

        def compose(self):
            yield Log()

        def action_load(self) -> None:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            self.query_one(Log).write_lines(lines, scroll_end=False)

    return BareLogApp()


async def _baseline_rep(path: Path, line_count: int) -> float:
    from textual.widgets import Log

    app = _bare_log_app(path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(Log)
        clock = FrameClock(app)
        shown = clock.expect(lambda: log.line_count == line_count)
        started = time.perf_counter()
        await pilot.press("ctrl+o")
        painted = await asyncio.wait_for(shown, 120)
        return painted - started


async def _load_the_output(app: Any, pilot: Any, text: str) -> str:
    """One real tool step in the app's agent: registry truncation, the file on disk, the events."""
    from app.kernel.messages import Message, ToolUseBlock

    from benchmarks.bench_ingest import _LogTool

    agent = app.session.agent
    agent.registry.register(_LogTool(text))
    use = ToolUseBlock(id="call_cat_app_log", name="cat_log", input={})
    agent.engine.append(Message.user("find errors in app.log"))
    agent.engine.append(Message(role="assistant", content=[use]))
    await agent._run_tools([use], offered=frozenset({use.name}))
    await pilot.pause()
    panel = app.tool_panel
    assert panel.selected_id == use.id, panel.selected_id
    info = panel.calls[use.id]
    assert info.truncated and info.full_output_path and Path(info.full_output_path).exists(), info
    return info.full_output_path


async def _subject_rep(tmp: Path, text: str, line_count: int, pages: list[float] | None,
                       first_moves: list[float]) -> float:
    app = build_app(tmp)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _load_the_output(app, pilot, text)
        panel = app.tool_panel
        viewer = panel.viewer
        clock = FrameClock(app)
        shown = clock.expect(lambda: panel.expanded and viewer.line_count == line_count)
        started = time.perf_counter()
        await pilot.press("ctrl+o")
        painted = await asyncio.wait_for(shown, 120)
        first_paint = painted - started
        if pages is not None:
            pages += await _page_downs(app, pilot, clock, viewer, first_moves)
        return first_paint


async def _page_downs(app: Any, pilot: Any, clock: FrameClock, viewer: Any,
                      first_moves: list[float]) -> list[float]:
    """Each page-down: key press -> the frame with the page where it stops (also recorded:
    the first frame that shows any movement, which differs when the scroll is animated)."""
    viewer.focus()
    await pilot.pause()
    times: list[float] = []
    for _ in range(PAGE_DOWNS):
        start_y = viewer.scroll_offset.y
        # Where one page down stops: the viewport height further (bounded by the end).
        target = min(start_y + viewer.scrollable_content_region.height, viewer.max_scroll_y)
        moved = clock.expect(lambda start_y=start_y: viewer.scroll_offset.y > start_y)
        arrived = clock.expect(lambda target=target: viewer.scroll_offset.y >= target)
        started = time.perf_counter()
        await pilot.press("pagedown")
        times.append(await asyncio.wait_for(arrived, 10) - started)
        first_moves.append(await asyncio.wait_for(moved, 10) - started)
    assert viewer.scroll_offset.y > 0
    return times


def run(quick: bool) -> list[Check]:
    require("app.surfaces.dashboard.app")
    require("widgets.tool_output_panel")
    lines = QUICK_LOG_LINES if quick else FULL_LOG_LINES
    reps = 3 if quick else 5
    text = app_log_text(lines)
    line_count = text.count("\n")
    pages: list[float] = []
    first_moves: list[float] = []

    async def measure() -> tuple[list[float], list[float]]:
        with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
            log_path = Path(tmp) / "app.log"
            log_path.write_text(text, encoding="utf-8")
            counter = iter(range(100))

            async def baseline() -> float:
                return await _baseline_rep(log_path, line_count)

            async def subject() -> float:
                n = next(counter)
                return await _subject_rep(Path(tmp) / f"s{n}", text, line_count, pages if n == 0 else None,
                                          first_moves)

            return await interleaved_async(baseline, subject, reps)

    base, subj = asyncio.run(measure())
    b, s = median(base), median(subj)
    size = f"{len(text) / 1e6:.0f} MB"
    worst = max(pages)
    return [
        Check(name=NAME_PAINT,
              figure=f"{seconds(s)} vs bare Log {seconds(b)} ({size}, {line_count:,} lines, median of {reps})",
              target=f"<= {MAX_PAINT_RATIO:g}× bare Log", value=s / b, limit=MAX_PAINT_RATIO, op="<=",
              extra={"subject_s": subj, "baseline_s": base}),
        Check(name=NAME_PAGE,
              figure=(f"page in place: slowest {seconds(worst)}, median {seconds(median(pages))} of {len(pages)}; "
                      f"first movement: median {seconds(median(first_moves))}"),
              target=f"each < {MAX_PAGE_S * 1e3:g} ms (absolute)", value=worst * 1e3,
              limit=MAX_PAGE_S * 1e3, op="<=", unit="ms",
              extra={"page_down_s": pages, "first_movement_s": first_moves}),
    ]

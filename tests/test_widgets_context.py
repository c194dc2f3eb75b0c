"""The context gauge, its history chart and breakdown, in a bare host app."""

from __future__ import annotations

import pytest
from textual.app import App

from app.surfaces.dashboard.app import CSS_FILE
from snapshot_apps.fake_agent import context
from widgets.context_breakdown import ContextBreakdown
from widgets.context_history import ContextHistory
from widgets.context_panel import ContextPanel
from app.kernel.describe import human_tokens
from widgets.gauge_bar import GaugeBar


class Host(App):
    CSS_PATH = str(CSS_FILE)

    def compose(self):
        yield ContextPanel(id="context-panel")


def bar_lines(gauge: GaugeBar) -> list[str]:
    return gauge.render().plain.split("\n")


async def test_markers_sit_where_the_thresholds_are_and_the_estimate_is_marked() -> None:
    app = Host()
    async with app.run_test(size=(204, 20)) as pilot:
        panel = app.query_one(ContextPanel)
        event = context(60_000, 20_000)  # 200K window: warn 130K, compact 150K, block 189K
        panel.update_context(event)
        await pilot.pause()
        gauge = app.query_one(GaugeBar)
        width = gauge.size.width
        figures, labels, bar = bar_lines(gauge)
        th = event.thresholds
        for line in (th.warning_line, th.auto_compact_line, th.blocking_line):
            column = round(line / th.window * width)
            assert bar[column] == "┃", (line, column, bar)
        exact_end = round(60_000 / th.window * width)
        projected_end = round(80_000 / th.window * width)
        assert set(bar[:exact_end]) == {"█"}
        assert bar[exact_end] == "~" and set(bar[exact_end + 1 : projected_end]) == {"▒"}
        assert set(bar[projected_end:round(th.warning_line / th.window * width)]) == {"─"}
        # one headline figure against the auto-compact line, the estimate said to be part of it
        assert figures.startswith("context 80.0K of 150.0K auto-compact")
        assert f"{80_000 / th.auto_compact_line:.0%}" in figures and "(incl. ~20.0K estimated)" in figures
        assert "70.0K left" in figures and "window 200.0K" in figures
        # the warning label ends at its marker, the others start at theirs
        warn_column = round(th.warning_line / th.window * width)
        assert labels.index("warn 130.0K▼") + len("warn 130.0K") == warn_column
        assert labels.index("▼compact 150.0K") == round(th.auto_compact_line / th.window * width)
        # the engine's block line (189K) is near the right edge: its label ends at its marker
        assert labels.index("block 189.0K▼") + len("block 189.0K") == round(th.blocking_line / th.window * width)


async def test_colour_classes_change_at_the_warning_and_auto_compact_lines() -> None:
    app = Host()
    async with app.run_test(size=(160, 20)) as pilot:
        panel = app.query_one(ContextPanel)
        gauge = app.query_one(GaugeBar)
        exact_colours = []
        for tokens, expected in ((100_000, None), (135_000, "-warning"), (155_000, "-compact"), (190_000, "-blocking")):
            panel.update_context(context(tokens, 0, turns=3))
            await pilot.pause()
            for cls in ("-warning", "-compact", "-blocking"):
                assert gauge.has_class(cls) == (cls == expected)
                assert panel.has_class(cls) == (cls == expected)
            exact_colours.append(gauge.get_component_rich_style("gauge--exact").color)
        assert len(set(exact_colours[:3])) == 3  # ok, warning and compact are drawn differently
        assert "auto-compact in ~3 model calls" in bar_lines(gauge)[0] or "at the auto-compact line" in bar_lines(gauge)[0]


async def test_a_context_event_at_the_same_level_does_not_restyle_the_panel() -> None:
    app = Host()
    async with app.run_test(size=(160, 20)) as pilot:
        panel = app.query_one(ContextPanel)
        panel.update_context(context(135_000, 0, turns=3))
        await pilot.pause()
        restyled: list[object] = []
        original = app.update_styles
        app.update_styles = lambda node=None, animate=True: (restyled.append(node), original(node, animate))  # type: ignore[method-assign,misc,assignment,func-returns-value]
        panel.update_context(context(136_000, 0, turns=3))  # still over the warning line
        await pilot.pause()
        assert panel not in restyled and panel.has_class("-warning")  # restyling recomputes its whole subtree
        panel.update_context(context(155_000, 0, turns=3))
        await pilot.pause()
        assert panel in restyled and panel.has_class("-compact") and not panel.has_class("-warning")


async def test_history_shows_one_column_per_call_and_the_compaction_drop() -> None:
    app = Host()
    async with app.run_test(size=(160, 24)) as pilot:
        panel = app.query_one(ContextPanel)
        panel.update_context(context(10_000))
        history = app.query_one(ContextHistory)
        for tokens in (10_000, 60_000, 110_000, 140_000):
            panel.add_point(tokens)
        panel.add_point(8_000, "compaction")
        panel.add_point(12_000)
        await pilot.pause()
        lines = history.render().plain.split("\n")[1:]
        gutter = 7
        width = 3  # few points: each is drawn 3 cells wide

        def height(point: int) -> int:
            column = gutter + point * width
            return sum(1 for line in lines if line[column] not in (" ", "╌"))

        heights = [height(i) for i in range(6)]
        assert heights[0] < heights[1] < heights[2] < heights[3]
        assert heights[4] < heights[3] // 3  # the drop is visible
        assert any("130.0K" in line and "╌" in line for line in lines)  # the warning line drawn across
        assert any("150.0K" in line and "╌" in line for line in lines)  # the compaction line


async def test_breakdown_lists_every_part_and_compaction_cost_apart() -> None:
    app = Host()
    async with app.run_test(size=(160, 24)) as pilot:
        panel = app.query_one(ContextPanel)
        panel.update_context(context(50_000, cost=0.25, compact_cost=0.05))
        panel.add_compaction_usage(40_000, 2_000)
        await pilot.pause()
        text = app.query_one(ContextBreakdown).render().plain
        for label in ("system prompt", "memory files", "tool schemas", "user", "assistant", "tool results"):
            assert label in text
        assert "$0.2500" in text and "compaction $0.0500" in text
        assert "compaction calls 1: in 40.0K · out 2.0K" in text


def labels_of(gauge: GaugeBar) -> str:
    return bar_lines(gauge)[1]


@pytest.mark.parametrize("columns", [44, 60, 80, 100, 160, 220])
async def test_the_compact_label_and_the_headline_stay_whole_at_every_width(columns) -> None:
    app = Host()  # one panel per width takes each window in turn: what it draws is the latest context's
    async with app.run_test(size=(columns, 12)) as pilot:
        panel = app.query_one(ContextPanel)
        for window, budget in ((64_000, 20_000), (200_000, 150_000), (48_000, 12_000)):
            case = f"window {window}, budget {budget}"
            event = context(budget // 2, budget // 10, window=window, budget=budget, turns=7)
            panel.update_context(event)
            await pilot.pause()
            gauge = app.query_one(GaugeBar)
            figures, labels, bar = bar_lines(gauge)
            compact = f"compact {human_tokens(event.thresholds.auto_compact_line)}"
            assert f"▼{compact}" in labels or f"{compact}▼" in labels, (case, labels)
            assert bar.count("┃") == 3, (case, bar)
            # the headline is never cut: pieces that do not fit are left out whole
            assert not figures.rstrip().endswith("…"), (case, figures)
            headline = (f"{human_tokens(event.projected_tokens)} of {human_tokens(event.thresholds.auto_compact_line)}"
                        " auto-compact")
            assert headline in figures or columns < 60, (case, figures)
            assert f"{event.projected_tokens / event.thresholds.auto_compact_line:.0%}" in figures, (case, figures)
            # the window, secondary, is always in the panel's title
            assert f"window {human_tokens(window)}" in str(panel.border_title), case


async def test_calls_until_auto_compact_is_the_engines_range_drawn_as_it_is() -> None:
    """The engine measures the range and restarts it at a compaction (tests/test_engine_plans.py);
    a second smoothing here kept readings from before a compaction ("next turn" at 13%). The unit
    is the one counted: model calls, not prompts."""
    app = Host()
    async with app.run_test(size=(160, 12)) as pilot:
        panel = app.query_one(ContextPanel)
        gauge = app.query_one(GaugeBar)
        for tokens, calls, words in ((40_000, (9, 14), "in 9–14 model calls"), (41_000, (1, 1), "within 1 model call"),
                                     (42_000, (6, 6), "in ~6 model calls")):
            panel.update_context(context(tokens, 0, turns=calls[0], calls=calls))
            await pilot.pause()
            figures = bar_lines(gauge)[0]
            assert f"auto-compact {words}" in figures, figures
            assert "turn" not in figures, figures
        panel.update_context(context(10_000, 0, turns=None))  # no pace known (right after a compaction)
        await pilot.pause()
        assert "call" not in bar_lines(gauge)[0]


async def test_history_title_says_1_point_and_2_points() -> None:
    app = Host()
    async with app.run_test(size=(160, 24)) as pilot:
        panel = app.query_one(ContextPanel)
        panel.update_context(context(10_000))
        history = app.query_one(ContextHistory)
        panel.add_point(10_000)
        await pilot.pause()
        assert "(1 point)" in history.render().plain.split("\n")[0]
        panel.add_point(12_000)
        await pilot.pause()
        assert "(2 points)" in history.render().plain.split("\n")[0]

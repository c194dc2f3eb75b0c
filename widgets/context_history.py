"""History of the context size: one column per model call, threshold lines across, drops visible."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from app.kernel.describe import human_tokens, plural
from widgets._runs import styled_runs

PointKind = Literal["call", "compaction", "prune", "reset", "memory", "server", "rewind"]
EIGHTHS = " ▁▂▃▄▅▆▇█"
GUTTER = 7  # y-axis labels


@dataclass(frozen=True)
class HistoryPoint:
    tokens: int
    kind: PointKind = "call"


class ContextHistory(Widget):
    """A block-character column chart drawn by hand (no plotting library)."""

    # Compactions from the session memory (no model call) and by the provider's server are
    # marked apart from ours (the app's stylesheet may override these defaults).
    DEFAULT_CSS = """
    ContextHistory > .history--memory { color: mediumseagreen; }
    ContextHistory > .history--server { color: darkcyan; }
    ContextHistory > .history--whatif { color: magenta; text-style: bold; }
    """

    COMPONENT_CLASSES = {
        "history--bar",
        "history--bar-warning",
        "history--bar-compact",
        "history--compaction",
        "history--prune",
        "history--memory",
        "history--server",
        "history--warning-line",
        "history--compact-line",
        "history--axis",
        "history--title",
        "history--whatif",
    }

    MAX_POINTS = 2_000  # older points are never drawn at any sane width

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.points: list[HistoryPoint] = []
        self.warning_line = 0
        self.compact_line = 0
        self.blocking_line = 0
        self.max_points = self.MAX_POINTS
        # A what-if curve drawn over the bars: the context after each model call under another
        # policy (the session replayed it), the n-th value over the n-th call's column.
        self.overlay: list[int] = []
        self.overlay_label = ""

    def add_point(self, tokens: int, kind: PointKind = "call") -> None:
        self.points.append(HistoryPoint(max(0, tokens), kind))
        if len(self.points) > self.max_points:
            del self.points[: len(self.points) - self.max_points]
        self.refresh()

    def add_points(self, points: list[HistoryPoint]) -> None:
        """Many points in one go (a replayed session's): one refresh, not one per point."""
        if not points:
            return
        self.points.extend(HistoryPoint(max(0, point.tokens), point.kind) for point in points[-self.max_points:])
        if len(self.points) > self.max_points:
            del self.points[: len(self.points) - self.max_points]
        self.refresh()

    def clear(self) -> None:
        self.points.clear()
        self.refresh()

    def set_overlay(self, points: list[int], label: str) -> None:
        """Draw ``points`` (one per model call, oldest first) over the bars; [] takes it away."""
        self.overlay = [max(0, p) for p in points[-self.max_points:]]
        self.overlay_label = label
        self.refresh()

    def _overlay_by_point(self) -> list[int | None]:
        """The what-if value over each point's column: the call's of the same number, none for a drop."""
        if not self.overlay:
            return [None] * len(self.points)
        calls = sum(1 for p in self.points if p.kind == "call")
        # the chart keeps the newest points: its first call is the (calls - kept)th of the session
        first = max(0, len(self.overlay) - calls) if calls <= len(self.overlay) else 0
        out: list[int | None] = []
        n = first
        for point in self.points:
            if point.kind == "call":
                out.append(self.overlay[n] if n < len(self.overlay) else None)
                n += 1
            else:
                out.append(None)
        return out

    def set_lines(self, warning: int, compact: int, blocking: int) -> None:
        if (warning, compact, blocking) != (self.warning_line, self.compact_line, self.blocking_line):
            self.warning_line, self.compact_line, self.blocking_line = warning, compact, blocking
            self.refresh()

    def render(self) -> Text:
        style = self.get_component_rich_style
        width, height = self.size.width, self.size.height
        rows = max(1, height - 1)
        plot_width = max(1, width - GUTTER)
        shown = self.points[-plot_width:]
        # few points: widen each column so the shape reads (up to 3 cells per call)
        column_width = max(1, min(3, plot_width // max(1, len(shown))))
        title = Text(no_wrap=True, overflow="ellipsis", end="")
        title.append(f"context per model call ({plural(len(self.points), 'point')}) ", style("history--title"))
        if self.overlay:  # first: the legend's end is cut when the panel is narrow
            title.append("•", style("history--whatif"))
            title.append(f" {self.overlay_label} ", style("history--axis"))
        title.append("█", style("history--bar"))
        title.append(" call ", style("history--axis"))
        title.append("█", style("history--compaction"))
        title.append(" compaction ", style("history--axis"))
        title.append("█", style("history--prune"))
        title.append(" pruning ", style("history--axis"))
        # the rarer drops get a legend entry once the chart has one
        for kind, label in (("memory", " memory "), ("server", " server ")):
            if any(p.kind == kind for p in self.points):
                title.append("█", style(f"history--{kind}"))
                title.append(label, style("history--axis"))
        title.append("╌", style("history--warning-line"))
        title.append(" warn ", style("history--axis"))
        title.append("╌", style("history--compact-line"))
        title.append(" compact", style("history--axis"))
        if not shown and not self.compact_line:
            return Text("\n", end="").join([title, Text("no model calls yet", style=style("history--axis"))])

        overlay = self._overlay_by_point()[-len(shown):] if shown else []
        # Scale to what matters: the compaction line with some headroom, or the peak.
        top = max([self.compact_line, *(p.tokens for p in shown), *(v for v in overlay if v is not None)]) or 1
        top = int(top * 1.15)
        eighths_total = rows * 8

        def level(tokens: int) -> int:
            return round(tokens / top * eighths_total)

        warn_row = min(rows - 1, level(self.warning_line) // 8) if self.warning_line else -1
        compact_row = min(rows - 1, level(self.compact_line) // 8) if self.compact_line else -1

        bar_styles = {
            "call": style("history--bar"),
            "compaction": style("history--compaction"),
            "prune": style("history--prune"),
            "reset": style("history--prune"),  # a reset is a drop like pruning's, drawn alike
            "rewind": style("history--prune"),
            "memory": style("history--memory"),
            "server": style("history--server"),
        }
        warn_bar, compact_bar = style("history--bar-warning"), style("history--bar-compact")
        warn_line, compact_line_style = style("history--warning-line"), style("history--compact-line")
        axis = style("history--axis")

        columns: list[tuple[int, Style]] = []
        marks: list[int | None] = []  # the what-if's row in each column
        for value in overlay:  # the row the value's bar would top out in
            marks.extend([min(rows - 1, max(0, (level(value) - 1) // 8)) if value is not None else None] * column_width)
        whatif = style("history--whatif")
        for point in shown:
            bar_style = bar_styles[point.kind]
            if point.kind == "call":
                if self.compact_line and point.tokens >= self.compact_line:
                    bar_style = compact_bar
                elif self.warning_line and point.tokens >= self.warning_line:
                    bar_style = warn_bar
            columns.extend([(level(point.tokens), bar_style)] * column_width)

        lines: list[Text] = [title]
        for row in range(rows - 1, -1, -1):
            line = Text(no_wrap=True, end="")
            if row == compact_row:
                label = human_tokens(self.compact_line)
                line_style = compact_line_style
            elif row == warn_row:
                label = human_tokens(self.warning_line)
                line_style = warn_line
            elif row == rows - 1:
                label, line_style = human_tokens(top), None
            elif row == 0:
                label, line_style = "0", None
            else:
                label, line_style = "", None
            line.append(f"{label:>{GUTTER - 2}} ┤"[:GUTTER], line_style or axis)
            cells: list[tuple[str, Style | None]] = []
            for index, (filled, bar_style) in enumerate(columns):
                cell = filled - row * 8
                if index < len(marks) and marks[index] == row:
                    cells.append(("•", whatif))
                elif cell >= 8:
                    cells.append(("█", bar_style))
                elif cell > 0:
                    cells.append((EIGHTHS[cell], bar_style))
                elif line_style is not None:
                    cells.append(("╌", line_style))
                else:
                    cells.append((" ", None))
            styled_runs(cells, line)
            if line_style is not None and len(columns) < plot_width:
                line.append("╌" * (plot_width - len(columns)), line_style)
            lines.append(line)
        return Text("\n", no_wrap=True, end="").join(lines)

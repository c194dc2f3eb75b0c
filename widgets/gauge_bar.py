"""The context gauge: a bar over the window with the exact and estimated parts and the lines.

The thresholds come from the engine's ContextEvent, computed by the same
function that triggers warnings, compaction and blocking, so the markers sit
exactly where things happen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive, var
from textual.widget import Widget

if TYPE_CHECKING:  # app.events (pydantic models) is not needed to draw the first frame
    from app.events import ContextEvent


LEVEL_CLASSES = ("-warning", "-compact", "-blocking")


def human_tokens(count: int | float) -> str:
    count = int(count)
    if abs(count) >= 1_000_000:
        return f"{count / 1_000_000:.2f}M"
    if abs(count) >= 1_000:
        return f"{count / 1_000:.1f}K"
    return str(count)


class GaugeBar(Widget):
    """Figures line, marker labels, and the bar itself (3 lines)."""

    COMPONENT_CLASSES = {
        "gauge--exact",
        "gauge--estimated",
        "gauge--empty",
        "gauge--warning-line",
        "gauge--compact-line",
        "gauge--blocking-line",
        "gauge--figure",
        "gauge--dim",
    }

    # Like ProgressBar's rounded values: an event that draws the same gauge causes no repaint
    # (ContextEvent is a pydantic model: equal figures compare equal).
    context: reactive[ContextEvent | None] = reactive(None)
    level = var("ok")

    def watch_context(self, event: ContextEvent | None) -> None:
        if event is not None:
            self.level = event.level

    def watch_level(self, level: str) -> None:
        self.remove_class(*LEVEL_CLASSES)
        if level != "ok":
            self.add_class(f"-{level}")

    def render(self) -> Text:
        event = self.context
        width = max(10, self.size.width)
        if event is None:
            return Text("context: waiting for the first figures…", style=self.get_component_rich_style("gauge--dim"))
        style = self.get_component_rich_style
        exact_style, est_style, empty_style = style("gauge--exact"), style("gauge--estimated"), style("gauge--empty")
        marker_styles = {
            "warning": style("gauge--warning-line"),
            "compact": style("gauge--compact-line"),
            "blocking": style("gauge--blocking-line"),
        }
        figure, dim = style("gauge--figure"), style("gauge--dim")
        th = event.thresholds
        window = max(1, th.window)
        exact = event.exact_tokens or 0
        projected = max(event.projected_tokens, exact)

        # line 1: the figures
        figures = Text(no_wrap=True, overflow="ellipsis", end="")
        figures.append("context ", dim)
        figures.append(human_tokens(projected), figure)
        if event.estimated_tokens:
            figures.append(f" (~{human_tokens(event.estimated_tokens)} estimated)", dim)
        figures.append(" / ", dim)
        figures.append(f"{human_tokens(th.auto_compact_line)} auto-compact", marker_styles["compact"])
        figures.append(" / ", dim)
        figures.append(f"{human_tokens(window)} window", dim)
        figures.append(f"  {projected / window:.0%}", figure)
        left = th.auto_compact_line - projected
        if left > 0:
            figures.append(f"  {human_tokens(left)} left until auto-compact", dim)
        else:
            figures.append("  at the auto-compact line", marker_styles["compact"])
        if event.turns_to_compact is not None and left > 0:
            turns = event.turns_to_compact
            when = "next turn" if turns <= 1 else f"in ~{turns} turns"
            figures.append(f"  · auto-compact {when}", dim)

        def column(tokens: int) -> int:
            return min(width - 1, max(0, round(tokens / window * width)))

        markers = {
            column(th.warning_line): "warning",
            column(th.auto_compact_line): "compact",
            column(th.blocking_line): "blocking",
        }

        # line 2: marker labels, placed at their columns when there is room
        labels = [" "] * width
        label_styles: list[Style | None] = [None] * width
        names = {"warning": "warn", "compact": "compact", "blocking": "block"}
        values = {"warning": th.warning_line, "compact": th.auto_compact_line, "blocking": th.blocking_line}
        next_free = 0
        for col in sorted(markers):
            kind = markers[col]
            label = f"▼{names[kind]} {human_tokens(values[kind])}"
            start = col
            if start + len(label) > width:
                start = max(next_free, width - len(label))
            if start < next_free:
                label = "▼"
                start = col if col >= next_free else -1
            if start < 0:
                continue
            for i, ch in enumerate(label[: width - start]):
                labels[start + i] = ch
                label_styles[start + i] = marker_styles[kind]
            next_free = start + len(label) + 1
        label_line = Text(no_wrap=True, end="")
        for ch, st in zip(labels, label_styles):
            label_line.append(ch, st or dim)

        # line 3: the bar; exact part solid, estimated part shaded (and marked ~)
        exact_cells = column(exact) if exact else 0
        projected_cells = column(projected)
        bar = Text(no_wrap=True, end="")
        for col in range(width):
            if col in markers:
                kind = markers[col]
                fill = exact_style if col < exact_cells else est_style if col < projected_cells else None
                marker_style = marker_styles[kind]
                if fill is not None and fill.color is not None:
                    marker_style = marker_style + Style(bgcolor=fill.color)
                bar.append("┃", marker_style)
            elif col < exact_cells:
                bar.append("█", exact_style)
            elif col < projected_cells:
                bar.append("~" if col == exact_cells else "▒", est_style)
            else:
                bar.append("─", empty_style)
        figures.truncate(width, overflow="ellipsis")
        return Text("\n", no_wrap=True, end="").join([figures, label_line, bar])

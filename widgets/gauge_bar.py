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

from app.kernel.describe import human_tokens
from widgets._runs import styled_runs

if TYPE_CHECKING:  # app.kernel.events (pydantic models) is not needed to draw the first frame
    from app.kernel.events import ContextEvent


LEVEL_CLASSES = ("-warning", "-compact", "-blocking")


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

    @property
    def calls_to_compact(self) -> tuple[int, int] | None:
        """The engine's range of model calls until auto-compact (fewest, most), drawn as it is: the
        engine measures it and restarts it at every compaction (a second figure here would disagree)."""
        event = self.context
        if event is None or event.calls_to_compact_fewest is None or event.calls_to_compact_most is None:
            return None
        return event.calls_to_compact_fewest, event.calls_to_compact_most

    def watch_level(self, level: str) -> None:
        self.remove_class(*LEVEL_CLASSES)
        if level != "ok":
            self.add_class(f"-{level}")

    def headline(self, width: int) -> Text:
        """Line 1: one figure against the auto-compact line, then what fits of the rest.

        The pieces are in order of importance; when the line is too narrow the least
        important ones are shortened first, then dropped, so what stays is never cut.
        """
        event = self.context
        assert event is not None
        style = self.get_component_rich_style
        figure, dim, compact = style("gauge--figure"), style("gauge--dim"), style("gauge--compact-line")
        th = event.thresholds
        exact = event.exact_tokens or 0
        projected = max(event.projected_tokens, exact)
        line = max(1, th.auto_compact_line)
        left = th.auto_compact_line - projected

        def headline_form(prefix: str, of: str, name: str) -> Text:
            text = Text(no_wrap=True, end="")
            text.append(prefix, dim)
            text.append(human_tokens(projected), figure)
            text.append(of, dim)
            text.append(f"{human_tokens(th.auto_compact_line)}{name}", compact)
            text.append(f" {projected / line:.0%}", figure)
            return text

        # the headline itself shortens on a very narrow gauge, its figures never
        forms = [headline_form("context ", " of ", " auto-compact"), headline_form("", " of ", " auto-compact"),
                 headline_form("", "/", " compact")]
        head = next((form for form in forms if form.cell_len <= width), forms[-1])
        # each optional piece: its forms, longest first
        pieces: list[list[Text]] = []
        if event.estimated_tokens:
            estimate = human_tokens(event.estimated_tokens)
            pieces.append([Text(f" (incl. ~{estimate} estimated)", dim, end=""),
                           Text(f" (incl. ~{estimate} est.)", dim, end="")])
        calls = self.calls_to_compact
        if left <= 0:
            pieces.append([Text(" · at the auto-compact line", compact, end="")])
        elif calls is not None:
            fewest, most = calls
            if most == 0:
                when, short = "before the next model call", "compacts before the next call"
            elif most == 1:
                when, short = "within 1 model call", "compacts within 1 call"
            else:
                span = f"~{most}" if fewest == most else f"{fewest}–{most}"
                when, short = f"in {span} model calls", f"{span} calls to compact"
            pieces.append([Text(f" · auto-compact {when}", dim, end=""), Text(f" · {short}", dim, end="")])
        if left > 0:
            pieces.append([Text(f" · {human_tokens(left)} left", dim, end="")])
        pieces.append([Text(f" · window {human_tokens(th.window)}", dim, end="")])

        chosen = [0] * len(pieces)
        kept = len(pieces)

        def total() -> int:
            return head.cell_len + sum(pieces[i][chosen[i]].cell_len for i in range(kept))

        while kept and total() > width:
            shorter = next((i for i in range(kept - 1, -1, -1) if chosen[i] + 1 < len(pieces[i])), None)
            if shorter is not None:
                chosen[shorter] += 1
            else:
                kept -= 1
        for i in range(kept):
            head.append_text(pieces[i][chosen[i]])
        head.truncate(width, overflow="ellipsis")
        return head

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
        dim = style("gauge--dim")
        th = event.thresholds
        window = max(1, th.window)
        exact = event.exact_tokens or 0
        projected = max(event.projected_tokens, exact)
        figures = self.headline(width)

        def column(tokens: int) -> int:
            return min(width - 1, max(0, round(tokens / window * width)))

        markers = {  # the compact line last: where two lines share a column, it is the one drawn
            column(th.warning_line): "warning",
            column(th.blocking_line): "blocking",
        }
        markers[column(th.auto_compact_line)] = "compact"

        # line 2: marker labels. The compact line's label is placed first and always
        # (after its marker, or before it near the right edge); the others take what room is left,
        # down to a bare ▼.
        labels = [" "] * width
        label_styles: list[Style | None] = [None] * width
        taken = [False] * width
        names = {"warning": "warn", "compact": "compact", "blocking": "block"}
        values = {"warning": th.warning_line, "compact": th.auto_compact_line, "blocking": th.blocking_line}
        columns = {kind: col for col, kind in markers.items()}

        def free(start: int, length: int) -> bool:
            # one blank cell either side keeps two labels apart
            if start < 0 or start + length > width:
                return False
            return not any(taken[max(0, start - 1): min(width, start + length + 1)])

        def put(start: int, label: str, kind: str) -> None:
            for i, ch in enumerate(label):
                labels[start + i] = ch
                label_styles[start + i] = marker_styles[kind]
                taken[start + i] = True

        for kind in ("compact", "warning", "blocking"):
            col = columns.get(kind)
            if col is None:
                continue
            name, value = names[kind], human_tokens(values[kind])
            after, before = f"▼{name} {value}", f"{name} {value}▼"
            options = [(col, after), (col - len(before) + 1, before), (col, f"▼{name}"),
                       (col - len(name), f"{name}▼"), (col, "▼")]
            if kind == "warning":  # left of the compact line: its label reads best before its marker
                options[0], options[1] = options[1], options[0]
            for start, label in options:
                if free(start, len(label)) or (kind == "compact" and 0 <= start <= width - len(label)):
                    put(start, label, kind)
                    break
        label_line = styled_runs(zip(labels, (st or dim for st in label_styles)))

        # line 3: the bar; exact part solid, estimated part shaded (and marked ~)
        exact_cells = column(exact) if exact else 0
        projected_cells = column(projected)
        cells: list[tuple[str, Style]] = []
        for col in range(width):
            if col in markers:
                kind = markers[col]
                fill = exact_style if col < exact_cells else est_style if col < projected_cells else None
                marker_style = marker_styles[kind]
                if fill is not None and fill.color is not None:
                    marker_style = marker_style + Style(bgcolor=fill.color)
                cells.append(("┃", marker_style))
            elif col < exact_cells:
                cells.append(("█", exact_style))
            elif col < projected_cells:
                cells.append(("~" if col == exact_cells else "▒", est_style))
            else:
                cells.append(("─", empty_style))
        bar = styled_runs(cells)
        return Text("\n", no_wrap=True, end="").join([figures, label_line, bar])


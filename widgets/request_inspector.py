"""The request inspector: the last request as sent, part by part, and its diff against the one before.

A modal screen over the dashboard. Its table is drawn with the line API (only the rows in
view are ever made), so a request of a million tokens and thousands of parts opens as fast as
a small one; the selected part's text (its head and tail) shows under the table. ``d`` switches
between the request and the diff; left and right step to the request before or after it (the
one a compaction made, to see what it removed and what replaced it). Every text is drawn inert (``_literal.sanitize``): a part
holds what models and tools wrote.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.screen import ModalScreen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Static

from app.surfaces.view_model import InspectorPage, PartView, head_and_tail
from widgets._literal import literal, sanitize

KIND_WORDS = {"system": "system prompt", "memory": "memory files", "tool": "tool schema", "text": "text",
              "thinking": "thinking", "tool_use": "tool call", "tool_result": "tool result",
              "opaque": "provider item"}
CHANGE_MARKS = {"added": "+", "removed": "-", "changed": "~", "": " "}
TOKENS_WIDTH = 16  # "12,345 → 1,234" fits
CACHED_WIDTH = 6


def _fit(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` cells with an ellipsis (only its start is looked at:
    a part may hold a megabyte)."""
    flat = " ".join(sanitize(text[: width * 4 + 16]).split())
    if cell_len(flat) <= width:
        return flat + " " * (width - cell_len(flat))
    out = flat[: max(0, width - 1)]
    while cell_len(out) > width - 1:
        out = out[:-1]
    return out + "…" + " " * (width - 1 - cell_len(out))


def _row(number: str, mark: str, label: str, origin: str, tokens: str, cached: str, width: int) -> str:
    head = f"{number:>5} {mark} "
    rest = max(10, width - len(head) - TOKENS_WIDTH - CACHED_WIDTH - 2)
    origin_width = min(30, max(8, rest // 3))
    label_width = rest - origin_width - 1
    return (f"{head}{_fit(label, label_width)} {_fit(origin, origin_width)} "
            f"{tokens:>{TOKENS_WIDTH}} {cached:<{CACHED_WIDTH}}")[:width]


def header_row(width: int) -> str:
    return _row("#", " ", "part", "origin", "tokens", "cached", width)


def part_row(view: PartView, number: int, width: int) -> str:
    """One row of the table at ``width`` cells: number, change, what the part is, origin, tokens, cached."""
    tokens = f"{view.tokens:,}" if view.tokens_before is None else f"{view.tokens_before:,} → {view.tokens:,}"
    cached = ("yes" if view.cached else "") + (" ▸" if view.breakpoint else "")
    role = "" if view.role in ("system", "tools") else f"{view.role} "
    label = f"{role}{KIND_WORDS.get(view.kind, view.kind)}: {view.text}"
    return _row(str(number), CHANGE_MARKS.get(view.change, " "), label, view.origin, tokens, cached, width)


class PartTable(ScrollView, can_focus=True):
    """The parts, one row each; only the rows in view are drawn."""

    BINDINGS = [
        # the screen's: a ScrollView scrolls sideways on left/right, which this table never needs
        Binding("left", "screen.other_request(-1)", "Earlier"),
        Binding("right", "screen.other_request(1)", "Later"),
        Binding("up", "move(-1)", "Part", show=False),
        Binding("down", "move(1)", "Part", show=False),
        Binding("pageup", "move(-10)", "Page", show=False),
        Binding("pagedown", "move(10)", "Page", show=False),
        Binding("home", "move(-1000000000)", "Top", show=False),
        Binding("end", "move(1000000000)", "End", show=False),
    ]

    class Highlighted(Message):
        def __init__(self, view: PartView | None) -> None:
            super().__init__()
            self.view = view

    def __init__(self, rows: tuple[PartView, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows = rows  # drawn by the first frame: nothing to lay out again after mounting
        self.cursor = 0

    def show(self, rows: tuple[PartView, ...]) -> None:
        self.rows = rows
        self.cursor = 0
        self.virtual_size = Size(self.size.width, len(rows) + 1)
        self.scroll_to(0, 0, animate=False)
        self.refresh()
        self.post_message(self.Highlighted(rows[0] if rows else None))

    def on_mount(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)

    def action_move(self, step: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(len(self.rows) - 1, self.cursor + step))
        top = self.scroll_offset.y
        height = max(1, self.size.height - 1)  # the header row stays
        if self.cursor < top:
            self.scroll_to(0, self.cursor, animate=False)
        elif self.cursor >= top + height:
            self.scroll_to(0, self.cursor - height + 1, animate=False)
        self.refresh()
        self.post_message(self.Highlighted(self.rows[self.cursor]))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        columns = self.scrollable_content_region.width  # the scrollbar keeps its own
        style = self.rich_style
        if y == 0:  # the column names, whatever the scroll
            line = header_row(columns)
            bold = style + Style(bold=True)
            return Strip([Segment(line, bold)], cell_len(line)).extend_cell_length(width, bold)
        index = self.scroll_offset.y + y - 1
        if index >= len(self.rows):
            return Strip.blank(width, style)
        line = part_row(self.rows[index], index + 1, columns)
        if index == self.cursor:
            style = style + Style(reverse=True)
        return Strip([Segment(line, style)], cell_len(line)).extend_cell_length(width, style)


class RequestInspectorScreen(ModalScreen[None]):
    """The last request, or its diff against the one before (``d``); escape closes it."""

    DEFAULT_CSS = """
    RequestInspectorScreen { align: center middle; }
    #inspector { width: 100%; height: 100%; border: round $accent; background: $surface; padding: 0 1; }
    #inspector-title { height: auto; max-height: 3; color: $text; text-style: bold; }
    #inspector-subtitle { height: 1; color: $text-muted; }
    #inspector-table { height: 1fr; min-height: 3; }
    #inspector-detail { height: 30%; min-height: 3; border-top: solid $accent; color: $text-muted;
                        overflow-y: auto; }
    """

    BINDINGS = [
        Binding("d", "toggle_diff", "Diff"),
        Binding("escape,q", "close", "Close"),
    ]

    def __init__(self, page: InspectorPage, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.page = page
        self.showing_diff = False
        self._diff: tuple[str, tuple[PartView, ...]] | None = None

    def compose(self) -> ComposeResult:
        # The first frame draws everything: the rows and the first part's text are given here,
        # not set after mounting (each update after it was one more layout and frame).
        subtitle, rows = self._rows()
        with Vertical(id="inspector"):
            yield Static(literal(self.page.title), id="inspector-title")
            yield Static(literal(subtitle), id="inspector-subtitle")
            yield PartTable(rows, id="inspector-table")
            yield Static(literal(self._detail(rows[0] if rows else None)), id="inspector-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(PartTable).focus()

    def _rows(self) -> tuple[str, tuple[PartView, ...]]:
        page = self.page
        if self.showing_diff:
            if self._diff is None:
                self._diff = page.diff_of()
            return f"diff · {self._diff[0]}", self._diff[1]
        read = sum(v.tokens for v in page.parts if v.cached)
        marks = sum(1 for v in page.parts if v.breakpoint)
        return (f"{len(page.parts):,} parts · {read:,} tokens in the parts the cache served"
                + (f" · {marks} cache breakpoints (▸)" if marks else "") + " · d: the diff"), page.parts

    def _show(self) -> None:
        subtitle, rows = self._rows()
        self.query_one("#inspector-subtitle", Static).update(literal(subtitle))
        self.query_one(PartTable).show(rows)

    def _detail(self, view: PartView | None) -> str:
        if view is None:
            return "nothing changed" if self.showing_diff else "no parts"
        return f"{view.origin} · {view.tokens:,} tokens · {view.chars:,} characters\n{head_and_tail(view.text)}"

    @on(PartTable.Highlighted)
    def _on_highlighted(self, message: PartTable.Highlighted) -> None:
        self.query_one("#inspector-detail", Static).update(literal(self._detail(message.view)))

    def action_toggle_diff(self) -> None:
        self.showing_diff = not self.showing_diff
        self._show()

    def action_other_request(self, step: int) -> None:
        """The request before or after this one (the diff stays on if it was)."""
        page = self.page
        number = page.number + step
        if page.page_for is None or not 1 <= number <= page.count:
            self.notify(f"request {page.number} is the {'first' if step < 0 else 'last'} one kept",
                        severity="information")
            return
        self.page = page.page_for(number)
        self._diff = None
        self.query_one("#inspector-title", Static).update(literal(self.page.title))
        self._show()

    def action_close(self) -> None:
        self.dismiss(None)

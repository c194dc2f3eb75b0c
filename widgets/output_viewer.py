"""A line-virtualized text viewer for tool output (up to hundreds of thousands of lines).

Like Textual's ``Log`` it renders only the visible lines and keeps recent
strips in an LRU cache, but it is built for one-shot loads of untrusted text:
lines are prepared off the event loop (``prepare_lines``), very long lines are
hard-wrapped so one 10 MB line cannot stall a frame, and every line is made
inert (escape sequences shown, never executed) when it is first drawn.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len, chop_cells
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from widgets._literal import sanitize

WRAP_AT = 1_000  # characters per display line; longer lines continue on the next one
# Wrapping at the viewer's width runs on the UI loop at every width change (~4 ms per 100K
# characters): a longer text scrolls sideways instead (a model's view is 40K by default).
WRAP_MAX_CHARS = 200_000


def prepare_lines(text: str, wrap_at: int = WRAP_AT) -> tuple[list[str], int]:
    """Split ``text`` into display lines and measure the widest (safe to run in a thread).

    Every pass over the lines runs in C (``split``, ``max(map(len, ...))``): a
    300,000-line output is ready in a few milliseconds, and the lines are made
    inert only when drawn.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    longest = max(map(len, lines), default=0)
    if longest > wrap_at:
        wrapped: list[str] = []
        for line in lines:
            if len(line) <= wrap_at:
                wrapped.append(line)
            else:
                wrapped.extend(line[i : i + wrap_at] for i in range(0, len(line), wrap_at))
        lines = wrapped
        longest = wrap_at
    if text.isascii():
        width = longest
    else:  # wide characters take two cells: measure the lines that have any
        width = max((len(line) if line.isascii() else cell_len(line) for line in lines), default=0)
    # tabs expand when drawn; leave room for a few
    return lines, min(width + 8, wrap_at * 2 + 8)


class OutputViewer(ScrollView, can_focus=True):
    """Shows lines of text; only the visible ones are ever rendered."""

    # Listed in the footer while the viewer has focus (the full output takes it when opened).
    BINDINGS = [
        # their own action names: the footer ranks the output's keys above the conversation's
        Binding("pageup", "page_output(-1)", "Page", group=Binding.Group("Page")),
        Binding("pagedown", "page_output(1)", "Page", group=Binding.Group("Page")),
        Binding("home", "output_edge(0)", "Top/end", group=Binding.Group("Top/end")),
        Binding("end", "output_edge(1)", "Top/end", group=Binding.Group("Top/end")),
        # as in less: / searches, n and N go to the next and previous match
        Binding("slash", "search_start", "Search"),
        Binding("n", "search_next(1)", "Next match", show=False),
        Binding("N", "search_next(-1)", "Previous match", show=False),
    ]

    # The printable keys this region takes while it has the focus (the App sends the others to
    # the prompt); while a search is typed, every printable key is the search's.
    SEARCH_KEYS = frozenset("/nN")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: list[str] = []
        self._width = 0  # of the widest line, as prepared
        self._cache: LRUCache[int, Strip] = LRUCache(1024)
        # Wrapped at the viewer's width (a short text in a narrow panel): every character is
        # on screen without scrolling sideways. The rows are the lines as drawn, cut to fit.
        self._wrap = False
        self._rows: list[str] = []
        self._rows_width = 0
        # Search, as in less: the text being typed after "/" (None: not typing), the last search,
        # the rows that hold it (ascending) and the one shown.
        self._reading = False  # a full output is open: the position row and the search
        self.search_typed: str | None = None
        self.search_query = ""
        self.matches: list[int] = []
        self.match_index: int | None = None

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def lines(self) -> list[str]:
        return self._lines

    @property
    def wraps(self) -> bool:
        return self._wrap

    @property
    def row_count(self) -> int:
        """Rows drawn: the lines, or in wrap mode the rows they were wrapped into."""
        return len(self._rows) if self._wrap else len(self._lines)

    def set_text(self, text: str, *, wrap: bool = False) -> None:
        """Show a (small) text; large texts should go through ``prepare_lines`` in a thread.
        ``wrap``: long lines continue on the next row instead of scrolling sideways."""
        lines, width = prepare_lines(text)
        self.set_lines(lines, width, wrap=wrap and len(text) <= WRAP_MAX_CHARS)

    def set_lines(self, lines: list[str], width: int, *, wrap: bool = False) -> None:
        self._lines = lines
        self._width = width
        self._wrap = wrap
        self._rows_width = 0
        self.search_typed = None
        self.matches, self.match_index = [], None
        self._lay_out()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    def _lay_out(self) -> None:
        """The virtual size for the lines (wrapped at the current width in wrap mode)."""
        self._cache.clear()
        if not self._wrap:
            self._rows = []
            self.virtual_size = Size(self._width, len(self._lines) + self._status_rows)
            return
        # a column kept for the vertical scrollbar: whether it shows depends on the rows made here
        width = max(1, self.size.width - self.styles.scrollbar_size_vertical)
        rows: list[str] = []
        for index in range(len(self._lines)):
            line = self.display_line(index)
            if len(line) <= width and (line.isascii() or cell_len(line) <= width):
                rows.append(line)
            elif line.isascii():
                rows.extend(line[i : i + width] for i in range(0, len(line), width))
            else:
                rows.extend(chop_cells(line, width))
        self._rows = rows
        self._rows_width = width
        self.virtual_size = Size(width, len(rows) + self._status_rows)

    def on_resize(self) -> None:
        if self._wrap and self.size.width != self._rows_width:
            self._lay_out()
            self.refresh()

    # A log is read by jumping: page and end keys move at once, without animation.
    def action_page_output(self, direction: int) -> None:
        if direction < 0:
            self.action_page_up()
        else:
            self.action_page_down()

    def action_output_edge(self, end: int) -> None:
        if end:
            self.action_scroll_end()
        else:
            self.action_scroll_home()

    def action_page_down(self) -> None:
        self.scroll_page_down(animate=False)

    def action_page_up(self) -> None:
        self.scroll_page_up(animate=False)

    def action_scroll_home(self) -> None:
        self.scroll_home(animate=False)

    def action_scroll_end(self) -> None:
        self.scroll_end(animate=False)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def display_line(self, index: int) -> str:
        """Line ``index`` exactly as drawn: inert, tabs expanded."""
        return sanitize(self._lines[index].replace("\r", "")).expandtabs(4)

    # ---------------------------------------------------------------- position and search

    @property
    def reading(self) -> bool:
        """A full output is open (the panel says so): the bottom row says where the view is and
        the search works. The model's view under the tool list is short and keeps every row."""
        return self._reading

    @reading.setter
    def reading(self, reading: bool) -> None:
        if reading != self._reading:
            self._reading = reading
            self.search_typed = None
            self.search_query, self.matches, self.match_index = "", [], None
            self._lay_out()
            self.refresh()

    @property
    def _status_rows(self) -> int:
        """The row kept at the bottom for the position and the search."""
        return 1 if self._reading and self._lines else 0

    @property
    def _view_rows(self) -> int:
        """Rows of text on screen (a horizontal scrollbar takes the widget's last row)."""
        return self.scrollable_content_region.height or self.size.height

    def position_text(self) -> str:
        """"line 1,201–1,220 of 300,001 (0%)", with the search's match when there is one."""
        total = self.row_count
        if self.search_typed is not None:
            return f"/{self.search_typed}▏ enter finds · escape cancels"
        if not total:
            return ""
        seen = max(1, self._view_rows - self._status_rows)
        top = min(int(self.scroll_offset.y), max(0, total - 1))
        bottom = min(total, top + seen)
        unit = "row" if self._wrap else "line"
        percent = 100 if bottom >= total else (bottom * 100) // total
        words = f"{unit} {top + 1:,}–{bottom:,} of {total:,} ({percent}%)"
        if self.search_query:
            query = sanitize(self.search_query)
            if not self.matches:
                words += f" · /{query}: not found"
            elif self.match_index is not None:
                words += f" · /{query}: match {self.match_index + 1:,} of {len(self.matches):,} (n/N)"
        else:
            words += " · / search"
        return words

    def takes_key(self, character: str) -> bool:
        """Whether this printable key is the viewer's (the App gives the others to the prompt)."""
        return self.search_typed is not None or (character in self.SEARCH_KEYS and bool(self._status_rows))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("search_start", "search_next"):
            return bool(self._status_rows)  # listed and taken only in a full output
        return True

    def action_search_start(self) -> None:
        if self._status_rows:
            self.search_typed = ""
            self.refresh()

    def action_search_next(self, direction: int) -> None:
        if not self.search_query:  # nothing searched yet: n asks for the search, as less does
            if direction > 0:
                self.action_search_start()
            return
        if not self.matches:
            self.refresh()
            return
        top = int(self.scroll_offset.y)
        if self.match_index is None:
            following = [i for i, row in enumerate(self.matches) if (row >= top if direction > 0 else row <= top)]
            index = (following[0] if direction > 0 else following[-1]) if following else (0 if direction > 0 else -1)
        else:
            index = self.match_index + direction
        self._show_match(index % len(self.matches))

    def _show_match(self, index: int) -> None:
        self.match_index = index
        row = self.matches[index]
        self._cache.clear()  # the highlighted row changed
        self.scroll_to(y=max(0, row - 2), animate=False, immediate=True)  # two rows of what leads to it
        self.refresh()

    def search(self, query: str) -> None:
        """Find ``query`` (case-insensitive unless it has a capital, as less -i does) and show the
        first match at or after the top of the view."""
        self.search_query = query
        self.match_index = None
        self._cache.clear()
        if not query:
            self.matches = []
            self.refresh()
            return
        rows = self._rows if self._wrap else self._lines
        if query.lower() == query:
            self.matches = [i for i, row in enumerate(rows) if query in row.lower()]
        else:
            self.matches = [i for i, row in enumerate(rows) if query in row]
        self.action_search_next(1)

    def on_key(self, event: events.Key) -> None:
        """While a search is typed: letters add to it, backspace removes, enter finds, escape cancels."""
        if self.search_typed is None:
            return
        event.stop()
        event.prevent_default()
        if event.key == "escape":
            self.search_typed = None
        elif event.key == "enter":
            typed, self.search_typed = self.search_typed, None
            self.search(typed or self.search_query)
        elif event.key == "backspace":
            self.search_typed = self.search_typed[:-1]
        elif event.is_printable and event.character:
            self.search_typed += event.character
        self.refresh()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.refresh()  # the position row moves with the view

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        style = self.rich_style
        if self._status_rows and y == self._view_rows - 1:
            words = self.position_text()
            return Strip([Segment(words, style + Style(reverse=True))], cell_len(words)).crop_extend(0, width, style)
        if index >= self.row_count:
            return Strip.blank(width, style)
        strip = self._cache.get(index)
        if strip is None:
            line = self._rows[index] if self._wrap else self.display_line(index)
            current = self.match_index is not None and self.matches[self.match_index] == index
            strip = Strip([Segment(line, style + Style(reverse=True) if current else style)], cell_len(line))
            self._cache[index] = strip
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_offsets(scroll_x, index)

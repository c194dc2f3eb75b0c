"""The session's tool calls, one line each (status, size, duration, truncated).

A line-API ScrollView rather than an OptionList: adding or updating a call
costs the same with 10 calls or 10,000 (only visible rows are rendered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.segment import Segment
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from widgets.tool_call_line import ToolCallInfo, tool_call_text

# Restore is a control key: a letter would be eaten from a sentence typed while the list has
# focus (typing anywhere goes to the prompt, app.py's on_key).
RESTORE_KEY = "ctrl+t"
# Evict and pin are letters, taken only while the list has focus and a call is highlighted
# (``takes_key``); an eviction asks first, so a stray d costs a question, never a result.
EVICT_KEY = "d"
PIN_KEY = "p"


class ToolCallList(ScrollView, can_focus=True):
    """Arrow keys move between calls; the highlighted call is shown in the viewer."""

    BINDINGS = [
        Binding("up", "move(-1)", "Previous call", show=False),
        Binding("down", "move(1)", "Next call", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("home", "first", "First call", show=False),
        Binding("end", "last", "Last call", show=False),
        Binding(RESTORE_KEY, "restore", "Restore cleared"),
        Binding(EVICT_KEY, "evict", "Evict"),
        Binding(PIN_KEY, "pin", "Pin"),
    ]

    COMPONENT_CLASSES = {
        "toolcall--running",
        "toolcall--ok",
        "toolcall--error",
        "toolcall--interrupted",
        "toolcall--name",
        "toolcall--dim",
        "toolcall--badge",
        "toolcall--cursor",
    }

    @dataclass
    class Highlighted(Message):
        """The user moved the cursor to another call."""

        call_list: "ToolCallList"
        call_id: str

    @dataclass
    class RestoreAsked(Message):
        """The user asked to bring the highlighted call's cleared result back (the App asks the session)."""

        call_id: str

    @dataclass
    class EvictAsked(Message):
        """The user asked to take the highlighted call's result out of the context (the App asks first)."""

        call_id: str

    @dataclass
    class PinAsked(Message):
        """The user asked to pin the highlighted call's result (``pin``), or to unpin it."""

        call_id: str
        pin: bool

    cursor: reactive[int | None] = reactive(None)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[ToolCallInfo] = []
        self._index: dict[str, int] = {}
        self._cache: LRUCache[int, Strip] = LRUCache(256)

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def index_of(self, call_id: str) -> int | None:
        return self._index.get(call_id)

    def add_call(self, info: ToolCallInfo) -> None:
        self._index[info.id] = len(self.calls)
        self.calls.append(info)
        self.virtual_size = Size(0, len(self.calls))
        self.refresh_lines(len(self.calls) - 1)

    def update_call(self, info: ToolCallInfo) -> None:
        index = self._index.get(info.id)
        if index is None:
            self.add_call(info)
            return
        self.calls[index] = info
        self._cache.discard(index)
        self.refresh_lines(index)

    def set_calls(self, calls: list[ToolCallInfo]) -> None:
        """All the calls at once (a replayed batch): one refresh, not one per call. The cursor
        stays where it was (clamped); the caller moves it."""
        self.calls = list(calls)
        self._index = {info.id: index for index, info in enumerate(self.calls)}
        self._cache.clear()
        self.virtual_size = Size(0, len(self.calls))
        self.refresh()

    def clear(self) -> None:
        self.calls.clear()
        self._index.clear()
        self._cache.clear()
        self.cursor = None
        self.virtual_size = Size(0, 0)
        self.refresh()

    # ---------------------------------------------------------------- cursor

    def validate_cursor(self, cursor: int | None) -> int | None:
        if cursor is None or not self.calls:
            return None
        return max(0, min(len(self.calls) - 1, cursor))

    def watch_cursor(self, old: int | None, new: int | None) -> None:
        for index in (old, new):
            if index is not None:
                self._cache.discard(index)
        if (old is None) != (new is None):
            self.refresh_bindings()  # evict and pin are listed only with a call highlighted
        self.refresh()
        self._scroll_to_cursor()
        # once more after layout: the first time the size may not be known yet
        self.call_after_refresh(self._scroll_to_cursor)

    def _scroll_to_cursor(self) -> None:
        cursor = self.cursor
        height = self.scrollable_content_region.height
        if cursor is None or height <= 0:
            return
        top = self.scroll_offset.y
        if cursor < top:
            self.scroll_to(y=cursor, animate=False, immediate=True, force=True)
        elif cursor >= top + height:
            self.scroll_to(y=cursor - height + 1, animate=False, immediate=True, force=True)
        self._place_thumb()

    def _place_thumb(self) -> None:
        if self.show_vertical_scrollbar:
            self.vertical_scrollbar.position = self.scroll_offset.y

    def watch_show_vertical_scrollbar(self, shown: bool) -> None:
        # Textual moves the thumb only when scroll_y changes while the bar is shown: a list
        # that followed its calls before the bar appeared showed its thumb at an old place
        # (at the top while the last call was on screen; 1 in 3 runs under load).
        if shown:
            self._place_thumb()
        self._cache.clear()  # each line is fitted to the room beside the bar
        self.refresh()

    def on_resize(self) -> None:
        self._cache.clear()  # each line is fitted to the width
        self._scroll_to_cursor()

    def _move_to(self, index: int) -> None:
        if not self.calls:
            return
        self.cursor = index
        if self.cursor is not None:
            self.post_message(self.Highlighted(self, self.calls[self.cursor].id))

    def action_move(self, delta: int) -> None:
        self._move_to((self.cursor if self.cursor is not None else len(self.calls)) + delta)

    def action_first(self) -> None:
        self._move_to(0)

    def action_last(self) -> None:
        self._move_to(len(self.calls) - 1)

    def on_click(self, event: events.Click) -> None:
        index = event.y + self.scroll_offset.y
        if 0 <= index < len(self.calls):
            self._move_to(index)

    # ---------------------------------------------------------------- cleared results

    def action_restore(self) -> None:
        """Ask for the highlighted call's cleared result back: the App asks the session what it
        costs, and a dialog follows."""
        if self.cursor is None or not self.calls:
            return
        self.post_message(self.RestoreAsked(self.calls[self.cursor].id))

    def takes_key(self, character: str) -> bool:
        """Whether this printable key is the list's (the App gives the others to the prompt)."""
        return character in (EVICT_KEY, PIN_KEY) and self.cursor is not None and bool(self.calls)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("evict", "pin"):
            return self.cursor is not None and bool(self.calls)  # listed only with a call highlighted
        return True

    def action_evict(self) -> None:
        """Ask to take the highlighted call's result out of the context: the App asks the session
        what it frees, and a dialog follows."""
        if self.cursor is None or not self.calls:
            return
        self.post_message(self.EvictAsked(self.calls[self.cursor].id))

    def action_pin(self) -> None:
        """Pin the highlighted call's result, or unpin a pinned one."""
        if self.cursor is None or not self.calls:
            return
        call = self.calls[self.cursor]
        self.post_message(self.PinAsked(call.id, pin=not call.pinned))

    # ---------------------------------------------------------------- render

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self.calls):
            return Strip.blank(width, base)
        strip = self._cache.get(index)
        if strip is None:
            styles = {
                key: self.get_component_rich_style(f"toolcall--{key}")
                for key in ("running", "ok", "error", "interrupted", "name", "dim", "badge")
            }
            # fitted to the room beside the scrollbar (the strip is cropped to the whole width)
            room = self.scrollable_content_region.width or width
            text = tool_call_text(self.calls[index], styles, summary_width=32, compact=True, width=room)
            if index == self.cursor:
                text.stylize(self.get_component_rich_style("toolcall--cursor"))
            segments = [Segment(seg.text, base + seg.style if seg.style else base) for seg in text.render(self.app.console)]
            strip = Strip(segments).simplify()
            self._cache[index] = strip
        line_style = base
        if index == self.cursor:
            line_style = base + self.get_component_rich_style("toolcall--cursor")
        return strip.crop_extend(scroll_x, scroll_x + width, line_style)

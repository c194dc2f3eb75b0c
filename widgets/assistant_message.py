"""The assistant's reply: streamed Markdown drawn as lines, one widget whatever its length.

Deltas are collected and handed over at most every ``FLUSH_INTERVAL`` seconds,
never one update per delta. The text is cut into segments (``_reply_markdown.cut_point``:
at a blank line past a few thousand characters, inside a long code block at a line
end, the block closed there and opened again in the next segment); a flush parses
only the segment being written into its top-level blocks and renders with Rich
only the blocks whose source changed (the last one, as a rule). So a flush costs
the same at the end of a 200 KB reply as at its start.

It is one widget with Textual's line API (as ``Log`` is): layout sees a single
height, a frame asks only for the lines in view, and lines already rendered are
kept until the width changes. Textual's ``Markdown`` widget mounts a widget per
block, list item and table cell; streamed at 2,000 deltas a second, styling,
arranging and rendering those took 60–90 ms a frame on 2 cores, so the screen fell
behind the stream and a key typed meanwhile waited up to 250 ms for its echo.

When the width changes (or the theme), a block is not rendered again before the
frame: rendering a 230 KB reply at once froze the UI for 0.7–1.7 s on every step of
a window drag. Each block is placed at an estimated height (``estimate_height``);
the frame renders the blocks in view (and ``VIEW_MARGIN`` lines below) before it
draws them, and the rest are rendered in the background, ``SLICE_BUDGET`` of work
at a time, the height corrected as estimates give way. What the last frame showed
of the reply's top or end is rendered before layout, so an anchored conversation
shows the right last lines in the first frame at the new width.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_right
from typing import Any, Callable

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Offset, Region, Size
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget

from widgets._literal import sanitize
from widgets._one_shot import OneShot
from widgets._reply_markdown import (
    ReplyBlock,
    ReplyLook,
    cut_point,
    estimate_height,
    fence_reopening,
    parse_blocks,
    render_block,
)

FLUSH_INTERVAL = 1 / 50  # seconds a delta waits, at most, before it is handed over (when flushes are cheap)
FLUSH_SHARE = 0.3  # flushing takes at most this share of the UI loop: a slow flush spaces the next ones
# While the user types, flushes come at most this often (for TYPING_HOLD seconds after a key):
# the text keeps flowing, and a key's echo seldom waits behind a frame of the reply.
TYPING_INTERVAL = 0.1
TYPING_HOLD = 0.5
# ``when_drawn`` waits at most this long: a reply scrolled out of view draws no line.
DRAWN_WAIT = 0.1
# After a width change, lines below those in view rendered before the frame too: a short scroll
# down finds them rendered (scrolling is drawn without waiting for a block).
VIEW_MARGIN = 20
# Blocks still at an estimated height are rendered in slices of about this many seconds of work,
# SLICE_GAP apart (a timer: frames, keys and the stream get the loop in between).
SLICE_BUDGET = 0.008
SLICE_GAP = 0.001


class AssistantMessage(Widget):
    """A reply that grows by batched flushes and draws only the lines in view."""

    # The colours of the Markdown, from the theme (as Textual's own Markdown takes them):
    # Rich's defaults (inline code cyan on black) are drawn as they are on any theme.
    COMPONENT_CLASSES = {
        "assistant-message--code", "assistant-message--h1", "assistant-message--h2",
        "assistant-message--h3", "assistant-message--link", "assistant-message--quote",
        "assistant-message--table",
    }
    DEFAULT_CSS = """
    AssistantMessage {
        height: auto;
        &:dark > .assistant-message--code { background: $warning 10%; color: $text-warning 95%; }
        &:light > .assistant-message--code { background: $error 5%; color: $text-error 95%; }
        & > .assistant-message--h1 { color: $markdown-h1-color; text-style: $markdown-h1-text-style; }
        & > .assistant-message--h2 { color: $markdown-h2-color; text-style: $markdown-h2-text-style; }
        & > .assistant-message--h3 { color: $markdown-h3-color; text-style: $markdown-h3-text-style; }
        & > .assistant-message--link { color: $text-accent; }
        & > .assistant-message--quote { color: $text-muted; }
        & > .assistant-message--table { color: $text-primary; }
        /* a failed stream's partial text: kept in view, dimmed, apart from the retried reply */
        &.-discarded { text-opacity: 45%; }
    }
    """

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._chunks: list[str] = [text] if text else []
        self._pending: list[str] = []
        self._flush_timer: OneShot | None = None
        self._interval = FLUSH_INTERVAL
        self._last_flush = 0.0  # time.monotonic() of the last flush
        self._typing_until = 0.0  # flushes are spaced by TYPING_INTERVAL until then
        self._segments: list[str] = []  # inert Markdown sources; the last is being written
        self._fence_open = False  # the segment being written ends inside a code block
        self._reopened = False  # ... and opens with a code block cut at the end of the one above
        self._blocks: list[ReplyBlock] = []
        self._tail = 0  # index of the first block of the segment being written
        self._heights: list[int] = []  # lines each block takes at ``_width``: as rendered, or estimated
        self._starts: list[int] = []  # first line of each block, at ``_width``
        self._height = 0
        self._width = 0
        self._placed = 0  # blocks whose height and first line are known (the rest changed since)
        self._redo = 0  # blocks before this one are rendered at ``_width`` in the current look
        self._redo_timer: OneShot | None = None
        self._rendered: asyncio.Event | None = None  # set while nothing waits to be rendered
        self._moved = False  # lines moved (an estimate gave way) since layout or the screen was told
        self._reported_height = 0  # the height layout was last given
        # What the last frame showed: (the reply's first line, its last line, lines in view, the scroll
        # offset of the container then); used when the width changes and the scroll has not moved.
        self._shown: tuple[bool, bool, int, Offset] | None = None
        self._unmounted = False
        self._base_style: Style | None = None
        self._look: ReplyLook | None = None  # built from the CSS above, for ``_look_theme``
        self._look_theme = ""
        self._undrawn = False  # text was handed over that no frame has drawn yet
        self._after_drawn: list[Callable[[], object]] = []  # ``when_drawn`` callbacks waiting
        self._drawn_timer: OneShot | None = None
        self.flushes = 0  # flushes that handed text over (for tests and benchmarks)
        self.block_renders = 0  # blocks rendered by Rich (for tests and benchmarks)
        self._open_segment("")
        if text:
            self._take(sanitize(text))

    # ----------------------------------------------------------------- reading

    @property
    def text(self) -> str:
        """Everything received, as the model wrote it."""
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def source(self) -> str:
        """The Markdown drawn (made inert; code blocks cut in two are closed and reopened)."""
        return "".join(self._segments)

    @property
    def segments(self) -> list[str]:
        return list(self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def blocks(self) -> list[ReplyBlock]:
        """The top-level Markdown blocks handed over so far, in order."""
        return list(self._blocks)

    # ---------------------------------------------------------------- writing

    def append_text(self, delta: str) -> None:
        """Queue a delta; a timer hands what is pending over in one piece."""
        if not delta:
            return
        self._chunks.append(delta)
        self._pending.append(delta)
        if self._flush_timer is None:
            # Right away after a pause (the last words of a reply are not held back);
            # in a steady stream, one interval after the last flush.
            now = time.monotonic()
            interval = max(self._interval, TYPING_INTERVAL) if now < self._typing_until else self._interval
            wait = max(0.0, self._last_flush + interval - now)
            self._flush_timer = OneShot(self, wait, self._flush)

    def note_typing(self) -> None:
        """A key was typed in the prompt: space the flushes for a moment."""
        self._typing_until = time.monotonic() + TYPING_HOLD

    def _flush(self) -> None:
        self._flush_timer = None
        if not self._pending:
            return
        self._last_flush = time.monotonic()
        started = time.perf_counter()
        fragment = sanitize("".join(self._pending))
        self._pending.clear()
        self._take(fragment)
        self.flushes += 1
        self._refresh_grown()
        self._undrawn = True
        # The lines are rendered in the frame that follows: it is counted as part of the flush.
        self.call_after_refresh(self._space_flushes, started)

    def _space_flushes(self, started: float) -> None:
        # Until the frame showing it is drawn (the screen's next tick included): measured as CPU
        # time instead, flushes came twice as often and key echo's p95 went from ~41 to ~55 ms.
        spent = time.perf_counter() - started
        self._interval = max(FLUSH_INTERVAL, min(0.25, spent * (1 - FLUSH_SHARE) / FLUSH_SHARE))

    def _take(self, fragment: str) -> None:
        """Add inert text to the segments, cutting where ``cut_point`` says, and re-parse."""
        while fragment:
            segment = self._segments[-1]
            cut = cut_point(len(segment), self._fence_open, fragment)
            head, fragment = (fragment, "") if cut is None else (fragment[:cut], fragment[cut:])
            self._segments[-1] = segment + head
            self._fence_open ^= head.count("```") % 2 == 1
            if cut is None:
                break
            reopen = ""
            if self._fence_open:  # the cut fell inside a (long) code block: close it, open it again
                closing, reopen = fence_reopening(self._segments[-1])
                if not self._segments[-1].endswith("\n"):  # cut inside one endless line: the fence
                    closing = "\n" + closing  # closes on a line of its own
                self._segments[-1] += closing
            self._parse_tail()
            self._open_segment(reopen)
        self._parse_tail()

    def _open_segment(self, text: str) -> None:
        self._segments.append(text)
        self._fence_open = self._reopened = bool(text)
        self._tail = len(self._blocks)

    def _parse_tail(self) -> None:
        """Parse the segment being written again; keep the blocks whose source is unchanged."""
        new = parse_blocks(self._segments[-1], continues_code=self._reopened)
        old = self._blocks[self._tail :]
        same = 0
        while same < min(len(old), len(new)) and old[same].source == new[same].source:
            same += 1
        changed = self._tail + same
        self._blocks[changed:] = new[same:]
        self._placed = min(self._placed, changed)
        if self._redo >= changed:  # nothing waits from here on: the new blocks are rendered when placed
            self._redo = len(self._blocks)

    def _refresh_grown(self) -> None:
        height = self._height
        if self._width:
            self._lay_out(self._width)
        self.refresh(layout=self._height != height or not self._width)

    # ----------------------------------------------------------------- layout

    def _lay_out(self, width: int) -> None:
        """Place every block's first line at ``width``.

        Blocks never rendered (new from the stream, or from the text the reply was made with) are
        rendered now: a flush renders what it changed, as a rule the last block. Blocks rendered at
        another width or in another look are placed at an estimated height, and rendered when drawn
        or in the background (``_redo_slice``)."""
        if width <= 0 or (width == self._width and self._placed == len(self._blocks)):
            return  # (every line drawn asks: nothing to do, as a rule)
        look = self._current_look()
        if width != self._width:
            self._width = width
            self._placed = 0
            self._render_shown(look)
            self._restart_redo()
        line = self._starts[self._placed - 1] + self._heights[self._placed - 1] if self._placed else 0
        del self._starts[self._placed :]
        del self._heights[self._placed :]
        for block in self._blocks[self._placed :]:
            if not block.width:
                self._render_block(block, look)
            if self._starts and not block.joined:
                line += 1  # a blank line between blocks
            self._starts.append(line)
            height = estimate_height(block, width)  # (exact if rendered at this width)
            self._heights.append(height)
            line += height
        self._placed = len(self._blocks)
        self._height = line

    def _render_block(self, block: ReplyBlock, look: ReplyLook) -> None:
        render_block(self.app.console, block, self._width, look)
        self.block_renders += 1

    def _is_current(self, block: ReplyBlock, look: ReplyLook) -> bool:
        return block.width == self._width and block.look is look

    def _render_shown(self, look: ReplyLook) -> None:
        """At a new width, before layout: render the blocks the last frame showed at the reply's top
        or its end, as many as fill what was in view and ``VIEW_MARGIN``. Layout then has their real
        heights, and an anchored conversation (its end in view) or a reply read from its top is drawn
        right in the first frame. (Only if the container has not scrolled since: else it may be out
        of view, and rendering a screenful of it would be waste.)"""
        shown = self._shown
        if shown is None or shown[3] != self.container_scroll_offset:
            return
        at_top, at_end, count, _ = shown
        runs: list[range] = []
        if at_top:
            runs.append(range(len(self._blocks)))
        if at_end:
            runs.append(range(len(self._blocks) - 1, -1, -1))
        for indices in runs:
            lines = 0
            for index in indices:
                block = self._blocks[index]
                if not self._is_current(block, look):
                    self._render_block(block, look)
                lines += len(block.lines) + 1
                if lines >= count + VIEW_MARGIN:
                    break

    def _render_placed(self, index: int, look: ReplyLook) -> None:
        """Render placed block ``index`` (at an estimated height) now; the blocks below move."""
        self._render_block(self._blocks[index], look)
        height = len(self._blocks[index].lines)
        if height != self._heights[index]:
            self._heights[index] = height
            self._restack(index)

    def _restack(self, first: int) -> None:
        """Place the blocks after ``first`` again from the heights (``first`` stays where it is)."""
        starts, heights, blocks = self._starts, self._heights, self._blocks
        line = starts[first] + heights[first]
        for index in range(first + 1, self._placed):
            if not blocks[index].joined:
                line += 1
            starts[index] = line
            line += heights[index]
        self._height = line
        self._moved = True

    def _render_between(self, first: int, end: int) -> None:
        """Render the blocks still at an estimated height that lines ``first`` to ``end`` fall in
        (the block ``first`` is in, and those below: what is above does not move)."""
        look = self._current_look()
        index = max(0, bisect_right(self._starts, first) - 1)
        while index < self._placed and self._starts[index] < end:
            if not self._is_current(self._blocks[index], look):
                self._render_placed(index, look)
            index += 1

    def _restart_redo(self) -> None:
        """Every block may wait to be rendered again: scan them all from the top."""
        self._redo = 0
        if self._rendered is not None:
            self._rendered.clear()
        self._schedule_slice()

    def _redo_slice(self) -> None:
        """Render blocks still at an estimated height, for ``SLICE_BUDGET`` seconds, then give the
        loop back (a frame, a key, the stream) and go on after ``SLICE_GAP``."""
        self._redo_timer = None
        if not self._width:
            return
        self._lay_out(self._width)  # (blocks the stream changed since are placed first)
        look = self._current_look()
        blocks, heights = self._blocks, self._heights
        deadline = time.perf_counter() + SLICE_BUDGET
        first_moved = -1
        while self._redo < self._placed:
            index = self._redo
            self._redo += 1
            block = blocks[index]
            if self._is_current(block, look):
                continue
            self._render_block(block, look)
            if len(block.lines) != heights[index]:
                heights[index] = len(block.lines)
                if first_moved < 0:
                    first_moved = index
            if time.perf_counter() >= deadline:
                break
        if first_moved >= 0:
            self._restack(first_moved)
        self._tell_moved()
        if self._redo < len(self._blocks):
            self._schedule_slice()
        elif self._rendered is not None:
            self._rendered.set()

    def _schedule_slice(self) -> None:
        """One slice timer at a time (a slice may already have been scheduled by a width change
        during it: a second one would only render the same blocks)."""
        if self._redo_timer is None and not self._unmounted:
            self._redo_timer = OneShot(self, SLICE_GAP, self._redo_slice)

    def _render_estimated(self) -> None:
        """Render every block still at an estimated height now (what is copied must be what is drawn)."""
        self._lay_out(self._width)
        look = self._current_look()
        for index in range(self._redo, self._placed):
            if not self._is_current(self._blocks[index], look):
                self._render_placed(index, look)
        self._redo = len(self._blocks)
        if self._rendered is not None:
            self._rendered.set()
        self._tell_moved()

    def _tell_moved(self) -> None:
        """Lines moved: draw them again, and lay out again if the height changed."""
        if self._moved:
            self._moved = False
            self.refresh(layout=self._height != self._reported_height)

    @property
    def line_count(self) -> int:
        """Lines the reply takes at its width as laid out (exact once ``estimated`` is 0)."""
        return self._height

    @property
    def estimated(self) -> int:
        """Blocks placed at an estimated height, waiting to be rendered (after a width or theme change)."""
        look = self._look
        return sum(1 for block in self._blocks[self._redo :] if look is None or not self._is_current(block, look))

    async def wait_rendered(self) -> None:
        """Return once no block waits to be rendered at the current width (for tests and benchmarks)."""
        # (While blocks wait, a slice is due: it sets the event when it renders the last of them.)
        while self._width and self._redo < len(self._blocks) and not self._unmounted:
            if self._rendered is None:
                self._rendered = asyncio.Event()
            self._rendered.clear()
            self._schedule_slice()  # (never wait on work that no timer will do)
            await self._rendered.wait()

    def _current_look(self) -> ReplyLook:
        look = self._look
        if look is None:

            def ink(name: str, extra: Style | None = None) -> Style:
                # colour and text style only: the line's background is the widget's (``render_line``)
                full = self.get_component_rich_style(f"assistant-message--{name}")
                style = Style(color=full.color, bold=full.bold, italic=full.italic, underline=full.underline)
                return style + extra if extra else style

            code = self.get_component_rich_style("assistant-message--code")  # with its own background
            look = self._look = ReplyLook(
                styles={
                    "markdown.code": code,
                    "markdown.kbd": code,
                    **{f"markdown.h{level}": ink(f"h{min(level, 3)}") for level in range(1, 7)},
                    "markdown.link": ink("link"),
                    "markdown.link_url": ink("link", Style(underline=True)),
                    "markdown.block_quote": ink("quote"),
                    "markdown.list": Style(),
                    "markdown.item.number": Style(bold=True),
                    "markdown.table.border": ink("table"),
                    "markdown.table.header": ink("table", Style(bold=True)),
                },
                code_theme="monokai" if self.app.current_theme.dark else "default",
            )
            self._look_theme = self.app.theme
        return look

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base_style = None
        if self._look is not None and self.app.theme != self._look_theme:
            # A new theme: every block is drawn again in its colours. (Only then: this is also
            # called on hover and focus changes, and a long reply takes a while to render.)
            # Lazily, as after a width change: the heights are the same, so nothing moves.
            self._look = None
            if self._width:
                self._restart_redo()
            self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._lay_out(width)
        self._reported_height = self._height
        return self._height

    def render_lines(self, crop: Region) -> list[Strip]:
        # The blocks in view (and VIEW_MARGIN lines below) are rendered before a line is drawn, so
        # a frame shows no estimate and, lines moving only below the first one, stays whole.
        self._lay_out(self.size.width)
        top = crop.y - self.gutter.top
        self._render_between(max(0, top), top + crop.height + VIEW_MARGIN)
        self._shown = (top <= 0, top + crop.height >= self._height, crop.height, self.container_scroll_offset)
        strips = super().render_lines(crop)
        if self._moved:  # (told once this frame is drawn, not from within it)
            self.call_later(self._tell_moved)
        return strips

    def render_line(self, y: int) -> Strip:
        if self._undrawn:  # this frame draws what was handed over: after it, call who waits
            self._undrawn = False
            if self._after_drawn:
                self.call_later(self._drawn)
        width = self.size.width
        self._lay_out(width)
        style = self._base_style
        if style is None:  # (``rich_style`` walks the ancestors: once, not per line)
            style = self._base_style = self.rich_style
        strip = self._line(y)
        strip = Strip.blank(width, style) if strip is None else strip.apply_style(style).adjust_cell_length(width, style)
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(y)) is not None:
            start, end = span
            left, chosen, right = strip.divide([start, width if end == -1 else end, width])
            marked = self.screen.get_component_rich_style("screen--selection")
            strip = Strip.join([left, Strip(Segment.apply_style(chosen, post_style=marked)), right])
        return strip.apply_offsets(0, y)  # where a mouse selection starts and ends

    def _line(self, y: int) -> Strip | None:
        """Line ``y`` as rendered (None: a blank line between blocks); a block still at an estimated
        height is rendered first (the blocks below it move, not line ``y``'s)."""
        while True:
            index = bisect_right(self._starts, y) - 1
            if index < 0 or y - self._starts[index] >= self._heights[index]:
                return None
            block = self._blocks[index]
            look = self._current_look()
            if self._is_current(block, look):
                return block.lines[y - self._starts[index]]
            self._render_placed(index, look)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The text under a mouse selection, as drawn (what the user sees is what is copied)."""
        self._lay_out(self._width or self.size.width)
        self._render_estimated()
        lines = (self._line(y) for y in range(self._height))
        return selection.extract("\n".join("" if line is None else line.text.rstrip() for line in lines)), "\n"

    # ------------------------------------------------------------- completion

    def _stop_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None

    def when_drawn(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` after the frame that draws the text handed over so far
        (at once if it is drawn; after ``DRAWN_WAIT`` at the latest)."""
        if not self._undrawn:
            callback()
            return
        self._after_drawn.append(callback)
        if self._drawn_timer is None:
            self._drawn_timer = OneShot(self, DRAWN_WAIT, self._drawn)

    def _drawn(self) -> None:
        if self._drawn_timer is not None:
            self._drawn_timer.stop()
            self._drawn_timer = None
        callbacks, self._after_drawn = self._after_drawn, []
        for callback in callbacks:
            callback()

    def flush_now(self) -> None:
        """The stream paused (or ended): hand over what is pending without waiting for the timer."""
        self._stop_flush_timer()
        self._flush()

    async def finish(self) -> None:
        """The reply is complete: hand over what is pending."""
        self.flush_now()

    def on_unmount(self) -> None:
        # Being removed: drop what is pending instead of drawing on a dead widget; nobody
        # waits on a frame that will never come.
        self._stop_flush_timer()
        self._pending.clear()
        self._drawn()
        if self._redo_timer is not None:
            self._redo_timer.stop()
            self._redo_timer = None
        self._unmounted = True
        if self._rendered is not None:
            self._rendered.set()  # (``wait_rendered`` returns: the widget is gone)

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
"""

from __future__ import annotations

import time
from bisect import bisect_right
from typing import Any, Callable

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.selection import Selection
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from widgets._literal import sanitize
from widgets._reply_markdown import ReplyBlock, ReplyLook, cut_point, fence_reopening, parse_blocks, render_block

FLUSH_INTERVAL = 1 / 50  # seconds a delta waits, at most, before it is handed over (when flushes are cheap)
FLUSH_SHARE = 0.3  # flushing takes at most this share of the UI loop: a slow flush spaces the next ones
# While the user types, flushes come at most this often (for TYPING_HOLD seconds after a key):
# the text keeps flowing, and a key's echo seldom waits behind a frame of the reply.
TYPING_INTERVAL = 0.1
TYPING_HOLD = 0.5
# ``when_drawn`` waits at most this long: a reply scrolled out of view draws no line.
DRAWN_WAIT = 0.1


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
    }
    """

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._chunks: list[str] = [text] if text else []
        self._pending: list[str] = []
        self._flush_timer: Timer | None = None
        self._interval = FLUSH_INTERVAL
        self._last_flush = 0.0  # time.monotonic() of the last flush
        self._typing_until = 0.0  # flushes are spaced by TYPING_INTERVAL until then
        self._segments: list[str] = []  # inert Markdown sources; the last is being written
        self._fence_open = False  # the segment being written ends inside a code block
        self._reopened = False  # ... and opens with a code block cut at the end of the one above
        self._blocks: list[ReplyBlock] = []
        self._tail = 0  # index of the first block of the segment being written
        self._starts: list[int] = []  # first line of each block, at ``_width``
        self._height = 0
        self._width = 0
        self._laid_out = 0  # blocks whose start line is known (the rest changed since)
        self._base_style: Style | None = None
        self._look: ReplyLook | None = None  # built from the CSS above, for ``_look_theme``
        self._look_theme = ""
        self._undrawn = False  # text was handed over that no frame has drawn yet
        self._after_drawn: list[Callable[[], object]] = []  # ``when_drawn`` callbacks waiting
        self._drawn_timer: Timer | None = None
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
            # in a steady stream, one interval after the last flush. (Never 0: a Textual timer of
            # 0 s never fires, and the reply would show only when it ends.)
            now = time.monotonic()
            interval = max(self._interval, TYPING_INTERVAL) if now < self._typing_until else self._interval
            wait = max(0.001, self._last_flush + interval - now)
            self._flush_timer = self.set_timer(wait, self._flush)

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
        self._blocks[self._tail + same :] = new[same:]
        self._laid_out = min(self._laid_out, self._tail + same)

    def _refresh_grown(self) -> None:
        height = self._height
        if self._width:
            self._lay_out(self._width)
        self.refresh(layout=self._height != height or not self._width)

    # ----------------------------------------------------------------- layout

    def _lay_out(self, width: int) -> None:
        """Render the blocks not rendered at ``width`` and place every block's first line."""
        if width <= 0 or (width == self._width and self._laid_out == len(self._blocks) == len(self._starts)):
            return  # (every line drawn asks: nothing to do, as a rule)
        if width != self._width:
            self._width = width
            self._laid_out = 0
        console = self.app.console
        look = self._current_look()
        line = self._starts[self._laid_out - 1] + len(self._blocks[self._laid_out - 1].lines) if self._laid_out else 0
        del self._starts[self._laid_out :]
        for block in self._blocks[self._laid_out :]:
            if block.width != width:
                render_block(console, block, width, look)
                self.block_renders += 1
            if self._starts and not block.joined:
                line += 1  # a blank line between blocks
            self._starts.append(line)
            line += len(block.lines)
        self._laid_out = len(self._blocks)
        self._height = line

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
            self._look = None
            for block in self._blocks:
                block.width = 0
            self._laid_out = 0
            self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._lay_out(width)
        return self._height

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
        """Line ``y`` as rendered (None: a blank line between blocks)."""
        index = bisect_right(self._starts, y) - 1
        if index < 0 or y - self._starts[index] >= len(self._blocks[index].lines):
            return None
        return self._blocks[index].lines[y - self._starts[index]]

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The text under a mouse selection, as drawn (what the user sees is what is copied)."""
        self._lay_out(self._width or self.size.width)
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
            self._drawn_timer = self.set_timer(DRAWN_WAIT, self._drawn)

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

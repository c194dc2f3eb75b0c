"""The assistant's reply: Markdown streamed with ``Markdown.get_stream`` (batched appends).

Deltas are collected and handed to the stream at most every ``FLUSH_INTERVAL``
seconds, never one append per delta. A Markdown append re-parses the last
block and re-joins the document, so a long reply is split into segments
(separate Markdown widgets, cut at a blank line outside code fences once a
segment passes ``SEGMENT_CHARS``, or at any line/word break past
``FORCE_CHARS``): each append then costs the same at the end of a 200 KB reply
as at its start. A code block is cut only once its segment passes
``FENCE_SPLIT_CHARS``: it is closed there and opened again, same fence and
language, in the next segment (a 100 KB file written in a reply would
otherwise be re-parsed whole on every append). Linkify is off: it dominates parse time and links do not
open from the conversation anyway (``open_links=False``).

Segments far out of view (more than a screen above or below what the
conversation shows) are parked: the Markdown, with its dozens of block
widgets, is replaced by a blank stand-in of the same height, and re-created
from its source when it comes near the view again. Every frame's layout walks
every mounted widget, so without this a 100 KB reply would make each frame
(and each garbage collection) cost in proportion to its whole length.
"""

from __future__ import annotations

from typing import Any

import asyncio
import re

from markdown_it import MarkdownIt
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize
from textual.geometry import Size
from textual.layout import DockArrangeResult
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownBlock, MarkdownStream

from widgets._literal import sanitize

FLUSH_INTERVAL = 1 / 50  # seconds a delta waits, at most, before it is handed to the Markdown
SEGMENT_CHARS = 4_000
FORCE_CHARS = 16_000
FENCE_SPLIT_CHARS = 32_000


def _parser() -> MarkdownIt:
    return MarkdownIt("gfm-like").disable("linkify")


class ReplySegment(Markdown):
    """One segment of a reply: a Markdown whose layout depends only on its width.

    Textual arranges a container whose children are all ``height: auto`` at the
    container's height, and passes that height down as the children's container
    size: each time a reply grew by a line, every segment above (and every list
    inside the segment being written) was arranged again, all its blocks
    recursively, making a long reply quadratic. Markdown blocks have no
    ``fr``/``%`` heights, so arranging them at height 0 places them exactly
    the same, and the result stays cached until the segment itself changes.
    """

    expected_height = 0  # restored from parking: its height until it is laid out again

    def arrange(self, size: Size, optimal: bool = False) -> DockArrangeResult:
        return super().arrange(Size(size.width, 0), optimal)


def _segment(text: str = "") -> ReplySegment:
    return ReplySegment(text, open_links=False, parser_factory=_parser, classes="assistant-segment")


class ParkedSegment(Widget):
    """Stands in for a segment far out of view: blank, the segment's height, its source kept."""

    def __init__(self, source: str, height: int, width: int) -> None:
        super().__init__(classes="assistant-segment")
        self.source = source
        self.parked_height = height
        self.parked_width = width  # the height holds at this width only

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.parked_height


async def stop_stream(stream: MarkdownStream) -> None:
    """Stop a Markdown stream and make sure everything written to it is appended.

    ``MarkdownStream.stop()`` cancels the stream's task and awaits it. If that task
    had not run yet, awaiting it raises the task's CancelledError in the caller, and
    a CancelledError escaping a Textual message handler ends that message loop
    silently (the App's: the dashboard quits by itself). Only a cancellation of
    the current task itself is passed on; the fragments the task never got to
    append are appended here. (When the task did run, it appended them itself on
    its way out, without clearing its list: appending them again would double them.)
    """
    try:
        await stream.stop()
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        leftover = "".join(stream._pending)
        stream._pending.clear()
        if leftover and stream.markdown_widget.is_attached:
            await stream.markdown_widget.append(leftover)


def _blank_line_cut(fragment: str, start: int, fence_open: bool, limit: int) -> int | None:
    """The first blank line outside code fences at or after ``start`` (and before ``limit``)."""
    fences = fence_open
    position = 0
    while True:
        index = fragment.find("\n\n", start, limit + 2)
        if index < 0:
            return None
        fences ^= fragment.count("```", position, index) % 2 == 1
        position = index
        if not fences:
            return index + 2
        start = index + 2


def cut_point(segment_chars: int, fence_open: bool, fragment: str) -> int | None:
    """Where to end the current segment within ``fragment`` (None: it all fits).

    At a blank line outside code blocks once the segment passes SEGMENT_CHARS;
    past FORCE_CHARS at a line or word break; inside a code block only past
    FENCE_SPLIT_CHARS, at a line end (the caller closes the block and reopens it).
    """
    room = SEGMENT_CHARS - segment_chars
    if len(fragment) <= room:
        return None
    force = max(0, FORCE_CHARS - segment_chars)
    split = max(0, FENCE_SPLIT_CHARS - segment_chars)
    inside = fence_open ^ (fragment.count("```", 0, force) % 2 == 1)  # in a code block at the force point
    blank = _blank_line_cut(fragment, max(0, room), fence_open, split if inside else force)
    if blank is not None:
        return blank
    if segment_chars + len(fragment) <= FORCE_CHARS:
        return None
    if inside:
        if segment_chars + len(fragment) <= FENCE_SPLIT_CHARS:
            return None
        index = fragment.find("\n", split)
        return index + 1 if index >= 0 else None
    for separator in ("\n", " "):
        index = fragment.find(separator, force)
        if index >= 0:
            return index + 1
    return None


_FENCE = re.compile(r"[ \t]*`{3,}")


def fence_reopening(segment_text: str) -> tuple[str, str]:
    """(closing line, opening line) for the code block left open at the end of ``segment_text``."""
    mark = segment_text.rfind("```")
    start = segment_text.rfind("\n", 0, mark) + 1
    end = segment_text.find("\n", mark)
    opening = segment_text[start : end if end >= 0 else len(segment_text)]
    fence = _FENCE.match(opening)
    closing = fence.group(0) if fence else "```"
    return closing + "\n", opening + "\n"


class AssistantMessage(Vertical):
    """Markdown that grows by batched appends; never re-rendered whole per delta."""

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._initial = sanitize(text)
        self._segments: list[ReplySegment | ParkedSegment] = []
        self._segment_chars = 0
        self._fence_open = False
        self._stream: MarkdownStream | None = None
        self._chunks: list[str] = [text] if text else []
        self._pending: list[str] = []
        self._backlog = ""  # made inert already, waiting for the next flush (one segment per flush)
        self._flush_timer: Timer | None = None
        self._finishing = False
        # The flush timer and finish() (awaited by the App) must not interleave: one
        # could stop the stream or start a segment under the other's feet.
        self._flush_lock = asyncio.Lock()
        self.appends = 0  # appends that reached a Markdown (for tests and benchmarks)
        self._parking_scheduled = False
        self._segment_text: list[str] = []  # what the segment being written holds (for code block cuts)
        self._initial_segments()

    def _initial_segments(self) -> None:
        # Built at construction: a flush may come before compose runs.
        text = self._initial
        parts: list[str] = []
        carried = ""  # a code block's opening line, when the last cut fell inside it
        while True:
            cut = cut_point(len(carried), bool(carried), text)
            if cut is None:
                parts.append(carried + text)
                break
            part = carried + text[:cut]
            text = text[cut:]
            carried = ""
            if part.count("```") % 2 == 1:  # cut inside a code block: close it, open it again
                closing, carried = fence_reopening(part)
                part += closing
            parts.append(part)
        self._segments = [_segment(part) for part in parts]
        self._segment_chars = len(parts[-1])
        self._fence_open = parts[-1].count("```") % 2 == 1
        self._segment_text = [parts[-1]]

    def compose(self) -> ComposeResult:
        yield from self._segments

    @property
    def text(self) -> str:
        """Everything received, as the model wrote it."""
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def source(self) -> str:
        """What the Markdown segments hold (made inert)."""
        return "".join(segment.source for segment in self._segments)

    @property
    def blocks(self) -> list[MarkdownBlock]:
        """The rendered Markdown blocks of the segments that are not parked, in order."""
        return [child for segment in self._segments for child in segment.children if isinstance(child, MarkdownBlock)]

    @property
    def _writing_segment(self) -> ReplySegment:
        segment = self._segments[-1]
        assert isinstance(segment, ReplySegment), "the last segment is never parked"
        return segment

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def parked_count(self) -> int:
        return sum(1 for segment in self._segments if isinstance(segment, ParkedSegment))

    def append_text(self, delta: str) -> None:
        """Queue a delta; a timer hands what is pending to the stream in one piece."""
        if not delta:
            return
        self._chunks.append(delta)
        self._pending.append(delta)
        if self._flush_timer is None:
            self._flush_timer = self.set_timer(FLUSH_INTERVAL, self._flush)

    async def _flush(self) -> None:
        self._flush_timer = None
        async with self._flush_lock:
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        if self._pending and not self._writing_segment.is_mounted:
            # A Markdown can only append once mounted; try again shortly (never block).
            self._flush_timer = self.set_timer(FLUSH_INTERVAL, self._flush)
            return
        if self._pending or self._backlog:
            fragment = self._backlog + sanitize("".join(self._pending))
            self._pending.clear()
            self._backlog = ""
            while fragment:
                cut = cut_point(self._segment_chars, self._fence_open, fragment)
                head, fragment = (fragment, "") if cut is None else (fragment[:cut], fragment[cut:])
                await self._write(head)
                if cut is not None:
                    await self._next_segment()
                    if fragment:
                        # At most one new segment per flush. A burst (a reply far ahead of the
                        # screen: 40 KB in one flush) mounted ten segments' block widgets at once,
                        # before any could be parked: 2,136 widgets and 840 ms layouts. The rest
                        # waits for the next flush, after this segment is laid out and far ones parked.
                        self._backlog = fragment
                        self._flush_timer = self.set_timer(FLUSH_INTERVAL, self._flush)
                        return
        if self._finishing and not self._pending:
            await self._stop_stream()

    async def _stop_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stop_stream(stream)

    async def _write(self, fragment: str) -> None:
        if not fragment:
            return
        if self._stream is None:
            self._stream = Markdown.get_stream(self._writing_segment)
        self.appends += 1
        self._segment_text.append(fragment)
        self._segment_chars += len(fragment)
        self._fence_open ^= fragment.count("```") % 2 == 1
        await self._stream.write(fragment)

    async def _next_segment(self) -> None:
        reopen = ""
        if self._fence_open:  # the cut fell inside a (very long) code block
            closing, reopen = fence_reopening("".join(self._segment_text))
            await self._write(closing)
        await self._stop_stream()
        segment = _segment()
        self._segments.append(segment)
        self._segment_chars = 0
        self._segment_text = []
        self._fence_open = False
        await self.mount(segment)
        if reopen:
            await self._write(reopen)
        # Each new segment is a moment to park far ones, here, under the flush lock we hold:
        # parking only on the scroll and resize signals ran twice in a 40,000-delta reply
        # streamed faster than the screen (53 segments, 15 parked, 1,960 widgets on screen).
        await self._park_now()

    # ---------------------------------------------------------------- parking

    def schedule_parking(self, after_refresh: bool = False) -> None:
        """Park/restore segments against the scroll position (soon: after what is queued)."""
        if not self._parking_scheduled and len(self._segments) > 1 and self.is_mounted:
            self._parking_scheduled = True
            (self.call_after_refresh if after_refresh else self.call_later)(self._update_parking)

    def on_mount(self) -> None:
        scroller = self.parent
        if isinstance(scroller, Widget) and scroller.is_scrollable:
            self.watch(scroller, "scroll_y", self._scrolled, init=False)

    def _scrolled(self) -> None:
        self.schedule_parking()

    def on_resize(self, event: Resize) -> None:
        self.schedule_parking()

    async def _update_parking(self) -> None:
        self._parking_scheduled = False
        async with self._flush_lock:  # a flush may start a segment meanwhile
            await self._park_now()

    async def _park_now(self) -> None:
        """Park and restore segments by the plan (the caller holds the flush lock)."""
        park, restore, width = self._parking_plan()
        if park or restore:
            await self._swap(park, restore, width)
        if restore:  # once the restored segments are laid out, look again (a width change
            self.schedule_parking(after_refresh=True)  # restores them all; most are parked again)

    def _parking_plan(self) -> tuple[list[int], list[int], int]:
        """Which segments to park and which to restore: live within a screen of the view."""
        scroller = self.parent
        if not self.is_attached or not isinstance(scroller, Widget) or not scroller.is_scrollable:
            return [], [], 0
        width = self.outer_size.width
        view = scroller.scrollable_content_region.height
        top = scroller.scroll_offset.y - self.virtual_region.y  # the view, in our own rows
        low, high = top - view, top + 2 * view
        last = len(self._segments) - 1  # the segment being written: never parked
        park: list[int] = []
        restore: list[int] = []
        y = 0
        for index, segment in enumerate(self._segments):
            if isinstance(segment, ParkedSegment):
                height = segment.parked_height
                if segment.parked_width != width or (y < high and y + height > low):
                    restore.append(index)
            else:
                # (height 0: not laid out yet, left as it is; the next resize looks again)
                height = segment.outer_size.height or segment.expected_height
                if index < last and height and segment.is_mounted and not (y < high and y + height > low):
                    park.append(index)
            y += height
        return park, restore, width

    async def _swap(self, park: list[int], restore: list[int], width: int) -> None:
        old: list[Widget] = []
        with self.app.batch_update():
            for index in restore:
                segment = self._segments[index]
                assert isinstance(segment, ParkedSegment)
                restored = self._segments[index] = _segment(segment.source)
                if segment.parked_width == width:
                    restored.expected_height = segment.parked_height
                await self.mount(restored, before=segment)
                old.append(segment)
            for index in park:
                segment = self._segments[index]
                self._segments[index] = ParkedSegment(segment.source, segment.outer_size.height, width)
                await self.mount(self._segments[index], before=segment)
                old.append(segment)
            await self.remove_children(old)

    def _stop_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None

    async def finish(self) -> None:
        """The reply is complete: flush what is pending, then stop the stream."""
        self._finishing = True
        self._stop_flush_timer()
        await self._flush()
        while self._backlog and self.is_attached:  # the rest, one segment a frame as while streaming
            await asyncio.sleep(FLUSH_INTERVAL)
            self._stop_flush_timer()
            await self._flush()

    async def on_unmount(self) -> None:
        # Being removed: drop what is pending instead of appending to a dead widget.
        self._stop_flush_timer()
        self._pending.clear()
        if self._stream is not None:
            # Cancel without awaiting: the task may be appending to a Markdown that
            # is being removed with us, and waiting for that could never end.
            stream, self._stream = self._stream, None
            stream._pending.clear()
            if stream._task is not None:
                stream._task.cancel()

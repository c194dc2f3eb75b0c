"""The assistant's reply: Markdown streamed with ``Markdown.get_stream`` (batched appends).

Deltas are collected and handed to the stream at most every ``FLUSH_INTERVAL``
seconds, never one append per delta. A Markdown append re-parses the last
block and re-joins the document, so a long reply is split into segments
(separate Markdown widgets, cut at a blank line outside code fences once a
segment passes ``SEGMENT_CHARS``, or at any line/word break past
``FORCE_CHARS``): each append then costs the same at the end of a 200 KB reply
as at its start. Linkify is off: it dominates parse time and links do not
open from the conversation anyway (``open_links=False``).
"""

from __future__ import annotations

import asyncio

from markdown_it import MarkdownIt
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownBlock, MarkdownStream

from widgets._literal import sanitize

FLUSH_INTERVAL = 1 / 25  # seconds: the screen is never more than this behind the stream
SEGMENT_CHARS = 4_000
FORCE_CHARS = 16_000


def _parser() -> MarkdownIt:
    return MarkdownIt("gfm-like").disable("linkify")


def _segment(text: str = "") -> Markdown:
    return Markdown(text, open_links=False, parser_factory=_parser, classes="assistant-segment")


async def stop_stream(stream: MarkdownStream) -> None:
    """Stop a Markdown stream and make sure everything written to it is appended.

    ``MarkdownStream.stop()`` cancels the stream's task and awaits it. If that task
    had not run yet, awaiting it raises the task's CancelledError in the caller, and
    a CancelledError escaping a Textual message handler ends that message loop
    silently (the App's: the dashboard quits by itself). Only a cancellation of
    the current task itself is passed on; the fragments the task never appended
    are appended here.
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


def cut_point(segment_chars: int, fence_open: bool, fragment: str) -> int | None:
    """Where to end the current segment within ``fragment`` (None: it all fits)."""
    room = SEGMENT_CHARS - segment_chars
    if len(fragment) <= room:
        return None
    start = max(0, room)
    fences = fence_open
    position = 0
    while True:
        index = fragment.find("\n\n", start)
        if index < 0:
            break
        fences ^= fragment.count("```", position, index) % 2 == 1
        position = index
        if not fences:
            return index + 2
        start = index + 2
    if segment_chars + len(fragment) <= FORCE_CHARS:
        return None
    force = max(0, FORCE_CHARS - segment_chars)
    inside = fence_open ^ (fragment.count("```", 0, force) % 2 == 1)
    if inside:
        return None  # never cut a code block in two
    for separator in ("\n", " "):
        index = fragment.find(separator, force)
        if index >= 0:
            return index + 1
    return None


class AssistantMessage(Vertical):
    """Markdown that grows by batched appends; never re-rendered whole per delta."""

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._initial = sanitize(text)
        self._segments: list[Markdown] = []
        self._segment_chars = 0
        self._fence_open = False
        self._stream: MarkdownStream | None = None
        self._chunks: list[str] = [text] if text else []
        self._pending: list[str] = []
        self._flush_timer: Timer | None = None
        self._finishing = False
        # The flush timer and finish() (awaited by the App) must not interleave: one
        # could stop the stream or start a segment under the other's feet.
        self._flush_lock = asyncio.Lock()
        self.appends = 0  # appends that reached a Markdown (for tests and benchmarks)
        self._initial_segments()

    def _initial_segments(self) -> None:
        # Built at construction: a flush may come before compose runs.
        text = self._initial
        parts: list[str] = []
        while True:
            cut = cut_point(0 if parts else self._segment_chars, False, text)
            if cut is None:
                parts.append(text)
                break
            parts.append(text[:cut])
            text = text[cut:]
        self._segments = [_segment(part) for part in parts]
        self._segment_chars = len(parts[-1])
        self._fence_open = parts[-1].count("```") % 2 == 1

    def compose(self):
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
        """The rendered Markdown blocks of every segment, in order."""
        return [child for segment in self._segments for child in segment.children if isinstance(child, MarkdownBlock)]

    @property
    def segment_count(self) -> int:
        return len(self._segments)

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
        if self._pending and not self._segments[-1].is_mounted:
            # A Markdown can only append once mounted; try again shortly (never block).
            self._flush_timer = self.set_timer(FLUSH_INTERVAL, self._flush)
            return
        if self._pending:
            fragment = sanitize("".join(self._pending))
            self._pending.clear()
            while fragment:
                cut = cut_point(self._segment_chars, self._fence_open, fragment)
                head, fragment = (fragment, "") if cut is None else (fragment[:cut], fragment[cut:])
                await self._write(head)
                if cut is not None:
                    await self._next_segment()
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
            self._stream = Markdown.get_stream(self._segments[-1])
        self.appends += 1
        self._segment_chars += len(fragment)
        self._fence_open ^= fragment.count("```") % 2 == 1
        await self._stream.write(fragment)

    async def _next_segment(self) -> None:
        await self._stop_stream()
        segment = _segment()
        self._segments.append(segment)
        self._segment_chars = 0
        self._fence_open = False
        await self.mount(segment)

    async def finish(self) -> None:
        """The reply is complete: flush what is pending, then stop the stream."""
        self._finishing = True
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        await self._flush()

    async def on_unmount(self) -> None:
        # Being removed: drop what is pending instead of appending to a dead widget.
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        self._pending.clear()
        if self._stream is not None:
            # Cancel without awaiting: the task may be appending to a Markdown that
            # is being removed with us, and waiting for that could never end.
            stream, self._stream = self._stream, None
            stream._pending.clear()
            if stream._task is not None:
                stream._task.cancel()

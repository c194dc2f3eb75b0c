"""The assistant's reply: Markdown streamed with ``Markdown.get_stream`` (batched appends).

Deltas are collected and handed to the stream at most every ``FLUSH_INTERVAL``
seconds: appending re-parses the last block, so one append per delta would
make a long reply quadratic. Linkify is off: it dominates parse time and links
do not open from the conversation anyway (``open_links=False``).
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from textual.timer import Timer
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownStream

from widgets._literal import sanitize

FLUSH_INTERVAL = 1 / 25  # seconds: the screen is never more than this behind the stream


def _parser() -> MarkdownIt:
    return MarkdownIt("gfm-like").disable("linkify")


class AssistantMessage(Markdown):
    """Markdown that grows by batched appends; never re-rendered whole per delta."""

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(sanitize(text), open_links=False, parser_factory=_parser, **kwargs)
        self._stream: MarkdownStream | None = None
        self._chunks: list[str] = [text] if text else []
        self._pending: list[str] = []
        self._flush_timer: Timer | None = None
        self.appends = 0  # how many appends reached the Markdown (for tests and benchmarks)

    @property
    def text(self) -> str:
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

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
        if not self._pending:
            return
        fragment = sanitize("".join(self._pending))
        self._pending.clear()
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        self.appends += 1
        await self._stream.write(fragment)

    async def finish(self) -> None:
        """Flush what is pending and stop the stream."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
        await self._flush()
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()

    async def on_unmount(self) -> None:
        # Being removed: drop what is pending instead of appending to a dead widget.
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        self._pending.clear()
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream._pending.clear()
            await stream.stop()

"""The assistant's reply: Markdown streamed with ``Markdown.get_stream`` (batched appends)."""

from __future__ import annotations

from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownStream

from widgets._literal import sanitize


class AssistantMessage(Markdown):
    """Markdown that grows by appends; never re-rendered whole per delta."""

    def __init__(self, text: str = "", **kwargs) -> None:
        super().__init__(sanitize(text), open_links=False, **kwargs)
        self._stream: MarkdownStream | None = None
        self._chunks: list[str] = [text] if text else []

    @property
    def text(self) -> str:
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    async def append_text(self, delta: str) -> None:
        """Queue a delta; the stream joins pending deltas into one append."""
        if not delta:
            return
        self._chunks.append(delta)
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        await self._stream.write(sanitize(delta))

    async def finish(self) -> None:
        """Flush what is pending and stop the stream."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()

    async def on_unmount(self) -> None:
        # Being removed: drop what is pending instead of appending to a dead widget.
        if self._stream is not None:
            self._stream._pending.clear()
            await self.finish()

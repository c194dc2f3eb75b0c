"""The model's thinking, collapsed to one line (click to unfold)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import var
from textual.widget import Widget

from widgets._literal import sanitize


class ThinkingLine(Widget):
    """Thinking text: one line while collapsed, the whole text when ``-expanded``."""

    expanded = var(False, toggle_class="-expanded")

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._parts: list[str] = [text] if text else []
        self._chars = len(text)
        self._head = text[:200]

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def append(self, delta: str) -> None:
        self._parts.append(delta)
        self._chars += len(delta)
        if len(self._head) < 200:
            self._head = (self._head + delta)[:200]
        if self.expanded:
            self.refresh(layout=True)
        else:
            self.refresh()

    def watch_expanded(self, _expanded: bool) -> None:
        self.refresh(layout=True)

    def on_click(self) -> None:
        self.expanded = not self.expanded

    def render(self) -> Text:
        if self.expanded:
            return Text(f"✻ thinking ({self._chars:,} chars)\n{sanitize(self.text)}", end="")
        # Only the head is needed for one line; never join megabytes per delta.
        head = sanitize(self._head).replace("\n", " ")
        line = Text(f"✻ thinking ({self._chars:,} chars) {head}", no_wrap=True, overflow="ellipsis", end="")
        # Cut here, with "…": drawn as is, the line broke at a word and read as the whole thought.
        if self.size.width and line.cell_len > self.size.width:
            line.truncate(self.size.width, overflow="ellipsis")
        return line

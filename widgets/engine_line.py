"""A line from the context engine (compaction, warning, breaker, ...) in its own style."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from widgets._literal import literal

# kind -> icon; the kind is also the CSS class (-warning, -compaction, ...) styled in TCSS
ENGINE_ICONS = {
    "info": "·",
    "warning": "▲",
    "compaction": "⇣",
    "compaction-failed": "✗",
    "micro": "✂",
    "overflow": "⇣",
    "breaker": "⏸",
    "cut": "✂",
    "retry": "↻",
    "error": "✗",
    "interrupted": "⏹",
    "queued": "⏳",
    "hidden": "…",
}


class EngineLine(Static):
    """One engine event as a visible line (``kind`` picks the style)."""

    def __init__(self, kind: str, text: str, **kwargs: Any) -> None:
        icon = ENGINE_ICONS.get(kind, "·")
        super().__init__(literal(f"{icon} {text}"), **kwargs)
        self.kind = kind
        self.text = text
        # Not mounted yet: its styles are worked out as it mounts. Updating them now styled a line
        # that is in no DOM (0.5 ms a line; a session's notices and tool lines are many).
        self.add_class(f"-{kind}", update=False)

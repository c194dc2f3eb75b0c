"""A prompt the user sent, shown literally."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from widgets._literal import literal


class UserPrompt(Static):
    """The user's message in the conversation."""

    def __init__(self, text: str, **kwargs: Any) -> None:
        super().__init__(literal(text), **kwargs)
        self.text = text

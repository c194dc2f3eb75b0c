"""Literal display of untrusted text (model output, tool output).

Not a widget: the one helper every widget uses so that markup such as
``[bold]`` and terminal escape sequences never take effect. Text goes into
``rich.text.Text`` (never parsed as markup) after control characters have
been replaced by visible stand-ins (ESC shows as ``␛``) by the one sanitizer
of the project (``app.kernel.sanitize.sanitize_for_display``, reached through
``app.kernel.describe``), so an escape sequence reads as what it is and does nothing.
"""

from __future__ import annotations

from rich.text import Text

from app.kernel.describe import sanitize_for_display


def sanitize(text: str) -> str:
    """Make untrusted text inert for the terminal (newlines and tabs kept)."""
    return sanitize_for_display(text)


def literal(text: str, style: str = "") -> Text:
    """A Text holding ``text`` exactly as written (no markup, no escapes)."""
    return Text(sanitize(text), style=style, no_wrap=False, end="")

"""Literal display of untrusted text (model output, tool output).

Not a widget: the one helper every widget uses so that markup such as
``[bold]`` and terminal escape sequences never take effect. Text goes into
``rich.text.Text`` (never parsed as markup) after control characters have
been replaced by visible stand-ins (ESC shows as ``␛``), so an escape
sequence reads as what it is and does nothing. When ``app.sanitize`` exists
its ``sanitize_for_display`` is used; the fallback below does the same job.
"""

from __future__ import annotations

import re


from rich.text import Text

_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # control pictures: ␛ ␀ ␇ ...
    if code == 0x7F:
        return "\u2421"  # ␡
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"  # lone surrogate (from invalid UTF-8 decoded with surrogateescape)
    return f"<U+{code:04X}>"  # C1 controls and bidi overrides: visible, inert


def _fallback_sanitize(text: str) -> str:
    return _CONTROL.sub(_stand_in, text)


try:  # the shared helper (issue 6), when it exists
    from app.sanitize import sanitize_for_display as _shared_sanitize  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on another helper's progress
    _shared_sanitize = None


def sanitize(text: str) -> str:
    """Make untrusted text inert for the terminal (newlines and tabs kept)."""
    if _shared_sanitize is not None:
        try:
            text = _shared_sanitize(text)
        except Exception:  # a helper bug must not crash the dashboard
            pass
    # Always run ours too: cheap, and guarantees no ESC reaches a Strip.
    return _fallback_sanitize(text)


def literal(text: str, style: str = "") -> Text:
    """A Text holding ``text`` exactly as written (no markup, no escapes)."""
    return Text(sanitize(text), style=style, no_wrap=False, end="")



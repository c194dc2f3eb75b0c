"""One tool call in the conversation: name, short argument, size, duration, truncated badge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.message import Message
from textual.widget import Widget

from app.surfaces.view_model import ToolCallRecord
from widgets._literal import sanitize

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rich.style import Style



def human_chars(count: int) -> str:
    """1234 -> '1.2K chars'."""
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}M chars"
    if count >= 1_000:
        return f"{count / 1_000:.1f}K chars"
    return f"{count} chars"


def human_duration(ms: float) -> str:
    if ms >= 60_000:
        return f"{ms / 60_000:.1f}m"
    if ms >= 1_000:
        return f"{ms / 1_000:.1f}s"
    return f"{ms:.0f}ms"


# The view model's record of a call is what every line draws (widgets keep no call state of their own).
ToolCallInfo = ToolCallRecord


STATUS_ICONS = {"running": "⋯", "ok": "✓", "error": "✗", "interrupted": "⏹"}


def tool_call_text(
    info: ToolCallInfo, styles: "Mapping[str, Style | str]", summary_width: int = 60, compact: bool = False,
    width: int | None = None,
) -> Text:
    """The one-line form shared by the conversation and the tool list (``compact``: narrower).

    With the line's ``width``, a running call's progress keeps its place: the arguments are
    shortened first (at 80 columns they took the whole line and the progress was never seen)."""
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    text.append(f"{STATUS_ICONS.get(info.status, '?')} ", styles.get(info.status, ""))
    text.append(sanitize(info.name), styles.get("name", ""))
    summary = sanitize(info.summary).replace("\n", " ")
    progress = sanitize(info.progress).replace("\n", " ") if info.status == "running" and info.progress else ""
    if progress and width is not None:
        room = width - (2 + len(info.name) + 1) - (2 + len(progress))
        summary_width = min(summary_width, room)
        if summary_width < 6:  # too little to say anything: the progress alone
            summary = ""
    if len(summary) > summary_width:
        summary = summary[: summary_width - 1] + "…"
    if summary:
        text.append(f" {summary}")
    if progress:
        text.append(f"  {progress}", styles.get("dim", ""))
    if info.status == "interrupted":
        # its size and duration would describe the stand-in result, not the tool
        text.append("  interrupted", styles.get("dim", ""))
    elif info.status != "running":
        size = human_chars(info.original_chars)
        if info.truncated:
            if compact:
                size = f"{human_chars(info.kept_chars).removesuffix(' chars')}/{size}"
            else:
                size = f"{human_chars(info.kept_chars)} of {size}"
        text.append(f"  {size}", styles.get("dim", ""))
        text.append(f"  {human_duration(info.duration_ms)}", styles.get("dim", ""))
        if info.truncated:
            text.append("  ")
            text.append(" truncated ", styles.get("badge", ""))
        if info.cut_before_send:
            text.append(" ")
            text.append(" cut " if compact else " cut before send ", styles.get("badge", ""))
        if info.cleared:
            text.append(" ")
            text.append(" cleared " if compact else " cleared from context ", styles.get("badge", ""))
        elif info.restored:
            text.append("  restored" if compact else "  restored to the context", styles.get("dim", ""))
    return text


TOOL_STYLE_KEYS = ("running", "ok", "error", "interrupted", "name", "dim", "badge")


class ToolCallLine(Widget):
    """A tool call as one line; clicking it selects the call in the tool output panel.

    Its colours come from the parent's ``tool_styles()`` (the conversation's
    component classes): per-line component classes would cost a stylesheet
    pass for every line mounted, and a long session mounts thousands.
    """

    @dataclass
    class Selected(Message):
        call_id: str

    def __init__(self, info: ToolCallInfo, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.info = info

    def update_info(self, info: ToolCallInfo) -> None:
        self.info = info
        self.refresh()

    def render(self) -> Text:
        tool_styles = getattr(self.parent, "tool_styles", None)
        styles = tool_styles() if callable(tool_styles) else {}
        return tool_call_text(self.info, styles, width=self.size.width)

    def on_click(self) -> None:
        self.post_message(self.Selected(self.info.id))

"""One tool call in the conversation: name, short argument, size, duration, and its badges
(truncated, cleared, evicted, pinned)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.message import Message
from textual.widget import Widget

from app.surfaces.tool_calls import ToolCallRecord
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
# Below this many cells an argument says nothing ("cat…"): the line goes without it.
SUMMARY_MIN = 6


@dataclass
class _Piece:
    """One part after the arguments; ``drop`` ranks what goes first when the line is too narrow
    (0: never: the status words and badges are what the line is for)."""

    text: str
    style: "Style | str"
    drop: int = 0
    short: str = ""  # a narrower form, tried before the piece is dropped


def tool_call_text(
    info: ToolCallInfo, styles: "Mapping[str, Style | str]", summary_width: int = 60, compact: bool = False,
    width: int | None = None,
) -> Text:
    """The one-line form shared by the conversation and the tool list (``compact``: narrower).

    With the line's ``width``, the line fits it and what says most stays in view: the status,
    the badges (*truncated*, *cleared*) and a running call's progress never give way; the
    duration goes first, then the size (its short form first), then the arguments are
    shortened (in the 30-column tool list at 80x24 the badge was cut off, the conversation's
    sizes cut to "58"; the arguments tell one call from the next, the size is on the status row)."""
    head = Text(no_wrap=True, overflow="ellipsis", end="")
    head.append(f"{STATUS_ICONS.get(info.status, '?')} ", styles.get(info.status, ""))
    head.append(sanitize(info.name), styles.get("name", ""))
    summary = sanitize(info.summary).replace("\n", " ")
    dim = styles.get("dim", "")
    badge = styles.get("badge", "")
    pieces: list[_Piece] = []
    if info.status == "running" and info.progress:
        pieces.append(_Piece("  " + sanitize(info.progress).replace("\n", " "), dim))
    if info.status == "interrupted":
        # its size and duration would describe the stand-in result, not the tool
        pieces.append(_Piece("  interrupted", dim))
    elif info.status != "running":
        size = short_size = human_chars(info.original_chars)
        if info.truncated:
            short_size = f"{human_chars(info.kept_chars).removesuffix(' chars')}/{size}"
            size = short_size if compact else f"{human_chars(info.kept_chars)} of {size}"
        pieces.append(_Piece(f"  {size}", dim, drop=2, short=f"  {short_size}"))
        pieces.append(_Piece(f"  {human_duration(info.duration_ms)}", dim, drop=1))
        if info.truncated:
            pieces += [_Piece("  ", ""), _Piece(" truncated ", badge)]
        if info.cut_before_send:
            pieces += [_Piece(" ", ""), _Piece(" cut " if compact else " cut before send ", badge)]
        if info.evicted:  # the user took it out (d): a cleared result by the user's hand
            pieces += [_Piece(" ", ""), _Piece(" evicted " if compact else " evicted by you ", badge)]
        elif info.cleared:
            pieces += [_Piece(" ", ""), _Piece(" cleared " if compact else " cleared from context ", badge)]
        elif info.pinned:  # the user pinned it (p): clearing and compaction keep it verbatim
            pieces += [_Piece(" ", ""), _Piece(" pinned " if compact else " pinned in context ", badge)]
        elif info.restored:
            pieces.append(_Piece("  restored" if compact else "  restored to the context", dim))
    if info.rewound:  # a turn a rewind abandoned: listed still, out of the context
        pieces.append(_Piece("  rewound", dim))  # short: the call's arguments still tell it apart
    summary_room = summary_width
    if width is not None:
        def room_left() -> int:
            return width - head.cell_len - sum(cell_len(piece.text) for piece in pieces) - 1

        if room_left() < min(cell_len(summary), summary_width):
            pieces = [piece for piece in pieces if piece.drop != 1]
        if room_left() < min(cell_len(summary), summary_width):
            pieces = [replace(piece, text=piece.short or piece.text) for piece in pieces]
        if room_left() < min(cell_len(summary), summary_width):
            pieces = [piece for piece in pieces if piece.drop != 2]
        summary_room = min(summary_width, room_left())
        if summary_room < SUMMARY_MIN:  # too little to say anything: the status alone
            summary = ""
        if room_left() < 0:  # two badges in the 30-column list ("tr" was all that showed of the first):
            # the badges take their short words and the tool's name gives way, never a badge
            short_badges = {"  ": " ", " truncated ": " trunc "}
            pieces = [replace(piece, text=short_badges.get(piece.text, piece.text)) for piece in pieces]
            head.truncate(max(2, width - sum(cell_len(piece.text) for piece in pieces) - 1), overflow="ellipsis")
    if summary and cell_len(summary) > summary_room:
        summary = set_cell_size(summary, summary_room - 1) + "…"  # cells: a wide character takes two
    text = head
    if summary:
        text.append(f" {summary}")
    for piece in pieces:
        text.append(piece.text, piece.style)
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

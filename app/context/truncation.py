"""The head+tail cut: the first and last 40% of an output kept, one notice between.

Pure logic. The tool registry applies it to every tool result (it owns truncation);
the engine applies it once more to a result that alone would cross the blocking
line. Living here, below both, keeps app.context and app.tools free of a cycle.
"""

from __future__ import annotations

__all__ = ["join_head_tail", "truncate_head_tail", "truncation_notice"]

_NOTICE_START = "\n\n… [output truncated: "
_NOTICE_END = "] …\n\n"


def truncation_notice(
    total_chars: int, left_out: int, full_output_path: str | None, saved_note: str = ""
) -> str:
    """The one line put where the middle of a truncated output was.

    ``saved_note`` says when the saved file is not the whole output (it hit the cap).
    """
    saved = ""
    if full_output_path:
        saved = f" Full output saved to {full_output_path}" + (f" ({saved_note})." if saved_note else ".")
    elif saved_note:  # why there is no file (the session's cap on saved outputs was reached)
        saved = f" {saved_note[:1].upper()}{saved_note[1:]}."
    return (
        f"{_NOTICE_START}{total_chars:,} characters in total, {left_out:,} left out in the "
        f"middle.{saved} Narrow it down: grep for what you need, use head/tail, or read_file "
        f"with offset and limit on the saved file.{_NOTICE_END}"
    )


def join_head_tail(
    head: str, tail: str, total_chars: int, full_output_path: str | None, saved_note: str = ""
) -> str:
    """``head`` + notice + ``tail``, for a caller that already holds only the two ends."""
    left_out = total_chars - len(head) - len(tail)
    return head + truncation_notice(total_chars, left_out, full_output_path, saved_note) + tail


def _cut(
    text: str,
    max_chars: int,
    full_output_path: str | None,
    original_chars: int | None,
    saved_note: str = "",
) -> tuple[str, int]:
    """The truncated text and how many characters of the output it kept."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text, len(text)
    keep = max_chars * 2 // 5
    total = max(original_chars or 0, len(text))
    head, tail = text[:keep], text[len(text) - keep :]
    return join_head_tail(head, tail, total, full_output_path, saved_note), 2 * keep


def truncate_head_tail(
    text: str,
    max_chars: int,
    full_output_path: str | None = None,
    original_chars: int | None = None,
) -> str:
    """Keep the first and last 40% of the characters of ``text`` with a notice between.

    Unchanged when ``text`` fits or ``max_chars`` <= 0. ``original_chars`` is the
    real size when ``text`` is already a cut-down copy (run_bash spilled to disk).
    """
    return _cut(text, max_chars, full_output_path, original_chars)[0]


def _notice_length(text: str) -> int:
    start = text.find(_NOTICE_START)
    if start < 0:
        return 0
    end = text.find(_NOTICE_END, start)
    return 0 if end < 0 else end + len(_NOTICE_END) - start



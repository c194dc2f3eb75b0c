"""read_saved_output: the model re-reads a tool output that was cut or cleared.

Every output the registry truncated, and every result micro-compaction
cleared, is saved under the session's ``tool-results/<call id>.txt``. The
stub or the truncation notice tells the model so; this tool reads such a file
by the call id (the id of the tool call whose result it was), a range of
lines at a time, so the model needs no path and cannot wander outside the
session's folder. It reads through the same bounded, cancellable path as
read_file.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from pydantic import Field

from app.tools.base import ArgsTool, ToolArgs, ToolContext, ToolInputError, ToolOutput
from app.tools.files import MAX_LINES, ReadRange, read_opened_range
from app.tools.workspace import CancelFlag, OpenedFile, run_blocking, special_file_message

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def saved_output_path(tool_results_dir: Path, call_id: str) -> Path | None:
    """The saved file of ``call_id``; the registry and the engine name files slightly differently."""
    stems = [re.sub(r"[^A-Za-z0-9_.-]", "_", call_id).strip(".")[:120],
             ("".join(c if c.isalnum() or c in "-_" else "_" for c in call_id)[:100] or "result")]
    for stem in stems:
        if not stem:
            continue
        candidate = tool_results_dir / f"{stem}.txt"
        try:
            if candidate.resolve().parent == tool_results_dir.resolve() and candidate.is_file():
                return candidate
        except OSError:
            continue
    return None


def _open_saved(path: Path, call_id: str) -> OpenedFile:
    """The saved file, opened without following a symlink planted in its place."""
    fd = os.open(path, _OPEN_FLAGS)
    st = os.fstat(fd)
    shown = f"saved output of {call_id}"
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ToolInputError(special_file_message(shown, st.st_mode))
    return OpenedFile(fd=fd, real=path, shown=shown, st=st)


class ReadSavedOutputArgs(ToolArgs):
    call_id: str = Field(description="The id of the tool call whose output to read.")
    offset: int = Field(1, ge=1, description="1-based line to start at (default 1).")
    # Above the maximum is clamped, not refused.
    limit: int = Field(
        MAX_LINES,
        ge=1,
        description=f"Number of lines (default and maximum {MAX_LINES}).",
        json_schema_extra={"maximum": MAX_LINES},
    )


class ReadSavedOutputTool(ArgsTool[ReadSavedOutputArgs]):
    name = "read_saved_output"
    Args = ReadSavedOutputArgs
    mutating = False
    description = (
        "Read the full saved output of an earlier tool call whose result was truncated or cleared "
        "from the conversation (its result says 'Full output saved' or 'Old tool result cleared'). "
        "Give the call_id of that tool call. Returns numbered lines; read a range with offset "
        f"(1-based first line) and limit (default and maximum {MAX_LINES:,}). Narrow down with offset "
        "and limit instead of reading a huge output whole."
    )

    async def call(self, args: ReadSavedOutputArgs, ctx: ToolContext) -> ToolOutput:
        call_id = args.call_id.strip()
        offset, limit = args.offset, min(args.limit, MAX_LINES)
        path = saved_output_path(Path(ctx.tool_results_dir), call_id)
        if path is None:
            raise ToolInputError(
                f"No saved output for call_id {call_id!r}. Only outputs that were truncated or cleared are "
                "saved; use the id of that tool call (the tool_use / tool_call id), or run the tool again.")

        def read(flag: CancelFlag) -> ReadRange:
            return read_opened_range(_open_saved(path, call_id), offset, limit, flag, ctx.read_max_bytes)

        try:
            read_range = await run_blocking(read)
        except OSError as exc:
            raise ToolInputError(f"Cannot read the saved output of {call_id}: {exc.strerror or exc}.") from None
        if not read_range.lines:
            return ToolOutput(f"The saved output of {call_id} is empty (0 lines).")
        content = "\n".join(read_range.lines)
        if read_range.total_lines is None or read_range.last_line < read_range.total_lines:
            of_total = "" if read_range.total_lines is None else f" of {read_range.total_lines:,}"
            content += (f"\n[Showing lines {read_range.first_line}-{read_range.last_line}{of_total} of the "
                        f"saved output; to continue, call read_saved_output with offset={read_range.last_line + 1}.]")
        return ToolOutput(content)

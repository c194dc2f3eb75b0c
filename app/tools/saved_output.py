"""read_saved_output: the model re-reads a tool output that was cut or cleared.

Every output the registry truncated, and every result micro-compaction
cleared, is saved under the session's ``tool-results/<call id>.txt``. The
stub or the truncation notice tells the model so; this tool reads such a file
by the call id (the id of the tool call whose result it was), a range of
lines at a time, so the model needs no path and cannot wander outside the
session's folder.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from app.messages import ToolSpec
from app.tools.base import ToolContext, ToolInputError, ToolOutput
from app.tools.files import MAX_LINES, _read_range
from app.tools.workspace import int_arg, str_arg


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


class ReadSavedOutputTool:
    mutating = False
    spec = ToolSpec(
        name="read_saved_output",
        description=(
            "Read the full saved output of an earlier tool call whose result was truncated or cleared "
            "from the conversation (its result says 'Full output saved' or 'Old tool result cleared'). "
            "Give the call_id of that tool call. Returns numbered lines; read a range with offset "
            f"(1-based first line) and limit (default and maximum {MAX_LINES:,}). Narrow down with offset "
            "and limit instead of reading a huge output whole."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "The id of the tool call whose output to read."},
                "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LINES,
                          "description": f"Number of lines (default and maximum {MAX_LINES})."},
            },
            "required": ["call_id"],
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        call_id = str_arg(args, "call_id").strip()
        offset = int_arg(args, "offset", 1)
        limit = min(int_arg(args, "limit", MAX_LINES), MAX_LINES)
        path = saved_output_path(Path(ctx.tool_results_dir), call_id)
        if path is None:
            raise ToolInputError(
                f"No saved output for call_id {call_id!r}. Only outputs that were truncated or cleared are "
                "saved; use the id of that tool call (the tool_use / tool_call id), or run the tool again.")
        read = await asyncio.to_thread(_read_range, path, f"saved output of {call_id}", offset, limit)
        if not read.lines:
            return ToolOutput(f"The saved output of {call_id} is empty (0 lines).")
        content = "\n".join(read.lines)
        if read.total_lines is None or read.last_line < read.total_lines:
            of_total = "" if read.total_lines is None else f" of {read.total_lines:,}"
            content += (f"\n[Showing lines {read.first_line}-{read.last_line}{of_total} of the saved output; "
                        f"to continue, call read_saved_output with offset={read.last_line + 1}.]")
        return ToolOutput(content)

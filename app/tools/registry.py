"""The tool registry: owns the tool definitions, runs every tool, truncates every result once.

Truncating here and never in the tools means nothing slips through: built-in
tools, tools added later, anything. A result longer than ``max_output``
characters keeps its first 40% and last 40% (errors, test summaries and exit
codes live at the end) with one notice between them, and the full output is
written to the session's ``tool-results/`` folder so the model can narrow in.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.context.truncation import (  # the cut itself is pure logic; the registry applies it
    _cut,
    _notice_length,
    join_head_tail,
)
from app.kernel.messages import ToolResultImage, ToolSpec
from app.kernel.private_files import open_private as open_private  # re-exported: run_bash opens its spill with it
from app.kernel.markers import BAD_ARGUMENTS_KEY
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_model
from app.tools.base import (
    DEFAULT_MAX_SAVED_OUTPUT,
    ArgsTool,
    SavedOutputBudget,
    Tool,
    ToolContext,
    ToolInputError,
    ToolOutput,
)
from app.tools.saved_file import CappedFile as CappedFile  # re-exported: MCP logs cap with it
from app.tools.saved_file import safe_file_stem as safe_file_stem
from app.tools.workspace import output_limit

DEFAULT_MAX_OUTPUT = 40_000

def save_full_output(
    text: str, tool_results_dir: Path, call_id: str, max_bytes: int = DEFAULT_MAX_SAVED_OUTPUT
) -> tuple[str | None, str]:
    """Write an untruncated output to ``tool_results_dir/<call id>.txt`` (0600, capped).

    Returns its path (None on a disk error) and the note saying what the cap left out.
    """
    target = Path(tool_results_dir) / f"{safe_file_stem(call_id)}.txt"
    try:
        capped = CappedFile(open_private(target), max_bytes)
        try:
            capped.write(text.encode("utf-8", errors="replace"))
        finally:
            capped.close()
    except OSError:
        return None, ""  # the notice then names no path
    return str(target), capped.note()


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _without_surrogates(text: str) -> str:
    """Lone surrogates (undecodable bytes in names, bad escapes) as ``\\xNN`` text.

    They cannot be encoded as UTF-8, so one of them in a result would break the
    JSON of the next request and the transcript line.
    """
    if text.isascii() or not _SURROGATE.search(text):  # isascii: one C pass, the regex a character at a time
        return text
    return text.encode("utf-8", "surrogateescape" if _only_escapes(text) else "backslashreplace").decode(
        "utf-8", "backslashreplace"
    )


def _only_escapes(text: str) -> bool:
    return all(0xDC80 <= ord(c) <= 0xDCFF for c in _SURROGATE.findall(text))


@dataclass
class ToolRun:
    """One finished tool call, as the engine records it."""

    content: str  # exactly what the model sees
    is_error: bool
    truncated: bool
    original_chars: int
    kept_chars: int
    full_output_path: str | None
    duration_ms: float
    images: list[ToolResultImage] = field(default_factory=list)  # for the model, beside the text


class ToolRegistry:
    def __init__(self, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        self.max_output = max_output
        self._tools: dict[str, Tool] = {}
        # Limits declared at registration, per tool name; the rest use ``max_output``.
        self._output_limits: dict[str, int] = {}

    def register(self, tool: Tool, *, max_output: int | None = None) -> None:
        """Add ``tool``. ``max_output`` is its own character limit (0: never truncated),
        for a tool whose output has another size than the rest (an MCP server's, a
        plug-in's); None takes the tool's own ``output_limit`` if it has one, else the
        registry's limit, which ``--max-output`` sets."""
        name = tool.spec.name
        self._tools[name] = tool
        if max_output is None:  # a tool may declare its own (the task tool: its report's size)
            max_output = getattr(tool, "output_limit", None)
        if max_output is None:
            self._output_limits.pop(name, None)
        else:
            self._output_limits[name] = max(0, max_output)

    def unregister(self, name: str) -> None:
        """Remove tool ``name`` (an MCP server's tool it no longer offers after a reconnect)."""
        self._tools.pop(name, None)
        self._output_limits.pop(name, None)

    def output_limit_for(self, name: str) -> int:
        """The character limit a result of tool ``name`` is cut to (0: none)."""
        return self._output_limits.get(name, self.max_output)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def is_mutating(self, name: str) -> bool:
        tool = self._tools.get(name)
        return bool(tool and tool.mutating)

    async def run(self, name: str, args: Any, ctx: ToolContext) -> ToolRun:
        """Run one tool call. Never raises except for cancellation."""
        started = time.perf_counter()
        limit = self.output_limit_for(name)
        budget = ctx.saved_output_budget
        # Near the session's cap a call may save only what is left of it (0: nothing).
        call_ctx = ctx if budget.room >= ctx.max_saved_output else replace(ctx, max_saved_output=budget.room)
        token = output_limit.set(limit)
        try:
            output = await self._run_tool(name, args, call_ctx)
        finally:
            output_limit.reset(token)
        by_session_cap = call_ctx is not ctx
        if by_session_cap and output.saved_note:
            output = _session_capped(output, budget)
        run = self._finish(output, call_ctx, limit, by_session_cap=by_session_cap)
        if run.full_output_path is not None and run.full_output_path not in budget.counted_as_written:
            budget.used += _file_size(run.full_output_path)
        run.duration_ms = (time.perf_counter() - started) * 1000
        return run

    async def _run_tool(self, name: str, args: Any, ctx: ToolContext) -> ToolOutput:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolOutput(f"Unknown tool {name!r}. Available tools: {known}.", is_error=True)
        if not isinstance(args, dict):
            return ToolOutput(
                f"The arguments of {name} must be a JSON object, got {type(args).__name__}. "
                f"Call {name} again with an object matching its schema.",
                is_error=True,
            )
        if BAD_ARGUMENTS_KEY in args:  # too big or too deep: the provider never parsed them
            return ToolOutput(
                f"The arguments of your {name} call were refused and nothing was run: {args[BAD_ARGUMENTS_KEY]}. "
                f"Call {name} again with smaller, flatter arguments (split a large file into several calls).",
                is_error=True,
            )
        if "_raw_arguments" in args:
            raw = str(args["_raw_arguments"])
            shown = raw if len(raw) <= 300 else raw[:300] + "…"
            return ToolOutput(
                f"The arguments of your {name} call were not valid JSON: {shown!r}. "
                f"Call {name} again with a single valid JSON object matching its schema.",
                is_error=True,
            )
        # A tool with an argument model names what is missing itself, in its one-line error.
        missing = [key for key in tool.spec.input_schema.get("required", []) if key not in args]
        if missing and not isinstance(tool, ArgsTool):
            schema = json.dumps(tool.spec.input_schema.get("properties", {}))
            return ToolOutput(
                f"{name} is missing required argument(s): {', '.join(missing)}. "
                f"Call it again with them. Arguments: {schema}",
                is_error=True,
            )
        try:
            output = await tool.run(args, ctx)
        except asyncio.CancelledError:
            raise
        except ToolInputError as exc:
            return ToolOutput(str(exc), is_error=True)
        except Exception as exc:  # a tool bug must not kill the agent
            return ToolOutput(
                f"{name} failed unexpectedly: {type(exc).__name__}: {exc}. "
                "Try different arguments or another tool.",
                is_error=True,
            )
        if not isinstance(output, ToolOutput):
            return ToolOutput(f"{name} returned no output (internal error).", is_error=True)
        return output

    def _finish(self, output: ToolOutput, ctx: ToolContext, limit: int, *, by_session_cap: bool = False) -> ToolRun:
        # A provider key never needs to reach the model, the screen or the disk.
        raw = output.text
        total_hint = output.original_chars or 0
        precut = limit > 0 and len(raw) > 3 * limit
        if precut:
            # Only the ends can survive the cut, so only they are cleaned: a 15 MB
            # output then costs about a millisecond here instead of ~200 ms.
            total_hint = max(total_hint, len(raw))
            raw = raw[:limit] + raw[-limit:]
        text = redact(sanitize_for_model(_without_surrogates(raw)))
        total = max(total_hint, len(text))
        path = str(output.full_output_path) if output.full_output_path else None
        saved_note = output.saved_note
        # A tool that spilled to disk already holds only the ends of its output.
        truncated = total > len(text)
        kept = len(text) - _notice_length(text) if truncated else len(text)
        if limit > 0 and (len(text) > limit or precut):
            if path is None and ctx.max_saved_output <= 0:
                saved_note = ctx.saved_output_budget.not_saved_note()
            elif path is None:
                path, saved_note = save_full_output(
                    redact(output.text), ctx.tool_results_dir, ctx.call_id, ctx.max_saved_output
                )
                if saved_note and by_session_cap:
                    saved_note = _session_note(saved_note, ctx.saved_output_budget)
            if len(text) > limit:
                text, kept = _cut(text, limit, path, total, saved_note)
            else:  # cleaning shrank the ends below the limit: still say what was left out
                half = len(text) // 2
                text, kept = join_head_tail(text[:half], text[half:], total, path, saved_note), len(text)
            truncated = True
        return ToolRun(
            content=text,
            is_error=output.is_error,
            truncated=truncated,
            original_chars=total,
            kept_chars=kept,
            full_output_path=path if truncated else None,
            duration_ms=0.0,
            images=list(output.images),
        )


def _session_note(note: str, budget: SavedOutputBudget) -> str:
    """A per-call cap's note, for a file capped by what was left of the session's cap instead."""
    return note.replace("(max_saved_output)", f"(what was left of this session's cap of {budget.limit:,} bytes, "
                        "max_session_saved_output)")


def _session_capped(output: ToolOutput, budget: SavedOutputBudget) -> ToolOutput:
    """A tool's output whose own saved file (run_bash's) hit the session's cap, saying so."""
    if output.full_output_path is None:
        return output
    note = _session_note(output.saved_note, budget)
    return replace(output, text=output.text.replace(output.saved_note, note, 1), saved_note=note)


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def default_registry(max_output: int = DEFAULT_MAX_OUTPUT) -> ToolRegistry:
    """The built-in tools: five for the workspace, one to re-read saved outputs."""
    # The built-in tools load when a registry is built, not when the agent loop imports this module for its types.
    from app.tools.bash import RunBashTool
    from app.tools.files import EditFileTool, ListFilesTool, ReadFileTool, WriteFileTool
    from app.tools.saved_output import ReadSavedOutputTool

    registry = ToolRegistry(max_output)
    for tool in (ReadFileTool(), ListFilesTool(), RunBashTool(), WriteFileTool(), EditFileTool(),
                 ReadSavedOutputTool()):
        registry.register(tool)
    return registry

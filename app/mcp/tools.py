"""MCP tools as registry tools: prefixed names, the read-only rule, progress and user-only content.

The registry does the rest exactly as for the built-ins: argument checks,
head+tail truncation, the full output saved under tool-results/.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

from app.mcp.client import McpConnection, RemoteTool
from app.kernel.messages import ToolSpec
from app.kernel.redact import redact
from app.kernel.sanitize import sanitize_for_display
from app.tools.base import ToolContext, ToolOutput

# What both APIs accept as a tool name (Anthropic and OpenAI: ^[a-zA-Z0-9_-]{1,64}$).
MAX_TOOL_NAME = 64
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
PREFIX_SEPARATOR = "__"
# Content for the user alone is a line in the conversation, not a file: this much is shown.
MAX_USER_CONTENT_CHARS = 20_000
# Progress notifications of one call reach the session at most this often (seconds).
PROGRESS_INTERVAL = 0.1


def prefixed_name(server: str, tool: str, taken: set[str]) -> str:
    """``server__tool``, made valid for both APIs and unique among ``taken``."""
    base = _INVALID.sub("_", f"{server}{PREFIX_SEPARATOR}{tool}")
    if len(base) > MAX_TOOL_NAME:
        digest = hashlib.sha1(tool.encode()).hexdigest()[:8]
        base = f"{base[:MAX_TOOL_NAME - 9]}_{digest}"
    name, n = base, 1
    while name in taken:  # two remote names that clean up to the same one
        n += 1
        suffix = f"_{n}"
        name = base[:MAX_TOOL_NAME - len(suffix)] + suffix
    return name


def object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Both APIs want an object at the root of a tool's input schema."""
    if schema.get("type") == "object":
        return schema
    return {**schema, "type": "object", "properties": dict(schema.get("properties") or {})}


class McpTool:
    """One remote tool; ``mutating`` unless the server declared it read-only."""

    def __init__(self, connection: McpConnection, remote: RemoteTool, name: str) -> None:
        self.connection = connection
        self.remote = remote
        self.server = connection.name
        self.mutating = not remote.read_only
        description = remote.description.strip() or f"{remote.name} (no description)"
        self.spec = ToolSpec(name=name, description=f"[MCP {self.server}] {description}",
                             input_schema=object_schema(remote.input_schema))

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        call_id = ctx.call_id
        last_shown = -PROGRESS_INTERVAL

        def progress(done: float, total: float | None, message: str) -> None:
            # A server may send thousands a second: each is an event on the stream, the transcript
            # and the screen, so at most one per interval goes on (and the last one, complete).
            nonlocal last_shown
            now = time.monotonic()
            if now - last_shown >= PROGRESS_INTERVAL or (total is not None and done >= total):
                last_shown = now
                ctx.on_progress(call_id, done, total, message)

        def task_status(status: str, message: str) -> None:
            ctx.on_task_status(call_id, status, message)  # a status changes a few times a task: each is shown

        output = await self.connection.call_tool(self.remote.name, args, on_progress=progress,
                                                 on_task_status=task_status)
        if output.for_user:
            shown = redact(sanitize_for_display(output.for_user))
            if len(shown) > MAX_USER_CONTENT_CHARS:
                shown = f"{shown[:MAX_USER_CONTENT_CHARS]}\n… [{len(shown) - MAX_USER_CONTENT_CHARS:,} more characters not shown]"
            ctx.on_user_content(call_id, shown)
        return output


def offered(remote: RemoteTool) -> bool:
    """Whether the model may be offered this tool: a task-only tool only when its server accepts task
    calls (otherwise every call would fail)."""
    return not remote.task_required or remote.as_task



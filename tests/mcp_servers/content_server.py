"""A real MCP server (the SDK's MCPServer) over stdio, for the precise cases of tool results.

    python tests/mcp_servers/content_server.py

- ``progress(steps, every_ms)``: a progress notification every ``every_ms`` ms, then "finished N steps".
- ``silent(seconds)``: waits without a word, then answers.
- ``twin(kilobytes)``: the same data as text and as structured content (server-filesystem's shape).
- ``structured_only``: structured content and no content at all.
- ``for_user``: one part for the assistant, one for the user alone.
- ``image``: a 1x1 PNG and a line of text.
- ``link``: a resource_link.
- ``big(megabytes)``: a text result that size (ASCII).
- ``log(text)``: sends ``text`` as an info log notification, then answers "logged".
"""

from __future__ import annotations

import asyncio
import base64

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

# A 1x1 transparent PNG.
PNG_1X1 = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()

server = MCPServer("content")


@server.tool(structured_output=False)
async def progress(steps: int, every_ms: int, ctx: Context) -> str:
    for step in range(1, steps + 1):
        await asyncio.sleep(every_ms / 1000)  # the server's own pace: it is what is being tested
        await ctx.report_progress(step, steps, f"step {step}")
    return f"finished {steps} steps"


@server.tool(structured_output=False)
async def silent(seconds: float) -> str:
    await asyncio.sleep(seconds)  # a server that says nothing while it works
    return "woke up"


@server.tool()
def twin(kilobytes: int) -> types.CallToolResult:
    rows = [f"row {n:06d} " + "x" * 40 for n in range(kilobytes * 1024 // 52)]
    return types.CallToolResult(content=[types.TextContent(type="text", text="\n".join(rows))],
                                structured_content={"rows": rows})


@server.tool()
def structured_only() -> types.CallToolResult:
    return types.CallToolResult(content=[], structured_content={"temperature": 21.5, "unit": "C"})


@server.tool()
def for_user() -> types.CallToolResult:
    return types.CallToolResult(content=[
        types.TextContent(type="text", text="summary for the model: 3 files changed"),
        types.TextContent(type="text", text="PRIVATE-DIFF-FOR-THE-USER-ONLY",
                          annotations=types.Annotations(audience=["user"])),
    ])


@server.tool()
def image() -> types.CallToolResult:
    return types.CallToolResult(content=[
        types.TextContent(type="text", text="a one-pixel chart"),
        types.ImageContent(type="image", data=PNG_1X1, mime_type="image/png"),
    ])


@server.tool()
def link() -> types.CallToolResult:
    return types.CallToolResult(content=[
        types.ResourceLink(type="resource_link", uri="file:///srv/report.pdf", name="report.pdf",
                           mime_type="application/pdf"),
    ])


@server.tool(structured_output=False)
def big(megabytes: int) -> str:
    line = "0123456789" * 9 + "abcdefghi\n"  # 100 bytes
    return line * (megabytes * 10_000)


@server.tool(structured_output=False)
async def log(text: str, ctx: Context) -> str:
    await ctx.info(text)
    return "logged"


if __name__ == "__main__":
    server.run("stdio")

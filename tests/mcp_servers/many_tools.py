"""A real MCP server (the SDK's MCPServer, formerly FastMCP) over stdio with many tools.

    python tests/mcp_servers/many_tools.py [--tools 200] [--http PORT]

Tool ``tool_NNN`` echoes its arguments; every tool has a real schema and a
paragraph of description, like the servers people plug in, so 200 of them
weigh tens of thousands of tokens. Even-numbered tools are declared
read-only. ``tool_000`` also takes ``lines``: that many numbered lines come
back, to meet the registry's truncation.
"""

from __future__ import annotations

import argparse
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field


def make_tool(index: int):
    def tool(
        query: Annotated[str, Field(description="What to look up; free text, matched case-insensitively.")],
        limit: Annotated[int, Field(description="Most results to return (1-1000).", ge=1, le=1000)] = 20,
        include_archived: Annotated[bool, Field(description="Also search archived records.")] = False,
        lines: Annotated[int, Field(description="Return this many numbered lines (for size tests).", ge=0)] = 0,
    ) -> str:
        if lines:
            return "\n".join(f"tool_{index:03d} line {n:06d} for {query}" for n in range(1, lines + 1))
        return f"tool_{index:03d} got query={query!r} limit={limit} include_archived={include_archived}"

    return tool


def build(count: int) -> MCPServer:
    server = MCPServer("many-tools")
    for index in range(count):
        server.add_tool(
            make_tool(index),
            name=f"tool_{index:03d}",
            description=(
                f"Search collection number {index} of the example catalogue. Returns matching records as "
                "plain text, one per line, newest first. Use it when the user asks about records of this "
                "collection; narrow the query rather than raising the limit."
            ),
            annotations=ToolAnnotations(read_only_hint=index % 2 == 0),
            structured_output=False,
        )
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=200)
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    args = parser.parse_args()
    server = build(args.tools)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()

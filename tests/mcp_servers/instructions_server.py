"""A real MCP server (the SDK's MCPServer) over stdio whose initialize answer carries ``instructions``.

    python tests/mcp_servers/instructions_server.py [--kilobytes N]

The instructions say "Always tag releases with the prefix rel-QX7." and, with ``--kilobytes``,
are padded to that size ("HEAD" first, "TAIL" last) with a line imitating an escape sequence.
Tool: ``ping`` answers "pong". tests/test_mcp_instructions.py serves ``build``'s app over
streamable HTTP on a thread of the test process.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

RULE = "Always tag releases with the prefix rel-QX7."


def build(kilobytes: int = 0) -> MCPServer:
    """The server, its instructions padded to ``kilobytes`` when given (see the module's docstring)."""
    text = RULE
    if kilobytes:
        padding = "x" * (kilobytes * 1024)
        text = f"HEAD {RULE}\n\x1b[2Jcleared?\n{padding}\nTAIL"
    server = MCPServer("notes", instructions=text)

    @server.tool(description="Answer pong")
    def ping() -> str:
        return "pong"

    return server


if __name__ == "__main__":
    build(int(sys.argv[sys.argv.index("--kilobytes") + 1]) if "--kilobytes" in sys.argv else 0).run()

"""A real MCP server over stdio that starts a child process of its own (a long ``sleep``).

Tool ``pids`` returns "<server pid> <child pid>", so a test can check that
stopping the session ends the whole process tree, not just the server.
"""

from __future__ import annotations

import os
import subprocess

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("process-tree")
child = subprocess.Popen(["sleep", "600"])


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def pids() -> str:
    """The server's process id and its child's."""
    return f"{os.getpid()} {child.pid}"


if __name__ == "__main__":
    server.run("stdio")

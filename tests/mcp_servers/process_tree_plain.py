"""An MCP server over stdio, in plain JSON-RPC (no SDK), that starts a child process of its own
(a long ``sleep``): what tests/test_exit_paths.py and test_mcp_servers.py need from a server, at a
twentieth of the start of one on the SDK (importing it costs ~0.9 CPU-s per start). What they check
(every process tidegauge started, and theirs, ends; a server that dies is reported once) does not
depend on which library speaks the protocol. Tool ``pids`` returns "<server pid> <child pid>".
"""

from __future__ import annotations

import os
import subprocess
import sys

from plain_jsonrpc import initialize_result, requests, send


def main() -> None:
    child = subprocess.Popen(["sleep", "600"])

    for method, request_id, message in requests(sys.stdin):
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": initialize_result(message, "process-tree-plain")})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [{
                "name": "pids", "description": "The server's process id and its child's.",
                "inputSchema": {"type": "object", "properties": {}},
                "annotations": {"readOnlyHint": True}}]}})
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"content": [{"type": "text", "text": f"{os.getpid()} {child.pid}"}], "isError": False}})
        else:  # the 2026 server/discover probe among them: "method not found", as the spec asks
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()

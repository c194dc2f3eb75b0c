"""many_tools.py's tools in plain JSON-RPC over stdio (no SDK: a twentieth of the start).

    python tests/mcp_servers/plain_tools.py [--tools 3]

The same tools as many_tools.py: ``tool_NNN`` echoes its arguments, has the same schema and
description, even-numbered tools are declared read-only, and ``tool_000``'s ``lines`` returns that
many numbered lines. For a test of what tidegauge does with a stdio server's tools, not of the SDK.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from plain_jsonrpc import initialize_result, requests, send


def tool(index: int) -> dict[str, Any]:
    return {
        "name": f"tool_{index:03d}",
        "description": (f"Search collection number {index} of the example catalogue. Returns matching records as "
                        "plain text, one per line, newest first. Use it when the user asks about records of this "
                        "collection; narrow the query rather than raising the limit."),
        "inputSchema": {"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string", "description": "What to look up; free text, matched case-insensitively."},
            "limit": {"type": "integer", "default": 20, "minimum": 1, "maximum": 1000,
                      "description": "Most results to return (1-1000)."},
            "include_archived": {"type": "boolean", "default": False, "description": "Also search archived records."},
            "lines": {"type": "integer", "default": 0, "minimum": 0,
                      "description": "Return this many numbered lines (for size tests)."}}},
        "annotations": {"readOnlyHint": index % 2 == 0},
    }


def answer(name: str, arguments: dict[str, Any]) -> str:
    index, query = int(name.removeprefix("tool_")), arguments.get("query", "")
    if arguments.get("lines"):
        return "\n".join(f"tool_{index:03d} line {n:06d} for {query}" for n in range(1, int(arguments["lines"]) + 1))
    return (f"tool_{index:03d} got query={query!r} limit={arguments.get('limit', 20)} "
            f"include_archived={arguments.get('include_archived', False)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=3)
    count = parser.parse_args().tools

    for method, request_id, message in requests(sys.stdin):
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": initialize_result(message, "plain-tools")})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [tool(n) for n in range(count)]}})
        elif method == "tools/call":
            text = answer(message["params"]["name"], message["params"].get("arguments") or {})
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"content": [{"type": "text", "text": text}], "isError": False}})
        else:  # the server/discover probe, and anything else: "method not found", as the spec asks
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()

"""A raw stdio MCP server (no SDK, so its own cost is small): the tool ``flood(n)`` sends ``n`` progress
notifications in one write, then its answer, which says how long the write took; the tool ``hold``
sends one progress notification and never answers (a call in flight until the server is ended).

    python tests/mcp_servers/progress_flood.py             # the server
    python tests/mcp_servers/progress_flood.py --emit N    # the same N notifications to stdout, then exit

``--emit`` is the server's own time as a baseline: the benchmark reads it through a pipe as fast as
the pipe goes.
"""

from __future__ import annotations

import json
import sys
import time

out = sys.stdout.buffer


def send(message: dict[str, object]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def notifications(n: int, token: object) -> bytes:
    return b"".join(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
        "progressToken": token, "progress": i, "total": n, "message": f"step {i}"}}).encode() + b"\n"
        for i in range(1, n + 1))


def serve() -> None:
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "flood", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [{
                "name": "flood", "description": "Send n progress notifications, then answer",
                "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}, {
                "name": "hold", "description": "Report progress once, then never answer",
                "inputSchema": {"type": "object"}}]}})
        elif method == "tools/call" and message["params"]["name"] == "hold":
            out.write(notifications(1, message["params"].get("_meta", {}).get("progressToken")))
            out.flush()
        elif method == "tools/call":
            n = int(message["params"]["arguments"]["n"])
            token = message["params"].get("_meta", {}).get("progressToken")
            started = time.perf_counter()
            out.write(notifications(n, token))
            out.flush()
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [
                {"type": "text", "text": f"sent {n} notifications in {time.perf_counter() - started:.3f} s"}]}})
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    if "--emit" in sys.argv:
        out.write(notifications(int(sys.argv[sys.argv.index("--emit") + 1]), 1))
        out.flush()
    else:
        serve()

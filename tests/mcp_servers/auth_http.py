"""A streamable-HTTP MCP server (the SDK's MCPServer) that wants a bearer token.

    python tests/mcp_servers/auth_http.py --port PORT --record FILE [--legacy]

The token it accepts is the environment variable EXPECTED_TOKEN. A request without it
is answered 401 with ``WWW-Authenticate: Bearer``, as remote servers do. Every request's
method, path and headers go to FILE as a JSON line (so a test can see what was sent).
With ``--legacy`` it refuses ``server/discover`` the way handshake-era servers do, so the
client keeps a session id (a restarted server then answers it 404).

A test that does not stop the server runs ``build_app``'s app on a thread of its own process
(tests/asgi_in_thread.py); one that kills it runs this script.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer


def build_app(record_path: str, expected: str, legacy: bool = False) -> tuple[Any, Callable[[], None]]:
    """The server's ASGI app, and what closes its record (see the module's docstring)."""
    server = MCPServer("auth-http")

    @server.tool(description="Says back what it is given.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Answers after that many seconds (a call a test can kill the server during).")
    async def hold(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "held"

    app = server.streamable_http_app()
    record = open(record_path, "a", encoding="utf-8")

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = b""
        if scope["method"] == "POST":  # read the body to record the JSON-RPC method, then hand it on
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
        try:
            method = json.loads(body).get("method") if body else None
        except ValueError:
            method = None
        record.write(json.dumps({"method": scope["method"], "rpc": method, "headers": headers}) + "\n")
        record.flush()
        if expected and headers.get("authorization") != f"Bearer {expected}":
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b'Bearer realm="test"'), (b"content-length", b"0")]})
            return await send({"type": "http.response.body", "body": b""})
        if legacy and method == "server/discover":
            reply = json.dumps({"jsonrpc": "2.0", "id": json.loads(body).get("id"),
                                "error": {"code": -32601, "message": "Method not found"}}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]})
            return await send({"type": "http.response.body", "body": reply})
        sent = False

        async def replay():  # type: ignore[no-untyped-def]
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay if scope["method"] == "POST" else receive, send)

    return guarded, record.close


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--legacy", action="store_true")
    args = parser.parse_args()
    app, _close = build_app(args.record, os.environ.get("EXPECTED_TOKEN", ""), args.legacy)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()

"""What the loopback HTTP test servers share (ASGI): reading a request whole, and a JSON reply.

The servers are run as scripts (``python tests/mcp_servers/NAME.py``), so this module is found
beside them on ``sys.path``.
"""

from __future__ import annotations

import json
from typing import Any


async def read_request(scope: dict[str, Any], receive: Any) -> tuple[dict[str, str], bytes]:
    """The request's headers (lower-case names, as ASGI gives them) and its whole body (POST only)."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    body = b""
    if scope["method"] == "POST":
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
    return headers, body


async def reply(send: Any, status: int, body: Any = None, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A JSON answer (or an empty one) with its length."""
    data = json.dumps(body).encode() if body is not None else b""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


def replaying(body: bytes, receive: Any) -> Any:
    """A ``receive`` that hands the wrapped app the body already read (``read_request``) as one
    message, then the connection's own messages (a disconnect)."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay

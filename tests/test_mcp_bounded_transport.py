"""A url server's transport: a request that never reached the server is reported as such (the
connection sends it again only then), and a body over the cap is never handed over whole."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import httpx2
import pytest

from app.mcp.bounded_stdio import MAX_MESSAGE_BYTES
from app.mcp.http_bounds import BoundedTransport


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed when the block ends: nothing listens there


def test_a_request_no_server_heard_is_reported_undelivered(tmp_path: Path) -> None:
    undelivered: list[str] = []
    transport = BoundedTransport("srv", tmp_path, on_undelivered=lambda: undelivered.append("x"))

    async def send() -> None:
        async with httpx2.AsyncClient(transport=transport) as client:
            await client.post(f"http://127.0.0.1:{_closed_port()}/mcp", json={"jsonrpc": "2.0", "id": 1})

    with pytest.raises(httpx2.ConnectError):
        asyncio.run(send())
    assert undelivered == ["x"]


def test_an_answer_over_the_cap_is_saved_not_handed_over(tmp_path: Path) -> None:
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": "x" * (MAX_MESSAGE_BYTES + 1000)}}).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     + f"content-length: {len(big)}\r\n\r\n".encode() + big)
        await writer.drain()
        writer.close()

    undelivered: list[str] = []

    async def exchange() -> tuple[bytes, str]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = BoundedTransport("srv", tmp_path, on_undelivered=lambda: undelivered.append("x"))
        try:
            async with httpx2.AsyncClient(transport=transport) as client:
                response = await client.post(f"http://127.0.0.1:{port}/mcp",
                                             json={"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
                return await response.aread(), response.request.headers["accept-encoding"]
        finally:
            server.close()
            await server.wait_closed()

    body, asked = asyncio.run(exchange())
    assert asked == "identity"  # a compressed body would be bounded only once decoded
    assert len(body) < MAX_MESSAGE_BYTES
    assert json.loads(body)["id"] == 1  # an answer to the same request, in the big one's place
    assert undelivered == []
    assert any(tmp_path.rglob("*")), "the full answer is saved"

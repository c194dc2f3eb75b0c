"""A url server's transport: a request that never reached the server is reported as such (the
connection sends it again only then), a body over the cap is never handed over whole, and the
TLS context its connections share checks certificates as httpx2's default does."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
from pathlib import Path

import httpx2
import pytest

from app.mcp.bounded_stdio import MAX_MESSAGE_BYTES
from app.mcp.http_bounds import BoundedTransport, verified_tls


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


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no CA signed, and its key: what a machine in the middle presents."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def _https_status(tmp_path: Path, cert: Path, key: Path) -> int | str:
    """One request of a url server's transport to an https loopback server with ``cert``: its status,
    or the error's words when the connection was refused."""
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client refused the certificate
        finally:
            writer.close()

    async def exchange() -> int | str:
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=served)
        port = server.sockets[0].getsockname()[1]
        try:
            async with httpx2.AsyncClient(transport=BoundedTransport("srv", tmp_path, on_undelivered=lambda: None)) as client:
                return (await client.get(f"https://127.0.0.1:{port}/mcp")).status_code
        except httpx2.ConnectError as exc:
            return str(exc)
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(exchange())


def test_url_servers_share_one_tls_context_with_httpx2s_default_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built once per process (loading the CAs cost every connection ~35 ms), with the checks httpx2
    makes by default: certificates and host names, against the same CAs."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared = verified_tls()
    assert verified_tls() is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    assert shared.cert_store_stats() == httpx2.create_ssl_context().cert_store_stats()
    assert shared.cert_store_stats()["x509_ca"] > 0


def test_a_certificate_no_trusted_ca_signed_is_refused_by_every_connection_sharing_the_context(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, self_signed: tuple[Path, Path]) -> None:
    """A machine in the middle of an https url server (or of its authorization server) is refused by
    the first connection and by the next, which reuses the context; a CA file named in
    SSL_CERT_FILE is believed, as httpx2 believes it, from the next connection on."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    cert, key = self_signed

    for _connection in range(2):
        refused = _https_status(tmp_path, cert, key)
        assert isinstance(refused, str) and "CERTIFICATE_VERIFY_FAILED" in refused, refused

    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert _https_status(tmp_path, cert, key) == 200
    monkeypatch.delenv("SSL_CERT_FILE")
    refused = _https_status(tmp_path, cert, key)
    assert isinstance(refused, str) and "CERTIFICATE_VERIFY_FAILED" in refused, refused

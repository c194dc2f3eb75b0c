"""Loopback HTTP servers for tests: a quiet handler base and a server run on a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, TypeVar

Server = TypeVar("Server", bound=HTTPServer)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, as the clients under test expect) and no access log on stderr."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def shut_down_now(server: HTTPServer) -> None:
    """``server.shutdown()`` without waiting out a poll of ``serve_forever``.

    ``shutdown`` asks the loop to stop and waits until it does, and the loop only looks between
    two waits for a connection (``poll_interval``, 50 ms here): every test's server stop took
    that long. A connection made while ``shutdown`` waits ends the loop's wait at once; it sends
    no request, so the handler closes it having answered nothing."""
    stopping = threading.Thread(target=server.shutdown, daemon=True)
    stopping.start()
    host, port = server.server_address[:2]
    address = (host if isinstance(host, str) else bytes(host).decode(), port)
    while stopping.is_alive():
        with contextlib.suppress(OSError):
            socket.create_connection(address, timeout=1).close()
        stopping.join(0.005)


@contextlib.contextmanager
def serving(server: Server) -> Iterator[Server]:
    """``server`` answering on a thread of its own until the block ends; then shut and closed."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        shut_down_now(server)
        server.server_close()
        thread.join(timeout=30)

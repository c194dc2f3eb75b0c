"""Loopback HTTP servers for tests: a quiet handler base and a server run on a thread."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def serving(server: Server) -> Iterator[Server]:
    """``server`` answering on a thread of its own until the block ends; then shut and closed."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)

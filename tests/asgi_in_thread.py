"""A loopback ASGI test server (uvicorn) on a thread of the test process.

A server script under tests/mcp_servers/ run as its own process costs an interpreter start and the
MCP SDK's imports (about 0.9 CPU-s), once per test. Where the process boundary is not what a test
checks (it checks what tidegauge sends the server and what it makes of the answers), the same app
runs here on its own event loop. The socket is bound and listening before the thread starts, so
the port is known at once and a client's first connection waits in the backlog: no polling for
the server to come up.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Literal

import uvicorn


class AsgiInThread:
    """``app`` served on 127.0.0.1:``port`` until ``stop``."""

    def __init__(self, app: Any, sock: socket.socket, lifespan: Literal["on", "off"] = "on") -> None:
        self.app = app
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True,
                                       name=f"asgi-{self.port}")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop at once, as a kill would: open connections (an SSE stream) are not waited for."""
        if self.thread.is_alive():
            self.server.should_exit = self.server.force_exit = True
            self.thread.join(timeout=30)
            assert not self.thread.is_alive(), f"the server on port {self.port} did not stop"
        self.sock.close()


def listening_socket() -> socket.socket:
    """A loopback TCP socket on a free port, already listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def server_module(name: str) -> Any:
    """The script tests/mcp_servers/NAME.py as a module (its helpers, ``_asgi``, found beside it)."""
    import importlib
    import sys
    from pathlib import Path

    folder = str(Path(__file__).parent / "mcp_servers")
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(name)

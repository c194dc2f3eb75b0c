"""What the plain (SDK-free) stdio MCP test servers share: reading requests, answering initialize.

Imported by the scripts beside it, run as ``python tests/mcp_servers/<script>.py`` (Python puts the
script's folder first on its path)."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Iterator


def requests(lines: Iterable[str | bytes]) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """Each request on ``lines`` (one JSON-RPC message a line): its method, id and whole message.
    Notifications (initialized, cancelled) are read and passed over: they want no answer."""
    for line in lines:
        message = json.loads(line)
        if message.get("id") is not None:
            yield message.get("method"), message["id"], message


def initialize_result(message: dict[str, Any], name: str) -> dict[str, Any]:
    """The answer to ``initialize``: the client's protocol version, tools only, named ``name``."""
    return {"protocolVersion": message["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}}, "serverInfo": {"name": name, "version": "0.0.1"}}


def send(message: dict[str, Any]) -> None:
    """One message on stdout, a line, flushed at once: the client waits for it."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

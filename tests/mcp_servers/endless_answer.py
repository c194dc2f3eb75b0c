"""An MCP server over stdio, in plain JSON-RPC (no SDK), whose answer can have no end.

    python tests/mcp_servers/endless_answer.py --pid-file FILE [--stop-after-mb N] [--endless-tools-list]

Tools:

- ``endless``: answers with the start of a result (its id first, as the Python SDK writes it)
  and then text without end: megabyte after megabyte and never the newline. It stops writing
  after ``--stop-after-mb`` (a bound for a test run against a client that never stops reading)
  and then waits, the line still open, until its stdin ends.
- ``big(megabytes)``: a whole text result that size (ASCII), on one line as usual.
- ``ping``: "pong".

With ``--endless-tools-list`` its answer to ``tools/list`` is the one without end (during the
client's start). It writes its process id to FILE first, so a test can check that it is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from plain_jsonrpc import initialize_result, requests

MB = 1024 * 1024
TOOLS = [
    {"name": "endless", "description": "An answer that never ends.", "inputSchema": {"type": "object"}},
    {"name": "big", "description": "A text result of this many megabytes.",
     "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "integer"}}}},
    {"name": "ping", "description": "Says pong.", "inputSchema": {"type": "object"}},
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid-file", required=True)
    parser.add_argument("--stop-after-mb", type=int, default=300)  # past the 256 MiB tidegauge reads
    parser.add_argument("--endless-tools-list", action="store_true")
    args = parser.parse_args()
    with open(args.pid_file, "w", encoding="utf-8") as pid_file:
        pid_file.write(str(os.getpid()))
    out = sys.stdout.buffer

    def send(message: dict) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    def send_without_end(request_id: object) -> None:
        out.write(b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode()
                  + b',"result":{"content":[{"type":"text","text":"the start of an endless answer ')
        block = b"x" * MB
        for _ in range(args.stop_after_mb):
            out.write(block)
        out.flush()
        sys.stdin.read()  # the line stays open until tidegauge goes

    for method, request_id, message in requests(sys.stdin):
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": initialize_result(message, "endless-answer")})
        elif method == "tools/list" and args.endless_tools_list:
            send_without_end(request_id)
            return
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call" and message["params"]["name"] == "endless":
            send_without_end(request_id)
            return
        elif method == "tools/call" and message["params"]["name"] == "big":
            megabytes = int(message["params"].get("arguments", {}).get("megabytes", 1))
            # The bytes json.dumps would write, put together as bytes: digits need no escaping, and
            # encoding a 70 MB text through json cost this server more CPU than tidegauge's read.
            out.write(b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode()
                      + b', "result": {"content": [{"type": "text", "text": "'
                      + b"0123456789" * (megabytes * 100_000) + b'"}], "isError": false}}\n')
            out.flush()
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"content": [{"type": "text", "text": "pong"}], "isError": False}})
        else:  # the server/discover probe, and anything else: "method not found", as the spec asks
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()

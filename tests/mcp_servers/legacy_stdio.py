"""A handshake-era MCP server over stdio, in plain JSON-RPC (no SDK), as old servers behave.

    python tests/mcp_servers/legacy_stdio.py --record FILE --unknown {ignore,crash,error}

It answers ``initialize``, ``tools/list`` and ``tools/call`` (tool ``echo``) and writes every
message it receives as a JSON line to FILE (so a test sees the ``clientInfo`` it was sent).
A request with any other method before ``initialize`` (the 2026 ``server/discover`` probe):

- ``ignore``: no answer at all (servers that drop unknown methods);
- ``crash``: the process exits, as servers on the MCP Python SDK 1.9.0 and earlier do;
- ``error``: a JSON-RPC "method not found" error, as the spec asks.

``--slow-start S`` answers ``initialize`` only after S seconds (a server that is slow to start:
``npx`` fetching a package, a large index loaded). ``--prompts N`` declares prompts and resources
too, and lists N prompts (``prompts/list``) and one resource (``resources/list``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--unknown", choices=["ignore", "crash", "error"], default="error")
    parser.add_argument("--slow-start", type=float, default=0.0)
    parser.add_argument("--prompts", type=int, default=0)
    args = parser.parse_args()
    record = open(args.record, "a", encoding="utf-8")  # appended: a restarted server adds to it

    def send(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        message = json.loads(line)
        record.write(json.dumps({**message, "received_at": time.time()}) + "\n")
        record.flush()
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification (initialized, cancelled)
        if method == "initialize":
            time.sleep(args.slow_start)  # the server's own slowness, not a wait for something
            capabilities: dict[str, dict] = {"tools": {}}
            if args.prompts:
                capabilities |= {"prompts": {}, "resources": {}}
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": "2024-11-05", "capabilities": capabilities,
                "serverInfo": {"name": "legacy-stdio", "version": "0.0.1"}}})
        elif method == "prompts/list" and args.prompts:
            send({"jsonrpc": "2.0", "id": request_id, "result": {"prompts": [
                {"name": f"prompt{n}", "description": f"Prompt number {n}"} for n in range(1, args.prompts + 1)]}})
        elif method == "resources/list" and args.prompts:
            send({"jsonrpc": "2.0", "id": request_id, "result": {"resources": [
                {"uri": "notes://readme", "name": "readme", "mimeType": "text/plain"}]}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [{
                "name": "echo", "description": "Says back what it is given.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}})
        elif method == "tools/call":
            text = message["params"].get("arguments", {}).get("text", "")
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"content": [{"type": "text", "text": f"echo: {text}"}], "isError": False}})
        elif args.unknown == "crash":
            sys.exit(1)
        elif args.unknown == "error":
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()

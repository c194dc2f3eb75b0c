"""A url server's 403 ``insufficient_scope`` (the MCP authorization spec's scope step-up) says
that the server wants more scope, names the scope it asked for, and how to log in again, as a
401 says "authorization required" (issue 26).

The server is a loopback HTTP/1.1 server in this file speaking Streamable HTTP with JSON
answers; it wants a bearer token, and answers 403 with ``WWW-Authenticate: Bearer
error="insufficient_scope", scope="..."`` where the test tells it to. Through the CLI
(``tidegauge -p``, run in the test process: tests/mcp_helpers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import openai_text, openai_tool_calls
from loopback_http import QuietHandler, serving
from mcp_helpers import run_headless
from test_mcp_headless import toml_string

TOKEN = "tg-step-up-token-3b9d0e71c2"


class ScopedMcp(QuietHandler):
    server: ScopedServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.seen.append(("GET", self.path, self.headers.get("authorization", "")))
        base = self.server.url.removesuffix("/mcp")
        if self.path.startswith("/.well-known/oauth-protected-resource"):  # RFC 9728, for an OAuth session
            return self._json({"resource": self.server.url, "authorization_servers": [base]})
        if self.path.startswith("/.well-known/oauth-authorization-server"):  # RFC 8414
            return self._json({"issuer": base, "authorization_endpoint": f"{base}/authorize",
                               "token_endpoint": f"{base}/token", "response_types_supported": ["code"],
                               "code_challenge_methods_supported": ["S256"]})
        self._reply(405, b"", "text/plain")

    def do_DELETE(self) -> None:  # noqa: N802
        self._reply(200, b"", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        method, request_id = body.get("method"), body.get("id")
        self.server.seen.append((method, self.path, self.headers.get("authorization", "")))
        wanted = self.server.forbidden.get(method if method != "tools/call" else body["params"]["name"])
        if wanted is not None:
            challenge = f'Bearer error="insufficient_scope", {wanted}error_description="needs more"'
            return self._reply(403, b'{"error":"insufficient_scope"}', "application/json",
                               (("WWW-Authenticate", challenge),))
        if request_id is None:
            return self._reply(202, b"", "text/plain")
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                      "serverInfo": {"name": "scoped", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": name, "inputSchema": {"type": "object"},
                                 "annotations": {"readOnlyHint": True}} for name in ("read", "write")]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "read it"}]}
        else:
            return self._json({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}})
        self._json({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _reply(self, status: int, body: bytes, media_type: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Mcp-Session-Id", "scoped-session")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, message: dict[str, Any]) -> None:
        self._reply(200, json.dumps(message).encode(), "application/json")


class ScopedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, forbidden: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), ScopedMcp)
        self.forbidden = forbidden  # a tool's or a method's name -> the challenge's scope parameter
        self.seen: list[tuple[str, str, str]] = []  # (JSON-RPC method or GET, path, Authorization)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


@pytest.fixture
def serve():
    with contextlib.ExitStack() as servers:
        yield lambda forbidden: servers.enter_context(serving(ScopedServer(forbidden)))


def _run(fake_llm: Any, tmp_path: Path, servers: dict[str, ScopedServer], prompt: str) -> tuple[list[dict[str, Any]], str]:
    toml = "memory_update_tokens = 0\n" + "".join(
        f"\n[mcp_servers.{name}]\nurl = {toml_string(server.url)}\nbearer_token_env_var = \"TG_STEP_UP_TOKEN\"\n"
        for name, server in servers.items())
    proc = run_headless(fake_llm, tmp_path, toml, prompt, env_extra={"TG_STEP_UP_TOKEN": TOKEN})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")], proc.stdout + proc.stderr


async def test_a_call_refused_for_scope_names_the_scope_and_how_to_log_in_again(fake_llm, tmp_path: Path,
                                                                                serve) -> None:
    server = serve({"write": 'scope="files:write files:read", '})
    fake_llm.enqueue(openai_tool_calls([("docs__write", {}, "call_write")]),
                     openai_tool_calls([("docs__read", {}, "call_read")]), openai_text("Done."))

    events, output = await asyncio.to_thread(_run, fake_llm, tmp_path, {"docs": server}, "write")

    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    write = results["call_write"]
    assert write["is_error"]
    assert write["content"] == (
        "MCP server 'docs': more scope required (HTTP 403 insufficient_scope, scope 'files:write files:read' asked "
        "for): give the server a token with that scope with bearer_token_env_var or headers in [mcp_servers.docs], "
        "or log in with `tidegauge mcp login docs`")
    # The next call, which the token allows, works: the step-up line was about that call only.
    assert not results["call_read"]["is_error"] and results["call_read"]["content"] == "read it"
    assert TOKEN not in output


async def test_a_server_that_wants_more_scope_to_start_says_so_and_a_hostile_scope_is_not_repeated(
        fake_llm, tmp_path: Path, serve) -> None:
    plain = serve({"initialize": 'scope="mcp:tools", '})
    hostile = serve({"initialize": 'scope="x\x1b]8;;https://evil.example\x07click", '})
    fake_llm.enqueue(openai_text("Fine."))

    events, output = await asyncio.to_thread(_run, fake_llm, tmp_path, {"plain": plain, "hostile": hostile}, "hi")

    failed = {e["name"]: e["detail"] for e in events if e["type"] == "mcp_server" and e["status"] == "failed"}
    assert failed["plain"].startswith("more scope required (HTTP 403 insufficient_scope, scope 'mcp:tools' asked "
                                      "for): give the server a token with that scope"), failed
    assert "did not start: more scope required" in output  # the warning line a user reads
    # A scope that is no scope (an escape sequence, a link) is not said at all.
    assert failed["hostile"].startswith("more scope required (HTTP 403 insufficient_scope): give the server a "
                                        "token"), failed
    assert "evil" not in output and "\x1b" not in output


async def test_an_oauth_session_that_meets_a_step_up_says_so_and_opens_no_browser(fake_llm, tmp_path: Path,
                                                                                 serve) -> None:
    """Logged in with OAuth (tokens stored by `tidegauge mcp login`): the SDK's flow would ask for the
    larger scope, which needs the user's consent, which a session never asks for."""
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

    from app.mcp.oauth import TokenFile, token_path

    server = serve({"write": 'scope="files:write", '})
    tokens = TokenFile(token_path(tmp_path / "data", "docs"), server.url)
    await tokens.set_client_info(OAuthClientInformationFull.model_validate(
        {"client_id": "tidegauge-test", "redirect_uris": ["http://127.0.0.1:9/callback"],
         "token_endpoint_auth_method": "none"}))
    await tokens.set_tokens(OAuthToken(access_token="tg-stored-access-9c1e", token_type="Bearer", expires_in=3600,
                                       scope="files:read"))
    fake_llm.enqueue(openai_tool_calls([("docs__write", {}, "call_write")]), openai_text("Done."))
    toml = f"memory_update_tokens = 0\n\n[mcp_servers.docs]\nurl = {toml_string(server.url)}\n"

    proc = await asyncio.to_thread(run_headless, fake_llm, tmp_path, toml, "write")

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    [write] = [e for e in events if e["type"] == "tool_result"]
    # The scope is kept for the next login, which asks for it beside the one granted (a login alone
    # used to keep the still-valid tokens and ask for nothing more).
    assert write["is_error"] and write["content"] == (
        "MCP server 'docs': more scope required (HTTP 403 insufficient_scope, scope 'files:write' asked for): run "
        "`tidegauge mcp login docs`: it asks for that scope beside the one you have"), write["content"]
    assert tokens.wanted_scope() == "files:write" and tokens.granted_scope() == "files:read"
    assert "tg-stored-access-9c1e" not in proc.stdout + proc.stderr
    assert ("tools/call", "/mcp", "Bearer tg-stored-access-9c1e") in server.seen  # the session's stored token
    assert not [path for _, path, _ in server.seen if "authorize" in path or "token" in path]  # no consent asked

"""Stored OAuth tokens are refreshed where they were issued, in every new process (issue 26).

A new process (every tidegauge session) holds no authorization server metadata, and the SDK then
sends a refresh to ``<MCP server origin>/token``: the refresh token given to the MCP server when
the authorization server is elsewhere, and a failed refresh for a 2025-03-26 server whose
endpoints are under ``/oauth``. Against tests/mcp_servers/oauth_refresh_http.py (the MCP server
and its authorization server on two loopback ports, or one 2025-03-26 origin), with
`tidegauge mcp login web` and then a headless session (a new process, or the CLI in the test process
after a login there: see ``_session_calling_echo``), its access token expired:

- the refresh goes to the token endpoint kept in the token file at login; the MCP server is sent
  neither refresh token (every header, query and body it received is checked); the tool answers;
- a token file written before the endpoint was kept: the authorization server is found again as
  login finds it, and the file keeps it from then on; when it cannot be found, one line says to
  log in again and no refresh token leaves;
- a token file edited to send the refresh elsewhere (the MCP server's origin) is not believed;
- a token endpoint on another origin than its issuer's is used when found again, never kept;
- a 2025-03-26 server with its endpoints under ``/oauth`` is refreshed there.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_in_thread import AsgiInThread, listening_socket, server_module
from fake_llm_server import openai_text, openai_tool_calls
from test_mcp_headless import toml_string
from test_mcp_oauth import _browser, _wait_for_line
from test_mcp_reach import _statuses, _tidegauge
from test_mcp_servers import START

from app.kernel.private_files import write_private_atomic
from app.kernel.redact import clear_secrets
from app.mcp.oauth import TokenFile, login, token_path
from app.mcp.settings import McpServerConfig


class RefreshServers:
    """tests/mcp_servers/oauth_refresh_http.py's apps: the MCP server (and in ``split``, the
    authorization server on another port), every request recorded whole. They run on threads of
    the test process (tests/asgi_in_thread.py); tidegauge's sessions are new processes."""

    def __init__(self, tmp_path: Path, layout: str) -> None:
        self.layout, _, token_elsewhere = layout.partition("+")
        self.sockets = {"mcp": listening_socket()}
        if self.layout == "split":
            self.sockets["as"] = listening_socket()
        if token_elsewhere:
            self.sockets["token"] = listening_socket()
        ports = {listener: sock.getsockname()[1] for listener, sock in self.sockets.items()}
        self.port = ports["mcp"]
        self.as_port = ports.get("as", self.port)
        self.token_port = ports.get("token", 0)
        self.record = tmp_path / f"{layout}-received.jsonl"
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.as_base = f"http://127.0.0.1:{self.as_port}"
        self.served: list[AsgiInThread] = []
        self.close_record: Any = None

    async def start(self) -> RefreshServers:
        apps, self.close_record = server_module("oauth_refresh_http").build_apps(
            self.layout, self.port, self.as_port, self.token_port, str(self.record))
        for listener, app in apps.items():
            # Only the MCP server's app has a lifespan (the SDK's session manager).
            served = AsgiInThread(app, self.sockets[listener], lifespan="on" if listener == "mcp" else "off")
            served.start()
            self.served.append(served)
        return self

    def stop(self) -> None:
        for served in self.served:
            served.stop()
        self.served = []
        if self.close_record is not None:
            self.close_record()
            self.close_record = None

    def received(self, listener: str) -> list[dict[str, Any]]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return [r for r in map(json.loads, lines) if r["listener"] == listener]

    def refreshes(self, listener: str) -> list[dict[str, Any]]:
        """(path, refresh token) of every refresh_token grant ``listener`` received."""
        from urllib.parse import parse_qs

        found = []
        for r in self.received(listener):
            form = {k: v[0] for k, v in parse_qs(r["body"]).items()}
            if form.get("grant_type") == "refresh_token":
                found.append({"path": r["path"], "refresh_token": form.get("refresh_token")})
        return found

    def hide_metadata(self) -> None:
        httpx.post(f"{self.as_base}/admin/hide-metadata", timeout=30, trust_env=False).raise_for_status()


@pytest.fixture
async def servers(tmp_path: Path, request: pytest.FixtureRequest):
    started = await RefreshServers(tmp_path, getattr(request, "param", "split")).start()
    yield started
    started.stop()
    clear_secrets()


def _toml(servers: RefreshServers) -> str:
    return f"[mcp_servers.web]\nurl = {toml_string(servers.url)}\n"


async def _login_through_the_cli(tmp_path: Path, servers: RefreshServers) -> TokenFile:
    """`tidegauge mcp login web` in its own process, the browser's part done here."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(_toml(servers))
    (config / "config.toml").chmod(0o600)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TIDEGAUGE_") and k not in ("DISPLAY", "WAYLAND_DISPLAY")}  # no browser: printed
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data")})
    stderr = tmp_path / "login.err"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "app", "mcp", "login", "web"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        await _browser(_wait_for_line(stderr, "/authorize?", proc))
        await asyncio.to_thread(proc.wait, 120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr.read_text()
    return TokenFile(token_path(tmp_path / "data", "web"), servers.url)


async def _logged_in(tmp_path: Path, servers: RefreshServers) -> TokenFile:
    """The same login, in this process (the real-process one is the first test's)."""
    data = tmp_path / "data"
    tools = await login("web", McpServerConfig(url=servers.url, startup_timeout=START), data, tmp_path,
                        open_consent=_browser, consent_timeout=60)
    assert tools == 1
    return TokenFile(token_path(data, "web"), servers.url)


def _stored(file: TokenFile) -> dict[str, Any]:
    return json.loads(file.path.read_text())


def _edit(file: TokenFile, **changes: Any) -> None:
    """An hour went by (the access token expired), and whatever else ``changes`` says of the file."""
    stored = _stored(file) | {"expires_at": time.time() - 60} | changes
    for key in [k for k, v in changes.items() if v is None]:
        del stored[key]
    file.path.write_text(json.dumps(stored))


def _session_calling_echo(tmp_path: Path, fake_llm: Any, servers: RefreshServers,
                          real_process: bool = False) -> tuple[int, list[dict[str, Any]], str]:
    """A headless session whose model calls web__echo: a new process with ``real_process``, else
    the CLI in the test process (tests/mcp_helpers.py). Either holds no authorization server
    metadata of the login's: the SDK keeps it on the OAuth provider each connection builds from
    the token file, and neither it nor app/mcp/oauth*.py caches any per process. The first test
    runs its login and its session as processes of their own, as a user does."""
    fake_llm.enqueue(openai_tool_calls([("web__echo", {"text": "again"}, "call_echo")]), openai_text("Done."))
    return _tidegauge(tmp_path, fake_llm, _toml(servers), "echo", real_process=real_process)


def _assert_echo_answered(code: int, events: list[dict[str, Any]], output: str) -> None:
    assert code == 0, output
    assert [s for s, _ in _statuses(events, "web")] == ["starting", "ready", "stopped"], output
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_echo"]
    assert not result["is_error"] and "echo: again" in result["content"], result


def _assert_the_mcp_server_never_saw(servers: RefreshServers, *refresh_tokens: str) -> None:
    seen = servers.received("mcp")
    assert seen, "the MCP server received nothing"
    for record in seen:
        for token in refresh_tokens:
            assert token not in json.dumps(record), f"the MCP server was sent a refresh token: {record}"
    assert not servers.refreshes("mcp"), servers.refreshes("mcp")


# ---------------------------------------------------------------- the authorization server elsewhere

async def test_a_new_session_refreshes_at_the_authorization_server_and_never_sends_the_refresh_token_to_the_mcp_server(
        fake_llm, tmp_path: Path, servers: RefreshServers) -> None:
    file = await _login_through_the_cli(tmp_path, servers)
    before = _stored(file)
    _edit(file)

    code, events, output = _session_calling_echo(tmp_path, fake_llm, servers, real_process=True)

    after = _stored(file)
    _assert_the_mcp_server_never_saw(servers, before["tokens"]["refresh_token"], after["tokens"]["refresh_token"])
    assert servers.refreshes("as") == [{"path": "/token", "refresh_token": before["tokens"]["refresh_token"]}]
    _assert_echo_answered(code, events, output)
    calls = [r for r in servers.received("mcp") if '"tools/call"' in r["body"]]
    assert [c["headers"].get("authorization") for c in calls] == [f"Bearer {after['tokens']['access_token']}"]
    assert after["tokens"]["refresh_token"] != before["tokens"]["refresh_token"]
    assert after["expires_at"] > time.time() + 3000
    # What the refresh needed was kept at login, beside the tokens, in the same 0600 file.
    assert before["authorization_server"] == {"issuer": servers.as_base, "token_endpoint": f"{servers.as_base}/token"}
    assert oct(file.path.stat().st_mode & 0o777) == "0o600"


async def test_a_token_file_from_before_the_endpoint_was_kept_finds_the_authorization_server_again(
        fake_llm, tmp_path: Path, servers: RefreshServers) -> None:
    file = await _logged_in(tmp_path, servers)
    refresh = _stored(file)["tokens"]["refresh_token"]
    _edit(file, authorization_server=None)  # as tidegauge wrote it before it kept the endpoint

    code, events, output = _session_calling_echo(tmp_path, fake_llm, servers)

    _assert_the_mcp_server_never_saw(servers, refresh, _stored(file)["tokens"]["refresh_token"])
    assert servers.refreshes("as") == [{"path": "/token", "refresh_token": refresh}]
    _assert_echo_answered(code, events, output)
    assert _stored(file)["authorization_server"]["token_endpoint"] == f"{servers.as_base}/token"  # kept from now on


async def test_when_the_authorization_server_cannot_be_found_again_one_line_says_to_log_in_and_no_refresh_token_leaves(
        fake_llm, tmp_path: Path, servers: RefreshServers) -> None:
    file = await _logged_in(tmp_path, servers)
    refresh = _stored(file)["tokens"]["refresh_token"]
    _edit(file, authorization_server=None)
    servers.hide_metadata()
    fake_llm.enqueue(openai_text("Fine."))

    code, events, output = _tidegauge(tmp_path, fake_llm, _toml(servers), "hi")

    _assert_the_mcp_server_never_saw(servers, refresh)
    assert servers.refreshes("as") == []
    assert code == 0, output
    [failed] = [d for s, d in _statuses(events, "web") if s == "failed"]
    assert "\n" not in failed and failed.endswith(
        "authorization required (the authorization server of its stored tokens cannot be found again "
        "(no authorization server metadata); log in again): run `tidegauge mcp login web`"), failed
    assert _stored(file)["tokens"]["refresh_token"] == refresh  # nothing lost: a login replaces it


@pytest.mark.parametrize("edited", ["endpoint on the MCP server", "issuer and endpoint on the MCP server"])
async def test_a_token_file_edited_to_send_the_refresh_to_the_mcp_server_is_not_believed(
        fake_llm, tmp_path: Path, servers: RefreshServers, edited: str) -> None:
    file = await _logged_in(tmp_path, servers)
    refresh = _stored(file)["tokens"]["refresh_token"]
    mcp_origin = f"http://127.0.0.1:{servers.port}"
    issuer = mcp_origin if edited.startswith("issuer") else servers.as_base
    _edit(file, authorization_server={"issuer": issuer, "token_endpoint": f"{mcp_origin}/token"})

    code, events, output = _session_calling_echo(tmp_path, fake_llm, servers)

    _assert_the_mcp_server_never_saw(servers, refresh, _stored(file)["tokens"]["refresh_token"])
    assert servers.refreshes("as") == [{"path": "/token", "refresh_token": refresh}]
    _assert_echo_answered(code, events, output)
    assert _stored(file)["authorization_server"]["token_endpoint"] == f"{servers.as_base}/token"


@pytest.mark.parametrize("servers", ["split+token-elsewhere"], indirect=True)
async def test_a_token_endpoint_off_its_issuers_origin_is_refreshed_at_when_found_again_and_never_kept(
        fake_llm, tmp_path: Path, servers: RefreshServers) -> None:
    file = await _logged_in(tmp_path, servers)
    refresh = _stored(file)["tokens"]["refresh_token"]
    assert "authorization_server" not in _stored(file)  # the file keeps only an endpoint on the issuer's origin
    _edit(file)

    code, events, output = _session_calling_echo(tmp_path, fake_llm, servers)

    _assert_the_mcp_server_never_saw(servers, refresh, _stored(file)["tokens"]["refresh_token"])
    assert servers.refreshes("token") == [{"path": "/token", "refresh_token": refresh}]
    assert servers.refreshes("as") == []
    _assert_echo_answered(code, events, output)
    assert "authorization_server" not in _stored(file)


# ---------------------------------------------------------------- a 2025-03-26 server, endpoints under /oauth

@pytest.mark.parametrize("servers", ["legacy"], indirect=True)
async def test_a_2025_03_26_server_with_its_endpoints_under_oauth_is_refreshed_there(
        fake_llm, tmp_path: Path, servers: RefreshServers) -> None:
    file = await _logged_in(tmp_path, servers)
    refresh = _stored(file)["tokens"]["refresh_token"]
    _edit(file)

    code, events, output = _session_calling_echo(tmp_path, fake_llm, servers)

    assert servers.refreshes("mcp") == [{"path": "/oauth/token", "refresh_token": refresh}]
    _assert_echo_answered(code, events, output)
    paths = [r["path"] for r in servers.received("mcp")]
    assert paths.count("/oauth/authorize") == 1, paths  # the login's: no consent asked again


@pytest.mark.parametrize("servers", ["legacy"], indirect=True)
async def test_a_2025_03_26_servers_token_file_from_before_finds_its_oauth_endpoints_at_the_origin_again(
        fake_llm, tmp_path: Path, servers: RefreshServers) -> None:
    file = await _logged_in(tmp_path, servers)
    refresh = _stored(file)["tokens"]["refresh_token"]
    _edit(file, authorization_server=None)

    code, events, output = _session_calling_echo(tmp_path, fake_llm, servers)

    assert servers.refreshes("mcp") == [{"path": "/oauth/token", "refresh_token": refresh}]
    _assert_echo_answered(code, events, output)
    assert _stored(file)["authorization_server"] == {"issuer": f"{servers.as_base}/oauth",
                                                     "token_endpoint": f"{servers.as_base}/oauth/token"}


# ---------------------------------------------------------------- the kept endpoint as an attacker edits it

@pytest.mark.parametrize(("issuer", "endpoint", "believed"), [
    ("https://auth.example.com", "https://auth.example.com/oauth2/token", True),
    ("http://127.0.0.1:9", "http://127.0.0.1:9/token", True),
    ("http://localhost:9/", "http://localhost:9/token", True),
    ("http://auth.example.com", "http://auth.example.com/token", False),  # a refresh token in clear text
    ("https://auth.example.com", "https://mcp.example.com/token", False),  # not the issuer's origin
    ("https://auth.example.com", "https://auth.example.com:8443/token", False),
    ("https://auth.example.com", "https://user:pw@auth.example.com/token", False),
    ("https://auth.example.com", "file:///etc/passwd", False),
    ("https://auth.example.com", 42, False),
])
def test_a_kept_token_endpoint_is_believed_only_if_https_or_loopback_and_on_its_issuers_origin(
        tmp_path: Path, issuer: str, endpoint: Any, believed: bool) -> None:
    file = TokenFile(tmp_path / "mcp-oauth" / "web.json", "https://mcp.example.com/mcp")
    write_private_atomic(file.path, json.dumps({"server_url": file.server_url, "authorization_server": {
        "issuer": issuer, "token_endpoint": endpoint}}).encode())
    kept = file.get_authorization_server()
    assert (kept is not None) == believed, kept

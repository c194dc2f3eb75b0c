"""OAuth 2.1 for remote MCP servers (issue 26): `tidegauge mcp login NAME`, then sessions use the tokens.

Against a real OAuth-protected MCP server on loopback (tests/mcp_servers/oauth_http.py: the SDK's
streamable-HTTP server behind protected-resource metadata, an authorization server with dynamic
registration, PKCE and refresh tokens). The login runs in the real process, the browser's part
done by the test (it fetches the printed address and follows the redirect, as a browser would).

- discovery -> registration -> PKCE -> token -> a tool call in a headless session;
- an expired access token is refreshed once; a revoked refresh token gives the one-line
  "authorization required ... run `tidegauge mcp login web`" error, never the SDK's words;
- the tokens are 0600 in the data directory, bound to the server's URL, and shown nowhere;
- the loopback redirect receiver as an attacker meets it: a wrong state, a second callback,
  a huge query.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_in_thread import AsgiInThread, listening_socket, server_module
from fake_llm_server import openai_text, openai_tool_calls
from mcp_helpers import tidegauge_run
from test_mcp_headless import toml_string
from test_mcp_reach import _statuses, _tidegauge
from test_mcp_servers import START, Session

from app.kernel.redact import REDACTED, clear_secrets, redact
from app.mcp.oauth import LoopbackReceiver, TokenFile, login, token_path
from app.mcp.settings import McpServerConfig

ROOT = Path(__file__).resolve().parent.parent


class OAuthServer:
    """tests/mcp_servers/oauth_http.py's app on a free loopback port, on a thread of the test process:
    what the tests check is what tidegauge sends it and makes of its answers, not its process."""

    def __init__(self, tmp_path: Path, client: str = "", scoped_tool: str = "") -> None:
        self.client = client  # a client registered beforehand, "ID:SECRET"
        self.scoped_tool = scoped_tool  # "NAME:SCOPE": a tool that needs that scope (a step-up)
        self.sock = listening_socket()
        self.port = self.sock.getsockname()[1]
        self.record = tmp_path / "oauth-received.jsonl"
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        self.served: AsgiInThread | None = None

    async def start(self) -> None:
        app = server_module("oauth_http").build_app(self.port, str(self.record), client=self.client,
                                                    scoped_tool_and_scope=self.scoped_tool)
        self.served = AsgiInThread(app, self.sock)
        self.served.start()

    def stop(self) -> None:
        if self.served is not None:
            self.served.stop()
            self.served.app.close_record()
            self.served = None

    def received(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []

    def grants(self) -> list[str]:
        return [r["grant_type"] for r in self.received() if r["path"] == "/token"]

    def revoke_everything(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/admin/revoke", timeout=30).raise_for_status()


@pytest.fixture
async def oauth_server(tmp_path: Path):
    server = OAuthServer(tmp_path)
    await server.start()
    yield server
    server.stop()
    clear_secrets()


def _config_toml(server: OAuthServer) -> str:
    return f"[mcp_servers.web]\nurl = {toml_string(server.url)}\n"


# The browser's TLS settings: every address it opens is plain http on loopback, so no CA bundle is
# loaded (~30 ms of CPU for each login's browser); an https address would fail its checks, not skip them.
_LOOPBACK_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


async def _browser(url: str) -> None:
    """What the user's browser does: open the address; the server consents and redirects to tidegauge."""
    async with httpx.AsyncClient(follow_redirects=True, timeout=30, trust_env=False, verify=_LOOPBACK_TLS) as browser:
        page = await browser.get(url)
    assert page.status_code == 200 and "authorized" in page.text, (page.status_code, page.text)


async def _logged_in(server: OAuthServer, data_dir: Path, tmp_path: Path) -> TokenFile:
    """A login as `tidegauge mcp login web` does it, in this process (the real-process one is tested below)."""
    tools = await login("web", McpServerConfig(url=server.url, startup_timeout=START), data_dir, tmp_path,
                        open_consent=_browser, consent_timeout=60)
    assert tools == 1
    return TokenFile(token_path(data_dir, "web"), server.url)


def _age_tokens(file: TokenFile) -> None:
    """An hour went by: the stored access token has expired (what a later run of tidegauge finds)."""
    stored = json.loads(file.path.read_text())
    stored["expires_at"] = time.time() - 60
    file.path.write_text(json.dumps(stored))


def _wait_for_line(path: Path, needle: str, proc: subprocess.Popen[bytes], seconds: float = 60.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        for line in text.splitlines():
            if needle in line:
                return line.strip()
        if proc.poll() is not None:
            break
        time.sleep(0.05)  # polling the login's stderr for the printed address, bounded
    raise AssertionError(f"no line with {needle!r} (exit code {proc.poll()}); stderr so far: {text[-2000:]!r}")


# ---------------------------------------------------------------- the whole flow, the login a real process

async def test_login_discovers_registers_uses_pkce_and_a_session_then_calls_the_tool_with_the_token(
        fake_llm, tmp_path: Path, oauth_server: OAuthServer) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text(_config_toml(oauth_server))
    (config / "config.toml").chmod(0o600)
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items()  # no browser: the address is printed
           if not k.startswith("TIDEGAUGE_") and k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(data)})
    stderr = tmp_path / "login.err"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "app", "mcp", "login", "web"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=err)
    try:
        address = _wait_for_line(stderr, "/authorize?", proc)
        await _browser(address)
        out, _ = await asyncio.to_thread(proc.communicate, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = stderr.read_text()
    assert proc.returncode == 0, said
    assert said.strip().endswith("logged in to web: 1 tools"), said

    # Discovery from the 401, registration, consent with S256 PKCE, the code exchanged for tokens.
    paths = [r["path"] for r in oauth_server.received()]
    assert paths[paths.index("/.well-known/oauth-protected-resource/mcp"):][:3] == [
        "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server", "/register"], paths
    assert "code_challenge_method=S256" in address and "redirect_uri=http%3A%2F%2F127.0.0.1%3A" in address
    assert oauth_server.grants() == ["authorization_code"]
    file = TokenFile(token_path(data, "web"), oauth_server.url)
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.path.parent.stat().st_mode) == 0o700
    tokens = json.loads(file.path.read_text())["tokens"]
    access, refresh = tokens["access_token"], tokens["refresh_token"]
    assert access not in said + out.decode() and refresh not in said + out.decode()

    # A session (headless, another process) sends the stored token; the user sees the tool's answer.
    fake_llm.enqueue(openai_tool_calls([("web__echo", {"text": "hello"}, "call_echo")]), openai_text("Done."))
    code, events, output = await asyncio.to_thread(_tidegauge, tmp_path, fake_llm, _config_toml(oauth_server), "echo")
    assert code == 0, output
    assert [s for s, _ in _statuses(events, "web")] == ["starting", "ready", "stopped"], output
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_echo"]
    assert not result["is_error"] and "echo: hello" in result["content"], result
    [call] = [r for r in oauth_server.received() if r["rpc"] == "tools/call"]
    assert call["authorization"] == f"Bearer {access}"
    assert access not in output and refresh not in output
    for path in data.rglob("*"):
        if path.is_file() and path != file.path:
            assert access not in path.read_text(errors="replace"), f"the access token was written to {path}"


# The browser a user names in BROWSER (here: one that follows the redirect, as a browser would, and
# notes the address it was given).
NAMED_BROWSER = """\
import sys
import urllib.request

with open(sys.argv[2], "a") as seen:
    seen.write(sys.argv[1] + "\\n")
with urllib.request.urlopen(sys.argv[1], timeout=30) as page:
    page.read()
"""


async def test_login_opens_the_browser_named_in_browser_even_without_a_display(
        tmp_path: Path, oauth_server: OAuthServer) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text(_config_toml(oauth_server))
    (config / "config.toml").chmod(0o600)
    (tmp_path / "browser.py").write_text(NAMED_BROWSER)
    opened = tmp_path / "opened.txt"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TIDEGAUGE_") and k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "BROWSER": f"{sys.executable} {tmp_path / 'browser.py'} %s {opened}"})

    proc = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "app", "mcp", "login", "web"], cwd=tmp_path,
                                   env=env, capture_output=True, text=True, timeout=120)

    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith("logged in to web: 1 tools"), proc.stderr
    (address,) = opened.read_text().splitlines()  # nobody else opened the printed address
    assert address.startswith(f"{oauth_server.base}/authorize?") and address in proc.stderr
    assert oauth_server.grants() == ["authorization_code"]


async def test_an_expired_access_token_is_refreshed_once_and_the_new_one_kept(
        tmp_path: Path, oauth_server: OAuthServer) -> None:
    data = tmp_path / "data"
    file = await _logged_in(oauth_server, data, tmp_path)
    old = json.loads(file.path.read_text())["tokens"]
    _age_tokens(file)

    session = Session(tmp_path)
    settings = {"web": McpServerConfig(url=oauth_server.url, startup_timeout=START)}
    from types import SimpleNamespace

    from app.mcp.hub import start_mcp

    session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10, data_dir=data),
                                  session.registry, session.engine, session.engine.emit,
                                  workspace=tmp_path, log_dir=session.log_dir)
    try:
        output = await session.run("web__echo", {"text": "again"})
        assert not output.is_error and "echo: again" in output.content, output.content
        output = await session.run("web__echo", {"text": "and again"}, call_id="call-2")
        assert not output.is_error, output.content
    finally:
        await session.hub.aclose()
    assert oauth_server.grants() == ["authorization_code", "refresh_token"]  # once, not at every request
    new = json.loads(file.path.read_text())
    assert new["tokens"]["access_token"] != old["access_token"] and new["expires_at"] > time.time() + 3000
    calls = [r for r in oauth_server.received() if r["rpc"] == "tools/call"]
    assert [c["authorization"] for c in calls] == [f"Bearer {new['tokens']['access_token']}"] * 2
    assert redact(new["tokens"]["access_token"]) == REDACTED and redact(new["tokens"]["refresh_token"]) == REDACTED


async def test_a_revoked_refresh_token_says_authorization_required_and_names_the_login_command(
        fake_llm, tmp_path: Path, oauth_server: OAuthServer) -> None:
    file = await _logged_in(oauth_server, tmp_path / "data", tmp_path)
    _age_tokens(file)
    oauth_server.revoke_everything()
    fake_llm.enqueue(openai_text("Fine."))

    code, events, output = await asyncio.to_thread(_tidegauge, tmp_path, fake_llm, _config_toml(oauth_server), "hi")

    assert code == 0, output
    [failed] = [d for s, d in _statuses(events, "web") if s == "failed"]
    assert failed == ("authorization required (HTTP 401, Bearer expected): run `tidegauge mcp login web`, or give "
                      "the server a token with bearer_token_env_var or headers in [mcp_servers.web]"), failed
    assert "did not start: authorization required" in output and "MCPError" not in output
    assert oauth_server.grants() == ["authorization_code", "refresh_token"]
    paths = [r["path"] for r in oauth_server.received()]
    assert paths.count("/authorize") == 1 and paths.count("/register") == 1  # the login's: no consent asked again


async def test_tokens_are_never_sent_to_another_url_configured_under_the_same_name(
        tmp_path: Path, oauth_server: OAuthServer) -> None:
    data = tmp_path / "data"
    file = await _logged_in(oauth_server, data, tmp_path)
    access = json.loads(file.path.read_text())["tokens"]["access_token"]
    elsewhere = OAuthServer(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    await elsewhere.start()
    try:
        session = Session(tmp_path)
        from types import SimpleNamespace

        from app.mcp.hub import start_mcp

        settings = {"web": McpServerConfig(url=elsewhere.url, startup_timeout=START)}
        session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10, data_dir=data),
                                      session.registry, session.engine, session.engine.emit,
                                      workspace=tmp_path, log_dir=session.log_dir)
        await session.hub.aclose()
        [failed] = [e.detail for e in session.server_events("web") if e.status == "failed"]
        assert failed.startswith("authorization required (HTTP 401, Bearer expected): run `tidegauge mcp login web`")
        assert elsewhere.received() and not [r for r in elsewhere.received() if r["authorization"]], access
    finally:
        elsewhere.stop()


PRE_ID, PRE_SECRET = "tidegauge-at-acme", "pre-registered-secret-7c41d09e"


async def test_a_pre_registered_client_logs_in_without_registering_and_its_secret_is_shown_nowhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = OAuthServer(tmp_path, client=f"{PRE_ID}:{PRE_SECRET}")
    await server.start()
    monkeypatch.setenv("TG_ACME_SECRET", PRE_SECRET)
    try:
        config = McpServerConfig(url=server.url, startup_timeout=START, oauth_client_id=PRE_ID,
                                 oauth_client_secret_env_var="TG_ACME_SECRET")
        assert await login("web", config, tmp_path / "data", tmp_path, open_consent=_browser, consent_timeout=60) == 1
    finally:
        server.stop()
        clear_secrets()
    paths = [r["path"] for r in server.received()]
    assert "/register" not in paths and "/authorize" in paths, paths
    [token_request] = [r for r in server.received() if r["path"] == "/token"]
    assert token_request["authorization"].startswith("Basic ")
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert PRE_SECRET not in path.read_text(), f"the client secret was written to {path}"


async def test_a_client_credentials_server_gets_its_token_in_the_session_without_a_login(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = OAuthServer(tmp_path, client=f"{PRE_ID}:{PRE_SECRET}")
    await server.start()
    monkeypatch.setenv("TG_ACME_SECRET", PRE_SECRET)
    session = Session(tmp_path)
    try:
        from types import SimpleNamespace

        from app.mcp.hub import start_mcp

        settings = {"web": McpServerConfig(url=server.url, startup_timeout=START, oauth_client_id=PRE_ID,
                                           oauth_client_secret_env_var="TG_ACME_SECRET",
                                           oauth_grant="client_credentials", oauth_issuer=server.base)}
        session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10,
                                                      data_dir=tmp_path / "data"),
                                      session.registry, session.engine, session.engine.emit,
                                      workspace=tmp_path, log_dir=session.log_dir)
        output = await session.run("web__echo", {"text": f"secret {PRE_SECRET}"})
        await session.hub.aclose()
        assert not output.is_error and output.content == "echo: secret [REDACTED]", output.content
    finally:
        server.stop()
        clear_secrets()
    assert server.grants() == ["client_credentials"]
    assert [r["path"] for r in server.received() if r["path"] in ("/register", "/authorize")] == []


async def test_a_client_secret_is_never_sent_to_an_authorization_server_other_than_oauth_issuer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MCP server (hostile, or moved) whose metadata names another authorization server than the
    one the client is registered with does not get the secret sent there."""
    server = OAuthServer(tmp_path, client=f"{PRE_ID}:{PRE_SECRET}")
    await server.start()
    monkeypatch.setenv("TG_ACME_SECRET", PRE_SECRET)
    session = Session(tmp_path)
    try:
        from types import SimpleNamespace

        from app.mcp.hub import start_mcp

        settings = {"web": McpServerConfig(url=server.url, startup_timeout=START, oauth_client_id=PRE_ID,
                                           oauth_client_secret_env_var="TG_ACME_SECRET",
                                           oauth_grant="client_credentials", oauth_issuer="https://login.acme.example")}
        session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10,
                                                      data_dir=tmp_path / "data"),
                                      session.registry, session.engine, session.engine.emit,
                                      workspace=tmp_path, log_dir=session.log_dir)
        await session.hub.aclose()
    finally:
        server.stop()
        clear_secrets()
    [failed] = [e.detail for e in session.server_events("web") if e.status == "failed"]
    assert failed.startswith("OAuth failed: ") and "\n" not in failed, failed
    assert server.grants() == [] and not [r for r in server.received() if (r["authorization"] or "").startswith("Basic")]


async def test_a_private_key_file_that_is_no_key_fails_that_server_in_one_line(tmp_path: Path) -> None:
    not_a_key = tmp_path / "key.pem"
    not_a_key.write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    session = Session(tmp_path)
    from types import SimpleNamespace

    from app.mcp.hub import start_mcp

    settings = {"m2m": McpServerConfig(url="http://127.0.0.1:9/mcp", oauth_client_id="c", oauth_grant="client_credentials",
                                       oauth_private_key_file=str(not_a_key))}
    session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10, data_dir=tmp_path),
                                  session.registry, session.engine, session.engine.emit,
                                  workspace=tmp_path, log_dir=session.log_dir)
    await session.hub.aclose()
    assert [(e.status, e.detail) for e in session.server_events("m2m")] == [
        ("starting", "http://127.0.0.1:9/mcp"),
        ("failed", f"oauth_private_key_file of m2m: {not_a_key} is not a readable PEM private key without a "
                   "password (ValueError)")]


@pytest.mark.parametrize(("table", "says"), [
    ({"command": "x", "oauth_client_id": "a"}, "oauth_client_id applies only to a url server"),
    ({"url": "http://127.0.0.1:9/", "oauth_client_metadata_url": "http://example.com/tidegauge.json"},
     "oauth_client_metadata_url must be an https:// address with a path"),
    ({"url": "http://127.0.0.1:9/", "oauth_grant": "client_credentials"},
     'oauth_grant = "client_credentials" needs oauth_client_id and either oauth_client_secret_env_var or '
     'oauth_private_key_file'),
    ({"url": "http://127.0.0.1:9/", "oauth_client_id": "a", "bearer_token_env_var": "T"},
     "set either oauth_client_id (OAuth) or a token"),
])
def test_oauth_settings_that_cannot_work_are_refused_naming_the_setting(table: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=re.escape(says)):
        McpServerConfig(**table)


@pytest.mark.parametrize(("toml", "says"), [
    ("", "mcp login: no server 'nope' in [mcp_servers] of config.toml (configured: none)"),
    ("[mcp_servers.nope]\ncommand = \"true\"\n", "mcp login nope: nope is started as a command; OAuth is for url servers"),
])
def test_mcp_login_of_a_server_it_cannot_log_in_to_is_one_line(tmp_path: Path, toml: str, says: str) -> None:
    (tmp_path / "config.toml").write_text(toml)
    (tmp_path / "config.toml").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data")})
    # The CLI in this process: the refusal's words are tested, not the process around them.
    proc = tidegauge_run(["mcp", "login", "nope"], cwd=tmp_path, env=env)
    assert proc.returncode in (1, 2) and proc.stderr.strip() == f"tidegauge: {says}", proc.stderr
    assert not (tmp_path / "data" / "mcp-oauth").exists()


# ---------------------------------------------------------------- the redirect receiver, as an attacker meets it

async def _get(port: int, target: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, body = answer.decode("latin-1").partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_the_redirect_receiver_takes_one_callback_with_the_flows_state_and_nothing_else() -> None:
    receiver = await LoopbackReceiver().start()
    await receiver.expect("the-flows-state")
    port = int(receiver.redirect_uri.rsplit(":", 1)[1].split("/")[0])
    assert receiver.redirect_uri == f"http://127.0.0.1:{port}/callback"
    waiting = asyncio.ensure_future(receiver.result(60))
    try:
        assert (await _get(port, "/callback?code=planted&state=guessed"))[0] == 400
        assert (await _get(port, "/callback?code=planted"))[0] == 400
        assert (await _get(port, "/elsewhere?code=planted&state=the-flows-state"))[0] == 400
        assert (await _get(port, "/callback?code=planted&state=" + "x" * 100_000))[0] == 414
        assert not waiting.done() and receiver.refused == 4

        status, page = await _get(port, "/callback?code=the-code&state=the-flows-state")
        assert status == 200 and "authorized" in page
        result = await waiting
        assert (result.code, result.state) == ("the-code", "the-flows-state")
        with pytest.raises(OSError):  # the port is closed: a second callback reaches nothing
            await _get(port, "/callback?code=second&state=the-flows-state")
    finally:
        waiting.cancel()
        await receiver.close()


async def test_the_receiver_listens_on_loopback_only() -> None:
    receiver = await LoopbackReceiver().start()
    try:
        assert receiver._server is not None
        assert {sock.getsockname()[0] for sock in receiver._server.sockets}  # type: ignore[attr-defined]  # an asyncio Server == {"127.0.0.1"}
    finally:
        await receiver.close()


# ---------------------------------------------------------------- scope step-up, as a user meets it

async def test_a_step_up_is_one_login_that_asks_for_the_new_scope_and_keeps_the_granted_one(
        fake_llm, tmp_path: Path) -> None:
    """Logged in with mcp:basic; a call of `admin` is refused 403 asking for mcp:admin; the line names
    `tidegauge mcp login web`, which now asks for both (it asked for mcp:basic again, so the user was
    stuck); the next session's call works."""
    server = OAuthServer(tmp_path, scoped_tool="admin:mcp:admin")
    await server.start()
    try:
        data = tmp_path / "data"
        config = McpServerConfig(url=server.url, startup_timeout=START)
        assert await login("web", config, data, tmp_path, open_consent=_browser, consent_timeout=60) == 2
        file = TokenFile(token_path(data, "web"), server.url)  # the 401 asked for mcp:basic
        assert file.granted_scope() == "mcp:basic"
        fake_llm.enqueue(openai_tool_calls([("web__admin", {}, "call_1")]), openai_text("Refused."),
                         openai_tool_calls([("web__admin", {}, "call_2")]), openai_text("Done."))
        first = await asyncio.to_thread(_run_session, fake_llm, tmp_path, server)
        [refused] = [e for e in first if e["type"] == "tool_result"]
        assert refused["is_error"] and "run `tidegauge mcp login web`: it asks for that scope" in refused["content"]

        assert await login("web", config, data, tmp_path, open_consent=_browser, consent_timeout=60) == 2
        assert file.granted_scope() is not None and set(file.granted_scope().split()) == {"mcp:basic", "mcp:admin"}
        assert file.wanted_scope() is None

        second = await asyncio.to_thread(_run_session, fake_llm, tmp_path, server)
        [done] = [e for e in second if e["type"] == "tool_result"]
        assert not done["is_error"] and done["content"] == "admin done"
    finally:
        server.stop()
        clear_secrets()


def _run_session(fake_llm: Any, tmp_path: Path, server: OAuthServer) -> list[dict[str, Any]]:
    from mcp_helpers import run_headless

    proc = run_headless(fake_llm, tmp_path, _config_toml(server), "administer", "--yes")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

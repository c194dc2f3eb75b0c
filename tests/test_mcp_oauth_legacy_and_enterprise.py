"""OAuth for MCP servers of the 2025-03-26 revision and enterprise-managed authorization (issue 26).

Against loopback servers laid out as the conformance suite's scenarios are
(tests/mcp_servers/oauth_legacy_enterprise_http.py), through tidegauge's real OAuth code:

- a 2025-03-26 server: authorization-server metadata at its origin naming an issuer under that
  origin (``/oauth``), logged in to as `tidegauge mcp login` does it, then a session calls its tool;
  and one without metadata, on the default ``/authorize``, ``/token``, ``/register``;
- as an attacker meets it: the origin's metadata naming another origin's issuer, and a
  current-revision server whose metadata names an issuer other than the one its protected-resource
  metadata named, are both refused, before anything is registered or sent;
- SEP-990 (``oauth_grant = "enterprise"``): a headless session exchanges the ID token at the
  identity provider for an ID-JAG, presents it at ``oauth_issuer`` (never at the authorization
  server the MCP server names) and calls the tool; the ID token and the client secret appear in no
  output, no file and no model request; an identity provider that refuses (and repeats the ID
  token) is one line without it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from asgi_in_thread import AsgiInThread, listening_socket, server_module
from fake_llm_server import openai_text, openai_tool_calls
from test_mcp_headless import toml_string
from test_mcp_oauth import _browser
from test_mcp_reach import _statuses, _tidegauge
from test_mcp_servers import START

from app.kernel.redact import clear_secrets
from app.mcp.oauth import LoginError, TokenFile, login, token_path
from app.mcp.settings import McpServerConfig

ID_TOKEN = "eyJhbGciOiJFUzI1NiJ9.id-token-of-demo-user.c2lnbmF0dXJl"
XAA_CLIENT, XAA_SECRET = "xaa-client", "xaa-client-secret-1234"


class LayoutServer:
    """tests/mcp_servers/oauth_legacy_enterprise_http.py's app in one MODE on a free loopback port, on
    a thread of the test process (tests/asgi_in_thread.py): what the tests check is what tidegauge
    sends it, not its process."""

    def __init__(self, tmp_path: Path, mode: str) -> None:
        self.mode = mode
        self.sock = listening_socket()
        self.port = self.sock.getsockname()[1]
        self.record = tmp_path / f"{mode}-received.jsonl"
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        self.served: AsgiInThread | None = None

    async def start(self) -> LayoutServer:
        app = server_module("oauth_legacy_enterprise_http").build_app(self.port, str(self.record), self.mode,
                                                                      ID_TOKEN)
        self.served = AsgiInThread(app, self.sock)
        self.served.start()
        return self

    def stop(self) -> None:
        if self.served is not None:
            self.served.stop()
            self.served.app.close_record()
            self.served = None

    def received(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []

    def paths(self) -> list[str]:
        return [r["path"] for r in self.received() if r["path"] != "/mcp"]


@pytest.fixture
async def layout(tmp_path: Path, request: pytest.FixtureRequest):
    server = await LayoutServer(tmp_path, request.param).start()
    yield server
    server.stop()
    clear_secrets()


def _files_holding(root: Path, *secrets: str) -> list[str]:
    return [f"{path} holds {secret[:6]}..." for path in root.rglob("*") if path.is_file()
            for secret in secrets if secret in path.read_text(errors="replace")]


# ---------------------------------------------------------------- 2025-03-26 servers

@pytest.mark.parametrize("layout", ["legacy"], indirect=True)
async def test_a_2025_03_26_server_whose_origin_metadata_names_an_issuer_under_it_is_logged_in_to_and_used(
        fake_llm, tmp_path: Path, layout: LayoutServer) -> None:
    toml = f"[mcp_servers.web]\nurl = {toml_string(layout.url)}\n"
    # The login `tidegauge mcp login` runs, in this process (its real process is test_mcp_oauth's):
    # what this layout changes is where the login goes, not the command around it.
    opened: list[str] = []

    async def browser(url: str) -> None:
        opened.append(url)
        await _browser(url)

    tools = await login("web", McpServerConfig(url=layout.url, startup_timeout=START), tmp_path / "data", tmp_path,
                        open_consent=browser, consent_timeout=60)
    assert tools == 1
    [address] = opened
    # The origin's metadata, then its endpoints under /oauth: registration, consent, the code's exchange.
    assert address.startswith(f"{layout.base}/oauth/authorize?"), address
    assert layout.paths() == ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource",
                              "/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server",
                              "/oauth/register", "/oauth/authorize", "/oauth/token"], layout.paths()

    fake_llm.enqueue(openai_tool_calls([("web__echo", {"text": "hello"}, "call_echo")]), openai_text("Done."))
    code, events, output = await asyncio.to_thread(_tidegauge, tmp_path, fake_llm, toml, "echo")
    assert code == 0, output
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_echo"]
    assert not result["is_error"] and "echo: hello" in result["content"], result


@pytest.mark.parametrize("layout", ["fallback"], indirect=True)
async def test_a_2025_03_26_server_without_metadata_is_logged_in_to_at_the_default_endpoints(
        tmp_path: Path, layout: LayoutServer) -> None:
    tools = await login("web", McpServerConfig(url=layout.url, startup_timeout=START), tmp_path / "data", tmp_path,
                        open_consent=_browser, consent_timeout=60)
    assert tools == 1
    assert layout.paths()[-3:] == ["/register", "/authorize", "/token"], layout.paths()
    assert TokenFile(token_path(tmp_path / "data", "web"), layout.url).exists()


async def _refused_login(layout: LayoutServer, tmp_path: Path) -> tuple[str, list[str]]:
    """``tidegauge mcp login`` against ``layout``, which must refuse: (its one line, the URLs a browser was sent to)."""
    opened: list[str] = []

    async def browser(url: str) -> None:
        opened.append(url)

    with pytest.raises(LoginError) as refused:
        await login("web", McpServerConfig(url=layout.url, startup_timeout=START), tmp_path / "data", tmp_path,
                    open_consent=browser, consent_timeout=60)
    return str(refused.value), opened


@pytest.mark.parametrize(("layout", "claimed", "expected"), [
    # A 2025-03-26 origin claiming another origin's issuer (and whatever is bound to it).
    ("foreign-issuer", "https://login.acme.example", "{base}"),
    # A current-revision server: its protected-resource metadata named {base}; the metadata there names
    # {base}/oauth. RFC 8414 §3.3 holds: an issuer under the same origin is not the one named.
    ("current-mismatch", "{base}/oauth", "{base}"),
], indirect=["layout"])
async def test_metadata_naming_an_issuer_it_may_not_speak_for_is_refused_before_anything_is_sent(
        tmp_path: Path, layout: LayoutServer, claimed: str, expected: str) -> None:
    said, opened = await _refused_login(layout, tmp_path)
    assert "\n" not in said and "issuer mismatch" in said, said
    assert claimed.format(base=layout.base) in said and expected.format(base=layout.base) in said, said
    assert opened == [] and not {"/register", "/oauth/register", "/oauth/token"} & set(layout.paths()), layout.paths()
    assert not (tmp_path / "data" / "mcp-oauth").exists() or not list((tmp_path / "data" / "mcp-oauth").iterdir())


@pytest.mark.parametrize("layout", ["cleartext-endpoints"], indirect=True)
async def test_a_login_refuses_authorization_endpoints_in_clear_text_off_loopback(
        tmp_path: Path, layout: LayoutServer) -> None:
    """The code, the PKCE verifier and the tokens would cross the network in plain http: refused in
    one line before the browser opens, as a refresh already refused such an endpoint."""
    said, opened = await _refused_login(layout, tmp_path)
    assert "\n" not in said and "http://192.0.2.10/oauth/authorize" in said, said
    assert "neither https nor http on loopback" in said, said
    assert opened == []
    assert not (tmp_path / "data" / "mcp-oauth").exists() or not [
        p for p in (tmp_path / "data" / "mcp-oauth").iterdir() if "access_token" in p.read_text()]


# ---------------------------------------------------------------- SEP-990, enterprise-managed authorization

def _enterprise_toml(server: LayoutServer, issuer: str | None = None) -> str:
    return (f"[mcp_servers.corp]\nurl = {toml_string(server.url)}\noauth_grant = \"enterprise\"\n"
            f"oauth_client_id = \"{XAA_CLIENT}\"\noauth_client_secret_env_var = \"TG_XAA_SECRET\"\n"
            f"oauth_issuer = {toml_string(issuer or server.base)}\n"
            f"oauth_idp_token_endpoint = {toml_string(server.base + '/idp/token')}\n"
            "oauth_idp_id_token_env_var = \"TG_ID_TOKEN\"\noauth_idp_client_id = \"idp-client\"\n")


@pytest.mark.parametrize("layout", ["enterprise"], indirect=True)
async def test_an_enterprise_session_exchanges_the_id_token_for_an_id_jag_and_calls_the_tool(
        fake_llm, tmp_path: Path, layout: LayoutServer) -> None:
    fake_llm.enqueue(openai_tool_calls([("corp__echo", {"text": "hello"}, "call_echo")]), openai_text("Done."))
    code, events, output = await asyncio.to_thread(
        _tidegauge, tmp_path, fake_llm, _enterprise_toml(layout), "echo",
        {"TG_XAA_SECRET": XAA_SECRET, "TG_ID_TOKEN": ID_TOKEN})
    assert code == 0, output
    assert [s for s, _ in _statuses(events, "corp")] == ["starting", "ready", "stopped"], output
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_echo"]
    assert not result["is_error"] and "echo: hello" in result["content"], result

    received = layout.received()
    [exchange] = [r["form"] for r in received if r["path"] == "/idp/token"]
    assert exchange == {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": ID_TOKEN,
                        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                        "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                        "audience": layout.base, "resource": layout.url, "client_id": "idp-client"}
    [bearer] = [r for r in received if r["path"] == "/token"]
    assert bearer["form"]["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert bearer["form"]["assertion"].startswith("idjag-") and "client_secret" not in bearer["form"]
    # The MCP server's protected-resource metadata named /evil: never asked, never sent anything.
    assert not [r for r in received if "evil" in r["path"] or "oauth-protected-resource" in r["path"]], received
    # The ID token went to the identity provider alone, the secret (HTTP Basic) to oauth_issuer's token endpoint alone.
    assert [r["path"] for r in received if ID_TOKEN in json.dumps(r)] == ["/idp/token"]
    assert [r["path"] for r in received if (r["authorization"] or "").startswith("Basic ")] == ["/token"]

    id_jag = bearer["form"]["assertion"]
    store = token_path(tmp_path / "data", "corp")
    access = json.loads(store.read_text())["tokens"]["access_token"]
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    for secret in (ID_TOKEN, XAA_SECRET, id_jag, access):
        assert secret not in output, f"{secret[:6]}... was printed"
        assert not [r for r in fake_llm.requests if secret in json.dumps(r.json)], f"{secret[:6]}... reached the model"
    assert list((tmp_path / "data").rglob("transcript.jsonl")), "the session's files were not where they are scanned"
    assert _files_holding(tmp_path / "data", ID_TOKEN, XAA_SECRET, id_jag) == []
    assert [p for p in (tmp_path / "data").rglob("*") if p.is_file() and access in p.read_text()] == [store]


@pytest.mark.parametrize("layout", ["enterprise"], indirect=True)
async def test_an_identity_provider_refusing_the_id_token_is_one_line_without_the_token(
        fake_llm, tmp_path: Path, layout: LayoutServer) -> None:
    wrong = "eyJhbGciOiJFUzI1NiJ9.an-expired-id-token.c2lnbmF0dXJl"
    fake_llm.enqueue(openai_text("No tools."))
    code, events, output = await asyncio.to_thread(
        _tidegauge, tmp_path, fake_llm, _enterprise_toml(layout), "echo",
        {"TG_XAA_SECRET": XAA_SECRET, "TG_ID_TOKEN": wrong})
    [(status, detail)] = [s for s in _statuses(events, "corp") if s[0] == "failed"]
    assert detail == (f"OAuth failed: OAuthTokenError: the identity provider at {layout.base}/idp/token refused "
                      "the token exchange (HTTP 400: invalid_grant)"), detail
    # The provider's answer repeated the token; nothing of it is shown or kept.
    assert wrong in json.dumps(layout.received()) and wrong not in output and XAA_SECRET not in output
    assert _files_holding(tmp_path / "data", wrong, XAA_SECRET) == []
    assert [r["path"] for r in layout.received() if r["path"] == "/token"] == []


async def test_an_enterprise_server_whose_id_token_variable_is_unset_fails_naming_it(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from app.mcp.hub import start_mcp
    from test_mcp_servers import Session

    session = Session(tmp_path)
    settings = {"corp": McpServerConfig(url="http://127.0.0.1:9/mcp", oauth_grant="enterprise", oauth_client_id="c",
                                        oauth_client_secret_env_var="TG_UNSET_SECRET_XYZ",
                                        oauth_issuer="https://as.example", oauth_idp_token_endpoint="https://idp.example/t",
                                        oauth_idp_id_token_env_var="TG_UNSET_ID_TOKEN_XYZ")}
    session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10, data_dir=tmp_path),
                                  session.registry, session.engine, session.engine.emit,
                                  workspace=tmp_path, log_dir=session.log_dir)
    await session.hub.aclose()
    assert [(e.status, e.detail) for e in session.server_events("corp")][-1] == (
        "failed", "oauth_client_secret_env_var of corp needs the environment variable TG_UNSET_SECRET_XYZ, "
                  "which is not set")


@pytest.mark.parametrize(("table", "says"), [
    ({"oauth_grant": "enterprise", "oauth_client_id": "c", "oauth_client_secret_env_var": "S"},
     'oauth_grant = "enterprise" needs oauth_issuer, oauth_idp_token_endpoint, oauth_idp_id_token_env_var'),
    ({"oauth_idp_token_endpoint": "https://idp.example/token"},
     'oauth_idp_token_endpoint applies only with oauth_grant = "enterprise"'),
    ({"oauth_grant": "enterprise", "oauth_client_id": "c", "oauth_client_secret_env_var": "S",
      "oauth_issuer": "https://as.example", "oauth_idp_token_endpoint": "idp.example/token",
      "oauth_idp_id_token_env_var": "T"}, "oauth_idp_token_endpoint must start with https:// or http://"),
    ({"oauth_grant": "enterprise", "oauth_client_id": "c", "oauth_client_secret_env_var": "S",
      "oauth_issuer": "https://as.example", "oauth_idp_token_endpoint": "https://idp.example/token",
      "oauth_idp_id_token_env_var": "eyJhbGciOi.not-a-name"}, "oauth_idp_id_token_env_var: 'eyJhbGciOi.not-a-name' "
                                                              "is not an environment variable name"),
])
def test_enterprise_settings_that_cannot_work_are_refused_naming_the_setting(table: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=re.escape(says)):
        McpServerConfig(url="http://127.0.0.1:9/mcp", **table)


async def test_mcp_login_of_an_enterprise_server_says_no_login_is_needed(tmp_path: Path) -> None:
    config = McpServerConfig(url="http://127.0.0.1:9/mcp", oauth_grant="enterprise", oauth_client_id="c",
                             oauth_client_secret_env_var="S", oauth_issuer="https://as.example",
                             oauth_idp_token_endpoint="https://idp.example/t", oauth_idp_id_token_env_var="T")
    with pytest.raises(LoginError, match=re.escape('corp uses oauth_grant = "enterprise": sessions get its tokens '
                                                   "themselves, no login needed")):
        await login("corp", config, tmp_path, tmp_path)


@pytest.mark.parametrize("layout", ["enterprise"], indirect=True)
async def test_an_identity_provider_client_with_a_secret_authenticates_with_http_basic(
        tmp_path: Path, layout: LayoutServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from app.mcp.hub import start_mcp
    from test_mcp_servers import Session

    idp_secret = "idp-client-secret-5678"
    monkeypatch.setenv("TG_XAA_SECRET", XAA_SECRET)
    monkeypatch.setenv("TG_ID_TOKEN", ID_TOKEN)
    monkeypatch.setenv("TG_IDP_SECRET", idp_secret)
    session = Session(tmp_path)
    settings = {"corp": McpServerConfig(
        url=layout.url, startup_timeout=START, oauth_grant="enterprise", oauth_client_id=XAA_CLIENT,
        oauth_client_secret_env_var="TG_XAA_SECRET", oauth_issuer=layout.base,
        oauth_idp_token_endpoint=f"{layout.base}/idp/token", oauth_idp_id_token_env_var="TG_ID_TOKEN",
        oauth_idp_client_id="idp client", oauth_idp_client_secret_env_var="TG_IDP_SECRET")}
    session.hub = await start_mcp(SimpleNamespace(mcp_servers=settings, tool_defer_share=0.10, data_dir=tmp_path / "data"),
                                  session.registry, session.engine, session.engine.emit,
                                  workspace=tmp_path, log_dir=session.log_dir)
    output = await session.run("corp__echo", {"text": f"{idp_secret} {ID_TOKEN}"})
    await session.hub.aclose()
    assert not output.is_error and output.content == "echo: [REDACTED] [REDACTED]", output.content
    [exchange] = [r for r in layout.received() if r["path"] == "/idp/token"]
    # RFC 6749 §2.3.1: each part form-encoded, then joined and base64'd (the id has a space).
    assert exchange["authorization"] == "Basic " + base64.b64encode(f"idp%20client:{idp_secret}".encode()).decode()
    assert "client_id" not in exchange["form"] and idp_secret not in json.dumps(exchange["form"])


async def test_an_identity_provider_answering_a_gzip_bomb_is_refused_unread(tmp_path: Path) -> None:
    """A hostile identity provider's 64 KB answer that inflates to 64 MiB: tidegauge asked for
    the answer as it is and does not inflate one that came compressed (httpx would inflate each
    chunk whole before the answer's bound could look)."""
    import gzip
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mcp.client.auth import OAuthTokenError

    from app.mcp.oauth import _id_jag_exchange

    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    asked: list[str | None] = []

    class BombingProvider(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(self.headers.get("Accept-Encoding"))
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(bomb)))
            self.end_headers()
            self.wfile.write(bomb)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), BombingProvider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/idp/token"
    config = McpServerConfig(url="http://127.0.0.1:9/mcp", oauth_grant="enterprise", oauth_client_id="c",
                             oauth_client_secret_env_var="TG_XAA_SECRET", oauth_issuer="https://as.example",
                             oauth_idp_token_endpoint=endpoint, oauth_idp_id_token_env_var="TG_ID_TOKEN")
    try:
        with pytest.raises(OAuthTokenError) as refused:
            await _id_jag_exchange(config, ID_TOKEN, None)("aud", "res")
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["identity"]
    assert str(refused.value) == (f"the identity provider at {endpoint} answered compressed ('gzip'), "
                                  "which tidegauge did not ask for; not read")

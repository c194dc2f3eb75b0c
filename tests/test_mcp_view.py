"""The dashboard's /mcp view and the re-authorize offer (issue 37), as a user meets them.

The real dashboard on a real session (on a thread, as the dashboard tests run it), with real MCP
servers: a plain JSON-RPC server process over stdio (tests/mcp_servers/legacy_stdio.py: started
twice, each start without the SDK's imports), and the OAuth-protected url server of
tests/mcp_servers/oauth_http.py with its own authorization server. The browser's part of a login
is a real process: ``$BROWSER`` names tests/mcp_servers/follow_redirect.py, which opens the
address and follows the redirect back to tidegauge, as a browser that consents would.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
import webbrowser
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
from rich.console import Console
from fake_llm_server import openai_text, openai_tool_calls
from test_mcp_oauth import OAuthServer, _browser
from test_mcp_servers import START

from app.kernel.envelope import outside_log
from app.kernel.commands import ManageMcpServer
from app.kernel.events import McpServerRow, McpStatusEvent
from app.kernel.redact import clear_secrets
from app.mcp.oauth import TokenFile, login, token_path
from app.mcp.settings import McpServerConfig
from widgets.confirm_screen import ConfirmScreen
from widgets.mcp_screen import McpScreen

FOLLOW_REDIRECT = Path(__file__).parent / "mcp_servers" / "follow_redirect.py"
LEGACY_STDIO = Path(__file__).parent / "mcp_servers" / "legacy_stdio.py"
KEY = "sk-test-fake-key-0123456789"


def _dashboard(fake_llm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: dict[str, Any],
               **settings_given: Any) -> Any:
    from session_thread import SessionThread

    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (tmp_path / "config").mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings = load_settings({"provider": "openai", "model": "m", "base_url": fake_llm.base_url("openai"),
                              "data_dir": str(tmp_path / "data"), "memory_update_tokens": 0, "mcp_servers": servers,
                              **settings_given})
    return TidegaugeApp(SessionThread(build_session(settings, approvals=True, cwd=work)).start(), cursor_blink=False)


async def _until(pilot: Any, condition: Callable[[], Any], what: str, rounds: int = 9_000) -> Any:
    """Let the App run until ``condition()`` holds (state decides, not time; the bound only stops a hang)."""
    for _ in range(rounds):
        value = condition()
        if value:
            return value
        await pilot.pause(0.01)
    lines = [line.text for line in pilot.app.screen_stack[0].query("EngineLine")]
    raise AssertionError(f"never: {what}; the screen is {pilot.app.screen!r}; the conversation said {lines}")


def _row(app: Any, name: str) -> McpServerRow | None:
    screen = app.screen
    if not isinstance(screen, McpScreen):
        return None
    return next((row for row in screen.rows if row.name == name), None)


def _in_state(app: Any, name: str, state: str) -> McpServerRow | None:
    row = _row(app, name)
    return row if row is not None and row.state == state and not row.busy else None


async def _open_view(pilot: Any) -> McpScreen:
    from dashboard_helpers import send

    await send(pilot, "/mcp")
    screen = await _until(pilot, lambda: isinstance(pilot.app.screen, McpScreen) and pilot.app.screen, "/mcp opens")
    assert isinstance(screen, McpScreen)
    return screen


def _server_pids(command: str) -> list[int]:
    """The processes of the test's own tree running ``command`` (the session runs on a thread here)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any(command in part for part in child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


# ---------------------------------------------------------------- a real stdio server: the view, reconnect


async def test_the_view_lists_a_real_server_reconnects_it_after_a_kill_and_says_what_it_cannot_do(
        fake_llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _dashboard(fake_llm, tmp_path, monkeypatch, {
        # Half a second to start, as a server that loads something does: the row's "reconnecting"
        # lasts long enough to be drawn (mcp-server-time took its SDK's imports, a CPU-second, instead).
        "echo": {"command": sys.executable, "args": [str(LEGACY_STDIO), "--record", str(tmp_path / "received.jsonl"),
                                                     "--slow-start", "0.5"],
                 "startup_timeout": START},
        "off": {"command": "/nonexistent/server", "enabled": False}})
    async with app.run_test(size=(120, 36)) as pilot:
        await _open_view(pilot)
        ready = await _until(pilot, lambda: _in_state(app, "echo", "ready"), "echo is ready in the view")
        assert (ready.transport, ready.tools, ready.deferred, ready.auth) == ("stdio", 1, False, "none")
        assert ready.target.endswith(f"legacy_stdio.py --record {tmp_path / 'received.jsonl'} --slow-start 0.5")
        # Its schema tokens are what the gauge's breakdown carries for it (definitions and instructions).
        context = app.view.context
        assert ready.schema_tokens > 0
        assert context.breakdown["mcp:echo"] == ready.schema_tokens + ready.instructions_tokens
        assert _row(app, "off") is not None and _row(app, "off").state == "disabled"

        [pid] = _server_pids("legacy_stdio.py")
        os.kill(pid, signal.SIGKILL)
        failed = await _until(pilot, lambda: _in_state(app, "echo", "failed"), "the killed server shows failed")
        assert "exited" in failed.reason or "signal" in failed.reason, failed.reason

        await pilot.press("r")  # the cursor is on the first server: echo
        await _until(pilot, lambda: (row := _row(app, "echo")) is not None and row.busy == "reconnecting",
                     "the row says it is reconnecting")
        again = await _until(pilot, lambda: _in_state(app, "echo", "ready"), "echo is ready again")
        assert again.tools == 1 and again.reason == ""
        [new_pid] = _server_pids("legacy_stdio.py")
        assert new_pid != pid
        assert app.view.context.breakdown["mcp:echo"] == again.schema_tokens + again.instructions_tokens

        # Commands reach the session from a pipe too: what it cannot do is one line under the list.
        screen = app.screen
        assert isinstance(screen, McpScreen)
        notes = []
        for command in (ManageMcpServer("reconnect", "nope\x1b[2J"), ManageMcpServer("login", "echo"),
                        ManageMcpServer("logout", "echo"), ManageMcpServer("reconnect", "off")):
            before = app.view.mcp_status

            def answered(before: McpStatusEvent | None = before) -> bool:
                return screen.status is not before and screen.status is app.view.mcp_status

            app.session.submit(command)
            await _until(pilot, answered, f"the view draws the answer to {command}")
            notes.append(screen.status.note)
        assert notes == ["no MCP server named 'nope\\x1b[2J' in this session",
                         "echo is started as a command: OAuth login is for url servers",
                         "echo is started as a command: OAuth login is for url servers",
                         "off is disabled in config.toml (enabled = false)"]
        assert _in_state(app, "echo", "ready") is not None and [row.name for row in screen.rows] == ["echo", "off"]
        await pilot.press("escape")
        assert not isinstance(app.screen, McpScreen)


# ---------------------------------------------------------------- OAuth: logout, login, the re-authorize offer


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graphical browser as ``webbrowser`` finds it: a display and ``$BROWSER``, a real process."""
    monkeypatch.setenv("DISPLAY", ":tidegauge-test")
    monkeypatch.setenv("BROWSER", f"{sys.executable} {FOLLOW_REDIRECT} %s")
    monkeypatch.setattr(webbrowser, "_tryorder", None)  # read from the environment above at the next open


async def _logged_in(server: OAuthServer, tmp_path: Path) -> TokenFile:
    data = tmp_path / "data"
    await login("web", McpServerConfig(url=server.url, startup_timeout=START), data, tmp_path,
                open_consent=_browser, consent_timeout=60)
    return TokenFile(token_path(data, "web"), server.url)


async def test_logout_deletes_the_token_file_and_login_from_the_view_gets_new_tokens(
        fake_llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: None) -> None:
    server = OAuthServer(tmp_path)
    await server.start()
    try:
        file = await _logged_in(server, tmp_path)
        first_token = json.loads(file.path.read_text())["tokens"]["access_token"]
        app = _dashboard(fake_llm, tmp_path, monkeypatch, {"web": {"url": server.url, "startup_timeout": START}})
        async with app.run_test(size=(120, 36)) as pilot:
            await _open_view(pilot)
            ready = await _until(pilot, lambda: _in_state(app, "web", "ready"), "web is ready")
            assert (ready.transport, ready.auth, ready.tools) == ("http", "oauth (logged in)", 1)

            await pilot.press("o")
            out = await _until(pilot, lambda: _in_state(app, "web", "failed"), "web needs a login after the logout")
            assert not file.path.exists()
            assert out.auth == "oauth (needs login)" and out.reason.startswith("authorization required")

            await pilot.press("l")
            back = await _until(pilot, lambda: _in_state(app, "web", "ready"), "web is ready after the login")
            assert back.auth == "oauth (logged in)"
            assert json.loads(file.path.read_text())["tokens"]["access_token"] != first_token
            lines = [line.text for line in app.query("EngineLine")]
            assert any(text.startswith("logged out of MCP server web") for text in lines), lines
            assert any(text.startswith("logging in to MCP server web: authorize tidegauge in your browser")
                       for text in lines), lines
            assert first_token not in "\n".join(lines)
    finally:
        server.stop()
        clear_secrets()


async def test_a_call_refused_for_scope_offers_to_log_in_again_and_is_sent_again_once_logged_in(
        fake_llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: None) -> None:
    """Logged in with mcp:basic; the model calls `admin`, which needs mcp:admin: the server answers
    403 insufficient_scope. The dialog names the server and the scopes the login will ask for (both);
    yes runs the login in the browser, and the call is sent again: the model gets the tool's answer."""
    server = OAuthServer(tmp_path, scoped_tool="admin:mcp:admin")
    await server.start()
    try:
        file = await _logged_in(server, tmp_path)
        assert file.granted_scope() == "mcp:basic"
        fake_llm.enqueue(openai_tool_calls([("web__admin", {}, "call_admin")]), openai_text("Done."))
        # --yes: the tool runs without its own approval; the offer is asked all the same
        app = _dashboard(fake_llm, tmp_path, monkeypatch, {"web": {"url": server.url, "startup_timeout": START}},
                         yes=True)
        async with app.run_test(size=(120, 36)) as pilot:
            from dashboard_helpers import send, settle

            await send(pilot, "administer")
            dialog = await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
                                  "the re-authorize dialog")
            assert "MCP server web refused a tool call" in dialog.question
            assert "Log in again, asking for: mcp:basic mcp:admin?" in dialog.question
            await pilot.press("y")
            await settle(pilot)

        tool_replies = [m["content"] for m in fake_llm.requests[1].json["messages"] if m["role"] == "tool"]
        assert tool_replies == ["admin done"]
        assert set((file.granted_scope() or "").split()) == {"mcp:basic", "mcp:admin"}
        assert file.wanted_scope() is None
    finally:
        server.stop()
        clear_secrets()


async def test_no_to_the_offer_gives_the_call_its_refusal_and_logs_in_to_nothing(
        fake_llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: None) -> None:
    server = OAuthServer(tmp_path, scoped_tool="admin:mcp:admin")
    await server.start()
    try:
        file = await _logged_in(server, tmp_path)
        grants_before = server.grants()
        fake_llm.enqueue(openai_tool_calls([("web__admin", {}, "call_admin")]), openai_text("Refused."))
        # --yes: the tool runs without its own approval; the offer is asked all the same
        app = _dashboard(fake_llm, tmp_path, monkeypatch, {"web": {"url": server.url, "startup_timeout": START}},
                         yes=True)
        async with app.run_test(size=(120, 36)) as pilot:
            from dashboard_helpers import send, settle

            await send(pilot, "administer")
            await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the re-authorize dialog")
            await pilot.press("n")
            await settle(pilot)

        [reply] = [m["content"] for m in fake_llm.requests[1].json["messages"] if m["role"] == "tool"]
        assert reply == ("Error: MCP server 'web': more scope required (HTTP 403 insufficient_scope, scope 'mcp:admin' "
                         "asked for): run `tidegauge mcp login web`: it asks for that scope beside the one you have")
        assert server.grants() == grants_before  # no login ran
        assert file.granted_scope() == "mcp:basic" and file.wanted_scope() == "mcp:admin"
    finally:
        server.stop()
        clear_secrets()


# ---------------------------------------------------------------- the view alone: snapshots, drawing


ROWS = [
    McpServerRow(name="time", state="ready", transport="stdio", target="/usr/bin/mcp-server-time --local-timezone UTC",
                 tools=2, schema_tokens=412),
    McpServerRow(name="git", state="ready", transport="stdio", target="mcp-server-git --repository /src/app",
                 tools=12, prompts=0, schema_tokens=2_804, instructions_tokens=35, deferred=True),
    McpServerRow(name="docs", state="failed", transport="http", target="https://docs.example.com/mcp",
                 auth="oauth (needs login)",
                 reason="authorization required (HTTP 401, Bearer expected): run `tidegauge mcp login docs`, or give "
                        "the server a token with bearer_token_env_var or headers in [mcp_servers.docs]"),
    McpServerRow(name="files", state="starting", transport="stdio", target="npx -y @modelcontextprotocol/server-filesystem",
                 busy="reconnecting"),
    McpServerRow(name="issues", state="ready", transport="http", target="https://issues.example.com/mcp", tools=5,
                 prompts=2, resources=True, schema_tokens=1_230, auth="oauth (logged in)", scopes="mcp:basic mcp:admin"),
]


class ViewHost:
    """The /mcp view on the dashboard's stylesheet, with fixed rows (so the snapshot is the same every run)."""

    @staticmethod
    def app(status: McpStatusEvent) -> Any:
        from textual.app import App

        from app.surfaces.dashboard.app import CSS_FILE

        class Host(App[None]):
            CSS_PATH = str(CSS_FILE)

            def __init__(self) -> None:
                super().__init__()
                self.asked: list[tuple[str, str]] = []

            async def on_mount(self) -> None:
                await self.push_screen(McpScreen(status))

            def on_mcp_screen_action_asked(self, message: McpScreen.ActionAsked) -> None:
                self.asked.append((message.action, message.server))

        return Host()


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_snapshot_mcp_view(snap_compare, size) -> None:
    assert snap_compare(ViewHost.app(McpStatusEvent(servers=ROWS)), terminal_size=size)


async def test_the_keys_ask_for_the_selected_server_and_hostile_words_are_drawn_inert() -> None:
    hostile = McpServerRow(name="evil", state="failed", transport="http", target="https://x.example/mcp",
                           reason="\x1b]8;;https://evil.example\x07click\x1b]8;;\x07 [bold]markup[/bold]")
    host = ViewHost.app(McpStatusEvent(servers=[ROWS[0], hostile]))
    async with host.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("down", "l", "up", "r", "o")
        await pilot.pause()
        assert host.asked == [("login", "evil"), ("reconnect", "time"), ("logout", "time")]
        option = host.screen.query_one("OptionList").get_option_at_index(1)
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(option.prompt)
        text = console.export_text()
        assert "\x1b" not in text and "\x07" not in text and "[bold]markup[/bold]" in text  # shown, not obeyed


# ---------------------------------------------------------------- logout as an attacker meets it


def test_a_logout_deletes_a_symlink_planted_at_the_token_path_never_the_file_it_names(tmp_path: Path) -> None:
    """Another local process replaced the token file with a link to a file of the user's: the
    logout removes the link, and the file it pointed at is untouched."""
    from app.mcp.oauth import logout

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    path = token_path(tmp_path / "data", "web")
    path.parent.mkdir(parents=True)
    path.symlink_to(precious)

    assert logout("web", tmp_path / "data") is True
    assert not path.is_symlink() and not path.exists()
    assert precious.read_text() == "keep me"
    assert logout("web", tmp_path / "data") is False  # nothing left to delete: said, not raised


def test_the_view_model_keeps_the_latest_servers_for_the_view() -> None:
    from app.surfaces.view_model import DashboardView

    view = DashboardView()
    first = McpStatusEvent(servers=ROWS[:1])
    second = McpStatusEvent(servers=ROWS, note="time: reconnecting already")
    view.apply(outside_log(first))
    view.apply(outside_log(second))
    assert view.mcp_status is second and [row.name for row in view.mcp_status.servers][:2] == ["time", "git"]


# ---------------------------------------------------------------- the offer, as a hostile server meets it


async def _call_with_stored_tokens(tmp_path: Path, forbidden: dict[str, str],
                                   answer: str) -> tuple[Any, list[Any]]:
    """The hub of a dashboard session (forms shown) calling `docs__write` on a server that refuses it
    403 insufficient_scope; each re-authorize offer is answered ``answer`` at once."""
    from loopback_http import serving
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
    from test_mcp_step_up import ScopedServer

    from app.kernel.events import McpAuthEvent
    from app.mcp.client_features import ClientRequests
    from app.mcp.hub import McpHub
    from app.tools.base import ToolContext
    from app.tools.registry import default_registry

    events: list[Any] = []
    loop = asyncio.get_running_loop()

    def emit(event: Any) -> None:
        events.append(event)
        if isinstance(event, McpAuthEvent) and event.status == "offer":
            loop.call_soon(requests.approve, event.request_id, answer)

    requests = ClientRequests(emit=emit, shows_forms=True)
    with serving(ScopedServer(forbidden)) as server:
        tokens = TokenFile(token_path(tmp_path / "data", "docs"), server.url)
        await tokens.set_client_info(OAuthClientInformationFull.model_validate(
            {"client_id": "tidegauge-test", "redirect_uris": ["http://127.0.0.1:9/callback"],
             "token_endpoint_auth_method": "none"}))
        await tokens.set_tokens(OAuthToken(access_token="tg-view-access-5d2c", token_type="Bearer",
                                           expires_in=3600, scope="files:read"))
        hub = McpHub(emit=emit)
        registry = default_registry(40_000)
        try:
            await hub.start({"docs": McpServerConfig(url=server.url, startup_timeout=START)}, workspace=tmp_path,
                            log_dir=None, registry=registry, requests=requests, data_dir=tmp_path / "data")
            run = await registry.run("docs__write", {}, ToolContext(workspace=tmp_path,
                                                                    tool_results_dir=tmp_path / "results"))
        finally:
            await hub.aclose()
            clear_secrets()
    return run, events


async def test_the_offer_names_the_union_of_scopes_and_a_no_runs_no_login(tmp_path: Path) -> None:
    run, events = await _call_with_stored_tokens(tmp_path, {"write": 'scope="files:write", '}, "no")
    [offer] = [e for e in events if e.type == "mcp_auth"]
    assert (offer.status, offer.server, offer.scopes) == ("offer", "docs", "files:read files:write")
    assert run.is_error and "more scope required" in run.content
    assert [e.decision for e in events if e.type == "approval_resolved"] == ["no"]


async def test_a_scope_that_is_no_scope_is_never_offered(tmp_path: Path) -> None:
    """A server naming an escape sequence or a link as its scope gets no dialog: nothing to log in for."""
    run, events = await _call_with_stored_tokens(
        tmp_path, {"write": 'scope="x\x1b]8;;https://evil.example\x07click", '}, "yes")
    assert not [e for e in events if e.type == "mcp_auth"]
    assert run.is_error and "evil" not in run.content and "\x1b" not in run.content


def test_the_views_command_and_answer_cross_the_session_process_pipe() -> None:
    """The dashboard runs its session in a child process: the ask and the rows go as JSON lines."""
    from app.kernel.events import McpAuthEvent, event_adapter
    from app.session.process import decode_command_line, encode_command

    assert decode_command_line(encode_command(ManageMcpServer("login", "docs"), 9)) == (9, ManageMcpServer("login", "docs"))
    for event in (McpStatusEvent(servers=ROWS, note="docs: logging in already"),
                  McpAuthEvent(server="docs", status="offer", request_id="reauthorize-1", scopes="a b")):
        assert event_adapter().validate_json(event.model_dump_json()) == event


async def test_a_reconnect_ends_a_call_in_flight_saying_so_rather_than_leaving_it_to_its_timeout(
        tmp_path: Path) -> None:
    """A plain JSON-RPC server whose ``hold`` reports progress once and never answers: what ends the
    call is the reconnect, whatever library the server speaks through (the SDK's content server cost
    two starts of its imports here)."""
    from test_mcp_servers import Session, python_server

    session = Session(tmp_path)
    hub = await session.start({"slow": python_server("progress_flood.py")})
    try:
        progressed = asyncio.Event()
        session.ctx.on_progress = lambda *_report: progressed.set()
        call = asyncio.ensure_future(session.run("slow__hold", {}))
        await asyncio.wait_for(progressed.wait(), 120)  # the server is working on the call: it is in flight
        await hub.reconnect("slow")
        run = await asyncio.wait_for(call, 120)  # bounds a hang only: the call ends with the restart
        assert run.is_error and "stopped during hold (it was restarted)" in run.content, run.content
        assert [e.status for e in session.server_events("slow")][-2:] == ["starting", "ready"]
        assert (await session.run("slow__flood", {"n": 1}, "call-2")).content.startswith("sent 1 notifications")
    finally:
        await hub.aclose()
        clear_secrets()

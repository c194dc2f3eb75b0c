"""``tidegauge --web`` against someone other than its user (issue 24).

Any page in the user's browser could open the dashboard's websocket, type a
prompt and approve a ``run_bash``. Here the real server runs as a child process
(``python -m app --web``) and is called the way an attacker would: without the
token, with a guessed one, from another origin, through a DNS-rebinding name,
with sizes and messages no page sends, and with more tabs than it allows. A
plain aiohttp client speaks for a script; one Chromium run speaks for pages.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import aiohttp
import httpx
import psutil
import pytest

from web_support import (START_TIMEOUT_S, BrowserTerminal, WebServer, browser_pages, isolated_env,
                         require_chromium)

MAX_TABS = 2


def _start(tmp_path: Path, *flags: str, max_tabs: int = MAX_TABS) -> WebServer:
    config = tmp_path / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f"web_max_tabs = {max_tabs}\n", encoding="utf-8")
    web = WebServer.start(tmp_path, "--web-port", "0", "--provider", "demo", *flags)
    web.wait_for_address()
    return web


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    web = _start(tmp_path_factory.mktemp("web"))
    try:
        yield web
    finally:
        web.stop()
    _assert_log_is_clean(web)


def _assert_log_is_clean(web: WebServer) -> None:
    """The token only in the one line that prints the address; never a traceback."""
    printed = "".join(web.output)
    assert printed.count(web.token) == 1, printed
    assert "Traceback" not in printed and "locals" not in printed, printed


def _ws_url(web: WebServer, path: str, query: str = "") -> str:
    return "ws://" + urlsplit(web.base_url).netloc + path + (f"?{query}" if query else "")


async def _refused_status(url: str, **options: Any) -> int:
    """The HTTP status that refused this websocket (the test fails if it opened)."""
    async with aiohttp.ClientSession() as client:
        try:
            websocket = await client.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=START_TIMEOUT_S),
                                                **options)
        except aiohttp.WSServerHandshakeError as error:
            return error.status
        await websocket.close()
        raise AssertionError(f"the websocket {url} opened with {options}")


async def _next_text(websocket: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
    """The next message that is not the dashboard's screen bytes (text, or the close)."""
    while True:
        message = await websocket.receive(timeout=START_TIMEOUT_S)
        if message.type != aiohttp.WSMsgType.BINARY:
            return message


async def _told_why_closed(websocket: aiohttp.ClientWebSocketResponse) -> tuple[str, int, str]:
    """A tab the server closes: (what its page is told, the close code, the close frame's reason)."""
    told = ""
    while True:
        message = await _next_text(websocket)
        if message.type == aiohttp.WSMsgType.TEXT and json.loads(message.data)[0] == "tidegauge_closed":
            told = json.loads(message.data)[1]
        elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
            return told, message.data, message.extra  # type: ignore[return-value]  # a close frame has both


def test_without_the_token_the_page_and_the_websocket_are_refused(server: WebServer) -> None:
    origin = server.base_url
    page = httpx.get(server.base_url + "/", timeout=START_TIMEOUT_S)
    hint = " (open the address tidegauge --web printed: it ends in ?token=...)"
    assert (page.status_code, page.text.strip()) == (403, "tidegauge: refused: no token" + hint)
    guessed = httpx.get(server.base_url + "/?token=" + "A" * len(server.token), timeout=START_TIMEOUT_S)
    assert (guessed.status_code, guessed.text.strip()) == (403, "tidegauge: refused: wrong token" + hint)
    assert asyncio.run(_refused_status(_ws_url(server, "/ws"), origin=origin)) == 403
    assert asyncio.run(_refused_status(_ws_url(server, "/ws/" + server.token[:-1] + "x"), origin=origin)) == 403

    lines = [server.wait_for_line("refused GET") for _ in range(4)]
    assert lines[0].rstrip("\n") == "tidegauge --web: refused GET '/' from 127.0.0.1: no token"
    assert lines[1].endswith(": wrong token\n") and lines[3].endswith(": wrong token\n")
    assert "refused GET the websocket" in lines[2] and "no token" in lines[2]
    assert httpx.get(server.url, timeout=START_TIMEOUT_S).status_code == 200  # the token opens the page


def test_another_origin_or_a_rebinding_name_is_refused_even_with_the_token(server: WebServer) -> None:
    port = urlsplit(server.base_url).port
    tab = _ws_url(server, "/ws/" + server.token)
    assert asyncio.run(_refused_status(tab, origin="http://evil.example")) == 403
    assert asyncio.run(_refused_status(tab)) == 403  # a websocket without an Origin is no page of ours
    rebinding = {"Host": f"evil.example:{port}"}
    assert asyncio.run(_refused_status(tab, origin=f"http://evil.example:{port}", headers=rebinding)) == 403
    page = httpx.get(server.url, headers=rebinding, timeout=START_TIMEOUT_S)
    assert (page.status_code, page.text.strip()) == (
        403, f"tidegauge: refused: Host 'evil.example:{port}' is not the served address")

    assert "Origin 'http://evil.example' is not the served origin" in server.wait_for_line("refused GET")
    assert "Origin none is not the served origin" in server.wait_for_line("refused GET")
    assert f"Host 'evil.example:{port}' is not" in server.wait_for_line("refused GET the websocket")
    assert f"Host 'evil.example:{port}' is not" in server.wait_for_line("refused GET '/'")


def _dashboard_environments(web: WebServer) -> list[dict[str, str]]:
    """The environment of every tab's dashboard process (textual-serve sets its size there)."""
    found = []
    for child in psutil.Process(web.process.pid).children():
        try:
            environment = child.environ()
        except psutil.NoSuchProcess:
            continue
        if "TEXTUAL_DRIVER" in environment:
            found.append(environment)
    return found


async def _open_tab(web: WebServer, query: str = "") -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
    # The token in the query, as a script would pass it (the page puts it in the path: the browser test).
    client = aiohttp.ClientSession()
    websocket = await client.ws_connect(_ws_url(web, "/ws", "&".join(filter(None, [f"token={web.token}", query]))),
                                        origin=web.base_url)
    return client, websocket


async def _close_tab(client: aiohttp.ClientSession, websocket: aiohttp.ClientWebSocketResponse) -> None:
    await websocket.close()
    await client.close()


def test_with_the_token_a_tab_runs_a_dashboard_at_a_clamped_size(server: WebServer) -> None:
    async def scenario() -> tuple[list[dict[str, str]], aiohttp.WSMessage]:
        client, websocket = await _open_tab(server, "width=99999999&height=99999999")
        server.wait_for_line("a tab opened")
        try:
            first = await websocket.receive(timeout=START_TIMEOUT_S)  # the dashboard draws
            return _dashboard_environments(server), first
        finally:
            await _close_tab(client, websocket)

    environments, first = asyncio.run(scenario())
    server.wait_for_line("a tab closed (0 of")
    assert first.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), first
    assert [(env["COLUMNS"], env["ROWS"]) for env in environments] == [("1000", "500")]


def test_more_tabs_than_web_max_tabs_are_refused_with_the_reason(server: WebServer) -> None:
    async def scenario() -> tuple[str, int, str]:
        tabs = [await _open_tab(server) for _ in range(MAX_TABS)]
        server.wait_for_line(f"a tab opened ({MAX_TABS} of web_max_tabs {MAX_TABS} open)")
        client, extra = await _open_tab(server)
        refused = await _told_why_closed(extra)
        await _close_tab(client, extra)
        await _close_tab(*tabs.pop(0))  # a place is free once a tab closes
        server.wait_for_line(f"a tab closed ({MAX_TABS - 1} of")
        tabs.append(await _open_tab(server))
        server.wait_for_line(f"a tab opened ({MAX_TABS} of")
        for tab in tabs:
            await _close_tab(*tab)
        return refused

    told, code, _ = asyncio.run(scenario())
    server.wait_for_line("a tab closed (0 of")
    assert code == 1013  # try again later
    assert told == (f"{MAX_TABS} tabs are open, the most web_max_tabs allows: close one and press "
                    "Restart, or raise web_max_tabs")
    assert "a tab was refused: 2 tabs are open" in "".join(server.output)


def test_a_malformed_message_is_one_log_line_and_the_server_serves_on(server: WebServer) -> None:
    malformed = {
        "{not json": "not JSON (9 characters)",
        '["stdin", 5]': "stdin data is int, not text",
        '["resize", {"width": "wide", "height": 3}]': "resize width and height must be whole numbers",
        '{"type": "stdin"}': "not a [type, data] list: dict",
        json.dumps(["ping", "x" * 100]): "ping data must be text of at most 64 characters",
        '["exec", "rm -rf ~"]': "unknown message type 'exec'",
        # json.loads recursed once per bracket: a RecursionError closed the tab
        "[" * 100_000: "nested more than 8 levels deep (100000 characters)",
        '["resize", ' + "[" * 50_000 + "]" * 50_000 + "]": "nested more than 8 levels deep (100012 characters)",
    }

    async def scenario() -> tuple[aiohttp.WSMessage, aiohttp.WSMessage]:
        client, websocket = await _open_tab(server)
        server.wait_for_line("a tab opened")
        try:
            for text in malformed:
                await websocket.send_str(text)
            await websocket.send_str('["ping", "42"]')  # the tab still answers after all of them
            pong = await _next_text(websocket)
            await websocket.send_str(json.dumps(["stdin", "x" * (1024 * 1024)]))  # over the 1 MiB bound
            closed = await _next_text(websocket)
            return pong, closed
        finally:
            await _close_tab(client, websocket)

    pong, closed = asyncio.run(scenario())
    for reason in malformed.values():
        line = server.wait_for_line("malformed message")
        assert line.rstrip("\n") == f"tidegauge --web: a tab sent a malformed message ({reason}): ignored"
    assert json.loads(pong.data) == ["pong", "42"]
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 1009), closed
    assert "its tab is closed" in server.wait_for_line("a tab's websocket failed")
    server.wait_for_line("a tab closed (0 of")
    assert httpx.get(server.url, timeout=START_TIMEOUT_S).status_code == 200
    _assert_log_is_clean(server)


def test_a_resumed_sessions_tab_says_which_process_holds_it_and_a_second_tab_is_told_why(tmp_path: Path) -> None:
    """One server on one resumed session shows both refusals (a server start is a process and its
    imports). While another process holds the session's lock, the tab's dashboard is refused and
    its page says so instead of staying blank; once the lock is free, a first tab runs on the
    session and a second is told it is open in the first."""
    from app.session import lock as session_lock
    from app.session.store import SessionStore

    (tmp_path / "work").mkdir()
    session = SessionStore(tmp_path / "data").create(tmp_path / "work", "demo", None)
    lock = session_lock.acquire(session.transcript_path)  # as a terminal tidegauge on it would
    web = _start(tmp_path, "--resume", session.id)

    async def refused_by_the_lock() -> tuple[str, int, str]:
        client, websocket = await _open_tab(web)
        try:
            return await _told_why_closed(websocket)
        finally:
            await _close_tab(client, websocket)

    async def second_tab() -> tuple[str, int, str]:
        first = await _open_tab(web)
        web.wait_for_line("a tab opened")
        drawn = await first[1].receive(timeout=START_TIMEOUT_S)  # its dashboard runs on the session
        assert drawn.type == aiohttp.WSMsgType.BINARY, drawn
        client, second = await _open_tab(web)
        refused = await _told_why_closed(second)
        await _close_tab(client, second)
        await _close_tab(*first)
        return refused

    held = False
    try:
        held_told, held_code, held_reason = asyncio.run(refused_by_the_lock())
        web.wait_for_line("a tab closed (0 of")  # the refused tab holds no place and not the session
        session_lock.release(lock)
        held = True
        second_told, second_code, _ = asyncio.run(second_tab())
    finally:
        web.stop()
        if not held:
            session_lock.release(lock)
    # held by another process: that process's line
    assert held_told.startswith(f"session {session.id} is in use by process {os.getpid()} since "), held_told
    assert held_told.endswith("wait for it to end, or add --fork-session to continue in a copy of it"), held_told
    assert held_code == 1011 and held_told.startswith(held_reason.removesuffix("..."))
    assert f"a tab's dashboard ended by itself: {held_told}" in "".join(web.output)
    # open in another tab: why, and what to do
    assert second_code == 1013
    assert second_told == (f"session {session.id} is open in another tab: close that tab, then press Restart "
                           "(or serve a copy: --fork-session)")
    _assert_log_is_clean(web)


@pytest.fixture(scope="module")
def off_loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    """A server on 0.0.0.0 with a refusal count of its own (the module's server counts those of
    the other tests): the off-loopback test and the flood of refusals share it, one start fewer."""
    web = _start(tmp_path_factory.mktemp("web-off-loopback"), "--web-host", "0.0.0.0")
    try:
        yield web
    finally:
        web.stop()


def test_web_host_off_loopback_warns_once_and_still_refuses_other_names(off_loopback: WebServer) -> None:
    web = off_loopback
    port = urlsplit(web.url).port
    warning = [line for line in web.output if "warning" in line]
    assert warning == [f"tidegauge: warning: --web-host 0.0.0.0 is not loopback: anyone who can reach "
                       f"0.0.0.0:{port} and holds the token can run commands as this user\n"]
    by_address = f"http://127.0.0.1:{port}/?token={web.token}"
    assert httpx.get(by_address, timeout=START_TIMEOUT_S).status_code == 200
    by_name = httpx.get(by_address, headers={"Host": f"rebound.example:{port}"}, timeout=START_TIMEOUT_S)
    assert by_name.status_code == 403


def test_web_host_that_is_not_an_address_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "app", "--web", "--web-host", "evil.example"],
                          cwd=tmp_path, env=isolated_env(tmp_path), capture_output=True, text=True,
                          timeout=START_TIMEOUT_S)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "tidegauge: --web-host: 'evil.example' is not an IP address (e.g. 127.0.0.1, 192.168.1.5) "
        "(see tidegauge --help)"]


def test_a_resize_to_any_size_is_clamped() -> None:
    from app.surfaces.dashboard.web import parse_tab_message

    huge = parse_tab_message(json.dumps(["resize", {"width": 99999999, "height": 99999999}]))
    tiny = parse_tab_message(json.dumps(["resize", {"width": -5, "height": 0}]))
    assert (huge.width, huge.height, tiny.width, tiny.height) == (1000, 500, 10, 5)


# --- a browser: another local page, no token, the token ------------------------------------------

ATTACK_PAGE = """<!DOCTYPE html><html><body><script>
window.results = {};
for (const [name, url] of Object.entries(%s)) {
  const socket = new WebSocket(url);
  socket.onopen = () => { window.results[name] = "open"; socket.send(JSON.stringify(["stdin", "y"])); };
  socket.onerror = () => { if (!window.results[name]) window.results[name] = "refused"; };
}
</script></body></html>"""


class _AttackPages(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.mark.timeout(240)
def test_in_chromium_only_the_served_page_with_the_token_reaches_the_dashboard(tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    web = _start(tmp_path, max_tabs=1)
    served = "ws://" + urlsplit(web.base_url).netloc
    targets = {"no token": served + "/ws", "guessed": served + "/ws/guess",
               "the real token": served + "/ws/" + web.token}  # even a page that learnt it: wrong origin
    _AttackPages.page = (ATTACK_PAGE % json.dumps(targets)).encode()
    attacker = ThreadingHTTPServer(("127.0.0.1", 0), _AttackPages)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            for page in browser_pages(playwright, (1200, 800)):
                page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/", timeout=START_TIMEOUT_S * 1000)
                page.wait_for_function("Object.keys(window.results).length === 3", timeout=START_TIMEOUT_S * 1000)
                assert page.evaluate("window.results") == {name: "refused" for name in targets}

                assert page.goto(web.base_url + "/").status == 403

                terminal = BrowserTerminal(page)
                terminal.open(web.url)
                terminal.wait_for_text("Ask tidegauge", timeout_s=START_TIMEOUT_S)
                terminal.focus()
                terminal.type("typed in the browser")
                terminal.wait_for_text("typed in the browser", timeout_s=START_TIMEOUT_S)

                second = page.context.new_page()  # web_max_tabs = 1: this tab says why it is empty
                second.goto(web.url)
                second.get_by_text("the most web_max_tabs allows").wait_for(state="visible",
                                                                            timeout=START_TIMEOUT_S * 1000)
    finally:
        attacker.shutdown()
        attacker.server_close()
        web.stop()
    printed = "".join(web.output)
    attack_origin = f"Origin 'http://127.0.0.1:{attacker.server_address[1]}' is not the served origin"
    assert printed.count(attack_origin) == 3, printed
    _assert_log_is_clean(web)


def test_the_page_that_holds_the_token_is_not_cached_framed_or_sent_as_a_referer(server: WebServer) -> None:
    """A link the dashboard opens must not carry the page's address (and its token) to another site."""
    page = httpx.get(server.url, timeout=START_TIMEOUT_S)
    assert page.status_code == 200
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["Cache-Control"] == "no-store"
    assert page.headers["X-Frame-Options"] == "DENY"
    assert f'data-session-websocket-url="ws://{urlsplit(server.base_url).netloc}/ws/{server.token}"' in page.text


def test_a_flood_of_refused_requests_does_not_bury_the_log(off_loopback: WebServer) -> None:
    """Any page in the browser can make requests to the port (an image tag in a loop). Each one
    was a log line: 10,000 of them buried everything the user must read."""
    from app.surfaces.dashboard.web import RefusalLog

    refusals = RefusalLog(each=50, every=1_000)
    lines = [refusals.line_for("refused GET '/x' from 127.0.0.1: no token") for _ in range(10_000)]
    logged = [line for line in lines if line is not None]
    assert len(logged) == 50 + 1 + 10  # one by one, the notice, then at 1,000, 2,000 ... 10,000
    assert "one line per 1,000 refusals: 51 so far" in logged[50] and "(10,000 refusals so far)" in logged[-1]

    # The refusals of the off-loopback test (one, if it ran first) count too: 51 more requests bring
    # the notice either way, and the log then holds 50 lines and the notice.
    web = off_loopback
    by_address = f"http://127.0.0.1:{urlsplit(web.url).port}"
    with httpx.Client(timeout=START_TIMEOUT_S) as client:
        for n in range(51):
            assert client.get(f"{by_address}/?n={n}").status_code == 403  # no token: each refused
    web.wait_for_line("from now on one line per 1,000 refusals")
    assert sum("refused GET" in line for line in web.output) == 51  # 50 lines and the notice
    assert httpx.get(f"{by_address}/?token={web.token}", timeout=START_TIMEOUT_S).status_code == 200  # the user gets in


def test_nesting_is_measured_outside_strings_and_refused_before_parsing() -> None:
    from app.surfaces.dashboard.web import BadTabMessage, parse_tab_message

    assert parse_tab_message(json.dumps(["stdin", "[" * 10_000])).text == "[" * 10_000  # a paste of brackets
    with pytest.raises(BadTabMessage, match="nested more than 8 levels"):
        parse_tab_message('["stdin", "x"' + ", [" * 9 + "]" * 9 + "]")

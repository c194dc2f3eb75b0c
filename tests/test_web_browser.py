"""``tidegauge --web`` in a real headless Chromium: the demo task, ctrl+o, ctrl+s, and stopping.

One server and one page run the whole user flow (each step needs the one before:
the output to expand and the context to compact come from the task). The page's
screen is read from xterm.js's buffer and every step waits for what it shows.
(screenshots/web-dashboard.png is made by screenshots/generate.py, with the SVGs.)
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import psutil
import pytest

from app.surfaces.dashboard.web import SERVER_STOPPED_WORDS
from web_support import START_TIMEOUT_S, BrowserTerminal, WebServer, launch_chromium, require_chromium

VIEWPORT = (1600, 1000)

pytestmark = pytest.mark.timeout(360)  # Chromium + the dashboard + a 15 MB demo log on a loaded machine


@contextlib.contextmanager
def _serving(folder: Path) -> Iterator[WebServer]:
    require_chromium()
    # --yes and --max-steps must reach every tab's dashboard (no approval dialog; "of 9" in the header)
    web = WebServer.start(folder, "--web-port", "0", "--provider", "demo", "--demo-speed", "0", "--yes",
                          "--max-steps", "9")
    try:
        web.wait_for_address()
        yield web
    finally:
        web.stop()


@pytest.fixture(scope="module")
def served_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's server's folder: its workspace, config and data directory."""
    return tmp_path_factory.mktemp("web")


@pytest.fixture(scope="module")
def server(served_folder: Path) -> Iterator[WebServer]:
    """One server for the module (a start is an interpreter, the web stack and the demo's data):
    the demo task runs in a tab of it, then the last test opens two more and stops it with ctrl+c.
    A tab is a dashboard of its own, so the tests share only the server and its data directory."""
    with _serving(served_folder) as web:
        yield web


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One Chromium for the module (a launch costs more than a test's own steps); each test has a
    context of its own in it, so no cookie, storage or tab carries from one test to the next."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def _page(chromium: Any, viewport: tuple[int, int]) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def terminal(chromium: Any) -> Iterator[BrowserTerminal]:
    with _page(chromium, VIEWPORT) as page:
        yield BrowserTerminal(page)


def test_the_demo_task_runs_in_the_browser_and_ctrl_o_and_ctrl_s_work(
        server: WebServer, served_folder: Path, terminal: BrowserTerminal) -> None:
    assert server.process.poll() is None, "the module's server stopped before this test (the ctrl+c test runs last)"
    terminal.open(server.url)
    screen = terminal.wait_for_text("demo (scripted model)", "Ask tidegauge", "of 9", timeout_s=START_TIMEOUT_S)
    assert "context" in screen and "auto-compact" in screen  # the gauge is there from the first screen

    # No click into the page first: the terminal has the focus from the start (issue 29).
    terminal.type("find errors in app.log")
    terminal.press("Enter")
    # The answer names the one error line, and the cat call is marked truncated.
    terminal.wait_for_text("ERROR database connection refused", "truncated", "idle")

    terminal.click_text("run_bash cat app.log")  # the call (in the tool list or the conversation)
    terminal.press("Control+o")
    # The viewer shows the whole saved output (15 MB of log), not the cut the model saw.
    saved = max((served_folder / "data" / "sessions").glob("*/tool-results/*"), key=lambda f: f.stat().st_size)
    full_text = saved.read_text(encoding="utf-8")
    # (its line count is on the full view's status row alone: the model's view says the characters too)
    terminal.wait_for_text(f"{len(full_text.splitlines()):,} lines, {len(full_text):,} characters",
                           full_text.split("\n", 1)[0])

    terminal.press("Control+o")  # collapse again
    terminal.press("Control+s")
    terminal.wait_for_text("compaction: frees ")  # it asks first, with what the compaction frees and costs
    terminal.press("y")
    terminal.wait_for_text("context compacted")

    # The tab has an icon: the page links it and the server answers it (no 404 in the log).
    icon = terminal.page.request.get(server.base_url + "/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.body()[:4] == b"\x00\x00\x01\x00"  # an ICO directory
    assert terminal.page.locator('link[rel="icon"]').get_attribute("href") == "/favicon.ico"

    # Offline: the page, its script, styles and fonts all came from this server.
    hosts = {urlsplit(url).netloc for url in terminal.requests if urlsplit(url).scheme in ("http", "https", "ws")}
    assert hosts == {urlsplit(server.url).netloc}, terminal.requests


def test_a_720x480_tab_and_a_closed_tab_ends_its_dashboard_and_ctrl_c_on_the_server_ends_the_others(
        server: WebServer, chromium: Any, terminal: BrowserTerminal) -> None:
    """The tab closed first is a small browser window, checked before it closes (a tab is a
    dashboard and a session process: one tab fewer than a test of its own). The server is the
    module's: this test stops it, so it runs last."""
    # An earlier test's tab ends once its page closed: only this test's two tabs are counted below.
    _, earlier = psutil.wait_procs(server.descendants(), timeout=START_TIMEOUT_S)
    assert not earlier, f"an earlier tab's processes still run: {[p.pid for p in earlier]}"
    with _page(chromium, (720, 480)) as small:
        other = BrowserTerminal(small)
        _a_small_window_takes_keys_before_a_click_and_keeps_the_footers_keys(other, server)
        terminal.open(server.url)
        terminal.wait_for_text("Ask tidegauge", timeout_s=START_TIMEOUT_S)
        # Each tab is a dashboard process with its session process under it (started after
        # the first frame): a tab's processes are one subtree of the server's.
        tabs = _tab_trees(server, count=2)
        other_tab, this_tab = tabs  # opened in this order: pids grow
        assert all(len(tree) >= 2 for tree in tabs), "every tab runs its own dashboard and session processes"

        other.page.close()
        gone, alive = psutil.wait_procs(other_tab, timeout=START_TIMEOUT_S)
        assert not alive, "closing a tab ends its dashboard and its session"
        assert all(p.is_running() for p in this_tab), "the other tab's dashboard runs on"
    dashboards = this_tab

    assert server.stop() == 0
    assert "stopped" in server.output[-1]
    gone, alive = psutil.wait_procs(dashboards, timeout=START_TIMEOUT_S)
    assert not alive, f"left running after ctrl+c: {[p.pid for p in alive]}"
    terminal.page.get_by_text("Session ended.").wait_for(state="visible", timeout=START_TIMEOUT_S * 1000)
    # Restart cannot open a new session with the server gone: it says so and how to resume.
    terminal.page.get_by_role("button", name="Restart").click()
    terminal.page.get_by_text(SERVER_STOPPED_WORDS).wait_for(state="visible", timeout=START_TIMEOUT_S * 1000)


def _tab_trees(server: WebServer, count: int) -> list[list["psutil.Process"]]:
    """The server's ``count`` tab subtrees (dashboard + its session process), oldest first,
    once each has its session process (the dashboard starts it after its first frame)."""
    root = psutil.Process(server.process.pid)
    for _ in range(int(START_TIMEOUT_S * 20)):
        trees = []
        for child in sorted(root.children(), key=lambda p: p.create_time()):
            try:
                tree = [child, *child.children(recursive=True)]
                if any("app.wiring.session_child" in " ".join(p.cmdline()) for p in tree):
                    trees.append(tree)
            except psutil.NoSuchProcess:  # one ended while we looked: look again
                continue
        if len(trees) >= count:
            return trees[:count]
        time.sleep(0.05)  # polls the process table for the condition above
    raise AssertionError(f"{count} tabs with a session process each did not appear")


# The keys the footer must keep whole at 80 columns, and every word it may show.
FOOTER_KEYS = ("^o Output", "^s Compact", "^r Reset", "^g Chart", "^q Quit", "^p palette")
FOOTER_WORDS = {"^o", "Output", "^s", "Compact", "^r", "Reset", "^g", "Chart", "^q", "Quit", "tab", "Region",
                "↑", "↓", "History", "pgup", "pgdn", "Scroll", "^p", "palette"}


def _a_small_window_takes_keys_before_a_click_and_keeps_the_footers_keys(terminal: BrowserTerminal,
                                                                         server: WebServer) -> None:
    """A small browser window (issue 29): its terminal is 80 columns, the footer's keys are whole
    there (at 142 columns it read "^s C▏"), and the page takes keys before any click."""
    terminal.open(server.url)
    screen = terminal.wait_for_text("Ask tidegauge", "session ", timeout_s=START_TIMEOUT_S)
    cols, rows = terminal.page.evaluate("[window.__tidegaugeTerminal.cols, window.__tidegaugeTerminal.rows]")
    assert cols <= 80 and rows <= 24, f"720x480 gives a {cols}x{rows} terminal"
    footer = screen.rstrip("\n").split("\n")[-1]
    assert set(footer.split()) <= FOOTER_WORDS, f"a cut word in the footer at {cols} columns: {footer!r}"
    for entry in FOOTER_KEYS:
        assert entry in footer, f"{entry!r} missing from the footer at {cols} columns: {footer!r}"
    terminal.type("/help")  # no click into the page first
    terminal.press("Enter")
    terminal.wait_for_text("commands:", "/compact", timeout_s=START_TIMEOUT_S)

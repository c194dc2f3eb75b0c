"""``tidegauge --web`` for tests: the real server in a child process, a real Chromium page on it.

The browser is Debian's ``chromium`` driven by Playwright (no browser download:
``executable_path`` points at the system one). The page draws the terminal on a
canvas, so what it shows is read from xterm.js's own screen buffer: an init
script catches the page's Terminal object when textual-serve's page code stores
it (``this.terminal = new Terminal(...)``), and ``screen_text`` reads its rows.
Everything is waited for by what appears on screen, never by sleeping.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("TIDEGAUGE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# The flags a root, offline, headless run needs: no sandbox (root), no GPU, and no
# background calls to Google's hosts, which this machine's closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-default-apps", "--disable-extensions"]
# Generous bounds for a loaded 2-core machine; every wait ends as soon as the screen shows it.
START_TIMEOUT_S = 60
TASK_TIMEOUT_S = 120

CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, 'terminal', {
  configurable: true,
  set(value) {
    Object.defineProperty(this, 'terminal', {value, writable: true, configurable: true, enumerable: true});
    window.__tidegaugeTerminal = value;
  },
});
window.__screenText = () => {
  const term = window.__tidegaugeTerminal;
  if (!term) return '';
  const buffer = term.buffer.active;
  const rows = [];
  for (let y = 0; y < term.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    rows.push(line ? line.translateToString(true) : '');
  }
  return rows.join('\\n');
};
"""


def require_chromium() -> None:
    """Skip without a browser on a developer's machine; in CI a missing browser is a failure."""
    if Path(CHROMIUM).exists():
        return
    message = f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def isolated_env(tmp_path: Path) -> dict[str, str]:
    """The user's environment without API keys or TIDEGAUGE_ settings, with config and data in tmp."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT))
    return env


@dataclass
class WebServer:
    """``python -m app --web ...`` running in a child process; ``url`` once it listens."""

    process: subprocess.Popen[str]
    url: str = ""
    output: list[str] = field(default_factory=list)
    _lines: "queue.Queue[str | None]" = field(default_factory=queue.Queue)
    _reader: threading.Thread | None = None

    @classmethod
    def start(cls, tmp_path: Path, *flags: str, folder: str = "work") -> "WebServer":
        """Started in ``tmp_path/folder`` (the header names it), its data and config in ``tmp_path``."""
        work = tmp_path / folder
        work.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen([sys.executable, "-m", "app", "--web", *flags], cwd=work,
                                   env=isolated_env(tmp_path), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        server = cls(process)
        server._reader = threading.Thread(target=server._read_output, daemon=True)
        server._reader.start()
        return server

    def _read_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def wait_for_address(self) -> str:
        """The address from the server's first line (it prints it once it listens)."""
        while True:
            try:
                line = self._lines.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(f"--web printed no address in {START_TIMEOUT_S}s: {''.join(self.output)!r}") from None
            if line is None:
                raise AssertionError(f"--web ended (exit {self.process.wait()}): {''.join(self.output)!r}")
            if "served on http://" in line:
                self.url = line.split("served on ", 1)[1].split()[0]
                return self.url

    @property
    def base_url(self) -> str:
        """The served address without the token (``url`` is the one printed, token included)."""
        return self.url.split("/?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    def wait_for_line(self, text: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """The next line the server prints that contains ``text`` (lines before it are skipped)."""
        seen: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"--web printed no line with {text!r} in {timeout_s}s; "
                                     f"since the last wait: {''.join(seen)!r}") from None
            if line is None:
                raise AssertionError(f"--web ended before printing {text!r}: {''.join(self.output)!r}")
            seen.append(line)
            if text in line:
                return line

    def stop(self) -> int:
        """ctrl+c, as a user stops it; returns the exit code once all it printed is in ``output``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("--web did not stop on ctrl+c") from None
        if self._reader is not None:
            self._reader.join(timeout=START_TIMEOUT_S)
        return code

    def descendants(self) -> list[Any]:
        import psutil

        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


class BrowserTerminal:
    """A Playwright page on the served dashboard, read and driven like a terminal."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.add_init_script(CATCH_TERMINAL)

    def open(self, url: str) -> None:
        self.page.goto(url, wait_until="commit", timeout=START_TIMEOUT_S * 1000)

    def screen_text(self) -> str:
        return str(self.page.evaluate("window.__screenText()"))

    def wait_for_text(self, *texts: str, timeout_s: float = TASK_TIMEOUT_S) -> str:
        """Wait until every one of ``texts`` is on screen at once; returns the screen."""
        condition = "(texts) => { const s = window.__screenText(); return texts.every(t => s.includes(t)); }"
        try:
            self.page.wait_for_function(condition, arg=list(texts), timeout=timeout_s * 1000, polling=100)
        except Exception as error:  # the screen says more than Playwright's timeout message
            raise AssertionError(f"not on screen after {timeout_s}s: {texts!r}\n{self.screen_text()}") from error
        return self.screen_text()

    def focus(self) -> None:
        """Keys to the terminal, as when a user clicks into the page (without a click in the app)."""
        self.page.focus(".xterm-helper-textarea")

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)

    def click_text(self, text: str) -> None:
        """Click the middle of the first place ``text`` is shown (cells measured from the page)."""
        rows = self.screen_text().split("\n")
        for row, line in enumerate(rows):  # noqa: B007 - row is read after the loop
            column = line.find(text)
            if column >= 0:
                break
        else:
            raise AssertionError(f"{text!r} is not on screen:\n{self.screen_text()}")
        box = self.page.locator(".xterm-screen").bounding_box()
        assert box is not None
        cols, term_rows = self.page.evaluate("[window.__tidegaugeTerminal.cols, window.__tidegaugeTerminal.rows]")
        cell_w, cell_h = box["width"] / cols, box["height"] / term_rows
        x = box["x"] + (column + len(text) / 2) * cell_w
        y = box["y"] + (row + 0.5) * cell_h
        self.page.mouse.click(x, y)


def launch_chromium(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                      timeout=START_TIMEOUT_S * 1000)


def browser_pages(playwright: Any, viewport: tuple[int, int]) -> Iterator[Any]:
    """A fresh browser and a page (more tabs: ``page.context.new_page()``); closed afterwards."""
    browser = launch_chromium(playwright)
    try:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        yield context.new_page()
    finally:
        browser.close()

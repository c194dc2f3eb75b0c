"""``tidegauge --web`` without a browser: what a user meets before a page opens, and the page itself.

The server runs as a real child process (``python -m app --web``); the page is
fetched over HTTP from it like a browser would. The starts refused before anything is served run
the same CLI in-process, but for the first (the real binary's exit).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from cli_in_process import run_cli
from web_support import START_TIMEOUT_S, WebServer, isolated_env


def _run(tmp_path: Path, *flags: str, real_process: bool = False,
         **env_extra: str) -> subprocess.CompletedProcess[str]:
    """A --web start that is expected to fail before serving (so it ends by itself): the same CLI
    in this process with exactly the process's environment (tests/cli_in_process.py; a ``python -m
    app`` start is ~0.5 CPU-s), or ``real_process`` for the real binary's exit."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = isolated_env(tmp_path) | env_extra
    if not real_process:
        return run_cli(["--web", *flags], cwd=work, env=env)
    return subprocess.run([sys.executable, "-m", "app", "--web", *flags], cwd=work, env=env,
                          capture_output=True, text=True, timeout=START_TIMEOUT_S)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    """One server for the tests that only read from it (its address, its page)."""
    web = WebServer.start(tmp_path_factory.mktemp("web"), "--web-port", "0", "--provider", "demo")
    try:
        web.wait_for_address()
        yield web
    finally:
        web.stop()


def test_a_port_in_use_is_one_line_naming_the_port_and_the_flag(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run(tmp_path, "--web-port", str(port), real_process=True)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tidegauge: --web: ") and f"127.0.0.1:{port}" in line and "--web-port" in line
    assert "served on" not in proc.stdout


def test_a_port_out_of_range_is_one_config_line(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--web-port", "70000")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "web_port" in line and "70000" in line and "--web-port" in line


def test_a_missing_api_key_is_one_line_before_anything_is_served(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--web-port", "0", "--provider", "anthropic")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["tidegauge: provider anthropic: no API key (set ANTHROPIC_API_KEY, or --base-url URL for a server of your own)"]
    assert "served on" not in proc.stdout


def test_an_unknown_session_is_one_line_before_anything_is_served(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--web-port", "0", "--provider", "demo", "--resume", "no-such-session")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "no-such-session" in line and "served on" not in proc.stdout


def test_web_and_a_headless_prompt_together_are_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-p", "hello")
    assert proc.returncode == 2
    assert "--web" in proc.stderr.strip().splitlines()[-1]


def test_the_server_listens_on_loopback_only(server: WebServer) -> None:
    assert urlsplit(server.url).hostname == "127.0.0.1"


def test_the_page_loads_nothing_from_outside_the_server(server: WebServer) -> None:
    """No CDN: every stylesheet, script, font and image the page names is served by tidegauge."""
    page = httpx.get(server.url, timeout=START_TIMEOUT_S)
    assert page.status_code == 200
    referenced = re.findall(r"""(?:href|src)=["']([^"']+)["']|url\(["']?([^"')]+)["']?\)""", page.text)
    urls = {urljoin(server.url, a or b) for a, b in referenced}
    assert any(u.endswith(".ttf") for u in urls), "the terminal font comes with the page"
    for url in urls:
        assert urlsplit(url).netloc == urlsplit(server.url).netloc, f"the page loads {url}"
        assert httpx.get(url, timeout=START_TIMEOUT_S).status_code == 200, url


def test_a_page_template_that_would_load_from_outside_is_refused_with_one_line() -> None:
    """If textual-serve's page ever names another remote file, --web says so instead of serving it."""
    from app.kernel.errors import SetupError
    from app.surfaces.dashboard.web import offline_index_template

    template = '<link rel="stylesheet" href="https://fonts.example/css?family=Roboto%20Mono" />' \
               '<script src="https://cdn.example/term.js"></script>'
    with pytest.raises(SetupError, match="https://cdn.example/term.js"):
        offline_index_template(template)
    assert "https://" not in offline_index_template(template.split("<script")[0])

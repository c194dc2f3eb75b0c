"""MCP as people use it (issue 26): every server starts, remote servers are reached.

- Old servers: a handshake-era server that ignores the 2026 ``server/discover`` probe is
  initialized without the SDK's 10 s wait; one that dies on it (MCP Python SDK 1.9.0 and
  earlier: ``mcp-server-time`` 0.6.2, a real release in its own venv) is started again with
  the plain ``initialize`` handshake; ``clientInfo`` names tidegauge.
- Remote servers: ``headers`` and ``bearer_token_env_var`` read tokens from the environment
  and never show them; a 401 says what to set; a streamable-HTTP server that restarts is
  reconnected and the call it never received is sent again.

Through the CLI (``tidegauge -p``, run in the test process: tests/mcp_helpers.py) where a user
would see it, through ``start_mcp`` (as the session wires it) where the test must act between two
calls.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from asgi_in_thread import AsgiInThread, listening_socket, server_module
from fake_llm_server import openai_text, openai_tool_calls
from forked_servers import ForkedServer, ForkingServers
from mcp_helpers import run_headless, tidegauge_run
from test_mcp_headless import toml_string
from test_mcp_servers import START, Session, _free_port, _wait_listening

import app
from app.kernel.events import McpServerEvent
from app.mcp.settings import McpServerConfig
from app.kernel.redact import clear_secrets

SERVERS = Path(__file__).parent / "mcp_servers"
LEGACY_STDIO = SERVERS / "legacy_stdio.py"
AUTH_HTTP = SERVERS / "auth_http.py"
TOKEN = "tg-reach-token-5f0c3a9e1d7b42"
SDK_PROBE_WAIT = 10.0  # mcp.client.session.DISCOVER_TIMEOUT_SECONDS as the SDK ships it


@pytest.fixture
async def session(tmp_path: Path):
    s = Session(tmp_path)
    yield s
    if s.hub is not None:
        await s.hub.aclose()
    clear_secrets()


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _legacy(record: Path, unknown: str) -> McpServerConfig:
    return McpServerConfig(command=sys.executable, args=[str(LEGACY_STDIO), "--record", str(record),
                                                         "--unknown", unknown], startup_timeout=START)


# ---------------------------------------------------------------- every server starts

async def test_client_info_names_tidegauge_and_its_version(session: Session, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    await session.start({"old": _legacy(record, "error")})

    [initialize] = [m for m in _records(record) if m.get("method") == "initialize"]
    assert initialize["params"]["clientInfo"] == {"name": "tidegauge", "version": app.__version__}


async def test_a_server_that_ignores_unknown_methods_is_initialized_without_the_sdks_ten_second_wait(
        session: Session, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    hub = await session.start({"quiet": _legacy(record, "ignore")})

    assert [e.status for e in session.server_events("quiet")] == ["starting", "ready"]
    messages = _records(record)
    probe = next(m for m in messages if m.get("method") == "server/discover")
    initialize = next(m for m in messages if m.get("method") == "initialize")
    waited = initialize["received_at"] - probe["received_at"]
    assert waited < SDK_PROBE_WAIT, f"the client waited {waited:.1f} s for an answer the server never gives"
    out = await session.run("quiet__echo", {"text": "still here"})
    assert out.content == "echo: still here" and hub.connections["quiet"].mode == "auto"


async def test_a_server_slower_to_start_than_a_tool_may_take_starts_within_its_startup_timeout(
        session: Session, tmp_path: Path) -> None:
    """tool_timeout bounds a tool call; the handshake has startup_timeout. A short tool_timeout made
    every server slower to answer initialize than it fail to start ("Request 'initialize' timed out")."""
    record = tmp_path / "received.jsonl"
    config = McpServerConfig(command=sys.executable, args=[str(LEGACY_STDIO), "--record", str(record),
                                                           "--unknown", "error", "--slow-start", "1.5"],
                             startup_timeout=START, tool_timeout=0.5)
    await session.start({"slow": config})

    assert [e.status for e in session.server_events("slow")] == ["starting", "ready"]
    out = await session.run("slow__echo", {"text": "hello"})
    assert not out.is_error and out.content == "echo: hello"


async def test_a_server_that_dies_on_the_probe_is_started_again_with_initialize_only(
        session: Session, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    hub = await session.start({"old": _legacy(record, "crash")})

    assert [e.status for e in session.server_events("old")] == ["starting", "ready"]
    methods = [m.get("method") for m in _records(record)]
    # The first process got the probe and died; the second was never sent it.
    assert methods == ["server/discover", "initialize", "notifications/initialized", "tools/list"]
    out = await session.run("old__echo", {"text": "hello"})
    assert not out.is_error and out.content == "echo: hello"
    assert hub.connections["old"].mode == "legacy"


OLD_TIME = ["mcp-server-time==0.6.2", "mcp==1.9.0", "pydantic==2.10.6"]  # pydantic: 1.9.0 needs one before 2.11


@pytest.fixture(scope="session")
def old_time_server() -> Path:
    """mcp-server-time 0.6.2 on the MCP Python SDK 1.9.0, in its own venv (its SDK cannot share
    ours), built once and cached under ~/.cache/tidegauge-tests (about 45 s to build here)."""
    key = hashlib.sha256(" ".join([sys.version, *OLD_TIME]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidegauge-tests"
    venv = cache / f"mcp-server-time-0.6.2-{key}"
    program, built = venv / "bin" / "mcp-server-time", venv / ".complete"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".lock-{key}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others wait, then use it
        if built.exists():
            return program
        # Built where it stays (a venv's scripts name their interpreter's path); .complete marks it whole.
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "-q", *OLD_TIME],
                             capture_output=True, text=True, timeout=600)
        if pip.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            # No skip: the package index is reachable wherever the suite runs (CI installs from it),
            # and "No matching distribution" is also what a pinned release that went away says.
            raise AssertionError(f"pip install {' '.join(OLD_TIME)} failed: {pip.stderr[-2000:]}")
        built.write_text(" ".join(OLD_TIME) + "\n")
    return program


def _tidegauge(tmp_path: Path, fake, servers_toml: str, prompt: str, env_extra: dict[str, str] | None = None,
               real_process: bool = False) -> tuple[int, list[dict[str, Any]], str]:
    proc = run_headless(fake, tmp_path, servers_toml, prompt, "--yes", env_extra=env_extra, real_process=real_process)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events, proc.stdout + proc.stderr


def _statuses(events: list[dict[str, Any]], name: str) -> list[tuple[str, str]]:
    return [(e["status"], e["detail"]) for e in events if e["type"] == "mcp_server" and e["name"] == name]


def test_mcp_server_time_0_6_2_on_the_old_sdk_starts_lists_and_answers(fake_llm, tmp_path: Path,
                                                                      old_time_server: Path) -> None:
    fake_llm.enqueue(openai_tool_calls([("time__get_current_time", {"timezone": "Europe/Paris"}, "call_time")]),
                     openai_text("It is time."))

    code, events, output = _tidegauge(
        tmp_path, fake_llm,
        f"[mcp_servers.time]\ncommand = {toml_string(str(old_time_server))}\n"
        f"args = [\"--local-timezone\", \"UTC\"]\nstartup_timeout = 120\n",
        "what time is it in Paris?")

    assert code == 0, output
    statuses = _statuses(events, "time")
    assert [s for s, _ in statuses] == ["starting", "ready", "stopped"], statuses
    assert "get_current_time" in fake_llm.requests[0].json["tools"].__repr__()
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_time"]
    assert not result["is_error"] and '"timezone": "Europe/Paris"' in result["content"], result


# ---------------------------------------------------------------- remote servers: headers and 401

class HttpServerInThread:
    """tests/mcp_servers/auth_http.py's app on a thread of the test process (tests/asgi_in_thread.py),
    for the tests that only call it: what they check is what tidegauge sends and shows."""

    def __init__(self, tmp_path: Path) -> None:
        sock = listening_socket()
        self.record = tmp_path / "http-received.jsonl"
        app, self.close_record = server_module("auth_http").build_app(str(self.record), TOKEN)
        self.served = AsgiInThread(app, sock)
        self.url = f"http://127.0.0.1:{self.served.port}/mcp"

    def stop(self) -> None:
        self.served.stop()
        self.close_record()

    def received(self, rpc: str) -> list[dict[str, Any]]:
        return [r for r in _records(self.record) if r["rpc"] == rpc]


@pytest.fixture
def http_server(tmp_path: Path):
    server = HttpServerInThread(tmp_path)
    server.served.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def forking() -> Iterator[ForkingServers]:
    """One interpreter that has imported auth_http.py, forking its server processes for the module."""
    servers = ForkingServers("auth_http")
    yield servers
    servers.close()


class HttpServer:
    """tests/mcp_servers/auth_http.py as its own process on a free loopback port, restartable on the
    same port: for the tests that kill it (a server that dies is the point). Each start is a fork
    of ``forking``, which imported the SDK once for the module."""

    def __init__(self, tmp_path: Path, forking: ForkingServers, legacy: bool = False) -> None:
        self.forking = forking
        self.port = _free_port()
        self.record = tmp_path / "http-received.jsonl"
        self.log_path = tmp_path / "http-server.log"
        self.argv = ["--port", str(self.port), "--record", str(self.record), *(["--legacy"] if legacy else [])]
        self.env = {**os.environ, "EXPECTED_TOKEN": TOKEN}
        self.proc: ForkedServer | None = None
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self.proc = self.forking.start("auth_http", self.argv, self.log_path, self.env)
        await _wait_listening(self.port, self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def received(self, rpc: str) -> list[dict[str, Any]]:
        return [r for r in _records(self.record) if r["rpc"] == rpc]


@pytest.fixture
async def http_process(tmp_path: Path, forking: ForkingServers):
    server = HttpServer(tmp_path, forking)
    await server.start()
    yield server
    server.kill()


async def test_headers_from_the_environment_reach_the_server_and_the_token_is_shown_nowhere(
        fake_llm, tmp_path: Path, http_server: HttpServerInThread) -> None:
    fake_llm.enqueue(openai_tool_calls([("web__echo", {"text": f"my token is {TOKEN}"}, "call_echo")]),
                     openai_text("Done."))

    code, events, output = await asyncio.to_thread(
        _tidegauge, tmp_path, fake_llm,
        f"[mcp_servers.web]\nurl = {toml_string(http_server.url)}\n"
        "headers = { Authorization = \"Bearer ${TG_REACH_TOKEN}\", X-Client = \"tidegauge-test\" }\n",
        "echo", {"TG_REACH_TOKEN": TOKEN})

    assert code == 0, output
    assert [s for s, _ in _statuses(events, "web")] == ["starting", "ready", "stopped"]
    [call] = http_server.received("tools/call")
    assert call["headers"]["authorization"] == f"Bearer {TOKEN}" and call["headers"]["x-client"] == "tidegauge-test"
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_echo"]
    assert not result["is_error"] and "echo: my token is" in result["content"]
    # The token never leaves the process: not on the screen, not in the model's next request,
    # not in any file of the session (transcript, tool results, logs).
    assert TOKEN not in output
    assert TOKEN not in json.dumps(fake_llm.requests[1].json)
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), f"the token was written to {path}"


async def test_a_401_says_authorization_required_and_an_unset_token_variable_is_named(
        fake_llm, tmp_path: Path, http_server: HttpServerInThread) -> None:
    fake_llm.enqueue(openai_text("Fine."))

    code, events, output = await asyncio.to_thread(
        _tidegauge, tmp_path, fake_llm,
        f"[mcp_servers.web]\nurl = {toml_string(http_server.url)}\n\n"
        f"[mcp_servers.gh]\nurl = {toml_string(http_server.url)}\nbearer_token_env_var = \"TG_REACH_UNSET\"\n", "hi")

    assert code == 0, output
    [failed] = [d for s, d in _statuses(events, "web") if s == "failed"]
    assert failed.startswith("authorization required (HTTP 401, Bearer expected)"), failed
    assert "bearer_token_env_var or headers in [mcp_servers.web]" in failed
    assert "did not start: authorization required" in output  # the warning line a user reads
    [unset] = [d for s, d in _statuses(events, "gh") if s == "failed"]
    assert unset == "bearer_token_env_var needs the environment variable TG_REACH_UNSET, which is not set"
    assert not [r for r in _records(http_server.record) if "authorization" in r["headers"]]  # no empty token sent


@pytest.mark.parametrize(("table", "says"), [
    ("command = \"x\"\nheaders = { A = \"b\" }", "headers and bearer_token_env_var apply only to a url server"),
    ("url = \"http://127.0.0.1:9/\"\nheaders = { A = \"b\\r\\nX-Injected: 1\" }", "the value of A has a line break"),
    ("url = \"http://127.0.0.1:9/\"\nheaders = { \"A B\" = \"c\" }", "'A B' is not a valid HTTP header name"),
    ("url = \"http://127.0.0.1:9/\"\nheaders = { A = \"Bearer ${TOKEN\" }", "the value of A has an unclosed ${TOKEN"),
])
def test_bad_header_settings_are_one_line_errors(tmp_path: Path, table: str, says: str) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text(f"[mcp_servers.web]\n{table}\n", encoding="utf-8")
    (config / "config.toml").chmod(0o600)
    env = {**os.environ, "TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data")}
    # The CLI in this process: the settings' check is what is tested, not the process around it.
    proc = tidegauge_run(["-p", "hi", "--provider", "openai", "--model", "m"], cwd=tmp_path, env=env)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert says in line and "mcp_servers.web" in line, line


# ---------------------------------------------------------------- remote servers: a restart

async def test_a_restarted_http_server_is_reconnected_and_the_call_it_never_got_is_sent_again(
        session: Session, tmp_path: Path, forking: ForkingServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_REACH_TOKEN", TOKEN)
    server = HttpServer(tmp_path, forking, legacy=True)  # a session id, which the restarted server does not know
    await server.start()
    try:
        await session.start({"web": McpServerConfig(url=server.url, bearer_token_env_var="TG_REACH_TOKEN",
                                                    startup_timeout=START)})
        assert (await session.run("web__echo", {"text": "one"})).content == "echo: one"

        server.kill()
        await server.start()
        out = await session.run("web__echo", {"text": "two"}, "call-2")

        assert not out.is_error and out.content == "echo: two", out.content
        assert len(server.received("initialize")) == 2  # handshake again with the new process
        statuses = [(e.status, e.detail) for e in session.server_events("web")]
        assert statuses[-1] == ("ready", "reconnected, 2 tools") and "exited" not in dict(statuses)
    finally:
        server.kill()


async def test_a_call_while_the_http_server_is_down_says_so_and_the_next_one_reconnects(
        session: Session, http_process: HttpServer, monkeypatch: pytest.MonkeyPatch) -> None:
    http_server = http_process
    monkeypatch.setenv("TG_REACH_TOKEN", TOKEN)
    await session.start({"web": McpServerConfig(url=http_server.url, bearer_token_env_var="TG_REACH_TOKEN",
                                                startup_timeout=START)})
    http_server.kill()

    down = await session.run("web__echo", {"text": "lost"})

    assert down.is_error and "web__echo" not in down.content
    assert "could not be reached" in down.content and "echo was not sent" in down.content, down.content
    assert "tried again at the next call" in down.content
    assert http_server.received("tools/call") == []
    await http_server.start()
    back = await session.run("web__echo", {"text": "back"}, "call-2")
    assert not back.is_error and back.content == "echo: back", back.content
    assert [r["headers"]["authorization"] for r in http_server.received("tools/call")] == [f"Bearer {TOKEN}"]
    assert not any(isinstance(e, McpServerEvent) and e.status == "exited" for e in session.events)



async def test_a_call_the_server_got_before_it_died_is_not_sent_again(
        session: Session, tmp_path: Path, forking: ForkingServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_REACH_TOKEN", TOKEN)
    server = HttpServer(tmp_path, forking, legacy=True)
    await server.start()
    try:
        await session.start({"web": McpServerConfig(url=server.url, bearer_token_env_var="TG_REACH_TOKEN",
                                                    startup_timeout=START, tool_timeout=120)})
        call = asyncio.create_task(session.run("web__hold", {"seconds": 600}))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not server.received("tools/call") and loop.time() < deadline and not call.done():
            await asyncio.sleep(0.05)  # polling the server's record for the call's arrival, bounded
        assert server.received("tools/call"), f"the call never reached the server (done: {call.done()})"
        server.kill()

        out = await asyncio.wait_for(call, 120)

        assert out.is_error and "lost during hold, which may have run" in out.content, out.content
        await server.start()
        assert (await session.run("web__echo", {"text": "after"}, "call-2")).content == "echo: after"
        assert len(server.received("tools/call")) == 2  # hold once (not repeated), then echo
    finally:
        server.kill()

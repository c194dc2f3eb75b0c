"""Real MCP servers over stdio: mcp-server-git, mcp-server-time (from PyPI) and servers of our own
(a plain JSON-RPC one with a child process, process_tree_plain.py; the tools of many_tools.py over
streamable HTTP, on a thread of the test process: building their schemas in a new interpreter cost
~3 CPU-s, and deferral is the same over either transport).

Each test starts real server processes through start_mcp, as a session does,
and checks what a user would notice: the tools' outputs meet the registry's
truncation with the full output on disk, the approval rule follows the
read-only declaration, a broken server is a warning and not a crash, and
stopping the session leaves no process behind.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, AsyncIterator, Iterator

import psutil
import pytest
import pytest_asyncio
from forked_servers import ForkedServer

from app.context.engine import ContextEngine, EngineConfig
from app.context.memory import MemoryBundle
from app.context.tokens import estimate_tools
from app.kernel.describe import describe
from app.kernel.events import McpServerEvent
from app.mcp.hub import McpHub, start_mcp
from app.mcp.settings import McpServerConfig
from app.kernel.redact import clear_secrets, redact
from app.tools.base import ToolContext
from app.tools.deferral import LOAD_TOOLS
from app.tools.registry import ToolRegistry, default_registry
from app.kernel.usage import Usage

SERVERS = Path(__file__).parent / "mcp_servers"
BIN = Path(sys.executable).parent
# Importing the SDK takes seconds on a loaded 2-core machine; this only bounds a hang.
START = 120.0


def server(command: str | Path, *args: str) -> McpServerConfig:
    return McpServerConfig(command=str(command), args=list(args), startup_timeout=START)


def python_server(script: str, *args: str) -> McpServerConfig:
    return server(sys.executable, str(SERVERS / script), *args)


class Session:
    """A registry, an engine and the events, wired the way runtime.start_session_mcp wires them."""

    def __init__(self, tmp_path: Path, max_output: int = 40_000, window: int = 200_000) -> None:
        self.registry: ToolRegistry = default_registry(max_output)
        self.engine = ContextEngine(system_prompt="You are a test.", memory=MemoryBundle(),
                                    tools=self.registry.specs(), config=EngineConfig(window=window, budget=0),
                                    tool_results_dir=tmp_path / "tool-results")
        self.events: list[Any] = []
        self.engine.emit = self.events.append
        self.ctx = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "tool-results")
        self.log_dir = tmp_path / "session"
        self.hub: McpHub | None = None

    async def start(self, servers: dict[str, McpServerConfig], share: float = 0.10) -> McpHub:
        settings = SimpleNamespace(mcp_servers=servers, tool_defer_share=share)
        self.hub = await start_mcp(settings, self.registry, self.engine, self.engine.emit,
                                   workspace=self.ctx.workspace, log_dir=self.log_dir)
        return self.hub

    async def run(self, name: str, args: dict[str, Any], call_id: str = "call-1"):
        self.ctx.call_id = call_id
        return await self.registry.run(name, args, self.ctx)

    def server_events(self, name: str) -> list[McpServerEvent]:
        return [e for e in self.events if isinstance(e, McpServerEvent) and e.name == name]


@pytest.fixture
async def session(tmp_path: Path):
    s = Session(tmp_path)
    yield s
    if s.hub is not None:
        await s.hub.aclose()
    clear_secrets()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real git repository: 40 commits, then an unstaged change of 3,000 lines; the server only reads it.

    The commits are written by one ``git fast-import`` rather than 80 ``git add``/``commit``
    processes: the same history (it is what the server reads), at a fraction of the start-ups."""
    path = tmp_path_factory.mktemp("git") / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    stream = []
    for n in range(1, 41):
        content = ("\n".join(f"row {i} v{n}" for i in range(3_000)) + "\n").encode()
        message = f"change number {n:02d}: rewrite every row of data.txt\n".encode()
        stamp = f"{1_760_000_000 + n * 60} +0000".encode()
        stream += [b"commit refs/heads/main\n",
                   b"author Dev <dev@example.com> " + stamp + b"\n",
                   b"committer Dev <dev@example.com> " + stamp + b"\n",
                   b"data %d\n" % len(message), message,
                   b"M 100644 inline data.txt\n", b"data %d\n" % len(content), content, b"\n"]
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input=b"".join(stream), check=True,
                   capture_output=True)
    git(path, "checkout", "-q", "main")
    (path / "data.txt").write_text("\n".join(f"row {i} edited by hand" for i in range(3_000)) + "\n")
    return path


# ---------------------------------------------------------------- mcp-server-git

@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def git_session(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> AsyncIterator[Session]:
    """One mcp-server-git, started through start_mcp as a session does, for the two tests that read
    it (each start is an interpreter with the SDK, pydantic and GitPython: over a CPU-second). Its
    hub lives on the module's event loop: the tests that use it run there (ON_GIT_SERVER)."""
    shared = Session(tmp_path_factory.mktemp("git-session"), max_output=2_000)
    await shared.start({"git": server(BIN / "mcp-server-git", "--repository", str(repo))})
    yield shared
    assert shared.hub is not None
    await shared.hub.aclose()
    clear_secrets()


ON_GIT_SERVER = pytest.mark.asyncio(loop_scope="module")


@ON_GIT_SERVER
async def test_git_log_and_diff_through_the_registry_meet_the_truncation(git_session: Session, repo: Path) -> None:
    session = git_session
    assert session.registry.max_output == 2_000
    log = await session.run("git__git_log", {"repo_path": str(repo), "max_count": 40}, "call-log")
    diff = await session.run("git__git_diff_unstaged", {"repo_path": str(repo)}, "call-diff")

    for run in (log, diff):
        assert not run.is_error
        assert run.truncated and "output truncated" in run.content
        assert len(run.content) < 2 * session.registry.max_output  # the limit plus one notice
        assert run.full_output_path is not None and run.full_output_path in run.content
        assert Path(run.full_output_path).parent == session.ctx.workspace / "tool-results"
    full_log = Path(log.full_output_path).read_text()
    assert all(f"change number {n:02d}" in full_log for n in range(1, 41))
    assert "change number 40" in log.content  # newest first: the head survives the cut …
    assert "change number 01" in log.content  # … and so does the tail
    full_diff = Path(diff.full_output_path).read_text()
    assert full_diff.count("edited by hand") == 3_000
    assert log.original_chars == len(full_log)


@ON_GIT_SERVER
async def test_git_tools_ask_first_unless_declared_read_only(git_session: Session) -> None:
    session = git_session
    hub = session.hub
    assert hub is not None

    assert not session.registry.is_mutating("git__git_log")
    assert not session.registry.is_mutating("git__git_diff_unstaged")
    assert session.registry.is_mutating("git__git_commit")
    assert session.registry.is_mutating("git__git_reset")
    [ready] = [e for e in session.server_events("git") if e.status == "ready"]
    assert ready.tools == len(hub.tools) == len([s for s in session.registry.specs() if s.name.startswith("git__")])
    # The context breakdown shows the server's definitions as its own part.
    breakdown = session.engine.context_event().breakdown
    git_specs = [s for s in session.engine.tools if s.name.startswith("git__")]
    assert breakdown["mcp:git"] == estimate_tools(git_specs) > 0
    assert "tools" in breakdown and "tool_results" in breakdown


# ---------------------------------------------------------------- mcp-server-time and failures

async def test_a_broken_server_is_a_warning_and_the_others_still_work(session: Session) -> None:
    crashing = server(sys.executable, "-c", "import sys; print('no mcp here', file=sys.stderr); sys.exit(3)")
    crashing.env["SERVICE_TOKEN"] = "tok-0123456789-abcdef"
    await session.start({
        "time": server(BIN / "mcp-server-time", "--local-timezone", "UTC"),
        "missing": server("/nonexistent/mcp-server-nope"),
        "crashing": crashing,
    })

    now = await session.run("time__get_current_time", {"timezone": "Europe/Paris"})
    assert not now.is_error and json.loads(now.content)["timezone"] == "Europe/Paris"
    assert not session.registry.is_mutating("time__get_current_time")
    for name in ("missing", "crashing"):
        statuses = [e.status for e in session.server_events(name)]
        assert statuses == ["starting", "failed"]
        [failed] = [e for e in session.server_events(name) if e.status == "failed"]
        assert failed.detail and "\n" not in failed.detail
        lines = [line.text for line in map(describe, session.events) if line is not None and name in line.text]
        assert len(lines) == 1 and "carrying on without its tools" in lines[0]
    assert "/nonexistent/mcp-server-nope" in session.server_events("missing")[-1].detail
    assert not any(s.name.startswith(("missing__", "crashing__")) for s in session.registry.specs())
    # The crashing server's stderr went to its log, not to the screen.
    assert "no mcp here" in (session.log_dir / "mcp-crashing.log").read_text()
    # A token handed to a server in its env is redacted like a provider key.
    assert "tok-0123456789-abcdef" not in redact("the server said tok-0123456789-abcdef")


# ---------------------------------------------------------------- process tree

def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_gone(pids: list[int], seconds: float = 30.0) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if all(_gone(pid) for pid in pids):
            return True
        await asyncio.sleep(0.05)  # polling a condition, bounded: not synchronisation by sleeping
    return False


async def test_stopping_the_session_ends_the_whole_process_tree(session: Session,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def no_look(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the server's process group is known from its spawn: nothing reads every process")

    # A look through the machine's processes cost a few milliseconds each (more on a busy machine),
    # every 50 ms of a server's start.
    monkeypatch.setattr(psutil.Process, "children", no_look)
    monkeypatch.setattr(psutil, "process_iter", no_look)
    hub = await session.start({"tree": python_server("process_tree_plain.py")})
    pids = [int(p) for p in (await session.run("tree__pids", {})).content.split()]
    assert not any(_gone(pid) for pid in pids)

    await hub.aclose()

    assert await _wait_gone(pids), f"still running after the session stopped: {pids}"
    assert [e.status for e in session.server_events("tree")] == ["starting", "ready", "stopped"]


async def test_a_server_that_dies_mid_session_is_reported_once_and_its_tools_answer_with_an_error(
        session: Session) -> None:
    await session.start({"tree": python_server("process_tree_plain.py")})
    server_pid, child_pid = [int(p) for p in (await session.run("tree__pids", {})).content.split()]

    os.kill(server_pid, signal.SIGKILL)
    first = await session.run("tree__pids", {}, "call-2")
    second = await session.run("tree__pids", {}, "call-3")

    assert first.is_error and "tree" in first.content
    assert second.is_error and "not running" in second.content
    failed = [e for e in session.server_events("tree") if e.status == "exited"]
    assert len(failed) == 1
    assert len([line for line in map(describe, session.events) if line is not None and "tree stopped" in line.text]) == 1
    # The dead server's orphaned child is still ended with the session.
    assert session.hub is not None
    await session.hub.aclose()
    assert await _wait_gone([child_pid]), f"the server's child {child_pid} outlived the session"


# ---------------------------------------------------------------- 200 tools: deferral

@pytest.fixture
def two_hundred_tools() -> Iterator[McpServerConfig]:
    """many_tools.py's 200 tools on a thread (requested before ``session``, so stopped after it)."""
    from asgi_in_thread import AsgiInThread, listening_socket, server_module

    served = AsgiInThread(server_module("many_tools").build(200).streamable_http_app(), listening_socket())
    served.start()
    yield McpServerConfig(url=f"http://127.0.0.1:{served.port}/mcp", startup_timeout=START)
    served.stop()


async def test_two_hundred_tools_are_deferred_and_loaded_on_demand(two_hundred_tools: McpServerConfig,
                                                                    session: Session) -> None:
    hub = await session.start({"many": two_hundred_tools})
    assert len(hub.tools) == 200
    full = estimate_tools(session.registry.specs())  # every definition, load_tools included
    assert estimate_tools(list(hub.tools[n].spec for n in hub.tools)) > 0.10 * session.engine.config.window

    sent = [s.name for s in session.engine.tools]
    assert LOAD_TOOLS in sent and not any(n.startswith("many__") for n in sent)
    before = session.engine.context_event()
    assert before.tool_tokens_saved > 0
    assert estimate_tools(session.engine.tools) + before.tool_tokens_saved < full
    assert "mcp:many" not in before.breakdown  # nothing of the server is sent in full yet

    # An exact figure from a call made before the load …
    projected = session.engine.projection().projected_tokens
    session.engine.accounting.record_usage(Usage(input_tokens=projected, output_tokens=0), len(session.engine.history))
    loaded = await session.run(LOAD_TOOLS, {"names": ["many__tool_123", "many__tool_042"]})
    assert not loaded.is_error and "many__tool_123" in loaded.content
    # … does not hide the definitions just loaded from the projection that decides.
    loaded_specs = [hub.tools["many__tool_123"].spec, hub.tools["many__tool_042"].spec]
    assert session.engine.projection().projected_tokens >= projected + estimate_tools(loaded_specs)

    sent_after = {s.name: s for s in session.engine.tools}
    assert {"many__tool_123", "many__tool_042"} <= set(sent_after)
    assert "limit" in sent_after["many__tool_123"].input_schema["properties"]  # the full schema
    after = session.engine.context_event()
    assert 0 < after.tool_tokens_saved < before.tool_tokens_saved
    assert after.breakdown["mcp:many"] == estimate_tools([sent_after["many__tool_123"], sent_after["many__tool_042"]])
    result = await session.run("many__tool_042", {"query": "rows"}, "call-2")
    assert not result.is_error and "tool_042 got query='rows'" in result.content


# ---------------------------------------------------------------- streamable HTTP

def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _wait_listening(port: int, proc: subprocess.Popen[bytes] | ForkedServer, seconds: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline and proc.poll() is None:
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)  # polling for the port to open, bounded (a refused connect costs little)
            continue
        writer.close()
        return
    raise AssertionError(f"the HTTP MCP server never listened on {port} (exit code {proc.poll()})")


async def test_a_streamable_http_server_by_url(session: Session) -> None:
    """many_tools.py's three tools served on a thread of this process (the server's own start is not
    what is tested, and a new interpreter importing the SDK cost about a CPU-second)."""
    from asgi_in_thread import AsgiInThread, listening_socket, server_module

    served = AsgiInThread(server_module("many_tools").build(3).streamable_http_app(), listening_socket())
    served.start()
    port = served.port
    try:
        url = f"http://reader:pw-0123456789@127.0.0.1:{port}/mcp"
        hub = await session.start({"web": McpServerConfig(url=url, startup_timeout=START)})
        assert session.server_events("web")[0].detail == f"http://127.0.0.1:{port}/mcp"  # no password shown

        assert sorted(hub.tools) == ["web__tool_000", "web__tool_001", "web__tool_002"]
        out = await session.run("web__tool_002", {"query": "over http"})
        assert not out.is_error and "tool_002 got query='over http'" in out.content
        await hub.aclose()
        # A server we did not start is not ours to stop: it still serves.
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        assert served.thread.is_alive()
    finally:
        served.stop()


async def test_a_server_that_never_answers_times_out_and_leaves_no_process(session: Session, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    # Starts a child, then never speaks MCP: the handshake can only time out.
    script = ("import os, subprocess, sys, time; child = subprocess.Popen(['sleep', '600']); "
              f"open({str(pid_file)!r}, 'a').write(f'{{os.getpid()}} {{child.pid}}\\n'); time.sleep(600)")
    # The SDK is imported on the first start, inside its timeout (seconds on a loaded machine):
    # imported here first, the short timeout bounds only the server's own start, which is
    # long enough for the script to write its pids (0.15 s on a loaded machine).
    for module in ("mcp", "mcp.client.session", "mcp.client.stdio", "mcp.shared.message", "mcp_types"):
        importlib.import_module(module)
    hung = McpServerConfig(command=sys.executable, args=["-c", script], startup_timeout=2.5)

    await session.start({"hung": hung})

    [failed] = [e for e in session.server_events("hung") if e.status == "failed"]
    assert "no answer within 2.5 s" in failed.detail
    # Started once: ended for its silence, it is not a server that dropped the probe, started
    # again in legacy mode.
    [started] = pid_file.read_text().splitlines()
    pids = [int(p) for p in started.split()]
    assert await _wait_gone(pids), f"the hung server's processes outlived the timeout: {pids}"

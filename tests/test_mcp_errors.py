"""A stdio MCP server's failure says why in its one line (exit status, last stderr line), and the lines
on its stdout that are not MCP messages go to its log, counted, never as tracebacks on our stderr."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from app.kernel.describe import describe
from test_mcp_servers import SERVERS, Session, server

CRASHING = """
import sys
print("loading settings from /etc/demo.conf", file=sys.stderr)
print("fatal: DEMO_TOKEN is not set", file=sys.stderr)
sys.exit(3)
"""

# A plain JSON-RPC server (legacy_stdio.py: no SDK to import, a twentieth of the start), after two
# lines of chatter on stdout that a careless server prints.
CHATTY = f"""
import runpy, sys
print("Starting server v1.2 ...", flush=True)
print('{{"not": "json-rpc"}}', flush=True)
sys.argv = [{str(SERVERS / "legacy_stdio.py")!r}, "--record", sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


async def test_a_server_that_dies_at_start_names_its_exit_status_and_last_stderr_line(tmp_path: Path) -> None:
    session = Session(tmp_path)
    await session.start({"broken": server(sys.executable, "-c", CRASHING)})
    [_, failed] = session.server_events("broken")
    assert failed.status == "failed"
    assert "exit status 3" in failed.detail
    assert "its last stderr line: 'fatal: DEMO_TOKEN is not set'" in failed.detail
    line = describe(failed)
    assert line is not None and line.text.startswith("MCP server broken did not start: ")


async def test_stdout_lines_that_are_not_messages_are_filed_in_the_log_and_the_server_works(
        tmp_path: Path, capfd) -> None:
    session = Session(tmp_path)
    hub = await session.start({"chatty": server(sys.executable, "-c", CHATTY, str(tmp_path / "received.jsonl"))})
    try:
        assert session.server_events("chatty")[-1].status == "ready"
        result = await session.run("chatty__echo", {"text": "hi"})
        assert not result.is_error and result.content == "echo: hi"
        connection = hub.connections["chatty"]
        assert connection.bad_lines == 2
    finally:
        await hub.aclose()
    log = (tmp_path / "session" / "mcp-chatty.log").read_text()
    assert "a stdout line that is not an MCP message was ignored: 'Starting server v1.2 ...'" in log
    assert "Traceback" not in capfd.readouterr().err  # the SDK's parser used to log kilobytes per line


# ---------------------------------------------------------------- tidegauge mcp list

import json  # noqa: E402 - the sections of this file read top to bottom
import os  # noqa: E402
import subprocess  # noqa: E402

from mcp_helpers import tidegauge_run  # noqa: E402


def _mcp_list(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``tidegauge mcp list FLAGS`` with four servers. docs is a plain JSON-RPC server with a tool, four
    prompts and resources (legacy_stdio.py: a start without the SDK's imports; the SDK's prompts
    server is test_mcp_prompts_resources'), which records what it receives in docs-received.jsonl."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    python = json.dumps(sys.executable)
    docs = [str(SERVERS / "legacy_stdio.py"), "--record", str(tmp_path / "docs-received.jsonl"), "--prompts", "4"]
    (config / "config.toml").write_text(
        f"[mcp_servers.docs]\ncommand = {python}\nargs = {json.dumps(docs)}\n"
        f"startup_timeout = 120\n"
        f"[mcp_servers.broken]\ncommand = {python}\nargs = [\"-c\", {json.dumps(CRASHING)}]\n"
        f"[mcp_servers.off]\ncommand = \"no-such-server\"\nenabled = false\n"
        f"[mcp_servers.remote]\nurl = \"http://127.0.0.1:9/mcp\"\nenabled = false\n", encoding="utf-8")
    (config / "config.toml").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data")})
    return tidegauge_run(["mcp", "list", *flags], cwd=tmp_path, env=env)  # the CLI, in this process


def test_mcp_list_starts_each_server_once_and_says_what_it_offers_or_why_it_failed(tmp_path: Path) -> None:
    proc = _mcp_list(tmp_path, "--json")
    assert proc.returncode == 1, proc.stderr  # one server failed
    servers = {s["name"]: s for s in json.loads(proc.stdout)["servers"]}
    docs = servers["docs"]
    assert (docs["state"], docs["transport"], docs["tools"], docs["prompts"], docs["resources"]) == (
        "ready", "stdio", 1, 4, True)
    assert docs["schema_tokens"] > 0 and docs["deferred"] is False and docs["auth"] == "none"
    assert servers["broken"]["state"] == "failed" and "exit status 3" in servers["broken"]["reason"]
    assert servers["off"]["state"] == "disabled"
    assert (servers["remote"]["transport"], servers["remote"]["auth"]) == ("http", "none (oauth login available)")
    received = [json.loads(line) for line in (tmp_path / "docs-received.jsonl").read_text().splitlines()]
    assert [m["method"] for m in received].count("initialize") == 1  # started once

    table = _mcp_list(tmp_path).stdout.splitlines()
    assert table[0].split()[:3] == ["server", "state", "transport"]
    assert any(line.startswith("docs ") and " ready " in line for line in table)
    assert any("its last stderr line: 'fatal: DEMO_TOKEN is not set'" in line for line in table)


# ---------------------------------------------------------------- a flood of progress notifications

from app.mcp.bounded_stdio import superseded_progress_dropped  # noqa: E402


def _progress(token: object, step: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": token, "progress": step, "message": f"step {step}"}}).encode()


def test_only_the_newest_of_a_run_of_progress_for_one_token_is_handed_on_and_nothing_else_is_dropped() -> None:
    answer = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": (
        'a log: {"method": "notifications/progress", "params": {"progressToken": 1}}')}]}}).encode()
    other = json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}}).encode()
    lines: list[Any] = [_progress(1, 1), _progress(1, 2), _progress("b", 1), _progress(1, 3), answer,
                        _progress(1, 4), other, _progress(1, 5), _progress(1, 6), {"jsonrpc": "2.0", "id": 8}]
    kept = superseded_progress_dropped(lines)
    assert kept == [_progress(1, 2), _progress("b", 1), _progress(1, 3), answer, _progress(1, 4), other,
                    _progress(1, 6), {"jsonrpc": "2.0", "id": 8}]


async def test_a_flood_of_progress_ends_complete_with_its_last_report(tmp_path: Path) -> None:
    from app.mcp.client import McpConnection

    config = server(sys.executable, str(SERVERS / "progress_flood.py"))
    connection = McpConnection("flood", config, tmp_path, tmp_path / "session")
    reports: list[float] = []
    await connection.start()
    try:
        output = await connection.call_tool("flood", {"n": 20_000}, on_progress=lambda done, *_: reports.append(done))
    finally:
        await connection.aclose()
    assert output.text.startswith("sent 20000 notifications")
    assert reports[-1] == 20_000 and len(reports) < 20_000  # runs were folded, the newest kept
    assert reports == sorted(reports)

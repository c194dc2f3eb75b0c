"""MCP tasks (spec 2025-11-25): a tool that runs only as a task is offered, called as a task, polled,
its result taken, and cancelled on its server when the call is given up.

With the reference server from npm (``@modelcontextprotocol/server-everything``: its
``simulate-research-query`` runs only as a task, four one-second stages) through the real CLI,
and with ``tests/mcp_servers/task_server.py``, a server that does what a careless or hostile
one may: ask to be polled every 0 ms, put escape sequences in its status, never finish.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import openai_text, openai_tool_calls
from test_mcp_content import npm_servers, results_by_id, server_table, tidegauge  # noqa: F401 - npm_servers: the fixture

from app.kernel.describe import tool_progress_text
from app.kernel.events import ToolProgressEvent
from app.mcp.client import McpConnection
from app.mcp.settings import McpServerConfig
from app.mcp.tools import offered

TASK_SERVER = Path(__file__).parent / "mcp_servers" / "task_server.py"
RESEARCH = "simulate-research-query"


def test_a_task_only_tool_runs_as_a_task_through_the_cli_its_status_on_the_tools_line(
        npm_servers, fake_llm, tmp_path):  # noqa: F811
    fake_llm.enqueue(openai_tool_calls([(f"every__{RESEARCH}", {"topic": "tides"}, "call_research")]),
                     openai_text("Read it."))
    tables = server_table("every", str(npm_servers / "mcp-server-everything"), ["stdio"])

    code, events, stderr = tidegauge(tmp_path, fake_llm, "openai", tables, "research tides")

    assert code == 0, stderr
    offered_names = {t["function"]["name"] for t in fake_llm.requests[0].json["tools"]}
    assert f"every__{RESEARCH}" in offered_names
    ready = next(e for e in events if e["type"] == "mcp_server" and e["status"] == "ready")
    assert ready["not_offered"] == []
    result = results_by_id(events)["call_research"]
    assert not result["is_error"] and "# Research Report: tides" in result["content"], result["content"][:300]
    assert "Stage 4: Generating report" in result["content"]
    # The task's stages, as tasks/get told them, reached the tool's line in order.
    statuses = [(e["task_status"], e["message"]) for e in events
                if e["type"] == "tool_progress" and e["id"] == "call_research"]
    assert statuses[0] == ("working", "Gathering sources...")  # the task as its creation answered
    assert statuses[-1][0] == "completed" and len(statuses) >= 3  # stages seen on the way (polled each second)
    shown = tool_progress_text(ToolProgressEvent(id="c", progress=0, task_status="working",
                                                 message="Gathering sources..."))
    assert shown == "task working: Gathering sources..."
    # What the model read is the task's result, sent with the tool's answer.
    tool_message = next(m for m in fake_llm.requests[1].json["messages"] if m["role"] == "tool")
    assert "# Research Report: tides" in tool_message["content"]


def test_an_interrupt_cancels_the_task_on_the_server(npm_servers, fake_llm, tmp_path):  # noqa: F811
    """ctrl+c in headless mode (its first SIGINT interrupts the turn) while the task works: tidegauge
    sends tasks/cancel, and the server's answer (the task, now cancelled) is in the server's log."""
    fake_llm.enqueue(openai_tool_calls([(f"every__{RESEARCH}", {"topic": "waves"}, "call_research")]))
    tables = server_table("every", str(npm_servers / "mcp-server-everything"), ["stdio"])
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text(tables, encoding="utf-8")
    (tmp_path / "work").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env |= {"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
            "OPENAI_API_KEY": "sk-test-fake-key-0123456789"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "--provider", "openai", "--model", "m", "--base-url",
                             fake_llm.base_url("openai"), "--output-format", "stream-json", "--yes", "-p", "research"],
                            cwd=tmp_path / "work", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    try:
        for line in proc.stdout:
            seen.append(json.loads(line))
            if seen[-1]["type"] == "tool_progress" and seen[-1].get("task_status") == "working":
                proc.send_signal(signal.SIGINT)  # the task is running on the server now
                break
        rest = proc.stdout.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read() if proc.stderr is not None else ""
    assert proc.returncode == 130, stderr
    after = [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
    (result,) = [e for e in after if e["type"] == "result"]
    assert result["stop_reason"] == "interrupted"
    logs = list((tmp_path / "data").rglob("mcp-every.log"))
    assert len(logs) == 1, logs
    cancelled = [line for line in logs[0].read_text().splitlines() if "given up and cancelled" in line]
    assert len(cancelled) == 1 and cancelled[0].endswith("the server says cancelled: Client cancelled task execution.")


def test_a_cancelled_call_leaves_the_task_cancelled_as_tasks_get_reads_it(npm_servers, tmp_path):  # noqa: F811
    async def run() -> tuple[str, Any]:
        config = McpServerConfig(command=str(npm_servers / "mcp-server-everything"), args=["stdio"],
                                 startup_timeout=120)
        connection = McpConnection("every", config, tmp_path, tmp_path / "session")
        await connection.start()
        try:
            working = asyncio.Event()
            call = asyncio.create_task(connection.call_tool(RESEARCH, {"topic": "currents"},
                                                            on_task_status=lambda _s, _m: working.set()))
            await working.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            (task_id,) = connection.tasks
            return task_id, await connection.get_task(task_id)
        finally:
            await connection.aclose()

    task_id, task = asyncio.run(run())

    assert task.task_id == task_id and task.status == "cancelled"


def test_a_task_that_needs_input_asks_its_question_as_a_form_and_goes_on_with_the_answer(npm_servers,  # noqa: F811
                                                                                          tmp_path):
    """``ambiguous``: the task stops at input_required and queues a form, which reaches the user through
    tasks/result; the answer (chosen from the form's options) ends up in the report."""
    from app.kernel.events import ElicitationRequestEvent, Event
    from app.mcp.client_features import ClientRequests

    asked: list[Any] = []

    def surface(event: Event) -> None:
        if isinstance(event, ElicitationRequestEvent):
            asked.append(event)
            (field,) = event.fields
            values: dict[str, object] = {field.name: field.options[field.option_labels.index("Python snake species")]}
            # Answered on the next turn of the loop, as a surface's command would be, not inside emit.
            asyncio.get_running_loop().call_soon(lambda: requests.answer(event.request_id, "accept", values))

    requests = ClientRequests(emit=surface, shows_forms=True)
    reports: list[tuple[str, str]] = []

    async def run() -> Any:
        config = McpServerConfig(command=str(npm_servers / "mcp-server-everything"), args=["stdio"],
                                 startup_timeout=120)
        connection = McpConnection("every", config, tmp_path, tmp_path / "session", requests=requests)
        await connection.start()
        try:
            return await connection.call_tool(RESEARCH, {"topic": "python", "ambiguous": True},
                                              on_task_status=lambda *report: reports.append(report))
        finally:
            await connection.aclose()

    output = asyncio.run(run())

    assert len(asked) == 1 and asked[0].server == "every"
    asking = reports.index(("input_required",
                            'Found multiple interpretations for "python". Requesting clarification...'))
    # Polled while tasks/result waited: the two seconds of work after the answer reached the tool's line.
    assert "working" in [status for status, _message in reports[asking + 1:]], reports
    assert not output.is_error and "# Research Report: python (snake)" in output.text, output.text[:300]


# ---- a careless or hostile task server ----

def task_connection(tmp_path: Path, behaviour: str, tool_timeout: float = 30) -> McpConnection:
    config = McpServerConfig(command=sys.executable, args=[str(TASK_SERVER), behaviour, str(tmp_path / "calls.jsonl")],
                             startup_timeout=60, tool_timeout=tool_timeout)
    return McpConnection("t", config, tmp_path, tmp_path / "session")


def calls_received(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def run_task_tool(tmp_path: Path, behaviour: str, tool_timeout: float = 30) -> tuple[Any, list[tuple[str, str]]]:
    reports: list[tuple[str, str]] = []

    async def run() -> Any:
        connection = task_connection(tmp_path, behaviour, tool_timeout)
        await connection.start()
        try:
            assert all(offered(remote) for remote in connection.tools)
            return await connection.call_tool("job", {"steps": 3},
                                              on_task_status=lambda *report: reports.append(report))
        finally:
            await connection.aclose()

    return asyncio.run(run()), reports


def test_a_server_asking_to_be_polled_every_0_ms_is_polled_at_a_bounded_rate_and_its_words_made_harmless(tmp_path):
    output, reports = run_task_tool(tmp_path, "eager")

    assert not output.is_error and output.text == "job done after 3 steps"
    polls = [c for c in calls_received(tmp_path) if c["method"] == "tasks/get"]
    assert len(polls) == 3  # it answered "completed" on the third
    # pollInterval 0: the polls are at least TASK_POLL_MIN apart, not a busy loop.
    gaps = [b["at"] - a["at"] for a, b in zip(polls, polls[1:])]
    assert min(gaps) >= 0.09, gaps
    # Its status words carried an escape sequence that would set the terminal's clipboard.
    assert reports and all("\x1b" not in message for _status, message in reports)
    assert reports[0][0] == "working" and reports[-1][0] == "completed"


def test_a_task_that_never_ends_times_out_and_is_cancelled_on_its_server(tmp_path):
    output, reports = run_task_tool(tmp_path, "stuck", tool_timeout=1.0)

    assert output.is_error and "timed out" in output.text, output.text
    methods = [c["method"] for c in calls_received(tmp_path)]
    assert methods[-1] == "tasks/cancel" and "tasks/result" not in methods
    # Each status said once: the same one again at every poll is no news (and no word from the server).
    assert reports == [("working", "starting"), ("working", "still at it")]


def test_a_task_only_tool_of_a_server_that_does_not_accept_task_calls_is_not_offered(tmp_path):
    async def tools() -> list[Any]:
        connection = task_connection(tmp_path, "no-task-capability")
        await connection.start()
        try:
            return connection.tools
        finally:
            await connection.aclose()

    (job,) = asyncio.run(tools())

    assert job.task_required and not job.as_task and not offered(job)


def test_a_server_that_answers_a_task_call_at_once_is_taken_at_its_word(tmp_path):
    output, reports = run_task_tool(tmp_path, "at-once")

    assert not output.is_error and output.text == "done at once"
    assert reports == []
    assert [c["method"] for c in calls_received(tmp_path) if c["method"].startswith(("tools/call", "tasks/"))] == [
        "tools/call"]

"""The task tool: a sub-agent with a fresh context, read-only tools, a step limit and a bounded report."""

from __future__ import annotations

import asyncio
import contextlib
import json

from agent_helpers import make_agent
from fake_llm_server import openai_text, openai_tool_calls, stall_after

from app.context.tokens import count_tokens
from app.agent.subagent import TASK_TOOL, SubAgentLimits, TaskTool, register_task_tool

IMPORTER = "\n".join([f"# filler line {i}" for i in range(200)] + [
    "def import_row(row):",
    "    if not row.get('id'):",
    "        raise RowRejected('row without id')  # MARKER-REJECT",
]) + "\n"


def _messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] != "system"]


def _tool_names(body: dict) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools", [])}


def _tool_result(body: dict, call_id: str) -> str:
    [content] = [m["content"] for m in body["messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id]
    return content


async def test_task_runs_a_sub_agent_in_a_fresh_context_and_returns_a_bounded_report(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    (agent.workspace / "importer.py").write_text(IMPORTER)
    register_task_tool(agent, SubAgentLimits(report_tokens=150))
    long_report = "The importer rejects rows without an id at importer.py:203. " + "More detail follows. " * 600
    fake_llm.enqueue(
        openai_tool_calls([(TASK_TOOL, {"description": "find rejection",
                                        "prompt": "Find where the importer rejects rows."}, "call_task")]),
        # the sub-agent's own calls
        openai_tool_calls([("read_file", {"path": "importer.py"}, "sub_read")]),
        openai_tool_calls([("run_bash", {"command": "rm -rf /tmp/x"}, "sub_bash")]),
        openai_text(long_report),
        # back in the main agent
        openai_text("It is in import_row."),
    )

    result = await agent.run_turn("Why are rows missing after the import?")

    assert result.stop_reason == "end_turn"
    main_first, sub_first, sub_second, sub_last, main_last = (r.json for r in fake_llm.requests)
    # Fresh context: the sub-agent sees its task, not the main conversation.
    assert [m["content"] for m in _messages(sub_first)] == ["Find where the importer rejects rows."]
    # Read-only tools by default; no task inside a task.
    assert _tool_names(sub_first) == {"read_file", "list_files", "read_saved_output"}
    assert TASK_TOOL in _tool_names(main_first)
    assert "MARKER-REJECT" in _tool_result(sub_second, "sub_read")
    assert "run_bash" in _tool_result(sub_last, "sub_bash") and "Unknown tool" in _tool_result(sub_last, "sub_bash")
    # Only the bounded report reaches the main context, none of the sub-agent's reading.
    report = _tool_result(main_last, "call_task")
    assert report.startswith("The importer rejects rows without an id at importer.py:203.")
    assert count_tokens(report) < count_tokens(long_report) / 5
    assert "output truncated" in report
    assert "MARKER-REJECT" not in json.dumps(main_last)
    # The ledger: the sub-agent's calls are its own.
    usage = [e.agent for e in events.of("usage")]
    assert usage.count("sub") == 3 and usage.count("main") == 2
    assert agent.engine.ledger.get("sub").calls == 3
    assert agent.engine.ledger.get("main").calls == 2
    # Its progress, for the lines folded under the task call and its own small gauge.
    progress = events.of("sub_agent")
    assert {e.call_id for e in progress} == {"call_task"}
    assert (progress[0].status, progress[0].summary) == ("started", "find rejection")
    assert [(e.tool, e.summary) for e in progress if e.status == "tool"] == [
        ("read_file", "importer.py"), ("run_bash", "rm -rf /tmp/x")]
    gauge = [e.context_tokens for e in progress if e.status == "context"]
    # (the fake server reports the same small usage for every call, so the figure is not monotonic)
    assert count_tokens(IMPORTER) / 2 < max(gauge) < progress[0].auto_compact_line  # the file it read
    assert (progress[-1].status, progress[-1].summary, progress[-1].step) == ("finished", "end_turn", 3)
    assert progress[0].window == agent.engine.thresholds.window
    # None of the sub-agent's own events reach the main stream as if they were the main agent's.
    assert {e.id for e in events.of("tool_result")} == {"call_task"}


async def test_a_sub_agent_at_its_step_limit_says_so_in_its_report(fake_llm, tmp_path, monkeypatch):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch)
    (agent.workspace / "importer.py").write_text(IMPORTER)
    agent.registry.register(TaskTool(agent, SubAgentLimits(max_steps=2)))
    agent.engine.use_tools(agent.registry.specs())
    fake_llm.enqueue(
        openai_tool_calls([(TASK_TOOL, {"prompt": "Read everything."}, "call_task")]),
        openai_tool_calls([("list_files", {"path": "."}, "sub_1")], text="Looking around."),
        openai_tool_calls([("read_file", {"path": "importer.py"}, "sub_2")]),
        openai_text("Done."),
    )

    await agent.run_turn("Delegate the reading.")

    report = _tool_result(fake_llm.requests[-1].json, "call_task")
    assert "step limit (2 steps)" in report
    assert len(fake_llm.requests) == 4  # the sub-agent made exactly its 2 calls


async def test_an_interrupt_stops_the_sub_agent_and_the_main_history_stays_valid(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    register_task_tool(agent, SubAgentLimits())
    fake_llm.enqueue(
        openai_tool_calls([(TASK_TOOL, {"prompt": "Read everything."}, "call_task")]),
        stall_after(openai_text("the sub-agent never finishes"), 1),
    )
    task = asyncio.ensure_future(agent.run_turn("Delegate the reading."))
    while len(fake_llm.requests) < 2 and not task.done():  # the sub-agent's request is on the wire
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    fake_llm.release()

    assert events.of("result")[-1].stop_reason == "interrupted"
    [interrupted] = [e for e in events.of("tool_result") if e.id == "call_task"]
    assert interrupted.is_error and "Interrupted" in interrupted.content
    assert (events.of("sub_agent")[-1].status, events.of("sub_agent")[-1].summary) == ("finished", "interrupted")
    fake_llm.enqueue(openai_text("fine"))
    assert (await agent.run_turn("go on")).stop_reason == "end_turn"
    assert len(fake_llm.requests) == 3  # nothing more from the sub-agent after the interrupt
    await agent.aclose()

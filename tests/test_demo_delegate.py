"""The demo's "find where the importer rejects rows": the search goes to a sub-agent (issue 16).

In-process, as the dashboard runs it: the real runtime, the real ``task`` tool and
tools, the scripted model at speed 0 playing both the main agent and the sub-agent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from app.wiring.config import load_settings
from app.context.tokens import count_tokens
from app.demo.provider import DemoProvider
from app.demo.scenarios import SCENARIOS, pick_scenario
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from app.providers.base import Completed, ModelRequest
from app.wiring.runtime import build_agent
from app.agent.subagent import SUB_SYSTEM_PROMPT

PROMPT = SCENARIOS["delegate"].prompt
IMPORTER = "inventory/importer.py"
MODELS = "inventory/models.py"


class Recorder(list[Any]):
    def __call__(self, envelope: Any) -> None:  # an EventEnvelope: the event is what the tests read
        self.append(envelope.event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self if e.type == kind]


def open_agent(tmp_path: Path, **overrides: Any) -> tuple[Any, Recorder]:
    settings = load_settings({"provider": "demo", "demo_speed": 0, "yes": True, "data_dir": str(tmp_path / "data"),
                              **overrides})
    events = Recorder()
    return build_agent(settings, cwd=tmp_path, emit=events), events


def context_text(messages: list[Message]) -> str:
    """Every word the main model is sent from its history: texts, tool inputs, tool results."""
    parts: list[str] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                parts += [str(value) for value in block.input.values()]
            elif isinstance(block, ToolResultBlock):
                parts.append(block.content)
    return "\n".join(parts)


def raise_lines(source: str, block: str) -> list[int]:
    """Line numbers of the ``raise ValidationError(`` lines inside top-level ``block`` of ``source``."""
    lines = source.splitlines()
    first = next(n for n, text in enumerate(lines, 1) if re.match(rf"(def|class) {block}\b", text))
    numbers = []
    for n, text in enumerate(lines[first:], first + 1):
        if text and not text[0].isspace() and not text.startswith(")"):
            break
        if "raise ValidationError(" in text:
            numbers.append(n)
    return numbers


async def final_message(provider: DemoProvider, request: ModelRequest) -> Completed:
    async for event in provider.stream(request):
        if isinstance(event, Completed):
            return event
    raise AssertionError("the stream ended without a Completed event")


def line_of(source: str, needle: str) -> int:
    return next(n for n, text in enumerate(source.splitlines(), 1) if needle in text)


async def test_the_sub_agent_reads_the_importer_and_only_its_report_enters_the_main_context(tmp_path: Path) -> None:
    agent, events = open_agent(tmp_path)
    try:
        before = agent.context_event().projected_tokens
        result = await agent.run_turn(PROMPT)
    finally:
        await agent.aclose()
    assert result.stop_reason == "end_turn"
    importer = (agent.workspace / IMPORTER).read_text(encoding="utf-8")
    models = (agent.workspace / MODELS).read_text(encoding="utf-8")

    # The main agent made one call, the task; the sub-agent listed and read, with the real tools.
    [task] = events.of("tool_start")
    assert (task.name, task.input["description"]) == ("task", PROMPT)
    assert task.summary == PROMPT  # the call's line reads as the task, not as its JSON arguments
    assert [(e.tool, e.summary) for e in events.of("sub_agent") if e.status == "tool"] == [
        ("list_files", "."), ("read_file", IMPORTER), ("read_file", MODELS)]
    # Its own context held both files it read.
    held = max(e.context_tokens for e in events.of("sub_agent"))
    assert held > count_tokens(importer) + count_tokens(models)

    # The report names the file and the lines where a row is rejected, as they are in the files.
    [report] = [e.content for e in events.of("tool_result") if e.id == task.id]
    assert f"`{IMPORTER}`, by `_parse_row`" in report
    for number in raise_lines(importer, "_parse_row"):
        assert f"line {number}" in report
    assert f"at line {line_of(importer, 'errors.append(exc)')}" in report
    assert f"returns at lines {line_of(importer, 'if errors:')}–" in report
    for number in raise_lines(models, "Item") + raise_lines(models, "Location"):
        assert str(number) in report.split(MODELS, 2)[2].splitlines()[0]
    # The final answer quotes it.
    assert all(f"> {line}" in result.text for line in report.splitlines() if line.strip())

    # The main context holds the report, none of what the sub-agent read.
    main = context_text(agent.history)
    assert report in main
    read = [line.strip() for source in (importer, models) for line in source.splitlines() if len(line.strip()) > 24]
    assert read and [line for line in read if line in main and line not in report] == []
    assert "inventory/barcodes.py" not in main  # the listing stayed in the sub-agent's context too
    grown = agent.context_event().projected_tokens - before
    assert grown < count_tokens(importer) + count_tokens(models)

    # The sub-agent's model calls are its own in the ledger and in the usage events.
    usage = [e.agent for e in events.of("usage")]
    [finished] = [e for e in events.of("sub_agent") if e.status == "finished"]
    assert usage.count("sub") == finished.step == agent.engine.ledger.get("sub").calls
    assert usage.count("main") == result.steps == agent.engine.ledger.get("main").calls


async def test_the_report_follows_the_importer_as_it_is_on_disk(tmp_path: Path) -> None:
    agent, events = open_agent(tmp_path)
    path = agent.workspace / IMPORTER
    edited = '"""An edited importer."""\n\n# two lines more above everything\n' + path.read_text(encoding="utf-8")
    path.write_text(edited, encoding="utf-8")
    try:
        await agent.run_turn(PROMPT)
    finally:
        await agent.aclose()
    [report] = [e.content for e in events.of("tool_result")]
    first = line_of(edited, "def _parse_row")
    assert f"by `_parse_row` (lines {first}–" in report
    assert f"at line {line_of(edited, 'errors.append(exc)')}" in report
    assert f"line {raise_lines(edited, '_parse_row')[-1]}:" in report


async def test_with_sub_agents_off_it_says_so_and_reads_nothing(tmp_path: Path) -> None:
    agent, events = open_agent(tmp_path, subagents=False)
    try:
        result = await agent.run_turn(PROMPT)
    finally:
        await agent.aclose()
    assert events.of("tool_start") == [] and events.of("sub_agent") == []
    assert "no `task` tool" in result.text and "subagents = false" in result.text


async def test_the_scripted_sub_agent_says_which_task_it_knows() -> None:
    """A sub-agent request (its system prompt) with another task: a report that says so, no reading."""
    request = ModelRequest(system=SUB_SYSTEM_PROMPT.format(cwd="/w", report_tokens=2000),
                           messages=[Message.user("Count the lines of cli.py.")], tools=[])
    final = await final_message(DemoProvider(speed=0), request)
    assert final.message.tool_uses == []
    assert "only know one task" in final.message.text


def test_the_prompt_picks_the_delegate_scenario_and_the_others_keep_theirs() -> None:
    assert pick_scenario(PROMPT) == "delegate"
    assert pick_scenario("find errors in app.log") == "errors"
    assert pick_scenario("summarize the project") == "summarize"


async def test_a_compaction_that_drops_the_report_makes_it_delegate_again_and_say_why() -> None:
    """After "summarize" the report can push the context over the auto-compact line; the demo's
    extractive summary keeps that the task ran, not the report: the model asks again."""
    from app.context.compaction import build_compaction_request, build_summary_history
    from app.agent.subagent import TASK_TOOL

    provider = DemoProvider(speed=0)
    use = ToolUseBlock(id="toolu_task", name=TASK_TOOL, input={"description": PROMPT, "prompt": "Find it."})
    history = [Message.user(PROMPT), Message(role="assistant", content=[use]),
               Message(role="user", content=[ToolResultBlock(tool_use_id=use.id, content="Rows are rejected …")])]
    tools = [ToolSpec(name=TASK_TOOL, description="delegate", input_schema={"type": "object"})]
    summary = await final_message(provider, build_compaction_request("system", history, tools))
    compacted = build_summary_history(summary.message.text, history)

    final = await final_message(provider, ModelRequest(system="system", messages=compacted, tools=tools))
    [again] = final.message.tool_uses
    assert again.name == TASK_TOOL
    assert "compacted just after the sub-agent's report arrived" in final.message.text

"""The demo provider's scripted scenarios, driven the way the agent drives a model.

Each call gets a request built from the history so far; tool calls run for
real through the tool registry in the demo workspace; results go back into
the history. No agent loop here (the lead's end-to-end tests cover that):
this is the model's side of the conversation.
"""

from __future__ import annotations

from typing import Any

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.wiring.config import load_settings
from app.context.compaction import build_compaction_request, build_summary_history
from app.context.engine import ContextEngine, EngineConfig
from app.context.memory import MemoryBundle
from app.context.overflow import DROPPED_NOTE
from app.context.summarizer import extractive_summary
from app.context.thresholds import compute_thresholds
from app.context.tokens import count_tokens, estimate_message, estimate_tools
from app.demo.provider import DemoProvider
from app.demo.scenarios import SCENARIOS, banner_text, pick_scenario
from app.demo.tools import UNTRUNCATED_BASH, UntruncatedBashTool
from app.demo.workspace import LOG_ERROR_LINE, create_demo_workspace, project_files
from app.kernel.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from app.providers.base import (
    Completed,
    ContextTooLongError,
    ModelRequest,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
)
from app.context.prices import Price, price_for
from app.providers.factory import default_key_env, open_provider, provider_plugin
from app.providers.too_long import parse_too_long
from app.tools.base import ToolContext
from app.tools.registry import ToolRegistry, default_registry

SYSTEM = "You are tidegauge, a coding agent. Be concise."


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_demo_workspace(tmp_path_factory.mktemp("demo") / "workspace")


def demo_registry() -> ToolRegistry:
    """The registry a demo session has: the built-in tools plus the plug-in's untruncated one."""
    registry = default_registry()
    registry.register(UntruncatedBashTool(), max_output=0)
    return registry


@dataclass
class Driver:
    """Plays the agent's part: request in, stream out, tools run, results appended."""

    workspace: Path
    results_dir: Path
    registry: ToolRegistry = field(default_factory=demo_registry)
    history: list[Message] = field(default_factory=list)
    calls: list[ToolUseBlock] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ctx = ToolContext(workspace=self.workspace, tool_results_dir=self.results_dir)

    def request(self, **kw) -> ModelRequest:
        return ModelRequest(system=SYSTEM, messages=list(self.history), tools=self.registry.specs(), **kw)

    async def step(self, provider: DemoProvider) -> Completed:
        completed = await collect(provider, self.request())
        self.history.append(completed.message)
        uses = completed.message.tool_uses
        if uses:
            results = []
            for use in uses:
                self.calls.append(use)
                self.ctx.call_id = use.id
                run = await self.registry.run(use.name, use.input, self.ctx)
                results.append(ToolResultBlock(tool_use_id=use.id, content=run.content, is_error=run.is_error,
                                               full_output_path=run.full_output_path))
            self.history.append(Message(role="user", content=results))
        return completed

    async def run(self, prompt: str, provider: DemoProvider | None = None, max_steps: int = 60) -> Completed:
        self.history.append(Message.user(prompt))
        for _ in range(max_steps):
            completed = await self.step(provider or self.fresh())
            if not completed.message.tool_uses:
                return completed
        raise AssertionError("the demo never finished")

    def fresh(self) -> DemoProvider:
        return DemoProvider(speed=0)


async def collect(provider: DemoProvider, request: ModelRequest) -> Completed:
    final = None
    async for event in provider.stream(request):
        if isinstance(event, Completed):
            final = event
    assert final is not None
    return final


def commands(driver: Driver) -> list[str]:
    return [u.input.get("command") or f"{u.name} {u.input.get('path', '')}".strip() for u in driver.calls]


# ---- scenario 1: find errors ----

async def test_find_errors_follows_the_notice_and_quotes_the_line_number(workspace: Path, tmp_path: Path) -> None:
    driver = Driver(workspace, tmp_path / "tool-results")
    # A fresh provider for every call: the decisions come from the request alone.
    final = await driver.run("find errors in app.log")
    assert commands(driver) == ["cat app.log", "grep -n ERROR app.log"]
    # Step 2 saw the registry's head+tail cut and says so, quoting the notice and the tail's ERROR.
    second = driver.history[3]
    assert "output truncated: 15,188,9" in second.text
    assert LOG_ERROR_LINE in second.text
    assert "Line 300001" in final.message.text
    assert LOG_ERROR_LINE in final.message.text
    assert final.stop_reason == "end_turn"


async def test_find_errors_explains_a_refused_command(workspace: Path, tmp_path: Path) -> None:
    provider = DemoProvider(speed=0)
    history = [Message.user("find errors in app.log")]
    first = await collect(provider, ModelRequest(system=SYSTEM, messages=history, tools=[]))
    use = first.message.tool_uses[0]
    history += [first.message, Message(role="user", content=[ToolResultBlock(
        tool_use_id=use.id, is_error=True,
        content="run_bash was refused: this session does not allow tools that change things.")])]
    second = await collect(provider, ModelRequest(system=SYSTEM, messages=history, tools=[]))
    assert not second.message.tool_uses
    assert "refused" in second.message.text and "--yes" in second.message.text


# ---- scenario 2: summarize the project ----

def _readable(path: str) -> bool:
    return path.endswith((".py", ".md", ".toml", ".csv"))


async def test_summarize_reads_every_file_once_and_summarizes_what_it_read(workspace: Path, tmp_path: Path) -> None:
    driver = Driver(workspace, tmp_path / "tool-results")
    final = await driver.run("summarize the project")
    read = [u.input["path"] for u in driver.calls if u.name == "read_file"]
    expected = {p for p in project_files() if _readable(p)}
    assert sorted(read) == sorted(expected)  # every file, none twice
    assert read[0] == "README.md" and driver.calls[0].name == "list_files"
    text = final.message.text
    for path in expected:
        assert f"`{path}`" in text
    # Built from what was read: names parsed out of the tool results.
    assert "SupplierBook" in text and "economic_order_quantity" in text
    assert "stock-keeping library" in text  # from the README


async def test_summarize_carries_on_after_an_auto_compaction(workspace: Path, tmp_path: Path) -> None:
    """Compact (with the demo's own summary, through the compaction request) once the
    request crosses a line, like the engine does, and check the demo picks up where it was."""
    driver = Driver(workspace, tmp_path / "tool-results")
    provider = DemoProvider(speed=0)
    line = 12_000
    driver.history.append(Message.user("summarize the project"))
    compactions = 0
    read_before: list[str] = []
    for _ in range(80):
        if provider.count_request(driver.request()) >= line and compactions == 0:
            read_before = [u.input["path"] for u in driver.calls if u.name == "read_file"]
            request = build_compaction_request(SYSTEM, driver.history, driver.registry.specs())
            summary = await collect(provider, request)
            assert summary.message.tool_uses == [] and summary.stop_reason == "end_turn"
            driver.history = build_summary_history(summary.message.text, driver.history)
            compactions += 1
        completed = await driver.step(provider)
        if not completed.message.tool_uses:
            break
    assert compactions == 1
    assert 5 < len(read_before) < len({p for p in project_files() if _readable(p)})
    read = [u.input["path"] for u in driver.calls if u.name == "read_file"]
    assert sorted(read) == sorted(p for p in project_files() if _readable(p))  # nothing re-read, nothing missed
    first_after = driver.history[1]
    assert "Carrying on from the summary" in first_after.text
    final = driver.history[-1].text
    assert "before the context was compacted" in final
    # A module read before the compaction is still described, from the summary.
    early = next(p for p in read_before if p.endswith(("models.py", "errors.py")))
    assert f"`{early}`" in final


# ---- scenario 3: flood ----

async def test_flood_cats_through_the_untruncated_tool_and_every_other_call_stays_truncated(
        workspace: Path, tmp_path: Path) -> None:
    driver = Driver(workspace, tmp_path / "tool-results")
    driver.history.append(Message.user("flood"))
    provider = DemoProvider(speed=0)
    for _ in range(3):
        completed = await collect(provider, driver.request())
        uses = completed.message.tool_uses
        driver.history.append(completed.message)
        if uses[0].name != "read_file":
            break
        await_results = [ToolResultBlock(tool_use_id=u.id, content="(read)") for u in uses]
        driver.history.append(Message(role="user", content=await_results))
    assert (uses[0].name, uses[0].input) == (UNTRUNCATED_BASH, {"command": "cat app.log"})
    # That tool's results are never cut; run_bash's still are, before and after it ran.
    probe = {"command": "head -c 60000 app.log"}
    runs = []
    for index, name in enumerate(("run_bash", UNTRUNCATED_BASH, UNTRUNCATED_BASH, "run_bash")):
        driver.ctx.call_id = f"probe{index}"
        runs.append(await driver.registry.run(name, probe, driver.ctx))
    assert [run.truncated for run in runs] == [True, False, False, True]
    assert runs[1].original_chars >= 60_000 and len(runs[1].content) >= 60_000


async def test_flood_without_the_untruncated_tool_says_the_registry_cut_applies(workspace: Path) -> None:
    """A session that lacks the plug-in's tool: the model uses run_bash and does not claim truncation was off."""
    history = [Message.user("flood")]
    tools = [spec for spec in default_registry().specs()]
    reads = 0
    while True:
        completed = await collect(DemoProvider(speed=0), ModelRequest(system=SYSTEM, messages=history, tools=tools))
        [use] = completed.message.tool_uses
        if use.name != "read_file":
            break
        reads += 1
        history += [completed.message,
                    Message(role="user", content=[ToolResultBlock(tool_use_id=use.id, content="(read)")])]
    assert reads and (use.name, use.input) == ("run_bash", {"command": "cat app.log"})
    assert f"no `{UNTRUNCATED_BASH}` tool" in completed.message.text


async def test_over_window_request_is_rejected_like_a_server() -> None:
    provider = DemoProvider(speed=0, window=2_000)
    big = Message.user("please look at this:\n" + "lorem ipsum dolor sit amet " * 800)
    request = ModelRequest(system=SYSTEM, messages=[big], tools=[])
    total = provider.count_request(request)
    with pytest.raises(ContextTooLongError) as info:
        await collect(provider, request)
    err = info.value
    assert str(err.message) == f"prompt is too long: {total} tokens > 2000 maximum"
    assert (err.actual_tokens, err.limit_tokens, err.status) == (total, 2_000, 400)
    assert parse_too_long(err.message) == (total, 2_000)  # the engine's parser reads it
    assert err.gap_tokens == total - 2_000
    # Under the window the same provider answers.
    small = ModelRequest(system=SYSTEM, messages=[Message.user("hello")], tools=[])
    assert (await collect(provider, small)).stop_reason == "end_turn"


async def test_flood_shows_the_cut_and_the_overflow_recovery(workspace: Path, tmp_path: Path) -> None:
    """The whole story with the real context engine making its two moves: the cut
    before sending, then dropping the oldest rounds after the server's rejection."""
    driver = Driver(workspace, tmp_path / "tool-results")
    provider = DemoProvider(speed=0)
    events: list[Any] = []
    engine = ContextEngine(system_prompt=SYSTEM, memory=MemoryBundle(), tools=driver.registry.specs(),
                           config=EngineConfig(window=DemoProvider.DEFAULT_WINDOW, budget=DemoProvider.DEFAULT_BUDGET),
                           emit=events.append, tool_results_dir=tmp_path / "tool-results")
    driver.history.append(Message.user("flood"))
    while True:
        completed = await driver.step(provider)
        if any(u.input.get("command") == "cat app.log" for u in completed.message.tool_uses):
            break
    [result] = driver.history.pop().tool_results
    assert len(result.content) > 15_000_000  # truncation really was off for this call
    engine.load_history(driver.history)
    fitted = engine.fit_tool_result(result, "run_bash", [])
    assert any(e.type == "result_cut" for e in events)
    engine.history.append(Message(role="user", content=[fitted]))
    assert engine.projection().projected_tokens < engine.thresholds.warning_line
    with pytest.raises(ContextTooLongError) as info:
        await collect(provider, driver.request())
    assert info.value.limit_tokens == DemoProvider.FLOOD_SERVER_WINDOW < engine.thresholds.warning_line
    assert engine.recover_overflow(info.value)
    assert any(e.type == "compaction" and e.trigger == "reactive" and e.ok for e in events)
    driver.history = engine.history
    final = await collect(provider, driver.request())
    text = final.message.text
    assert LOG_ERROR_LINE in text
    assert "output truncated" in text and "prompt is too long" in text
    assert "inventory/storage.py" in text  # names the read the recovery dropped
    assert final.stop_reason == "end_turn"


# ---- compaction requests ----

def _history_with_work() -> list[Message]:
    return [
        Message.user("find errors in app.log. Never change public function signatures."),
        Message(role="assistant", content=[TextBlock(text="Reading the models."),
                                           ToolUseBlock(id="t1", name="read_file",
                                                        input={"path": "inventory/models.py"})]),
        Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content=(
            '     1\t"""The domain model."""\n     2\tclass Sku:\n     3\t    pass\n'
            '     4\tclass ValidationError(Exception):\n     5\t    pass'))]),
        Message(role="assistant", content=[TextBlock(text="Now grep."),
                                           ToolUseBlock(id="t2", name="run_bash",
                                                        input={"command": "grep -n ERROR app.log"})]),
        Message(role="user", content=[ToolResultBlock(tool_use_id="t2", content=(
            f"300001:{LOG_ERROR_LINE}\n[exit code: 0]"))]),
    ]


async def test_compaction_request_is_answered_with_the_extractive_summary() -> None:
    history = _history_with_work()
    provider = DemoProvider(speed=0)
    request = build_compaction_request(SYSTEM, history, default_registry().specs())
    assert request.tool_choice == "none"
    completed = await collect(provider, request)
    text = completed.message.text
    assert completed.message.tool_uses == [] and completed.stop_reason == "end_turn"
    assert "find errors in app.log. Never change public function signatures." in text  # verbatim
    assert "inventory/models.py" in text
    assert f"300001:{LOG_ERROR_LINE}" in text
    assert "Write a handoff summary" not in text  # the instruction is not part of the transcript
    assert text == extractive_summary(history)  # exactly the engine's fallback summary


async def test_compaction_focus_reaches_the_summary() -> None:
    request = build_compaction_request(SYSTEM, _history_with_work(), [], focus="the database error")
    completed = await collect(DemoProvider(speed=0), request)
    assert "Focus requested for this summary: the database error" in completed.message.text


# ---- usage, streaming, the protocol ----

async def test_usage_is_the_tiktoken_count_of_the_request_with_the_prefix_cached(workspace: Path,
                                                                             tmp_path: Path) -> None:
    driver = Driver(workspace, tmp_path / "tool-results")
    provider = DemoProvider(speed=0)
    driver.history.append(Message.user("summarize the project"))

    def expected_total() -> int:
        tools = driver.registry.specs()
        return count_tokens(SYSTEM) + estimate_tools(tools) + sum(estimate_message(m) for m in driver.history)

    total = expected_total()
    first = await driver.step(provider)
    assert first.usage.total_input == total
    assert (first.usage.cache_read_tokens, first.usage.input_tokens) == (0, total)
    new_part = sum(estimate_message(m) for m in driver.history[-2:])  # the answer and the tool result
    total2 = expected_total()
    second = await driver.step(provider)
    assert second.usage.total_input == total2
    assert second.usage.cache_read_tokens == total2 - new_part  # the prefix of the previous call
    assert second.usage.input_tokens == new_part  # uncached input only
    msg = second.message
    thinking = next(b.thinking for b in msg.content if isinstance(b, ThinkingBlock))
    use = msg.tool_uses[0]
    assert second.usage.output_tokens == (count_tokens(thinking) + count_tokens(msg.text) + count_tokens(use.name)
                                          + count_tokens(json.dumps(use.input)))


async def test_stream_events_assemble_into_the_final_message() -> None:
    provider = DemoProvider(speed=0)
    request = ModelRequest(system=SYSTEM, messages=[Message.user("find errors in app.log")], tools=[])
    text, thinking, args = "", "", {}
    starts = []
    final = None
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, ThinkingDelta):
            thinking += event.text
        elif isinstance(event, ToolCallStart):
            starts.append(event)
            args[event.index] = ""
        elif isinstance(event, ToolCallDelta):
            args[event.index] += event.partial_json
        elif isinstance(event, Completed):
            final = event
    assert final is not None and final.stop_reason == "tool_use"
    assert text == final.message.text and thinking
    [use] = final.message.tool_uses
    assert starts[0].id == use.id and starts[0].name == "run_bash"
    assert json.loads(args[0]) == use.input == {"command": "cat app.log"}


async def test_speed_paces_the_stream() -> None:
    """Pacing is checked through the sleeps it asks for, not the wall clock."""
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    request = ModelRequest(system=SYSTEM, messages=[Message.user("hi")], tools=[])
    instant = DemoProvider(speed=0)
    instant.sleep = fake_sleep
    await collect(instant, request)
    assert slept == []
    paced = DemoProvider(speed=40)
    paced.sleep = fake_sleep
    final = await collect(paced, request)
    assert len(slept) > 20  # many small deltas, not one block
    assert sum(slept) == pytest.approx(final.usage.output_tokens / 40, rel=0.02)


async def test_menu_and_banner_list_every_scenario_and_each_prompt_picks_its_own() -> None:
    final = await collect(DemoProvider(speed=0),
                          ModelRequest(system=SYSTEM, messages=[Message.user("hello there")], tools=[]))
    text = final.message.text
    assert final.message.tool_uses == []
    assert DemoProvider().banner == banner_text()
    assert len(SCENARIOS) == 5
    for name, scenario in SCENARIOS.items():
        assert f"**{scenario.prompt}**" in text
        assert scenario.prompt in banner_text()
        assert pick_scenario(scenario.prompt) == name
    assert "what did I ask first?" in banner_text()  # the one the first banner left out


async def test_recall_as_the_first_request_says_there_is_nothing_earlier() -> None:
    final = await collect(DemoProvider(speed=0),
                          ModelRequest(system=SYSTEM, messages=[Message.user("what did I ask first?")], tools=[]))
    assert "first thing you've asked" in final.message.text
    assert "Your first request was" not in final.message.text


async def test_recall_after_compaction_quotes_the_first_request() -> None:
    history = _history_with_work()
    summary = extractive_summary(history)
    compacted = build_summary_history(summary, history)
    compacted += [Message.assistant_text("Done."), Message.user("what did I ask first?")]
    memory_system = SYSTEM + "\n\n# Project and user rules (memory files)\n- Never change public function signatures."
    final = await collect(DemoProvider(speed=0), ModelRequest(system=memory_system, messages=compacted, tools=[]))
    text = final.message.text
    assert "> find errors in app.log. Never change public function signatures." in text
    assert "compacted" in text
    assert "Rules from the memory files" in text


async def test_the_task_note_of_an_overflow_drop_is_not_taken_for_a_request(workspace: Path) -> None:
    """After a drop the first message carries the engine's note; the demo still sees the task."""
    task = Message(role="user", content=[TextBlock(text="find errors in app.log"), TextBlock(text=DROPPED_NOTE)])
    final = await collect(DemoProvider(speed=0), ModelRequest(system=SYSTEM, messages=[task], tools=[]))
    assert final.message.tool_uses[0].input == {"command": "cat app.log"}


def test_the_plug_in_gives_its_provider_workspace_limits_and_untruncated_tool(tmp_path: Path) -> None:
    settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(tmp_path / "data")})
    assert provider_plugin("demo") is not None and default_key_env("demo") == ""
    setup = open_provider("demo", settings, None, session_dir=tmp_path / "session")
    provider = setup.provider
    assert isinstance(provider, DemoProvider) and provider.speed == 0
    assert (provider.name, provider.label, provider.model) == ("demo", "demo (scripted model)", "demo-scripted")
    assert provider.banner == banner_text()
    assert setup.workspace == tmp_path / "session" / "workspace" and (setup.workspace / "app.log").is_file()
    assert provider.window == setup.default_window == DemoProvider.DEFAULT_WINDOW
    assert setup.default_budget == DemoProvider.DEFAULT_BUDGET
    assert price_for(provider.model, provider_price=setup.price) == Price(0.0, 0.0, 0.0, 0.0)  # scripted: free
    [extra] = setup.tools
    assert (extra.tool.spec.name, extra.max_output, extra.tool.mutating) == (UNTRUNCATED_BASH, 0, True)
    t = compute_thresholds(DemoProvider.DEFAULT_WINDOW, DemoProvider.DEFAULT_BUDGET, 8_000)
    assert (t.warning_line, t.auto_compact_line) == (15_000, 20_000)


def test_the_window_the_user_gives_is_the_one_the_scripted_server_enforces(tmp_path: Path) -> None:
    settings = load_settings({"provider": "demo", "window": 30_000, "data_dir": str(tmp_path / "data")})
    setup = open_provider("demo", settings, None, session_dir=tmp_path / "s")
    assert setup.provider.window == 30_000  # type: ignore[attr-defined]


async def test_late_wake_ups_are_caught_up_not_added_to_the_reply() -> None:
    """When every wake-up comes late (another thread holding the GIL: the dashboard
    drawing), the pacing asks for less sleep next time instead of adding each
    lateness to the reply: the same reply must not take far longer in the dashboard."""
    asked: list[float] = []
    lateness = 0.005  # every wake-up 5 ms late, as on a busy machine

    async def late_sleep(seconds: float) -> None:
        asked.append(seconds)
        await asyncio.sleep(seconds + lateness)

    paced = DemoProvider(speed=4000)
    paced.sleep = late_sleep
    final = await collect(paced, ModelRequest(system=SYSTEM, messages=[Message.user("hi")], tools=[]))
    budget = final.usage.output_tokens / 4000
    assert len(asked) > 20
    assert sum(asked) < budget / 2  # caught up; sleeping each share in full asks for the whole budget


async def test_recall_quotes_each_earlier_prompt_as_its_own_paragraph() -> None:
    # Quoted lines in a row are one Markdown paragraph: the prompts read as one sentence (issue 29).
    from markdown_it import MarkdownIt

    prompts = ["summarize the project", "find where the importer rejects rows", "flood", "hi"]
    history: list[Message] = []
    for prompt in prompts:
        history += [Message.user(prompt), Message.assistant_text("Done.")]
    history.append(Message.user("what did I ask first?"))
    final = await collect(DemoProvider(speed=0), ModelRequest(system=SYSTEM, messages=history, tools=[]))
    tokens = MarkdownIt().parse(final.message.text)
    quoted = [tokens[i + 2].content for i, t in enumerate(tokens) if t.type == "blockquote_open"]
    assert quoted == prompts  # the first request, then each later one, one quote each

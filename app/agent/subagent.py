"""Sub-agents: a ``task`` tool that runs a side task in a fresh context and returns a bounded report.

The point is the main context: a side task's reading (files, logs, searches)
never enters it, only the report does. The sub-agent is the same Agent and
ContextEngine with its own history and thresholds, read-only tools by default
(a tool that changes things is refused, never asked about), a step limit, and
no transcript of its own. Its model calls are in the session's ledger as
agent ``sub`` (stream-json ``usage`` events with ``"agent": "sub"``); its
other events stay inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from app.context.file_cache import FileReadCache
from app.context.memory import MemoryBundle
from app.kernel.event_sink import EventSink
from app.kernel.events import (
    AssistantMessageEvent,
    ContextEvent,
    Event,
    SubAgentEvent,
    TextDeltaEvent,
    ToolStartEvent,
    UsageEvent,
)
from app.kernel.messages import ToolSpec
from app.tools.base import ToolContext, ToolInputError, ToolOutput
from app.tools.registry import ToolRegistry, safe_file_stem

if TYPE_CHECKING:  # the agent module imports the tools; the sub-agent is built from it on use
    from app.agent.loop import Agent

TASK_TOOL = "task"
DEFAULT_REPORT_TOKENS = 2_000
DEFAULT_SUB_STEPS = 20
# The report's limit in characters for the registry's cut (a token is ~4 characters of prose).
REPORT_CHARS_PER_TOKEN = 4

SUB_SYSTEM_PROMPT = """You are a sub-agent of tidegauge, a coding agent. Another agent delegated one task to you.
Working directory: {cwd}

Investigate with your tools (they only read; anything that changes things is refused), then answer
with a report for the other agent: what you found, with file paths and line numbers, and what you
could not settle. Your final message is the report and nothing else reaches the other agent: keep
it under about {report_tokens} tokens. Read files with read_file (offset/limit for big ones)."""


@dataclass
class SubAgentLimits:
    max_steps: int = DEFAULT_SUB_STEPS
    report_tokens: int = DEFAULT_REPORT_TOKENS
    max_tokens: int = 8_000  # output tokens per model call


def report_text(text: str, stopped: str | None = None) -> str:
    """The whole report as the sub-agent wrote it, with a note when it stopped early.

    Not cut here: the registry cuts it to ``TaskTool.output_limit`` like every
    tool result, and saves it whole under the parent's tool-results/.
    """
    note = f"[the sub-agent {stopped}; its report may be incomplete]\n\n" if stopped else ""
    return note + (text.strip() or "(the sub-agent wrote no report)")


def sub_agent_results_dir(tool_results_dir: Path, task_call_id: str) -> Path:
    """Where a sub-agent saves its outputs: its own folder, named by the parent's task call, so
    the same call id in the parent and a sub-agent never names the same file."""
    return Path(tool_results_dir) / "agents" / safe_file_stem(task_call_id)


class TaskTool:
    """``task``: delegate a self-contained investigation to a sub-agent with a fresh context.

    ``parent`` is the main Agent: its provider, price, engine (for the ledger and the
    window), registry (read-only tools are lent) and tool context are reused.
    """

    mutating = False  # the sub-agent itself can only read

    def __init__(self, parent: Agent, limits: SubAgentLimits | None = None) -> None:
        self.parent = parent
        self.limits = limits or SubAgentLimits()
        # The registry cuts the report to this (head+tail, the whole report saved), as any result.
        self.output_limit = self.limits.report_tokens * REPORT_CHARS_PER_TOKEN
        self.spec = ToolSpec(
            name=TASK_TOOL,
            description=(
                "Delegate a self-contained investigation to a sub-agent with a fresh context of its own (for "
                "example: find where something is implemented, read many files or a long log). Only its "
                f"report (at most ~{self.limits.report_tokens:,} tokens) comes back, so the reading does not "
                "fill your context. The sub-agent can only read. Give it everything it needs in the prompt."),
            input_schema={
                "type": "object",
                "properties": {
                    "description": {"type": "string", "description": "a few words naming the task, for display"},
                    "prompt": {"type": "string", "description": "the whole task: what to find and what to report"},
                },
                "required": ["prompt"],
            },
        )

    def read_only_registry(self) -> ToolRegistry:
        """The parent's tools that only read, without ``task`` itself (no recursion) and load_tools."""
        parent_registry: ToolRegistry = self.parent.registry
        registry = ToolRegistry(parent_registry.max_output)
        for spec in parent_registry.specs():
            tool = parent_registry.get(spec.name)
            if tool is None or tool.mutating or spec.name in (TASK_TOOL, "load_tools"):
                continue
            if getattr(tool, "server", None) is not None and spec not in self.parent.engine.tools:
                continue  # an MCP tool whose definition is deferred: too big to lend in full
            registry.register(tool)
        return registry

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolInputError('task needs a "prompt": the whole task for the sub-agent, as text.')
        call_id = ctx.call_id
        sub = self.build_sub_agent(ctx)
        sub.emit.connect(_forward(self.parent, sub, call_id))
        self.parent.engine.emit(SubAgentEvent(call_id=call_id, status="started", summary=str(args.get("description") or ""),
                                              max_steps=self.limits.max_steps,
                                              window=sub.engine.thresholds.window,
                                              auto_compact_line=sub.engine.thresholds.auto_compact_line))
        stop_reason = "interrupted"
        try:
            # Nothing of the sub-agent to close afterwards: the provider (and its connections) is the parent's.
            result = await sub.run_turn(prompt)
            stop_reason = result.stop_reason
        finally:
            done = sub.engine.context_event()
            self.parent.engine.emit(SubAgentEvent(
                call_id=call_id, status="finished", step=sub.step, max_steps=self.limits.max_steps,
                summary=stop_reason, context_tokens=done.projected_tokens, window=done.thresholds.window,
                auto_compact_line=done.thresholds.auto_compact_line))
        stopped = None
        if result.stop_reason == "max_steps":
            stopped = f"stopped at its step limit ({self.limits.max_steps} steps)"
        elif result.stop_reason == "error":
            return ToolOutput(f"The sub-agent failed: {result.text}", is_error=True)
        return ToolOutput(report_text(result.text, stopped))

    def build_sub_agent(self, ctx: ToolContext) -> Agent:
        from app.agent.loop import Agent, AgentOptions
        from app.context.engine import ContextEngine, EngineConfig

        parent = self.parent
        registry = self.read_only_registry()
        parent_config = parent.engine.config
        results_dir = sub_agent_results_dir(ctx.tool_results_dir, ctx.call_id)
        events = EventSink()  # its engine's and its loop's, connected to the parent by ``run``
        engine = ContextEngine(
            emit=events,
            system_prompt=SUB_SYSTEM_PROMPT.format(cwd=ctx.workspace, report_tokens=self.limits.report_tokens),
            memory=MemoryBundle(),
            tools=registry.specs(),
            # Its own thresholds: the same window and budget, computed afresh for an empty history.
            config=EngineConfig(window=parent_config.window, budget=parent_config.budget,
                                compact_max_output=parent_config.compact_max_output),
            price=parent.engine.price,
            compact_price=parent.engine.compact_price,
            tool_results_dir=results_dir,
        )
        # A fresh context: the parent's file-read cache would answer "unchanged, see above".
        # Its saved outputs count against the same per-session cap (the budget is shared).
        tool_context = replace(ctx, call_id="", file_cache=FileReadCache(), tool_results_dir=results_dir)
        agent = Agent(
            provider=parent.provider,
            registry=registry,
            engine=engine,
            tool_context=tool_context,
            options=AgentOptions(max_steps=self.limits.max_steps, max_tokens=self.limits.max_tokens,
                                 max_tool_calls_per_turn=parent.options.max_tool_calls_per_turn,
                                 auto_approve=parent.options.auto_approve, max_retries=parent.options.max_retries,
                                 retry_base_delay=parent.options.retry_base_delay),
            price=parent.price,
            session_id=parent.session_id,
            provider_label=parent.provider_label,
            transcript=None,
            # The session's rules and the user's answers hold inside it too: a deny
            # rule refuses, an ask rule asks the user as the main agent would. (Its tools only
            # read; a tool that changes things is not lent to it at all.)
            approver=parent.approver,
            permissions=parent.permissions,
            emit=events,
            api_clock=parent.api_clock,  # its calls are the session's model time too
        )
        return agent


# The sub-agent's reply is said as it streams, once per this many characters: its report takes
# seconds to write (7 s in the demo) in which nothing else under the task call would change.
WRITING_STEP_CHARS = 200


def _forward(parent: Agent, sub: Agent, call_id: str) -> Callable[[Event], None]:
    """What leaves the sub-agent: its usage (ledger and stream, as agent "sub") and one-line
    progress (SubAgentEvent), with how much of its reply has streamed. Its text, tool outputs and
    engine lines stay inside it."""
    max_steps = sub.options.max_steps
    written = [0, 0]  # characters of the reply streaming now; those last said

    def forward(event: Event) -> None:
        if isinstance(event, TextDeltaEvent):
            written[0] += len(event.text)
            if written[0] - written[1] >= WRITING_STEP_CHARS or not written[1]:
                written[1] = written[0]
                parent.engine.emit(SubAgentEvent(call_id=call_id, status="writing", step=sub.step,
                                                 max_steps=max_steps, written_chars=written[0]))
            return
        if isinstance(event, AssistantMessageEvent):
            written[0] = written[1] = 0
        if isinstance(event, UsageEvent):
            from app.kernel.usage import Usage

            usage = Usage(event.input_tokens, event.cache_read_tokens, event.cache_write_tokens, event.output_tokens,
                          reasoning_tokens=event.reasoning_tokens)
            parent.engine.ledger.add("sub", usage, event.cost_usd)
            parent.engine.emit(event.model_copy(update={"agent": "sub"}))
        elif isinstance(event, ToolStartEvent):
            parent.engine.emit(SubAgentEvent(call_id=call_id, status="tool", tool=event.name, summary=event.summary,
                                             step=sub.step, max_steps=max_steps))
        elif isinstance(event, ContextEvent):
            parent.engine.emit(SubAgentEvent(call_id=call_id, status="context", step=sub.step, max_steps=max_steps,
                                             context_tokens=event.projected_tokens, window=event.thresholds.window,
                                             auto_compact_line=event.thresholds.auto_compact_line))

    return forward


def register_task_tool(agent: Agent, limits: SubAgentLimits | None = None) -> TaskTool:
    """Add ``task`` to a main agent's tools (and to what its engine sends). ``limits``: the
    settings' (``subagent_max_steps``, ``subagent_report_tokens``), turned into them by the runtime."""
    limits = limits or SubAgentLimits()
    tool = TaskTool(agent, limits)
    agent.registry.register(tool)
    if all(spec.name != TASK_TOOL for spec in agent.engine.tools):
        agent.engine.use_tools([*agent.engine.tools, tool.spec])
    return tool

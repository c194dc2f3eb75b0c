"""1. Ingesting a huge tool result, through the path the agent really uses.

Subject: the agent's own tool step (``Agent._run_tools``) for one call whose
tool returns the seed's 15 MB, 300,000-line app.log: the registry sanitizes
and truncates it head+tail and writes the full output to tool-results/, the
engine checks the kept part against the blocking line (estimating its
tokens), the result event is emitted and written to the transcript, the
message is appended and the context event computed.

Baseline: the naive way, ``count_tokens(whole output)`` with tiktoken.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._fixtures import FULL_LOG_LINES, QUICK_LOG_LINES, app_log_text, require
from benchmarks.harness import Check, interleaved, median, seconds, timed

NAME = "1 ingest 15 MB tool result"
MIN_SPEEDUP = 10.0


class _LogTool:
    """A read-only tool whose output is the whole log (``cat app.log`` without the subprocess)."""

    mutating = False

    def __init__(self, text: str) -> None:
        from app.kernel.messages import ToolSpec
        from app.tools.base import ToolOutput

        self.spec = ToolSpec(name="cat_log", description="prints app.log", input_schema={"type": "object"})
        self._output = ToolOutput
        self._text = text

    async def run(self, args: dict[str, Any], ctx: Any) -> Any:
        return self._output(self._text)


class _NoModel:
    """The tool step never calls the model; the Agent just needs something in the slot."""

    name = "none"
    model = "none"


def _make_agent(text: str, workdir: Path, rep: int) -> Any:
    from app.agent.loop import Agent, AgentOptions
    from app.context.engine import ContextEngine, EngineConfig
    from app.context.memory import MemoryBundle
    from app.kernel.event_sink import EventSink
    from app.kernel.messages import Message, ToolUseBlock
    from app.tools.base import ToolContext
    from app.tools.registry import DEFAULT_MAX_OUTPUT, ToolRegistry
    from app.session.transcript import TranscriptWriter

    registry = ToolRegistry(DEFAULT_MAX_OUTPUT)
    registry.register(_LogTool(text))
    session = workdir / f"session-{rep}"
    events: list[Any] = []
    sink = EventSink(events.append)
    engine = ContextEngine(system_prompt="You are a coding agent.", memory=MemoryBundle([]), emit=sink,
                           tools=registry.specs(), config=EngineConfig(window=200_000, budget=150_000),
                           tool_results_dir=session / "tool-results")
    transcript = TranscriptWriter(session / "transcript.jsonl")
    engine.transcript = transcript
    ctx = ToolContext(workspace=workdir, tool_results_dir=session / "tool-results")
    agent = Agent(provider=_NoModel(), registry=registry, engine=engine, tool_context=ctx,  # type: ignore[arg-type]
                  options=AgentOptions(auto_approve=True), transcript=transcript, emit=sink)
    engine.append(Message.user("find errors in app.log"))
    use = ToolUseBlock(id=f"call_{rep}", name="cat_log", input={})
    engine.append(Message(role="assistant", content=[use]))
    return agent, use, events


def run(quick: bool) -> list[Check]:
    for module in ("app.agent.loop", "app.context.engine", "app.tools.registry", "app.session.transcript"):
        require(module)
    from app.context.tokens import count_tokens
    from app.kernel.redact import register_secret

    # A session on a real provider has its API key registered, so the registry's
    # redaction pass really searches the output (as it does for the user).
    register_secret("sk-benchmark-not-a-real-key-0123456789abcdef")
    lines = QUICK_LOG_LINES if quick else FULL_LOG_LINES
    reps = 5
    text = app_log_text(lines)
    count_tokens("warm the encoder up")
    outcome: dict[str, Any] = {}

    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
        workdir = Path(tmp)
        counter = iter(range(1_000))

        def baseline() -> float:
            return timed(lambda: count_tokens(text))

        def subject() -> float:
            agent, use, events = _make_agent(text, workdir, next(counter))
            loop = asyncio.new_event_loop()
            try:
                started = time.perf_counter()
                loop.run_until_complete(agent._run_tools([use], offered=frozenset({use.name})))
                elapsed = time.perf_counter() - started
            finally:
                loop.close()
            result = next(e for e in events if getattr(e, "type", "") == "tool_result")
            outcome.update(truncated=result.truncated, kept=result.kept_chars, path=result.full_output_path,
                           original=result.original_chars, history_tail=agent.engine.history[-1])
            agent.transcript.close()
            return elapsed

        base, subj = interleaved(baseline, subject, reps)
        # It must have done the real work, not skipped it.
        assert outcome["truncated"] and outcome["original"] == len(text), outcome
        assert outcome["path"] and Path(outcome["path"]).stat().st_size >= len(text), outcome
        assert "ERROR database connection refused" in outcome["history_tail"].tool_results[0].content

    b, s = median(base), median(subj)
    speedup = b / s
    size = f"{len(text) / 1e6:.0f} MB/{lines:,} lines"
    return [Check(
        name=NAME if not quick else NAME.replace("15 MB", "3 MB"),
        figure=f"{seconds(s)} vs {seconds(b)} tiktoken of all ({size}, median of {reps})",
        target=f">= {MIN_SPEEDUP:g}× faster",
        value=speedup, limit=MIN_SPEEDUP, op=">=",
        extra={"subject_s": subj, "baseline_s": base, "kept_chars": outcome["kept"]},
    )]

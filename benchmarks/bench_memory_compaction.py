"""7. Compaction from a fresh session memory against a normal compaction.

The same ~150,000-token history (rounds of one file read each, as in
benchmark 6) is compacted two ways, interleaved ABBA in one process:

- baseline: ``ContextEngine.compact`` whose summary comes from the offline
  demo provider's summarizer (its extractive handoff summary of the whole
  history, streamed at full speed: no typing delay), the cheapest model call
  there is;
- subject: ``ContextEngine.compact_from_memory`` with an up-to-date session
  memory (it covers all but the last round): no model call at all.

Both include the audit of the summary, the history replacement, the
re-estimate and the events. The figure is the ratio of the medians; a real
model's summary call takes seconds more, so this is the smallest gain.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks._fixtures import require
from benchmarks._session import new_engine, play_turn
from benchmarks.harness import Check, interleaved_async, median, seconds

NAME = "7 compaction from session memory"
TARGET_RATIO = 0.5
HISTORY_TOKENS = 150_000
QUICK_HISTORY_TOKENS = 60_000

MEMORY = "\n".join(
    ["## Task goal and acceptance criteria", "Find why requests fail in this service and fix it; keep the public API.",
     "## Done so far"] + [f"- src/module_{i}.py: read; handle() raises PermissionError without a user"
                          for i in range(1, 80)]
    + ["## Key findings", "handle() raises PermissionError('login required') when request.user is None.",
       "## In progress / next step", "Read the remaining modules, then patch handle().",
       "## User preferences", "Keep the public API."])


def _build_history(tokens: int) -> tuple[list[Any], int]:
    from app.kernel.messages import Message

    engine = new_engine()
    engine.append(Message.user("Find why requests fail in this service and fix it. Keep the public API."))
    turn = 0
    while engine.projection().projected_tokens < tokens:
        turn += 1
        play_turn(engine, turn)
    return list(engine.history), engine.projection().projected_tokens


def run(quick: bool) -> list[Check]:
    for module in ("app.context.engine", "app.context.session_memory", "app.demo.provider"):
        require(module)
    from app.providers.base import Completed
    from app.demo.provider import DemoProvider

    history, tokens = _build_history(QUICK_HISTORY_TOKENS if quick else HISTORY_TOKENS)
    reps = 5 if quick else 9
    # The demo plays a server with a window: make it roomy enough for the whole history.
    demo = DemoProvider(speed=0, window=4 * tokens)
    outcome: dict[str, Any] = {}

    def fresh_engine() -> Any:
        engine = new_engine(window=4 * tokens, budget=tokens)
        engine.load_history(list(history))
        engine.context_event()
        return engine

    async def summarize(request: Any) -> tuple[Any, Any]:
        async for item in demo.stream(request):
            if isinstance(item, Completed):
                return item.message, item.usage
        raise RuntimeError("the demo stream ended without a message")

    async def normal() -> float:
        engine = fresh_engine()
        started = time.perf_counter()
        event = await engine.compact(summarize, "auto")
        elapsed = time.perf_counter() - started
        outcome["normal"] = (event.ok, event.tokens_after, event.facts_added)
        return elapsed

    async def from_memory() -> float:
        engine = fresh_engine()
        engine.session_memory.save(MEMORY, engine.history[-3])  # all but the last round
        engine._recount_memory_tokens()
        started = time.perf_counter()
        event = engine.compact_from_memory()
        elapsed = time.perf_counter() - started
        assert event is not None, "the memory compaction was refused"
        outcome["memory"] = (event.ok, event.tokens_after, event.facts_added, event.messages_after)
        return elapsed

    base, subj = asyncio.run(interleaved_async(normal, from_memory, reps))
    assert outcome["normal"][0] and outcome["memory"][0], outcome
    assert 0 < outcome["memory"][1] < tokens and 0 < outcome["normal"][1] < tokens, outcome
    b, s = median(base), median(subj)
    ratio = s / b
    return [Check(
        name=NAME,
        figure=(f"{seconds(s)} vs {seconds(b)} with the demo's summarizer "
                f"({tokens:,} tokens, {len(history):,} messages; median of {reps})"),
        target=f"<= {TARGET_RATIO:g}× a normal compaction",
        value=ratio, limit=TARGET_RATIO, op="<=", unit="x",
        extra={"memory_s": subj, "normal_s": base, "history_tokens": tokens,
               "memory_tokens_after": outcome["memory"][1], "normal_tokens_after": outcome["normal"][1],
               "memory_messages_after": outcome["memory"][3]},
    )]

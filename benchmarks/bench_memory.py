"""4b/4c. The dashboard after 1,000 tool outputs: resident memory, and a pruned DOM.

One turn, as the agent's worker emits it: a short streamed reply, the tool
call, its result (a ~3,000-character file read; every tenth a truncated
40,000-character output with its full output on disk), the usage and the
context event. 1,000 turns go through ``agent.emit`` into the real app
(headless, 160×50). Then the process's resident set size is read (psutil),
and the conversation's mounted children are counted against its items.
Runs in its own process (the runner gives each module one), so nothing else
is resident.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._dashboard import SIZE, build_app, emit, settle
from benchmarks._fixtures import require
from benchmarks._session import tool_result_text
from benchmarks.harness import Check

NAME_RSS = "4b 1,000 outputs: dashboard RSS"
NAME_DOM = "4c 1,000 outputs: DOM pruned"
MAX_RSS_MB = 300.0
MAX_CHILDREN = 300  # a few hundred mounted widgets at most, whatever the session length


def _turn_events(turn: int, workdir: Path, context: Any) -> list[Any]:
    from app.kernel import events as ev
    from app.context.truncation import truncate_head_tail

    call_id = f"call_{turn}"
    if turn % 10 == 0:
        full = "\n".join(f"{n:>7} line of a long build log, step {turn}" for n in range(5_000))
        path = workdir / f"{call_id}.txt"
        path.write_text(full, encoding="utf-8")
        content = truncate_head_tail(full, 40_000, str(path))
        result = ev.ToolResultEvent(id=call_id, name="run_bash", is_error=False, truncated=True,
                                    original_chars=len(full), kept_chars=32_000, full_output_path=str(path),
                                    duration_ms=120.0, content=content)
        start = ev.ToolStartEvent(id=call_id, name="run_bash", input={"command": "make build"}, summary="make build")
    else:
        content = tool_result_text(turn, lines=60)
        result = ev.ToolResultEvent(id=call_id, name="read_file", is_error=False, truncated=False,
                                    original_chars=len(content), kept_chars=len(content), duration_ms=3.0,
                                    content=content)
        start = ev.ToolStartEvent(id=call_id, name="read_file", input={"path": f"src/module_{turn}.py"},
                                  summary=f"src/module_{turn}.py")
    tokens = 20_000 + turn * 150
    reply = f"Reading module {turn} next: it may hold the handler that drops requests."
    return [
        ev.StateEvent(state="streaming", step=turn, max_steps=2_000),
        *[ev.TextDeltaEvent(text=word + " ") for word in reply.split()],
        ev.AssistantMessageEvent(text=reply, tool_calls=1),
        ev.UsageEvent(agent="main", input_tokens=500, cache_read_tokens=tokens - 560, cache_write_tokens=0,
                      output_tokens=60, context_tokens=tokens, cost_usd=None),
        context.model_copy(update={"exact_tokens": tokens, "projected_tokens": tokens}),
        start,
        result,
    ]


def run(quick: bool) -> list[Check]:
    require("app.surfaces.dashboard.app")
    import psutil

    turns = 300 if quick else 1_000  # quick: still past the point where pruning starts

    async def session() -> tuple[float, int, int, int]:
        with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
            app = build_app(Path(tmp))
            outputs = Path(tmp) / "outputs"
            outputs.mkdir()
            async with app.run_test(size=SIZE) as pilot:
                await pilot.pause()
                context = app.session.agent.context_event()
                for turn in range(1, turns + 1):
                    for event in _turn_events(turn, outputs, context):
                        emit(app, event)
                        await asyncio.sleep(0)
                    if turn % 25 == 0:
                        await settle(app, pilot, f"after {turn} turns")
                await settle(app, pilot, f"after {turns} turns")
                conversation = app.conversation
                assert len(app.tool_panel.calls) == turns, len(app.tool_panel.calls)
                gc.collect()
                rss = psutil.Process().memory_info().rss / 1e6
                return rss, len(conversation.children), len(conversation.items), len(list(app.screen.walk_children()))

    rss, children, items, dom = asyncio.run(session())
    label = lambda name: name if not quick else name.replace("1,000", f"{turns:,}")  # noqa: E731
    return [
        Check(name=label(NAME_RSS), figure=f"{rss:.0f} MB resident after {turns:,} tool outputs",
              target=f"< {MAX_RSS_MB:g} MB (absolute)", value=rss, limit=MAX_RSS_MB, op="<=", unit="MB"),
        Check(name=label(NAME_DOM), figure=f"{children} mounted of {items:,} conversation items; {dom:,} widgets on screen",
              target=f"<= {MAX_CHILDREN} mounted children", value=float(children), limit=float(MAX_CHILDREN),
              op="<=", unit="widgets"),
    ]

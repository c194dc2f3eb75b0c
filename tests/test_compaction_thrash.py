"""A compaction that cannot make room is not run again at the next request.

What a summary keeps (the fixed part, the summary, the user's words) can itself fill most of the
room under the auto-compact line: a session of many short messages with a small window. Before,
every request then compacted again, freeing a few tokens for a model call each time and
summarizing away the turn the model had just been given. Now the compaction says so, and
auto-compaction waits until the context has grown by the room a compaction is meant to make.
"""

from __future__ import annotations

import asyncio

from app.context.engine import ContextEngine, EngineConfig
from app.context.memory import MemoryBundle
from app.kernel.describe import describe
from app.kernel.events import CompactionEvent, Event
from app.kernel.messages import Message
from app.kernel.usage import Usage
from app.providers.base import ModelRequest


def test_auto_compaction_waits_after_one_that_left_the_context_over_the_warning_line() -> None:
    events: list[Event] = []
    engine = ContextEngine(system_prompt="You are terse.", memory=MemoryBundle(), tools=[],
                           config=EngineConfig(window=40_000, budget=8_000, kept_words_budget=20_000),
                           emit=events.append, clock=lambda: 0.0)
    calls: list[int] = []

    async def summarize(request: ModelRequest) -> tuple[Message, Usage]:
        calls.append(len(request.messages))
        return Message.assistant_text("The user left notes; nothing else happened."), Usage(input_tokens=100,
                                                                                              output_tokens=10)

    def turn(n: int) -> None:
        # the notes a summary keeps word for word; the replies are what it can take away
        engine.append_user_text(f"note {n}: " + " ".join(f"keep{n}w{k}" for k in range(30)))
        engine.append(Message.assistant_text(f"Noted {n}. " + " ".join(f"detail{n}x{k}" for k in range(8))))

    lines = engine.core.thresholds
    n = 0
    while engine.core.projected() < lines.auto_compact_line:
        n += 1
        turn(n)
    asyncio.run(engine.before_request(summarize))
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert len(calls) == 1 and len(compactions) == 1 and compactions[0].ok
    first = compactions[0]
    # every note is kept word for word: what is left is over the warning line
    assert first.tokens_after >= lines.warning_line
    assert first.auto_held_until is not None and first.auto_held_until > lines.auto_compact_line
    line = describe(first)
    assert line is not None and "auto-compaction waits until" in line.text

    # over the auto-compact line again after one more turn, but short of the figure it waits for
    n += 1
    turn(n)
    while engine.core.projected() < lines.auto_compact_line:
        n += 1
        turn(n)
    assert engine.core.projected() < first.auto_held_until
    asyncio.run(engine.before_request(summarize))
    assert len(calls) == 1

    # grown by the room a compaction should have made: it is tried again
    while engine.core.projected() < first.auto_held_until:
        n += 1
        turn(n)
    asyncio.run(engine.before_request(summarize))
    assert len(calls) == 2


def test_the_blocking_line_fallback_waits_after_one_that_left_the_context_over_the_auto_compact_line() -> None:
    """With the server compacting (ours stands down), the blocking line's extractive fallback is the
    one that runs; when what it keeps is over the auto-compact line it is not run at each request."""
    events: list[Event] = []
    engine = ContextEngine(system_prompt="You are terse.", memory=MemoryBundle(), tools=[],
                           config=EngineConfig(window=40_000, budget=8_000, kept_words_budget=30_000,
                                               server_compaction=True),
                           emit=events.append, clock=lambda: 0.0)

    async def summarize(request: ModelRequest) -> tuple[Message, Usage]:
        raise AssertionError("the fallback makes no model call")

    def turn(n: int) -> None:
        engine.append_user_text(f"note {n}: " + " ".join(f"keep{n}w{k}" for k in range(30)))
        engine.append(Message.assistant_text(f"Noted {n}. " + " ".join(f"detail{n}x{k}" for k in range(8))))

    lines = engine.core.thresholds
    n = 0
    while engine.core.projected() < lines.blocking_line:
        n += 1
        turn(n)
    asyncio.run(engine.before_request(summarize))
    fallbacks = [e for e in events if isinstance(e, CompactionEvent) and e.trigger == "fallback"]
    assert len(fallbacks) == 1 and fallbacks[0].tokens_after >= lines.auto_compact_line
    n += 1
    turn(n)
    while engine.core.projected() < lines.blocking_line:
        n += 1
        turn(n)
    asyncio.run(engine.before_request(summarize))
    assert len([e for e in events if isinstance(e, CompactionEvent) and e.trigger == "fallback"]) == 1

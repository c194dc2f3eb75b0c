"""What a background memory update reports carries the update's own id, not the id of whatever
command runs when its events are let out (a session memory written during one prompt and
finished during the next is not the next prompt's doing)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_helpers import make_session
from app.kernel.commands import Shutdown, UserInput
from app.kernel.messages import Message
from app.kernel.usage import Usage
from test_engine_features import MEMORY_SETUP, TAGS, Router, reads
from test_engine_support import write_words


async def test_a_memory_update_finished_during_the_next_prompt_carries_its_own_id(
        fake_llm, tmp_path, monkeypatch) -> None:
    session, events = make_session(fake_llm, tmp_path, monkeypatch, provider="openai", **MEMORY_SETUP)
    write_words(session.agent.workspace / "f1.txt", 700, TAGS[1])
    router = Router("openai")
    router.main.extend([*reads("f1.txt"), "read it", "second answer"])
    fake_llm.default = router
    started, finish = asyncio.Event(), asyncio.Event()

    async def memory_call(_request: Any) -> tuple[Message, Usage]:  # held until the first prompt is over
        started.set()
        await finish.wait()
        return Message.assistant_text("memory-v1: read f1.txt"), Usage(400, 0, 0, 20)

    session.agent.engine.memory_summarize = memory_call
    running = asyncio.ensure_future(session.run())
    first = session.submit(UserInput("read f1.txt"))
    await asyncio.wait_for(started.wait(), 60)
    first_result = await _result_of(events, first)
    assert first_result.text == "read it"
    finish.set()
    await asyncio.wait_for(session.agent.engine.wait_memory_update(), 60)
    second = session.submit(UserInput("and now?"))
    await _result_of(events, second)
    session.submit(Shutdown())
    await asyncio.wait_for(running, 60)

    (memory,) = events.enveloped("session_memory")
    memory_usage = [u for u in events.enveloped("usage") if u.event.agent == "memory"]
    assert memory.event.ok and len(memory_usage) == 1
    own = memory.command_id
    assert own is not None and own not in (first, second), own
    assert memory_usage[0].command_id == own  # one update, one id
    assert own < 0  # never a command's id (a parent process numbers those)
    # the second prompt's own events keep its id
    assert [e.type for e in events.caused_by(second)][0] == "user_message"


async def _result_of(events: Any, command_id: int) -> Any:
    async def ended() -> Any:
        while True:
            done = [e.event for e in events.enveloped("result") if e.command_id == command_id]
            if done:
                return done[0]
            await asyncio.sleep(0.005)  # polls the condition above

    return await asyncio.wait_for(ended(), 60)

"""Two guards: no oversized compaction request is sent, and a lone summary is not re-compacted."""

from __future__ import annotations

from agent_helpers import make_agent
from test_engine_support import compaction_bodies, request_tokens, summary_text, text_reply

from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock


async def test_compaction_request_is_trimmed_under_the_blocking_line(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, budget=4_000, window=30_000, max_retries=0)
    blocking = agent.engine.thresholds.blocking_line
    history = [Message.user("task: summarize the files; keep the public API")]
    for i in range(12):  # ~2,400 tokens a round: far over the blocking line in all
        history.append(Message(role="assistant", content=[ToolUseBlock(id=f"t{i}", name="read_file", input={"path": f"f{i}"})]))
        history.append(Message(role="user", content=[ToolResultBlock(tool_use_id=f"t{i}", content="word " * 2_400)]))
    agent.engine.load_history(history)
    agent.engine.accounting.invalidate()
    assert agent.context_event().projected_tokens > blocking
    fake_llm.enqueue(text_reply("openai", summary_text("trimmed")))
    event = await agent.compact()
    assert event.ok
    sent = compaction_bodies(fake_llm)[0]
    assert request_tokens(sent) < blocking
    assert "keep the public API" in str(sent["messages"])  # the task survives the trim
    await agent.aclose()


async def test_a_history_that_is_only_a_summary_is_not_compacted_again(fake_llm, tmp_path, monkeypatch):
    # The budget is below what the summary itself weighs: without the guard every request would compact.
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, budget=300, window=20_000)
    fake_llm.enqueue(text_reply("openai", summary_text("S") + " detail" * 400))
    agent.engine.append(Message.user("first task " * 50))
    agent.engine.append(Message.assistant_text("working on it " * 400))  # bigger than the summary
    agent.engine.append(Message(role="user", content=[TextBlock(text="go on")]))
    compacted = await agent.compact()
    assert compacted.ok and len(agent.history) == 1
    fake_llm.enqueue(text_reply("openai", "answer"))
    result = await agent.run_turn("next question")
    assert result.stop_reason == "end_turn"
    assert len(compaction_bodies(fake_llm)) == 1  # only the manual one
    await agent.aclose()


async def test_compact_on_a_lone_summary_says_there_is_nothing_to_compact_without_a_model_call(
        fake_llm, tmp_path, monkeypatch):
    from app.kernel.describe import describe

    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, budget=20_000, window=64_000)
    fake_llm.enqueue(text_reply("openai", summary_text("S")))
    agent.engine.append(Message.user("first task " * 50))
    agent.engine.append(Message.assistant_text("working on it " * 400))
    assert (await agent.compact()).ok and len(agent.history) == 1
    requests_before = len(fake_llm.requests)
    summary_before = list(agent.history)

    again = await agent.compact()  # what /compact (or ctrl+s) does right after

    assert not again.ok and again.nothing_to_compact and len(fake_llm.requests) == requests_before  # no model call
    assert agent.history == summary_before
    line = describe(again)
    assert line is not None and line.text.startswith("nothing to compact") and "summary" in line.text
    assert line.kind == "info"  # not shown as a failure
    await agent.aclose()

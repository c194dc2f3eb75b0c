"""Auto and manual compaction through the real agent loop and the fake server.

Small lines so a few files cross them: window 20,000 and budget 2,000 give
warning 1,500, auto-compact 2,000 and blocking 10,800 (the system prompt and
the tool schemas alone weigh about 950 tokens).
"""

from __future__ import annotations

import pytest
from agent_helpers import make_agent
from test_engine_support import (
    PROTOCOLS,
    all_text,
    bodies,
    compaction_bodies,
    counted,
    dump,
    is_compaction,
    main_bodies,
    next_request_problems,
    protocol_of,
    request_tokens,
    server_error,
    summary_text,
    system_text,
    text_reply,
    tool_outputs,
    tool_reply,
    too_long_error,
    transcript_messages,
    wire_messages,
    wire_problems,
    write_words,
)

from app.context.compaction import COMPACT_PROMPT, SUMMARY_INTRO

SMALL = dict(budget=2_000, window=20_000)
TASK = "task: read big.txt and tell me its last word. Please keep answers short."


def _over_budget_turn_replies(provider: str, fake, summary_label: str = "S", snapshots: list | None = None,
                              agent=None):
    """Replies for one turn: a read_file that crosses the budget, the compaction, the answer."""
    def compaction(body: dict, path: str):
        if snapshots is not None:
            snapshots.append(dump(agent.history))
        return text_reply(provider, summary_text(summary_label))

    fake.enqueue(
        counted(provider, lambda u: tool_reply(provider, [("read_file", {"path": "big.txt"})], usage=u)),
        compaction,
        counted(provider, lambda u: text_reply(provider, "The last word is big96.", usage=u)),
    )


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_budget_crossing_compacts_before_the_next_request(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **SMALL)
    content = write_words(agent.workspace / "big.txt", 1_300, "big")
    snapshots: list = []
    _over_budget_turn_replies(provider, fake_llm, snapshots=snapshots, agent=agent)

    result = await agent.run_turn(TASK)

    assert result.stop_reason == "end_turn" and result.text == "The last word is big96."
    sent = bodies(fake_llm)
    assert [is_compaction(b) for b in sent] == [False, True, False]
    first, compaction, after = sent

    # The compaction request: tools present, tool choice none, the history plus the instruction
    # appended to the last user message (here the one holding the tool result).
    assert compaction["tools"] and {t.get("name") or t["function"]["name"] for t in compaction["tools"]} >= {
        "read_file", "run_bash"}
    if protocol_of(provider) == "anthropic":
        assert compaction["tool_choice"] == {"type": "none"}
        msgs = compaction["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
        last = msgs[-1]["content"]
        assert last[0]["type"] == "tool_result" and "BEGIN big" in all_text(last[0])
        assert last[-1]["type"] == "text" and last[-1]["text"].startswith(COMPACT_PROMPT[:40])
    else:
        assert compaction["tool_choice"] == "none"
        msgs = wire_messages(compaction)
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
        assert "BEGIN big" in msgs[2]["content"]
        assert msgs[-1]["content"].startswith(COMPACT_PROMPT[:40])
    assert wire_problems(compaction, provider) == []
    assert sum(COMPACT_PROMPT[:40] in all_text(m) for m in compaction["messages"]) == 1
    # it was sent while the history was exactly the over-budget one (the instruction went on a copy)
    assert [m["role"] for m in snapshots[0]] == ["user", "assistant", "user"]

    # The next main request holds only the summary message.
    convo = wire_messages(after)
    assert len(convo) == 1 and convo[0]["role"] == "user"
    summary_message = all_text(convo[0]["content"])
    assert summary_message.startswith(SUMMARY_INTRO)
    assert "summary-S: finish the task" in summary_message
    assert TASK in summary_message  # the user's own words, verbatim
    assert "BEGIN big" not in all_text(after["messages"])
    assert after["tools"] and after.get("tool_choice") not in ("none", {"type": "none"})
    assert wire_problems(after, provider) == []
    assert request_tokens(after) < request_tokens(compaction)

    # Events: one auto compaction, 3 messages -> 1, smaller but never zero; a visible line.
    compactions = events.of("compaction")
    assert len(compactions) == 1
    ev = compactions[0]
    assert (ev.trigger, ev.ok, ev.messages_before, ev.messages_after) == ("auto", True, 3, 1)
    assert 0 < ev.tokens_after < ev.tokens_before
    assert ev.tokens_before >= agent.engine.thresholds.auto_compact_line
    assert any(n.text.startswith("context compacted: 3 messages → 1 summary") for n in events.of("notice"))
    usage = events.of("usage")
    assert [u.agent for u in usage] == ["main", "compact", "main"]

    # The live history: the summary, then the answer; the transcript on disk keeps everything.
    assert [m.role for m in agent.history] == ["user", "assistant"]
    assert agent.history[0].text.startswith(SUMMARY_INTRO)
    on_disk = [m.model_dump() for m in transcript_messages(tmp_path)]
    for message in snapshots[0]:
        assert message in on_disk
    assert any("BEGIN big" in str(m) for m in on_disk)
    assert content.strip().splitlines()[-1] in str(on_disk)
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_instruction_goes_in_its_own_user_message_when_history_ends_with_the_assistant(
        fake_llm, tmp_path, monkeypatch, provider):
    """Manual compaction after a finished turn: the history ends with the assistant's answer."""
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider)
    fake_llm.enqueue(text_reply(provider, "hello"), text_reply(provider, summary_text("M")))
    await agent.run_turn("say hello")
    event = await agent.compact("the greeting")
    assert event.ok and event.trigger == "manual"
    compaction = fake_llm.requests[-1].json
    assert is_compaction(compaction)
    roles = [m["role"] for m in wire_messages(compaction)]
    assert roles == ["user", "assistant", "user"]
    last = all_text(wire_messages(compaction)[-1]["content"])
    assert last.startswith(COMPACT_PROMPT[:40]) and "Focus especially on: the greeting" in last
    assert wire_problems(compaction, provider) == []
    assert len(agent.history) == 1 and "summary-M" in agent.history[0].text
    assert "say hello" in agent.history[0].text
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_memory_files_reach_every_request_including_after_a_compaction(
        fake_llm, tmp_path, monkeypatch, provider):
    work = tmp_path / "work"
    work.mkdir()
    (work / "AGENTS.md").write_text("Rule from AGENTS.md: always answer in haiku (zebra-7731).\n")
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, cwd=work, **SMALL)
    write_words(agent.workspace / "big.txt", 1_300, "big")
    _over_budget_turn_replies(provider, fake_llm)
    fake_llm.enqueue(text_reply(provider, "second answer"))

    await agent.run_turn(TASK)
    await agent.run_turn("and now?")

    sent = bodies(fake_llm)
    assert [is_compaction(b) for b in sent] == [False, True, False, False]
    for body in sent:
        assert "zebra-7731" in system_text(body)
        # the rules live in the system prompt, never in the conversation
        assert "zebra-7731" not in all_text(wire_messages(body))
    assert wire_messages(sent[2])[0]["content"] and len(wire_messages(sent[2])) == 1
    assert agent.context_event().breakdown["memory"] > 0
    await agent.aclose()

"""Auto and manual compaction through the real agent loop and the fake server.

Small lines so a few files cross them: window 20,000 and budget 2,000 give
warning 1,500, auto-compact 2,000 and blocking 10,800 (the system prompt and
the tool schemas alone weigh about 950 tokens).
"""

from __future__ import annotations

from typing import Any
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

# No prompt-cache marks: a first cached request that fails to a gateway is tried once more without
# them (tests/test_headless_wire.py), which would take a scripted reply these tests give the next call.
SMALL: dict[str, Any] = dict(budget=2_000, window=20_000, prompt_caching=False)
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
    assert any(n.text.startswith("context compacted: 3 messages → 1 summary") for n in events.notices())
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
    # an answer longer than the summary: a summary that does not shrink the context fails
    fake_llm.enqueue(text_reply(provider, "hello " + "and welcome aboard " * 100), text_reply(provider, summary_text("M")))
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


# ---- failures leave the history exactly as it was ----

def _failure_reply(provider: str, kind: str):
    if kind == "http_500":
        return server_error(provider, 500)
    if kind == "empty_summary":
        return text_reply(provider, "")
    return too_long_error(provider, 25_000, 20_000)


FAILURE_REASONS = {"http_500": "error", "empty_summary": "empty summary", "too_long": "too long"}


@pytest.mark.parametrize("kind", list(FAILURE_REASONS))
@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_failed_auto_compaction_leaves_history_untouched(fake_llm, tmp_path, monkeypatch, provider, kind):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0, **SMALL)
    write_words(agent.workspace / "big.txt", 1_300, "big")
    seen: dict[str, list] = {}

    def failing_compaction(body: dict, path: str):
        seen["at_compaction"] = dump(agent.history)
        return _failure_reply(provider, kind)

    def answer(body: dict, path: str):
        seen["at_next_request"] = dump(agent.history)
        return text_reply(provider, "answered anyway")

    fake_llm.enqueue(
        counted(provider, lambda u: tool_reply(provider, [("read_file", {"path": "big.txt"})], usage=u)),
        failing_compaction,
        answer,
    )
    result = await agent.run_turn(TASK)

    assert result.stop_reason == "end_turn" and result.text == "answered anyway"
    assert [is_compaction(b) for b in bodies(fake_llm)] == [False, True, False]
    # Every message exactly as it was, and the request that followed carried all of it.
    assert seen["at_next_request"] == seen["at_compaction"]
    assert len(seen["at_compaction"]) == 3
    assert "BEGIN big" in tool_outputs(fake_llm.requests[-1].json)[0]
    assert [m.model_dump() for m in agent.history[:3]] == seen["at_compaction"]
    failed = events.of("compaction")
    assert len(failed) == 1
    ev = failed[0]
    assert (ev.trigger, ev.ok, ev.messages_before, ev.messages_after) == ("auto", False, 3, 3)
    assert ev.tokens_after == ev.tokens_before
    assert FAILURE_REASONS[kind] in (ev.reason or "").lower()
    assert any("compaction failed" in n.text and n.level == "error" for n in events.notices())
    assert not any("context compacted" in n.text for n in events.notices())
    assert next_request_problems(agent.history) == []
    await agent.aclose()


def _rounds_of_list_files(provider: str, fake, n: int) -> None:
    for _ in range(n):
        fake.enqueue(tool_reply(provider, [("list_files", {})]))
    fake.enqueue(text_reply(provider, "listed"))


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_compaction_request_too_long_shrinks_a_copy_and_never_the_history(
        fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0)
    for i in range(3):
        (agent.workspace / f"f{i}.txt").write_text("x\n")
    _rounds_of_list_files(provider, fake_llm, 6)
    await agent.run_turn("list the files again and again")
    before = dump(agent.history)
    n_before = len(fake_llm.requests)
    fake_llm.default = lambda body, path: too_long_error(provider, 20_010, 20_000)

    event = await agent.compact()

    assert not event.ok and "too long" in (event.reason or "")
    attempts = [b for b in bodies(fake_llm)[n_before:]]
    assert all(is_compaction(b) for b in attempts)
    assert len(attempts) == 4  # the first try and three shrunk copies
    sizes = [len(wire_messages(b)) for b in attempts]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]
    for body in attempts:
        assert wire_problems(body, provider) == []
        assert "list the files again and again" in all_text(wire_messages(body)[0]["content"])
    assert dump(agent.history) == before

    # A shrunk copy that fits gives a summary: the history becomes one message.
    fake_llm.default = None
    fake_llm.enqueue(too_long_error(provider, 20_010, 20_000), text_reply(provider, summary_text("shrunk")))
    event = await agent.compact()
    assert event.ok and event.messages_before == len(before) and event.messages_after == 1
    assert len(agent.history) == 1 and "summary-shrunk" in agent.history[0].text
    await agent.aclose()


# ---- the breaker ----

def _turn_replies(provider: str, fake, compaction_reply=None) -> None:
    if compaction_reply is not None:
        fake.enqueue(compaction_reply)
    fake.enqueue(counted(provider, lambda u: text_reply(provider, "ok", usage=u)))


def _seed_long_answer(agent) -> None:
    """An earlier exchange whose long answer a summary can shrink (the user's own words it keeps verbatim)."""
    from app.kernel.messages import Message

    agent.engine.append(Message.user("describe the data"))
    agent.engine.append(Message.assistant_text(" ".join(f"w{i % 89}" for i in range(1_400))))


def _big_task(n_words: int) -> str:
    words = " ".join(f"w{i % 89}" for i in range(n_words))
    return f"Here is my long task description: {words}"


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_three_auto_failures_pause_auto_compaction_until_the_cooldown(fake_llm, tmp_path, monkeypatch,
                                                                             provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0, **SMALL)
    now = [1_000.0]
    agent.engine.breaker.clock = lambda: now[0]
    cooldown = agent.engine.breaker.cooldown_s

    def compactions_sent() -> int:
        return len(compaction_bodies(fake_llm))

    # Every turn is over budget (a long earlier answer weighs ~1,500 tokens) and every compaction fails.
    _seed_long_answer(agent)
    for turn in range(1, 4):
        _turn_replies(provider, fake_llm, server_error(provider))
        result = await agent.run_turn(f"turn {turn}")
        assert result.stop_reason == "end_turn"
        assert compactions_sent() == turn
    breaker = events.of("breaker")
    assert len(breaker) == 1 and breaker[0].paused and breaker[0].failures == 3
    assert [e.ok for e in events.of("compaction")] == [False, False, False]

    # Paused: the 4th over-budget turn sends its main request without any compaction request.
    _turn_replies(provider, fake_llm)
    requests_before = len(fake_llm.requests)
    await agent.run_turn("turn 4")
    assert len(fake_llm.requests) == requests_before + 1 and compactions_sent() == 3
    assert any("auto-compaction paused" in n.text for n in events.notices())
    assert agent.context_event().projected_tokens >= agent.engine.thresholds.auto_compact_line

    # A manual compaction always runs, even while paused (and its failure does not count).
    fake_llm.enqueue(server_error(provider))
    manual = await agent.compact()
    assert not manual.ok and manual.trigger == "manual" and compactions_sent() == 4
    _turn_replies(provider, fake_llm)
    await agent.run_turn("turn 5")
    assert compactions_sent() == 4

    # After the cooldown, one trial; it fails, so the breaker pauses again at once.
    now[0] += cooldown + 1
    _turn_replies(provider, fake_llm, server_error(provider))
    await agent.run_turn("turn 6")
    assert compactions_sent() == 5
    assert [e.paused for e in events.of("breaker")] == [True, True]
    _turn_replies(provider, fake_llm)
    await agent.run_turn("turn 7")
    assert compactions_sent() == 5

    # Another cooldown, a trial that succeeds: compaction works again and the breaker closes.
    now[0] += cooldown + 1
    _turn_replies(provider, fake_llm, text_reply(provider, summary_text("trial")))
    await agent.run_turn("turn 8")
    assert compactions_sent() == 6
    assert events.of("compaction")[-1].ok and events.of("compaction")[-1].trigger == "auto"
    assert events.of("breaker")[-1].paused is False
    assert not agent.engine.breaker.paused and agent.engine.breaker.failures == 0
    assert "summary-trial" in agent.history[0].text
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_manual_compaction_while_paused_succeeds_and_closes_the_breaker(fake_llm, tmp_path, monkeypatch,
                                                                              provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0, **SMALL)
    _seed_long_answer(agent)
    for turn in range(1, 4):
        _turn_replies(provider, fake_llm, server_error(provider))
        await agent.run_turn(f"turn {turn}")
    assert agent.engine.breaker.paused
    fake_llm.enqueue(text_reply(provider, summary_text("manual")))
    event = await agent.compact()
    assert event.ok and event.trigger == "manual" and event.messages_after == 1
    assert is_compaction(fake_llm.requests[-1].json)
    assert not agent.engine.breaker.paused
    assert events.of("breaker")[-1].paused is False
    await agent.aclose()


# ---- paused and over the blocking line: the extractive fallback, never an oversized request ----

@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_paused_and_over_the_blocking_line_falls_back_to_the_extractive_summary(
        fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0, **SMALL)
    blocking = agent.engine.thresholds.blocking_line
    for turn in range(1, 4):
        _turn_replies(provider, fake_llm, server_error(provider))
        await agent.run_turn(_big_task(1_400) if turn == 1 else f"turn {turn}")
    assert agent.engine.breaker.paused

    # The user pastes something huge: the next request would be far over the blocking line.
    huge = "Please look at this log:\n" + "\n".join(f"line {i}: value={i * 7919 % 10007}" for i in range(1_400))
    _turn_replies(provider, fake_llm)
    requests_before = len(fake_llm.requests)
    result = await agent.run_turn(huge)

    assert result.stop_reason == "end_turn"
    assert len(fake_llm.requests) == requests_before + 1  # no model call for the fallback summary
    for body in bodies(fake_llm):
        assert request_tokens(body) < blocking, "a request over the blocking line reached the server"
    fallback = events.of("compaction")[-1]
    assert (fallback.trigger, fallback.ok, fallback.messages_after) == ("fallback", True, 1)
    assert fallback.tokens_before >= blocking > fallback.tokens_after > 0
    sent = fake_llm.requests[-1].json
    convo = wire_messages(sent)
    assert len(convo) == 1 and all_text(convo[0]["content"]).startswith(SUMMARY_INTRO)
    # the user's first request and the start and end of the latest survive in the summary
    text = all_text(convo[0]["content"])
    assert "Here is my long task description" in text
    assert "Please look at this log:" in text and "line 1399: value=" in text
    assert wire_problems(sent, provider) == []
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_failed_compaction_over_the_blocking_line_falls_back_instead_of_sending(
        fake_llm, tmp_path, monkeypatch, provider):
    """Not paused yet, but the compaction fails and the request would not fit: the fallback runs."""
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0, **SMALL)
    blocking = agent.engine.thresholds.blocking_line
    huge = "Please look at this log:\n" + "\n".join(f"line {i}: value={i * 7919 % 10007}" for i in range(1_400))
    _turn_replies(provider, fake_llm, server_error(provider))

    result = await agent.run_turn(huge)

    assert result.stop_reason == "end_turn"
    sent = bodies(fake_llm)
    assert [is_compaction(b) for b in sent] == [True, False]
    assert request_tokens(sent[1]) < blocking
    assert [(e.trigger, e.ok) for e in events.of("compaction")] == [("auto", False), ("fallback", True)]
    assert not agent.engine.breaker.paused and agent.engine.breaker.failures == 1
    assert "line 1399: value=" in all_text(wire_messages(sent[1]))
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_the_pause_is_said_once_not_before_every_request(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_retries=0, **SMALL)
    for turn in range(1, 4):
        _turn_replies(provider, fake_llm, server_error(provider))
        await agent.run_turn(_big_task(1_400) if turn == 1 else f"turn {turn}")
    assert agent.engine.breaker.paused
    (agent.workspace / "a.txt").write_text("a\n")
    for _ in range(3):
        fake_llm.enqueue(counted(provider, lambda u: tool_reply(provider, [("read_file", {"path": "a.txt"})], usage=u)))
    _turn_replies(provider, fake_llm)
    requests_before = len(fake_llm.requests)
    await agent.run_turn("read a.txt three times")
    assert len(fake_llm.requests) == requests_before + 4 and len(compaction_bodies(fake_llm)) == 3
    assert all(e.level != "ok" for e in events.of("context")[-3:])  # over the line all along
    paused_lines = [n for n in events.notices() if "auto-compaction paused" in n.text]
    assert len(paused_lines) == 1
    await agent.aclose()

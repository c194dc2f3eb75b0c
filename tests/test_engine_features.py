"""Issue 15 through the real agent loop and the fake server, both wire protocols:
session memory compaction, audited summaries, reversible clearing, cost
forecasts and path-scoped rules. Everything is judged by what the server
received, the events, the history and the files on disk.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any, Callable

import pytest
from agent_helpers import make_agent
from test_engine_support import (
    PROTOCOLS,
    all_text,
    bodies,
    is_compaction,
    main_bodies,
    next_request_problems,
    protocol_of,
    summary_text,
    text_reply,
    tool_outputs,
    tool_reply,
    transcript_path,
    usage_for,
    wire_messages,
    wire_problems,
    write_words,
)

from app.context.audit import CHECKED_FACTS_HEADER
from app.context.engine import RestoreError
from app.context.rules import load_rules
from app.context.session_memory import MEMORY_INTRO, MEMORY_PROMPT_HEAD
from app.context.thresholds import compute_thresholds
from app.context.tokens import count_tokens
from app.kernel.messages import TextBlock
from app.session.transcript import read_transcript


def is_memory_update(body: dict) -> bool:
    return is_compaction(body) and MEMORY_PROMPT_HEAD in all_text(body["messages"])


def memory_text(n: int) -> str:
    return (f"## Task goal and acceptance criteria\nmemory-v{n}: read the files one by one\n"
            "## Done so far\nread some files\n## Key findings\nwords repeat\n"
            "## In progress / next step\nread the next file\n## User preferences\nnone")


class Router:
    """Answers by kind of request, so a background memory update may arrive at any point."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.main: deque = deque()
        self.summaries: deque = deque()
        self.memory_updates = 0
        self.on_compaction: Callable[[dict[str, Any]], None] | None = None

    def __call__(self, body: dict, path: str):
        if is_memory_update(body):
            self.memory_updates += 1
            return text_reply(self.provider, memory_text(self.memory_updates), usage=usage_for(self.provider, body))
        if is_compaction(body):
            if self.on_compaction is not None:
                self.on_compaction(body)
            text = self.summaries.popleft() if self.summaries else summary_text("R")
            return text_reply(self.provider, text, usage=usage_for(self.provider, body))
        item = self.main.popleft() if self.main else "done"
        if isinstance(item, list):
            return tool_reply(self.provider, item, usage=usage_for(self.provider, body))
        return text_reply(self.provider, item, usage=usage_for(self.provider, body))


def reads(*names: str) -> list[list]:
    return [[("read_file", {"path": n})] for n in names]


# ---- 1. session memory ----

# Updates on token growth alone (the first at once, no tool calls waited for): these tests are about
# what an update does; when the first one starts is tests/test_demo_figures.py's.
MEMORY_SETUP: dict[str, Any] = dict(window=100_000, budget=8_000, memory_update_tokens=1_500, memory_keep_tokens=500,
                                    memory_init_tokens=0, memory_update_tool_calls=0)
# Single-token tags: each file is ~1,500 tokens, each read ~1,700 with its line numbers.
TAGS = {1: "one", 2: "two", 3: "six", 4: "ten", 5: "cat", 6: "dog"}
TASK = "task: read f1.txt to f6.txt one after the other. Do not modify any file."


def let_each_memory_update_land(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each background memory update lands before the next request: on a starved machine a late
    one left the memory short of the line, and the engine rightly fell back to a summary (what
    the tests using this are not about)."""
    unhurried = engine.before_request

    async def after_the_memory_update(summarize: Any) -> None:
        await engine.wait_memory_update()
        await unhurried(summarize)

    monkeypatch.setattr(engine, "before_request", after_the_memory_update)


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_memory_written_in_the_background_then_compaction_needs_no_model_call(
        fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **MEMORY_SETUP)
    t = agent.engine.thresholds
    names = [f"f{i}.txt" for i in range(1, 7)]
    for i, name in enumerate(names, start=1):
        write_words(agent.workspace / name, 700, TAGS[i])
    router = Router(provider)
    router.main.extend([*reads(*names), "all read"])
    fake_llm.default = router
    let_each_memory_update_land(agent.engine, monkeypatch)

    result = await agent.run_turn(TASK)
    await agent.engine.wait_memory_update()
    agent.engine.flush_background_events()  # what the dashboard does when a turn is over

    assert result.stop_reason == "end_turn" and result.text == "all read"
    sent = bodies(fake_llm)
    # The memory updates: the history plus the update instruction, tools present, tool choice none, valid.
    updates = [b for b in sent if is_memory_update(b)]
    assert updates and router.memory_updates == len(updates)
    for body in updates:
        assert wire_problems(body, provider) == []
        assert body["tools"]
    # Later updates carry the memory so far, to be updated rather than rewritten blind.
    if len(updates) > 1:
        assert "memory-v1" in all_text(updates[1]["messages"])
    # No summary was ever asked for: the compaction came from the memory.
    assert [b for b in sent if is_compaction(b) and not is_memory_update(b)] == []
    compactions = events.of("compaction")
    assert compactions and all(c.trigger == "memory" and c.ok for c in compactions)
    first = compactions[0]
    assert first.tokens_before >= t.auto_compact_line > first.tokens_after
    assert first.messages_after > 1  # the memory plus the latest messages verbatim
    assert any(line.startswith("context compacted from the session memory (no model call)")
               for line in events.lines())
    memory_events = events.of("session_memory")
    assert memory_events and all(e.ok for e in memory_events)
    # The memory file in the session folder holds the latest memory.
    path = Path(memory_events[-1].path)
    assert path.parent == agent.engine.tool_results_dir.parent
    assert f"memory-v{router.memory_updates}" in path.read_text()

    # The first main request after the compaction: the memory, then raw messages starting with
    # the assistant's tool call and its result (never a result without its call).
    index = next(i for i, b in enumerate(sent) if not is_compaction(b) and MEMORY_INTRO in all_text(b["messages"]))
    after = sent[index]
    assert wire_problems(after, provider) == []
    convo = wire_messages(after)
    assert MEMORY_INTRO in all_text(convo[0]["content"]) and convo[1]["role"] == "assistant"
    assert "memory-v" in all_text(convo[0]["content"])
    assert TASK in all_text(convo[0]["content"])  # the user's own words, verbatim
    kept_outputs = tool_outputs(after)
    assert kept_outputs and all("BEGIN" in o for o in kept_outputs)
    assert "BEGIN one" not in all_text(after["messages"])  # the oldest reads are in the memory only
    assert next_request_problems(agent.history) == []

    # The breakdown shows the memory's tokens as a part of its own; the parts still add up.
    ev = agent.context_event()
    assert ev.breakdown["session_memory"] > 0
    assert sum(ev.breakdown.values()) == pytest.approx(ev.projected_tokens, rel=0.35)
    # Memory calls have their own line in the ledger (issue 27), apart from compaction work.
    assert sum(1 for u in events.of("usage") if u.agent == "memory") == len(updates)
    assert not any(u.agent == "compact" for u in events.of("usage"))
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_without_a_fresh_memory_the_compaction_asks_the_model(fake_llm, tmp_path, monkeypatch, provider):
    """Memory off: the same turn compacts the usual way (one summary call)."""
    setup: dict[str, Any] = dict(MEMORY_SETUP, memory_update_tokens=0)
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **setup)
    names = [f"f{i}.txt" for i in range(1, 7)]
    for i, name in enumerate(names, start=1):
        write_words(agent.workspace / name, 700, TAGS[i])
    router = Router(provider)
    router.main.extend([*reads(*names), "all read"])
    fake_llm.default = router
    await agent.run_turn(TASK)
    assert router.memory_updates == 0
    assert [c.trigger for c in events.of("compaction")][:1] == ["auto"]
    assert events.of("session_memory") == []
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_failing_memory_update_is_shown_and_never_breaks_the_turn(fake_llm, tmp_path, monkeypatch, provider):
    from test_engine_support import server_error

    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **MEMORY_SETUP)
    for i in (1, 2):
        write_words(agent.workspace / f"f{i}.txt", 700, TAGS[i])
    router = Router(provider)
    router.main.extend([*reads("f1.txt", "f2.txt"), "done"])

    def answer(body: dict, path: str):
        return server_error(provider) if is_memory_update(body) else router(body, path)

    fake_llm.default = answer
    result = await agent.run_turn("read f1.txt and f2.txt")
    await agent.engine.wait_memory_update()
    agent.engine.flush_background_events()
    assert result.stop_reason == "end_turn"
    failed = events.of("session_memory")
    assert failed and not failed[0].ok and failed[0].reason
    assert any("session memory update failed" in line for line in events.lines())
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_stalled_memory_update_does_not_hold_up_the_turn(fake_llm, tmp_path, monkeypatch, provider):
    from fake_llm_server import stall_after

    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **MEMORY_SETUP)
    for i in (1, 2, 3):
        write_words(agent.workspace / f"f{i}.txt", 700, TAGS[i])
    router = Router(provider)
    router.main.extend([*reads("f1.txt", "f2.txt", "f3.txt"), "all three read"])

    def answer(body: dict, path: str):
        if is_memory_update(body):  # the server never finishes the memory's reply
            return stall_after(text_reply(provider, memory_text(1)), 2)
        return router(body, path)

    fake_llm.default = answer
    # (a turn that waited for the update would never end: the guard turns that into a failure)
    result = await asyncio.wait_for(agent.run_turn("read f1.txt, f2.txt and f3.txt"), timeout=120)
    # The turn went on and ended while the update still waited for the server.
    assert result.stop_reason == "end_turn" and result.text == "all three read"
    assert sum(1 for b in bodies(fake_llm) if is_memory_update(b)) == 1
    assert events.of("session_memory") == []
    await agent.engine.cancel_background()
    fake_llm.release()
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_reset_clears_the_session_memory(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, **MEMORY_SETUP)
    for i in (1, 2):
        write_words(agent.workspace / f"f{i}.txt", 700, TAGS[i])
    router = Router(provider)
    router.main.extend([*reads("f1.txt", "f2.txt"), "done"])
    fake_llm.default = router
    await agent.run_turn("read f1.txt and f2.txt")
    await agent.engine.wait_memory_update()
    memory = agent.engine.session_memory
    assert memory.exists and "memory-v" in memory.path.read_text()
    agent.reset()
    assert not memory.exists and memory.path.read_text().strip() == ""
    router.main.append("fresh")
    await agent.run_turn("new task")
    assert not agent.engine.memory_compaction_available()
    await agent.aclose()


# ---- 2. audited summaries ----

AUDIT_TASK = "fix the parser. Do not touch setup.py. Always run the tests with -q."


def _audit_session_replies(provider: str) -> list:
    return [
        [("write_file", {"path": "parser_fix.py", "content": "x = 1\n"})],
        [("run_bash", {"command": "python3 -c 'import sys; sys.exit(3)'"})],
        [("read_file", {"path": "missing_module.py"})],
        "parser fixed, tests still failing",
    ]


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_summary_missing_facts_gets_exactly_those_back(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, yes=True, memory_update_tokens=0)
    router = Router(provider)
    router.main.extend(_audit_session_replies(provider))
    # The summary names the write and the failing command but forgets the missing file and both rules.
    router.summaries.append(summary_text("A") + "\nwrote parser_fix.py; ran python3 -c 'import sys; sys.exit(3)'"
                            " which exited 3")
    fake_llm.default = router
    await agent.run_turn(AUDIT_TASK)
    await agent.run_turn("now make the tests pass")
    event = await agent.compact()

    assert event.ok
    added = event.checked_facts
    assert event.facts_added == len(added)
    joined = "\n".join(added)
    assert "missing_module.py" in joined  # the unresolved read error
    # the rules the summary forgot are in the user's messages, every one kept whole: never checked facts
    assert not any(a.startswith("user constraint") for a in added)
    kept = [b.text for b in agent.history[0].content if isinstance(b, TextBlock) and b.user_message_id]
    assert kept == [AUDIT_TASK, "now make the tests pass"]
    # named in the summary: not repeated; the latest request is quoted verbatim after the summary
    assert "parser_fix.py" not in joined and "sys.exit(3)" not in joined
    assert not any(a.startswith("the user's latest request") for a in added)
    summary = agent.history[0].text
    assert CHECKED_FACTS_HEADER in summary and all(a in summary for a in added)
    assert any("the audit added" in line for line in events.lines())

    # The next request carries them to the model.
    router.main.append("ok")
    await agent.run_turn("continue")
    assert CHECKED_FACTS_HEADER in all_text(main_bodies(fake_llm)[-1]["messages"])
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_summary_that_names_every_fact_gets_nothing_appended(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, yes=True, memory_update_tokens=0)
    router = Router(provider)
    router.main.extend(_audit_session_replies(provider))
    fake_llm.default = router
    await agent.run_turn(AUDIT_TASK)
    complete = (summary_text("B") + "\nWrote parser_fix.py. Ran python3 -c 'import sys; sys.exit(3)' (exit code 3)."
                "\nError: missing_module.py does not exist (read_file failed)."
                "\nThe user said: Do not touch setup.py. Always run the tests with -q.")

    def check_first(body: dict) -> None:
        router.summaries.append(complete)

    router.on_compaction = check_first
    event = await agent.compact()
    assert event.ok and event.facts_added == 0 and event.checked_facts == []
    assert CHECKED_FACTS_HEADER not in agent.history[0].text
    await agent.aclose()


# ---- 3. reversible clearing ----

def _clear_everything(agent) -> None:
    engine = agent.engine
    keep, free = engine.config.micro_keep_tokens, engine.config.micro_min_free
    engine.config.micro_keep_tokens, engine.config.micro_min_free = 0, 0
    try:
        engine._micro_by_size()
    finally:
        engine.config.micro_keep_tokens, engine.config.micro_min_free = keep, free


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_cleared_result_is_restored_for_the_next_request(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, memory_update_tokens=0)
    original = write_words(agent.workspace / "notes.txt", 600, "note")
    write_words(agent.workspace / "other.txt", 600, "other")
    router = Router(provider)
    router.main.extend([*reads("notes.txt"), "read it", *reads("other.txt"), "read that"])
    fake_llm.default = router
    await agent.run_turn("read notes.txt")
    await agent.run_turn("read other.txt")
    _clear_everything(agent)
    cleared = agent.engine.cleared_results()
    assert len(cleared) == 1  # the latest turn's result is never cleared
    call_id = cleared[0]
    before = agent.context_event().projected_tokens

    preview = agent.engine.preview_restore(call_id)
    assert preview.tool_name == "read_file" and preview.fits
    assert preview.projected_before == before and preview.projected_after == before + preview.tokens
    assert preview.tokens == pytest.approx(count_tokens(original), rel=0.25)
    assert agent.context_event().projected_tokens == before  # a preview changes nothing

    restored = agent.engine.restore_result(call_id)
    assert restored.tokens == preview.tokens
    assert agent.context_event().projected_tokens == pytest.approx(preview.projected_after, rel=0.05)
    ev = events.of("restore")[-1]
    assert (ev.id, ev.name, ev.by) == (call_id, "read_file", "user")

    router.main.append("thanks")
    await agent.run_turn("what does notes.txt end with?")
    sent = main_bodies(fake_llm)[-1]
    assert "END note" in all_text(sent["messages"]) and wire_problems(sent, provider) == []
    # The transcript records the restore as a history change.
    lines = read_transcript(transcript_path(tmp_path)).lines
    assert any(line.kind == "history" and line.reason == "restore" for line in lines)
    assert any(line.kind == "event" and '"restore"' in json.dumps(line.model_dump(mode="json"))
               for line in lines)
    # Restoring again is refused with a clear reason: it is already in the context.
    with pytest.raises(RestoreError, match="not cleared"):
        agent.engine.preview_restore(call_id)
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_restore_survives_the_pruning_of_the_next_request(fake_llm, tmp_path, monkeypatch, provider):
    """A restored result is pinned for one request: an idle-time clearing does not undo it."""
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, memory_update_tokens=0)
    now = [1_000_000.0]
    agent.engine.clock = lambda: now[0]
    for name in ("a.txt", "b.txt", "c.txt"):
        write_words(agent.workspace / name, 400, name[0] + "w")
    router = Router(provider)
    router.main.extend([*reads("a.txt", "b.txt", "c.txt"), "done"])
    fake_llm.default = router
    await agent.run_turn("read a.txt, b.txt and c.txt")
    agent.engine.config.micro_keep_latest = 0
    now[0] += 2 * 3600
    agent.engine._micro_by_time()
    call_id = agent.engine.cleared_results()[0]
    agent.engine.restore_result(call_id)
    router.main.append("answer")
    await agent.run_turn("and a.txt?")  # two hours idle again would clear everything
    assert "END aw" in all_text(main_bodies(fake_llm)[-1]["messages"])
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_unknown_or_uncleared_results_cannot_be_restored(fake_llm, tmp_path, monkeypatch, provider):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, memory_update_tokens=0)
    with pytest.raises(RestoreError, match="is no longer in the live context"):
        agent.engine.preview_restore("call_nope")
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_the_model_reads_a_saved_output_by_call_id(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, memory_update_tokens=0)
    write_words(agent.workspace / "notes.txt", 600, "note")
    write_words(agent.workspace / "other.txt", 600, "other")
    router = Router(provider)
    router.main.extend([*reads("notes.txt"), "ok", *reads("other.txt"), "ok"])
    fake_llm.default = router
    await agent.run_turn("read notes.txt")
    await agent.run_turn("read other.txt")
    _clear_everything(agent)
    call_id = agent.engine.cleared_results()[0]
    router.main.extend([[("read_saved_output", {"call_id": call_id, "offset": 2, "limit": 3})],
                        [("read_saved_output", {"call_id": "no-such-call"})], "found it"])
    await agent.run_turn("what was in notes.txt?")
    outputs = tool_outputs(main_bodies(fake_llm)[-1])
    saved, missing = outputs[-2], outputs[-1]
    assert "note" in saved and "BEGIN note" not in saved  # line 1 skipped
    assert "offset=5" in saved  # says where to continue
    assert "No saved output for call_id 'no-such-call'" in missing
    assert wire_problems(main_bodies(fake_llm)[-1], provider) == []
    await agent.aclose()


# ---- 4. cost before you compact or reset ----

@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_auto_compaction_carries_the_forecast_made_before_it(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, model="claude-sonnet-4-5"
                               if protocol_of(provider) == "anthropic" else "gpt-4.1", budget=2_000,
                               window=20_000, memory_update_tokens=0)
    write_words(agent.workspace / "big.txt", 1_300, "big")
    router = Router(provider)
    router.main.extend([*reads("big.txt"), "the last word is big96"])
    seen = []
    router.on_compaction = lambda body: seen.append(agent.engine.forecast_compaction())
    fake_llm.default = router
    await agent.run_turn("read big.txt")

    (event,) = events.of("compaction")
    (planned,) = seen  # asked while the compaction request was in flight: the history was unchanged
    assert event.trigger == "auto"
    assert event.forecast_tokens_freed == planned.tokens_freed > 0
    assert event.cache_tokens_invalidated == planned.cache_tokens_invalidated
    assert event.next_request_cost_before_usd == pytest.approx(planned.next_request_cost_before_usd)
    assert event.next_request_cost_after_usd == pytest.approx(planned.next_request_cost_after_usd)
    assert event.next_request_cost_after_usd < event.next_request_cost_before_usd
    assert event.compaction_call_cost_usd > 0
    assert 0 < planned.tokens_after < planned.tokens_before
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_forecasts_count_the_cached_prefix_they_invalidate(fake_llm, tmp_path, monkeypatch, provider):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, model="claude-sonnet-4-5"
                                if protocol_of(provider) == "anthropic" else "gpt-4.1", memory_update_tokens=0)
    write_words(agent.workspace / "a.txt", 4_000, "big")  # a large, mostly cached context

    def cached_usage(body: dict) -> dict:
        usage = usage_for(provider, body)
        total = usage.get("input", usage.get("prompt"))
        if protocol_of(provider) == "anthropic":  # Anthropic's input excludes what the cache served
            return {"input": total // 10, "cache_read": total - total // 10, "output": 20}
        return {**usage, "cached": total - total // 10}

    replies = deque([[("read_file", {"path": "a.txt"})], "read"])

    def answer(body: dict, path: str):
        item = replies.popleft()
        if isinstance(item, list):
            return tool_reply(provider, item, usage=cached_usage(body))
        return text_reply(provider, item, usage=cached_usage(body))  # type: ignore[arg-type]

    fake_llm.default = answer
    await agent.run_turn("read a.txt")
    engine = agent.engine
    cached = engine.core.cached_prefix
    stable = engine.core.stable_prefix()
    assert cached > stable
    compaction, reset = engine.forecast_compaction(), engine.forecast_reset()
    for f in (compaction, reset):
        assert f.cache_tokens_invalidated == cached - stable
        assert 0 < f.next_request_cost_after_usd < f.next_request_cost_before_usd
        assert f.tokens_freed > 0
    assert reset.tokens_after < compaction.tokens_after  # a reset keeps less than a summary
    assert compaction.model_call and not reset.model_call
    assert reset.operation_cost_usd == 0 and compaction.operation_cost_usd > 0
    # a summary's size is not known before it is written: the compaction frees a range, a reset a figure
    low, high = compaction.tokens_after_low, compaction.tokens_after_high
    assert 0 <= low < high
    assert f"frees {compaction.tokens_before - high:,}–{compaction.tokens_before - low:,} tokens" in compaction.describe()
    assert "frees ~" in reset.describe() and "no model call" in reset.describe()
    await agent.aclose()


# ---- 5. path-scoped rules ----

def _with_rules(agent) -> None:
    agent.engine.use_rules(load_rules(agent.workspace, None), agent.workspace)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


PY_RULE = "---\npaths:\n  - \"src/**/*.py\"\n---\nPython rule: use tabs-zebra-4411 style.\n"


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_rule_is_attached_once_to_the_first_matching_read_and_again_after_compaction(
        fake_llm, tmp_path, monkeypatch, provider):
    work = tmp_path / "work"
    _write(work / ".claude" / "rules" / "python.md", PY_RULE)
    _write(work / "src" / "pkg" / "a.py", "A = 1\n")
    _write(work / "src" / "b.py", "B = 2\n")
    _write(work / "README.md", "readme\n")
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, cwd=work, memory_update_tokens=0)
    _with_rules(agent)
    router = Router(provider)
    router.main.extend([*reads("README.md", "src/pkg/a.py", "src/b.py"), "read"])
    fake_llm.default = router
    await agent.run_turn("read the project")

    sent = main_bodies(fake_llm)[-1]
    outputs = tool_outputs(sent)
    assert [("tabs-zebra-4411" in o) for o in outputs] == [False, True, False]
    assert "tabs-zebra-4411" not in json.dumps(sent.get("system", "")) + json.dumps(
        [m for m in sent["messages"] if m.get("role") == "system"])  # not in the system prompt
    (attached,) = events.of("rule_attached")
    assert attached.file_path == "src/pkg/a.py" and attached.rule_path.endswith("python.md")
    assert agent.context_event().breakdown["rules"] == attached.tokens > 0

    await agent.compact()
    assert "rules" not in agent.context_event().breakdown
    router.main.extend([*reads("src/b.py"), "again"])
    await agent.run_turn("read src/b.py again")
    assert "tabs-zebra-4411" in tool_outputs(main_bodies(fake_llm)[-1])[-1]
    assert len(events.of("rule_attached")) == 2
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_rule_reached_twice_loads_once(fake_llm, tmp_path, monkeypatch, provider):
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    _write(work / ".agents" / "rules" / "python.md", PY_RULE)
    _write(work / ".claude" / "rules" / "python-copy.md", PY_RULE)  # the same rule in both trees
    _write(work / "src" / "a.py", "A = 1\n")
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, cwd=work, memory_update_tokens=0)
    _with_rules(agent)
    router = Router(provider)
    router.main.extend([*reads("src/a.py"), "read"])
    fake_llm.default = router
    await agent.run_turn("read src/a.py")
    (output,) = tool_outputs(main_bodies(fake_llm)[-1])
    assert output.count("tabs-zebra-4411") == 1
    assert len(events.of("rule_attached")) == 1
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_rule_already_imported_by_a_memory_file_is_not_attached(fake_llm, tmp_path, monkeypatch, provider):
    work = tmp_path / "work"
    _write(work / ".claude" / "rules" / "python.md", PY_RULE)
    _write(work / "AGENTS.md", "Project rules.\nSee @.claude/rules/python.md\n")
    _write(work / "src" / "a.py", "A = 1\n")
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, cwd=work, memory_update_tokens=0)
    _with_rules(agent)
    router = Router(provider)
    router.main.extend([*reads("src/a.py"), "read"])
    fake_llm.default = router
    await agent.run_turn("read src/a.py")
    sent = main_bodies(fake_llm)[-1]
    assert "tabs-zebra-4411" not in tool_outputs(sent)[0]
    assert events.of("rule_attached") == []
    assert "tabs-zebra-4411" in agent.engine.system_text
    await agent.aclose()


def test_thresholds_of_the_memory_setup_leave_room_for_the_kept_messages():
    """The memory scenario above relies on these lines (a guard against a silent re-tuning)."""
    t = compute_thresholds(MEMORY_SETUP["window"], MEMORY_SETUP["budget"], 8_000)
    assert t.warning_line > 3 * MEMORY_SETUP["memory_keep_tokens"]
    assert t.auto_compact_line == MEMORY_SETUP["budget"]


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_broken_rule_file_is_named_and_the_session_goes_on(fake_llm, tmp_path, monkeypatch, provider):
    work = tmp_path / "work"
    _write(work / ".claude" / "rules" / "broken.md", "---\npaths: src/*.py\n")
    _write(work / ".claude" / "rules" / "python.md", PY_RULE)
    _write(work / "src" / "a.py", "A = 1\n")
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, cwd=work, memory_update_tokens=0)
    _with_rules(agent)
    (warning,) = events.of("config_warning")
    assert "broken.md" in warning.text and "never closed" in warning.text and "\n" not in warning.text
    router = Router(provider)
    router.main.extend([*reads("src/a.py"), "read"])
    fake_llm.default = router
    result = await agent.run_turn("read src/a.py")
    assert result.stop_reason == "end_turn"
    assert "tabs-zebra-4411" in tool_outputs(main_bodies(fake_llm)[-1])[0]
    await agent.aclose()

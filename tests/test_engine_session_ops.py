"""Reset and the file-read cache through the real agent loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import make_agent
from test_engine_support import (
    PROTOCOLS,
    counted,
    summary_text,
    text_reply,
    tool_outputs,
    tool_reply,
    transcript_messages,
    transcript_path,
    wire_messages,
    write_words,
)

from app.context.pruning import CLEARED_PREFIX
from app.context.tokens import count_tokens, estimate_tools

UNCHANGED = "File unchanged since read_file call"


# ---- reset ----

@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_reset_clears_history_and_live_accounting_but_keeps_ledger_and_files(
        fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_output=2_000)
    write_words(agent.workspace / "big.txt", 1_500, "big")
    fake_llm.enqueue(
        counted(provider, lambda u: tool_reply(provider, [("read_file", {"path": "big.txt"})], usage=u)),
        counted(provider, lambda u: tool_reply(provider, [("list_files", {})], usage=u)),
        counted(provider, lambda u: text_reply(provider, "done", usage=u)),
    )
    await agent.run_turn("read big.txt")
    saved = [e.full_output_path for e in events.of("tool_result") if e.full_output_path]
    assert saved and Path(saved[0]).is_file()  # max_output 2,000 truncated the read
    before = agent.context_event()
    assert before.exact_tokens is not None and agent.engine.accounting.recent_growths()  # a pace is measured
    ledger = agent.engine.ledger.total()
    messages_on_disk = len(transcript_messages(tmp_path))

    agent.reset()

    assert agent.history == []
    after = agent.context_event()
    engine = agent.engine
    base = count_tokens(engine.system_prompt) + count_tokens(engine.memory.text) + estimate_tools(engine.tools)
    assert after.exact_tokens is None
    assert after.projected_tokens == base
    assert after.breakdown["user"] == after.breakdown["assistant"] == after.breakdown["tool_results"] == 0
    assert after.turns_to_compact is None and not engine.accounting.recent_growths()  # none for the new one
    assert after.level == "ok"
    # cumulative figures stay
    total = engine.ledger.total()
    assert (total.calls, total.input_tokens, total.output_tokens) == (ledger.calls, ledger.input_tokens,
                                                                     ledger.output_tokens)
    assert after.cumulative_input == before.cumulative_input > 0
    assert after.cumulative_output == before.cumulative_output > 0
    # the session's files stay
    assert Path(saved[0]).is_file()
    assert transcript_path(tmp_path).is_file()
    assert len(transcript_messages(tmp_path)) >= messages_on_disk
    assert any("BEGIN big" in str(m.model_dump()) for m in transcript_messages(tmp_path))
    assert any("reset" in n.text for n in events.notices())

    # the next request starts from nothing but the new message
    fake_llm.enqueue(text_reply(provider, "fresh start"))
    await agent.run_turn("a new task")
    convo = wire_messages(fake_llm.requests[-1].json)
    assert len(convo) == 1 and "a new task" in str(convo[0]["content"])
    assert engine.ledger.total().calls == ledger.calls + 1
    await agent.aclose()


# ---- the file-read cache ----

def _read(provider: str, fake, path: str = "notes.txt", answer: str = "ok") -> None:
    fake.enqueue(tool_reply(provider, [("read_file", {"path": path})]), text_reply(provider, answer))


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_unchanged_reread_is_a_stub_until_a_compaction_removes_the_first_result(
        fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider)
    write_words(agent.workspace / "notes.txt", 300, "note")

    _read(provider, fake_llm)
    await agent.run_turn("read notes.txt")
    first = tool_outputs(fake_llm.requests[-1].json)[-1]
    assert "BEGIN note" in first and "END note" in first

    _read(provider, fake_llm)
    await agent.run_turn("read notes.txt again")
    second = tool_outputs(fake_llm.requests[-1].json)[-1]
    assert second.startswith(UNCHANGED) and "BEGIN note" not in second
    assert count_tokens(second) < 80

    fake_llm.enqueue(text_reply(provider, summary_text("cache")))
    assert (await agent.compact()).ok

    _read(provider, fake_llm)
    await agent.run_turn("read notes.txt once more")
    third = tool_outputs(fake_llm.requests[-1].json)[-1]
    assert "BEGIN note" in third and "END note" in third and UNCHANGED not in third
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_reread_after_the_result_was_cleared_or_the_file_changed_is_fresh(
        fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider)
    now = [10_000.0]
    agent.engine.clock = lambda: now[0]
    write_words(agent.workspace / "notes.txt", 300, "note")
    for i in range(5):
        write_words(agent.workspace / f"other{i}.txt", 100, f"other{i}x")
    fake_llm.enqueue(tool_reply(provider, [("read_file", {"path": "notes.txt"})]))
    for i in range(5):
        fake_llm.enqueue(tool_reply(provider, [("read_file", {"path": f"other{i}.txt"})]))
    fake_llm.enqueue(text_reply(provider, "read six files"))
    await agent.run_turn("read notes.txt and the five others")

    # An hour later the time trigger clears all but the latest 5 results: notes.txt's is gone.
    now[0] += 61 * 60
    _read(provider, fake_llm)
    await agent.run_turn("read notes.txt again")
    sent = tool_outputs(fake_llm.requests[-1].json)
    assert sent[0].startswith(CLEARED_PREFIX) and "read_file(path='notes.txt')" in sent[0]
    assert "BEGIN note" in sent[-1] and UNCHANGED not in sent[-1]

    # A changed file comes back fresh, with a note and a small diff.
    path = agent.workspace / "notes.txt"
    path.write_text(path.read_text().replace("END note", "END note (edited)"))
    _read(provider, fake_llm)
    await agent.run_turn("and now?")
    changed = tool_outputs(fake_llm.requests[-1].json)[-1]
    assert "changed on disk" in changed and "END note (edited)" in changed
    assert "+END note (edited)" in changed  # the diff
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_reread_of_a_truncated_read_is_never_a_stub(fake_llm, tmp_path, monkeypatch, provider):
    """Only the head and tail of a truncated read reached the model: 'still in the context' would be false."""
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_output=5_000)
    (agent.workspace / "wide.txt").write_text("\n".join(f"row {i:05d} " + "x" * 80 for i in range(400)) + "\n")
    _read(provider, fake_llm, "wide.txt")
    await agent.run_turn("read wide.txt")
    first = tool_outputs(fake_llm.requests[-1].json)[-1]
    assert "output truncated" in first and "row 00200" not in first

    _read(provider, fake_llm, "wide.txt")
    await agent.run_turn("read wide.txt again")
    second = tool_outputs(fake_llm.requests[-1].json)[-1]
    assert UNCHANGED not in second
    assert second.startswith(first[:200]) and "output truncated" in second
    await agent.aclose()

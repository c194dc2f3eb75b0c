"""Micro-compaction and the projection's rescue of one huge result, through the agent loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import make_agent
from test_engine_support import (
    PROTOCOLS,
    bodies,
    counted,
    is_compaction,
    next_request_problems,
    request_tokens,
    text_reply,
    tool_outputs,
    tool_reply,
    wire_problems,
    write_words,
)

from app.context.pruning import CLEARED_PREFIX
from app.context.tokens import count_tokens

STUB_PATH = "Full output: "


def _stub_path(stub: str) -> Path:
    start = stub.index(STUB_PATH) + len(STUB_PATH)
    return Path(stub[start:stub.index(". Call the tool again", start)])


def _read_rounds(provider: str, fake, names: list[str], final: str = "read them all") -> None:
    for name in names:
        fake.enqueue(counted(provider, lambda u, n=name: tool_reply(provider, [("read_file", {"path": n})], usage=u)))  # type: ignore[misc]
    fake.enqueue(counted(provider, lambda u: text_reply(provider, final, usage=u)))


# ---- by size: past the warning line, old results become stubs ----

@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_size_micro_compaction_stubs_old_results_and_keeps_every_pair(fake_llm, tmp_path, monkeypatch,
                                                                           provider):
    # window 40,000 / budget 6,000: warning 4,500, auto-compact 6,000. The size trigger keeps the
    # newest 1,500 tokens of results and runs when it frees at least 1,000.
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, budget=6_000, window=40_000)
    agent.engine.config.micro_keep_tokens = 1_500
    agent.engine.config.micro_min_free = 1_000
    names = [f"f{i}.txt" for i in range(1, 9)]
    originals = {n: write_words(agent.workspace / n, 250, f"tag{n[1]}x") for n in names}
    _read_rounds(provider, fake_llm, names)

    result = await agent.run_turn("read f1.txt to f8.txt one by one")

    assert result.stop_reason == "end_turn"
    sent = bodies(fake_llm)
    assert not any(is_compaction(b) for b in sent)  # the lighter defence was enough
    assert not [e for e in events.of("compaction")]
    micro = events.of("micro_compaction")
    assert micro and all(e.trigger == "size" for e in micro)
    assert all(e.results_cleared >= 1 and e.tokens_freed >= 1_000 for e in micro)
    assert events.of("warning_crossed")

    # The first request after the first micro-compaction: old results are stubs, the latest is whole.
    first_stubbed = next(i for i, b in enumerate(sent) if any(o.startswith(CLEARED_PREFIX) for o in tool_outputs(b)))
    before, after = sent[first_stubbed - 1], sent[first_stubbed]
    assert not any(o.startswith(CLEARED_PREFIX) for o in tool_outputs(before))
    assert request_tokens(after) < request_tokens(before) + 400  # it shrank (one new result arrived)
    outputs = tool_outputs(after)
    stubs = [o for o in outputs if o.startswith(CLEARED_PREFIX)]
    assert len(stubs) == micro[0].results_cleared
    assert outputs[:len(stubs)] == stubs  # the oldest ones
    latest_name = names[len(outputs) - 1]
    assert outputs[-1].endswith(f"END tag{latest_name[1]}x")  # the latest turn untouched
    for index, stub in enumerate(stubs):
        name = names[index]
        assert f"read_file(path='{name}')" in stub  # names the tool and the call
        saved = _stub_path(stub)
        assert saved.is_file(), stub  # ... and the file holding the full output
        assert f"BEGIN tag{name[1]}x" in saved.read_text(encoding="utf-8")
        assert originals[name].splitlines()[-1] in saved.read_text(encoding="utf-8")
        assert count_tokens(stub) < 100
    for body in sent:
        assert wire_problems(body, provider) == []  # every tool call still answered
    assert next_request_problems(agent.history) == []
    await agent.aclose()


@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_size_micro_compaction_never_touches_the_latest_turn(fake_llm, tmp_path, monkeypatch, provider):
    """The latest turn's three results alone exceed what the size trigger keeps: all stay whole."""
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, budget=6_000, window=40_000)
    agent.engine.config.micro_keep_tokens = 1_500
    agent.engine.config.micro_min_free = 1_000
    names = [f"f{i}.txt" for i in range(1, 8)]
    for n in names:
        write_words(agent.workspace / n, 250, f"tag{n[1]}x")
    for n in names[:4]:
        fake_llm.enqueue(counted(provider, lambda u, n=n: tool_reply(provider, [("read_file", {"path": n})], usage=u)))  # type: ignore[misc]
    fake_llm.enqueue(counted(provider, lambda u: tool_reply(
        provider, [("read_file", {"path": n}) for n in names[4:]], usage=u)))
    fake_llm.enqueue(counted(provider, lambda u: text_reply(provider, "done", usage=u)))

    await agent.run_turn("read four files, then three at once")

    micro = events.of("micro_compaction")
    assert sum(e.results_cleared for e in micro) == 4
    assert count_tokens("".join(tool_outputs(fake_llm.requests[-1].json)[4:])) > 1_500
    outputs = tool_outputs(fake_llm.requests[-1].json)
    assert all(o.startswith(CLEARED_PREFIX) for o in outputs[:4])
    for name, output in zip(names[4:], outputs[4:]):
        assert output.endswith(f"END tag{name[1]}x")
    assert wire_problems(fake_llm.requests[-1].json, provider) == []
    await agent.aclose()


# ---- by time: after an hour, all but the latest 5 results are cleared ----

@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_time_micro_compaction_after_an_hour_keeps_the_latest_five(fake_llm, tmp_path, monkeypatch, provider):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider)
    now = [50_000.0]
    agent.engine.clock = lambda: now[0]
    names = [f"f{i}.txt" for i in range(1, 9)]
    for n in names:
        write_words(agent.workspace / n, 200, f"tag{n[1]}x")
    _read_rounds(provider, fake_llm, names)
    await agent.run_turn("read all eight files")
    assert not events.of("micro_compaction")

    # 59 minutes later nothing happens; 61 minutes after the last answer the cache is cold.
    now[0] += 59 * 60
    fake_llm.enqueue(text_reply(provider, "still here"))
    await agent.run_turn("are you there?")
    assert not events.of("micro_compaction")
    assert not any(o.startswith(CLEARED_PREFIX) for o in tool_outputs(fake_llm.requests[-1].json))

    now[0] += 61 * 60
    fake_llm.enqueue(text_reply(provider, "back again"))
    await agent.run_turn("what did f8 say?")

    micro = events.of("micro_compaction")
    assert len(micro) == 1 and micro[0].trigger == "time"
    assert micro[0].results_cleared == 3 and micro[0].tokens_freed > 0
    outputs = tool_outputs(fake_llm.requests[-1].json)
    assert len(outputs) == 8
    assert all(o.startswith(CLEARED_PREFIX) for o in outputs[:3])
    for name, output in zip(names[3:], outputs[3:]):
        assert output.startswith("     1\tBEGIN tag") and f"END tag{name[1]}x" in output
    assert wire_problems(fake_llm.requests[-1].json, provider) == []
    await agent.aclose()


# ---- one result that alone would cross the blocking line is cut before it is sent ----

@pytest.mark.parametrize("provider", PROTOCOLS)
async def test_a_result_that_would_cross_the_blocking_line_is_cut_before_sending(fake_llm, tmp_path, monkeypatch,
                                                                                 provider):
    # No registry truncation (max_output 0); window 20,000, no budget: warning 6,750, blocking 10,800.
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider=provider, max_output=0, yes=True,
                               budget=0, window=20_000)
    t = agent.engine.thresholds
    lines = [f"2026-10-18 12:00:00 INFO request handled id={i}" for i in range(1, 8_001)]
    lines.append("2026-10-18 12:00:01 ERROR database connection refused")
    log = "\n".join(lines) + "\n"
    (agent.workspace / "app.log").write_text(log)
    assert count_tokens(log) > 5 * t.blocking_line
    fake_llm.enqueue(
        counted(provider, lambda u: tool_reply(provider, [("run_bash", {"command": "cat app.log"})], usage=u)),
        counted(provider, lambda u: text_reply(provider, "ERROR database connection refused", usage=u)),
    )

    result = await agent.run_turn("cat app.log and find errors")

    assert result.stop_reason == "end_turn"
    nxt = fake_llm.requests[1].json
    [output] = tool_outputs(nxt)
    assert count_tokens(output) < t.warning_line
    assert request_tokens(nxt) < t.blocking_line
    assert output.startswith("2026-10-18 12:00:00 INFO request handled id=1\n")
    assert "ERROR database connection refused" in output[-500:]
    cut = events.of("result_cut")
    assert len(cut) == 1
    path = cut[0].full_output_path
    assert path and path in output  # the notice tells the model where the rest is
    assert cut[0].original_chars > len(log) and cut[0].kept_chars == len(output)
    saved = Path(path).read_text(encoding="utf-8")
    assert log in saved  # the whole output on disk
    tool_event = events.of("tool_result")[0]
    assert tool_event.truncated and tool_event.kept_chars == len(output)
    assert any("blocking line" in n.text for n in events.notices())
    assert not events.of("compaction")
    await agent.aclose()

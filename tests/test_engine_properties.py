"""Property: a real Agent on the fake server, driven through random sequences of
rounds (0-3 tool calls), manual compactions that succeed or fail, micro-compactions,
overflow drops, resets, server-side compactions (a reply carrying the provider's
compaction item), restores of cleared results, session-memory updates and compactions from the
memory, keeps a history that is a valid request, and every body the server receives is valid for
its wire protocol (Chat Completions, Anthropic Messages, Responses).

One fake server serves every example; each step scripts it through ``default``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from pathlib import Path

import pytest
from agent_helpers import make_agent
from fake_anthropic_context import anthropic_compacted
from fake_llm_server import FakeLLMServer
from fake_responses_server import responses_text
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_engine_support import (
    PROTOCOLS,
    dump,
    is_compaction,
    next_request_problems,
    protocol_of,
    server_error,
    summary_text,
    text_reply,
    tool_reply,
    too_long_error,
    usage_for,
    wire_problems,
)

from app.context.core import SERVER_COMPACTED_NOTE
from app.context.engine import RestoreError, ResultChangeError
from app.context.pruning import is_cleared
from app.context.session_memory import MEMORY_INTRO
from app.kernel.messages import OpaqueBlock, ToolResultBlock

CALLS = [
    ("list_files", {}),
    ("read_file", {"path": "f0.txt"}),
    ("read_file", {"path": "f1.txt"}),
    ("read_file", {"path": "f2.txt"}),
    ("read_file", {"path": "missing.txt"}),  # an error result
]

round_calls = st.lists(st.lists(st.sampled_from(CALLS), min_size=1, max_size=3), max_size=3)
OPS = st.one_of(
    st.tuples(st.just("round"), round_calls, st.booleans()),  # bool: auto compactions in this step fail
    st.tuples(st.just("round"), round_calls, st.just(False)),
    st.tuples(st.just("compact_ok"), st.none(), st.none()),
    st.tuples(st.just("compact_fail"), st.sampled_from(["http_500", "empty", "too_long"]), st.none()),
    st.tuples(st.just("micro"), st.sampled_from(["size", "time"]), st.none()),
    st.tuples(st.just("overflow"), st.sampled_from([None, 20, 100_000]), round_calls),
    st.tuples(st.just("reset"), st.none(), st.none()),
    st.tuples(st.just("server_compact"), round_calls, st.none()),  # the turn's last reply carries a compaction
    # this step's rounds, an idle-time clearing of every result, then restore one of them
    st.tuples(st.just("restore"), st.integers(min_value=0, max_value=5), round_calls),
    # keep tokens; this step's rounds first (so the memory has something to cover), then update and compact
    st.tuples(st.just("memory"), st.sampled_from([0, 50, 400]), round_calls),
    # this step's rounds, then the user's hand on one result: pinned (kept through what follows) or evicted
    st.tuples(st.just("hand"), st.tuples(st.sampled_from(["pin", "evict"]), st.integers(min_value=0, max_value=5)),
              round_calls),
)


class Script:
    """What the server answers during one step: main requests and compaction requests apart."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.main: deque = deque()
        self.compaction: deque = deque()

    def clear(self) -> None:
        self.main.clear()
        self.compaction.clear()

    def answer(self, body: dict, path: str):
        if is_compaction(body):
            return self.compaction.popleft() if self.compaction else text_reply(self.provider, summary_text("auto"))
        item = self.main.popleft() if self.main else "text"
        if item == "text":
            return text_reply(self.provider, "done", usage=usage_for(self.provider, body))
        if isinstance(item, list):
            return tool_reply(self.provider, item, usage=usage_for(self.provider, body))
        if item == "compacted":
            usage = usage_for(self.provider, body)
            if self.provider == "responses":
                return responses_text("done", compaction="gAAAAAB-compacted", usage={**usage, "input": 300})
            if self.provider == "anthropic":
                return anthropic_compacted("Summary of the work so far.", "done", usage={**usage, "input": 300})
            return text_reply(self.provider, "done", usage=usage)  # Chat Completions has no server compaction
        return item  # a prepared Reply (an error)


def _failure(provider: str, kind: str):
    if kind == "http_500":
        return server_error(provider)
    if kind == "empty":
        return text_reply(provider, "")
    return too_long_error(provider, 20_050, 20_000)


async def _run_example(server: FakeLLMServer, agent, provider: str, ops: list) -> None:
    script = Script(provider)
    server.default = script.answer
    now = [100_000.0]
    agent.engine.clock = lambda: now[0]
    for name in ("f0.txt", "f1.txt", "f2.txt"):
        words = " ".join(f"{name[:2]}w{i}" for i in range(40 + 60 * int(name[1])))
        (agent.workspace / name).write_text(words + "\n")
    try:
        for step, (op, arg, extra) in enumerate(ops):
            script.clear()
            first_request = len(server.requests)
            before = dump(agent.history)
            if op == "round":
                script.main.extend([*arg, "text"])
                if extra:
                    script.compaction.extend([server_error(provider)] * 4)
                result = await agent.run_turn(f"step {step}: go on")
                assert result.stop_reason == "end_turn", result
                assert agent.history[-1].role == "assistant"
            elif op == "compact_ok":
                summary = summary_text(f"step{step}")
                script.compaction.append(text_reply(provider, summary))
                # a summary that would not make the context smaller is a failed compaction
                # a lone summary is not compacted again (no model call): nothing to compact
                lone = agent.engine.core.only_a_summary()
                shrinks = bool(before) and not lone and (agent.engine.estimate_with_summary(summary)
                                                         < agent.engine.estimate_request(agent.history))
                outcome = await agent.compact()
                assert outcome.ok == shrinks
                if shrinks:
                    # one summary, and after it only the results the user pinned, carried verbatim
                    assert f"summary-step{step}" in agent.history[0].text
                    assert agent.engine.core.only_a_summary(), dump(agent.history)[1:]
                else:
                    assert dump(agent.history) == before
                    assert before == [] or "smaller" in (outcome.reason or "") or (
                        lone and outcome.nothing_to_compact)
                    if lone:
                        script.compaction.clear()  # no model call was made for it
                event(f"compact_ok ok={outcome.ok}")
            elif op == "compact_fail":
                script.compaction.extend([_failure(provider, arg)] * 4)
                outcome = await agent.compact()
                assert not outcome.ok
                assert dump(agent.history) == before  # exactly as it was
            elif op == "micro":
                engine = agent.engine
                if arg == "size":
                    keep, free = engine.config.micro_keep_tokens, engine.config.micro_min_free
                    engine.config.micro_keep_tokens, engine.config.micro_min_free = 0, 0
                    try:
                        engine._micro_by_size()
                    finally:
                        engine.config.micro_keep_tokens, engine.config.micro_min_free = keep, free
                else:
                    now[0] += 61 * 60
                    engine._micro_by_time()
                after = agent.history
                assert len(after) == len(before)
                for old, new in zip(before, dump(after)):
                    assert old["role"] == new["role"] and len(old["content"]) == len(new["content"])
                event(f"micro {arg} cleared={sum(is_cleared(b) for m in after for b in m.content if isinstance(b, ToolResultBlock))}")
            elif op == "overflow":
                gap = arg
                # this turn's rounds first (so there is something to drop), then the rejection
                script.main.extend(extra)
                script.main.append(too_long_error(provider, None if gap is None else 20_000 + gap,
                                                  None if gap is None else 20_000))
                script.main.append("text")
                result = await agent.run_turn(f"step {step}: after overflow")
                # with no round to drop the turn stops with an error; otherwise it recovers
                assert result.stop_reason in ("end_turn", "error"), result
                event(f"overflow {result.stop_reason}")
            elif op == "reset":
                agent.reset()
                assert agent.history == []
            elif op == "server_compact":
                script.main.extend([*arg, "compacted"])
                result = await agent.run_turn(f"step {step}: long work")
                assert result.stop_reason == "end_turn", result
                if protocol_of(provider) != "openai":  # Chat Completions has no server compaction
                    assert agent.history[0].text == SERVER_COMPACTED_NOTE and len(agent.history) == 2
                    assert any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for b in agent.history[1].content)
                event(f"server_compact {provider}")
            elif op == "restore":
                engine = agent.engine
                script.main.extend([*extra, "text"])
                result = await agent.run_turn(f"step {step}: read")
                assert result.stop_reason == "end_turn", result
                keep_latest, engine.config.micro_keep_latest = engine.config.micro_keep_latest, 0
                now[0] += 61 * 60
                try:
                    engine._micro_by_time()
                finally:
                    engine.config.micro_keep_latest = keep_latest
                before = dump(agent.history)
                cleared = engine.cleared_results()
                if cleared:
                    call_id = cleared[arg % len(cleared)]
                    try:
                        restored = agent.engine.restore_result(call_id)
                    except RestoreError as err:
                        assert "blocking line" in str(err)  # the only reason a listed result is refused
                        assert dump(agent.history) == before
                    else:
                        assert restored.tokens >= 0
                        block = next(b for m in agent.history for b in m.content
                                     if isinstance(b, ToolResultBlock) and b.tool_use_id == call_id)
                        assert not is_cleared(block)
                        assert len(agent.history) == len(before)
                event(f"restore of {len(cleared)} cleared")
            elif op == "hand":
                what, index = arg
                script.main.extend([*extra, "text"])
                result = await agent.run_turn(f"step {step}: read")
                assert result.stop_reason == "end_turn", result
                before = dump(agent.history)
                ids = [b.tool_use_id for m in agent.history if m.role == "user" for b in m.tool_results
                       if not is_cleared(b) and not b.pinned]
                if ids:
                    call_id = ids[index % len(ids)]
                    try:
                        if what == "pin":
                            agent.engine.pin_result(call_id)
                        else:
                            agent.engine.evict_result(call_id)
                    except ResultChangeError:
                        assert dump(agent.history) == before  # refused: nothing changed
                    else:
                        assert len(agent.history) == len(before)
                event(f"{what} of {len(ids)}")
            elif op == "memory":
                engine = agent.engine
                script.main.extend([*extra, "text"])
                result = await agent.run_turn(f"step {step}: remember")
                assert result.stop_reason == "end_turn", result
                engine.config.memory_update_tokens, engine.config.memory_keep_tokens = 1, arg
                engine.core.memory_new_tokens = max(engine.core.memory_new_tokens, 1)
                engine._maybe_start_memory_update(agent._summarize)
                await engine.wait_memory_update()
                outcome = engine.compact_from_memory()
                if outcome is not None:
                    assert outcome.trigger == "memory" and outcome.ok
                    assert MEMORY_INTRO in agent.history[0].text
                    assert len(agent.history) > 1 and agent.history[1].role == "assistant"
                event(f"memory compaction={outcome is not None}")
            await agent.engine.wait_memory_update()  # no background call may outlive its step
            assert next_request_problems(agent.history) == [], (op, next_request_problems(agent.history))
            for recorded in server.requests[first_request:]:
                problems = wire_problems(recorded.json, provider)
                assert problems == [], (op, problems)
    finally:
        script.clear()
        server.default = None
        await agent.aclose()


@pytest.mark.parametrize("provider", [*PROTOCOLS, "deepseek", "responses"])  # the four wire protocols
def test_random_operations_keep_every_request_valid(provider, tmp_path: Path, monkeypatch):
    server = FakeLLMServer().start()
    numbers = itertools.count()
    try:
        # 15 sequences per protocol, 60 in all: every operation runs through the same engine for
        # each protocol, so each kind still comes up ~7 times per protocol and dozens of times in
        # all; 30 per protocol doubled the file's CPU (each step is a real HTTP round) for mixes
        # the other protocols' examples already draw.
        @settings(max_examples=15, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(budget=st.sampled_from([0, 1_300, 2_500]), ops=st.lists(OPS, min_size=1, max_size=10))
        def run(budget: int, ops: list) -> None:
            example_dir = tmp_path / f"example{next(numbers)}"
            agent, _events = make_agent(server, example_dir, monkeypatch, provider=provider, budget=budget,
                                        window=20_000, max_retries=0)
            asyncio.run(_run_example(server, agent, provider, ops))

        run()
    finally:
        server.stop()
    assert server.problems() == []

"""Property: whatever the engine does to the history, it stays a valid request.

Random valid histories (rounds with 0-3 tool calls, text, thinking) go through
random sequences of new rounds, time and size pruning, overflow drops,
compactions that succeed or fail, and resets; after every step the history
must satisfy both wire protocols' rules.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.context import tokens
from app.context.accounting import ContextAccounting
from app.context.compaction import build_compaction_request, build_summary_history
from app.context.overflow import drop_oldest_rounds
from app.context.pruning import prune_by_size, prune_by_time
from app.context.validate import history_problems
from app.kernel.messages import Message, ToolSpec

from test_ctx_support import histories, rounds_strategy

TOOLS = [ToolSpec(name="read_file", description="Read a file.",
                  input_schema={"type": "object", "properties": {"path": {"type": "string"}}})]
OPS = ["round", "round", "prune_time", "prune_size", "drop", "compact_ok", "compact_fail", "reset"]


def dump(history: list[Message]) -> list[dict]:
    return [m.model_dump() for m in history]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=histories(max_rounds=10, min_rounds=2), ops=st.lists(st.sampled_from(OPS), max_size=12),
       data=st.data())
def test_history_stays_valid_through_any_sequence(start: list[Message], ops: list[str],
                                                  data: st.DataObject) -> None:
    history = start
    acc = ContextAccounting()
    assert history_problems(history) == []
    for op in ops:
        before = dump(history)
        if op == "round":
            history = history + data.draw(rounds_strategy(max_words=300))
        elif op == "prune_time":
            r = prune_by_time(history, data.draw(st.sampled_from([5.0, 59.9, 60.1, 180.0])),
                              keep_latest=data.draw(st.integers(0, 6)))
            assert dump(history) == before  # the input was not mutated
            assert len(r.history) == len(history)
            event(f"{op} cleared={r.results_cleared > 0}")
            history = r.history
        elif op == "prune_size":
            r = prune_by_size(history, keep_tokens=data.draw(st.integers(0, 2_000)),
                              min_free=data.draw(st.integers(0, 1_500)))
            assert dump(history) == before
            if r.results_cleared:
                assert tokens.estimate_messages(r.history) < tokens.estimate_messages(history)
            event(f"{op} cleared={r.results_cleared > 0}")
            history = r.history
        elif op == "drop":
            gap = data.draw(st.one_of(st.none(), st.integers(0, 5_000)))
            kept, dropped = drop_oldest_rounds(history, gap)
            event(f"drop dropped={bool(dropped)}")
            assert dump(history) == before
            assert kept[0].text.startswith(history[0].text)  # the task is kept
            assert len(kept) + len(dropped) == len(history)
            history = kept
        elif op in ("compact_ok", "compact_fail"):
            req = build_compaction_request("SYS", history, TOOLS,
                                           focus=data.draw(st.sampled_from([None, "tests"])))
            assert req.tool_choice == "none" and req.tools
            assert history_problems(req.messages) == []
            assert dump(history) == before
            if op == "compact_ok":
                history = build_summary_history("## Task goal\nsummary text", history)
                assert len(history) == 1
        elif op == "reset":
            history = [Message.user("a new task")]
        acc.invalidate()
        assert history_problems(history) == [], (op, history_problems(history))
        assert acc.project("SYS", TOOLS, history).projected_tokens > 0

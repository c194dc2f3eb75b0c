"""Accounting: exact figure + estimate of what came since, counted once."""

from __future__ import annotations

import pytest

from app.context import tokens
from app.context.accounting import ContextAccounting, Ledger
from app.context.prices import cost_usd, price_for
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolSpec
from app.kernel.usage import Usage

from test_ctx_support import filler, history_of, tool_round

SYSTEM = "You are a coding agent. " * 50
TOOLS = [ToolSpec(name="read_file", description="Read a file.",
                  input_schema={"type": "object", "properties": {"path": {"type": "string"}}})]


def cached_usage() -> Usage:
    # Most of the input is a cache read: uncached input alone would be 1,000.
    return Usage(input_tokens=1_000, cache_read_tokens=50_000, cache_write_tokens=2_000,
                 output_tokens=500)


def test_projection_is_exact_plus_the_new_messages() -> None:
    acc = ContextAccounting()
    history = history_of(3)
    acc.record_usage(cached_usage(), history_len=len(history))
    new = tool_round(1, 2_000)
    history += new
    p = acc.project(SYSTEM, TOOLS, history)
    assert p.exact_tokens == 53_500  # total input incl. cache reads and writes, plus output
    assert p.estimated_tokens == tokens.estimate_messages(new)
    assert p.projected_tokens == 53_500 + p.estimated_tokens
    assert p.estimated_tokens > 2_000


def test_without_exact_figure_the_whole_request_is_estimated() -> None:
    acc = ContextAccounting()
    history = history_of(3)
    p = acc.project(SYSTEM, TOOLS, history, memory_text="Never edit generated files.")
    assert p.exact_tokens is None
    expected = (tokens.count_tokens(SYSTEM) + tokens.count_tokens("Never edit generated files.")
                + tokens.estimate_tools(TOOLS) + tokens.estimate_messages(history))
    assert p.projected_tokens == p.estimated_tokens == expected


def test_server_without_usage_makes_the_figure_unknown() -> None:
    acc = ContextAccounting()
    history = history_of(2)
    acc.record_usage(cached_usage(), len(history))
    acc.record_usage(Usage(), len(history))
    p = acc.project(SYSTEM, TOOLS, history)
    assert p.exact_tokens is None
    assert p.projected_tokens > tokens.estimate_messages(history)


def test_after_invalidate_projection_is_the_new_history_never_zero() -> None:
    acc = ContextAccounting()
    history = history_of(5, result_words=500)
    acc.record_usage(cached_usage(), len(history))
    summary = [Message.user("This is a summary of an earlier conversation ... next step: run pytest")]
    acc.invalidate()
    p = acc.project(SYSTEM, TOOLS, summary)
    assert p.exact_tokens is None
    assert p.projected_tokens == (tokens.count_tokens(SYSTEM) + tokens.estimate_tools(TOOLS)
                                  + tokens.estimate_message(summary[0]))
    assert 0 < p.projected_tokens < 53_500


def test_old_messages_are_not_counted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    acc = ContextAccounting()
    history = history_of(200, result_words=20)
    acc.project(SYSTEM, TOOLS, history)  # counts everything once
    counted: list[str] = []
    real = tokens.count_tokens
    monkeypatch.setattr(tokens, "count_tokens", lambda t: counted.append(t) or real(t))  # type: ignore[func-returns-value]

    new = tool_round(1, 30)
    history += new
    p1 = acc.project(SYSTEM, TOOLS, history)  # no exact figure: incremental sum
    assert p1.exact_tokens is None
    texts_in_new = sum(len(m.content) for m in new)
    assert 0 < len(counted) <= texts_in_new + 1  # tool_use counts name + input

    acc.record_usage(cached_usage(), len(history))
    counted.clear()
    newer = tool_round(2, 30)
    history += newer
    p2 = acc.project(SYSTEM, TOOLS, history)
    assert p2.exact_tokens == 53_500
    assert 0 < len(counted) <= 2 * sum(len(m.content) for m in newer)
    counted.clear()
    acc.project(SYSTEM, TOOLS, history)
    acc.breakdown(SYSTEM, "", TOOLS, history)
    assert counted == []


def test_per_call_work_does_not_grow_with_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """Estimate calls per turn at turn 1,000 equal those at turn 10."""
    calls = 0
    real = tokens.estimate_message

    def counting(msg: Message) -> int:
        nonlocal calls
        calls += 1
        return real(msg)

    monkeypatch.setattr(tokens, "estimate_message", counting)
    acc = ContextAccounting()
    history = history_of(0)
    per_turn: dict[int, int] = {}
    for turn in range(1, 1_001):
        history += tool_round(1, 5)
        before = calls
        acc.project(SYSTEM, TOOLS, history)
        acc.breakdown(SYSTEM, "", TOOLS, history)
        acc.record_usage(Usage(input_tokens=turn, output_tokens=1), len(history))
        per_turn[turn] = calls - before
    assert per_turn[1_000] == per_turn[10] <= 4


def test_replaced_history_is_re_summed() -> None:
    acc = ContextAccounting()
    history = history_of(10, result_words=300)
    big = acc.project(SYSTEM, TOOLS, history).projected_tokens
    shorter = history[:1] + history[-2:]  # a new list, e.g. after a drop
    small = acc.project(SYSTEM, TOOLS, shorter).projected_tokens
    assert small < big
    assert small == (tokens.count_tokens(SYSTEM) + tokens.estimate_tools(TOOLS)
                     + tokens.estimate_messages(shorter))


def test_breakdown_by_part() -> None:
    acc = ContextAccounting()
    history = [Message.user("task " * 100)] + tool_round(1, 1_000, text="reading it")
    mixed = Message(role="user", content=[
        ToolResultBlock(tool_use_id="x", content=filler(800)), TextBlock(text="stop " * 50)])
    history += [Message.assistant_text("ok"), mixed]
    parts = acc.breakdown(SYSTEM, "memory rule " * 30, TOOLS, history)
    assert set(parts) == {"system", "memory", "tools", "user", "assistant", "tool_results"}
    assert parts["system"] == tokens.count_tokens(SYSTEM)
    assert parts["memory"] == tokens.count_tokens("memory rule " * 30)
    assert parts["tool_results"] > 1_800
    assert 150 < parts["user"] < 400  # task + typed text, not the results
    assert 0 < parts["assistant"] < 100
    assert (parts["user"] + parts["assistant"] + parts["tool_results"]
            == tokens.estimate_messages(history))


def test_calls_to_compact_need_three_growths_since_the_last_restart() -> None:
    acc = ContextAccounting()
    assert acc.calls_to(100_000, 10_000) is None
    for p in (10_000, 12_000, 14_000):
        acc.record_point(p)
    # two growths: their "median" would be their mean, so one big read would dominate it
    assert acc.calls_to(20_000, 14_000) is None
    acc.record_point(16_000)
    calls = acc.calls_to(20_000, 16_000)
    assert calls is not None and (calls.fewest, calls.typical, calls.most) == (2, 2, 2)
    assert acc.turns_to(16_000, 16_000) == 0
    acc.restart_growth(3_000)  # a compaction: the pace counts afresh from here
    for p in (3_500, 4_000):
        acc.record_point(p)
    assert acc.calls_to(5_000, 4_000) is None
    acc.record_point(4_500)
    calls = acc.calls_to(5_000, 4_500)
    assert calls is not None and calls.typical == 1


def test_the_range_is_shown_only_as_far_ahead_as_calls_were_measured() -> None:
    acc = ContextAccounting()
    for p in range(10_000, 14_001, 1_000):  # four growths of 1,000
        acc.record_point(p)
    assert acc.calls_to(18_000, 14_000) is not None  # 4 calls ahead: as far as measured
    assert acc.calls_to(30_000, 14_000) is None  # 16 calls ahead of 4 measured: not said


def test_one_big_read_widens_the_near_end_and_leaves_the_middle() -> None:
    acc = ContextAccounting()
    points = [40_000 + 1_000 * i for i in range(8)]
    for p in points:
        acc.record_point(p)
    acc.record_point(points[-1] + 12_800)  # one big read
    now = points[-1] + 12_800
    calls = acc.calls_to(now + 5_000, now)
    assert calls is not None
    # the steady pace still sets the middle figure; the big read only makes the fewest smaller
    assert calls.typical == 5 and calls.most == 5 and calls.fewest == 1, calls


def test_flat_context_is_not_growing() -> None:
    acc = ContextAccounting()
    for _ in range(4):
        acc.record_point(5_000)
    assert acc.turns_to(10_000, 5_000) is None


def test_reset_forgets_everything() -> None:
    acc = ContextAccounting()
    acc.record_point(1)
    acc.record_usage(cached_usage(), 3)
    acc.reset()
    assert acc.points == [] and acc.exact_tokens is None
    restored = ContextAccounting.from_dict({"exact_tokens": 7, "exact_history_len": 1,
                                            "points": [1, 2]})
    assert restored.to_dict() == {"exact_tokens": 7, "exact_history_len": 1, "points": [1, 2]}


def test_ledger_keeps_compaction_apart() -> None:
    ledger = Ledger()
    price = price_for("claude-sonnet-4-5")
    main = cached_usage()
    ledger.add("main", main, cost_usd(main, price))
    ledger.add("main", main, cost_usd(main, price))
    compact = Usage(input_tokens=100, cache_read_tokens=50_000, output_tokens=3_000)
    ledger.add("compact", compact, cost_usd(compact, price))
    m, c, total = ledger.get("main"), ledger.get("compact"), ledger.total()
    assert (m.calls, m.input_tokens, m.cached_tokens, m.output_tokens) == (2, 106_000, 100_000, 1_000)
    assert (c.calls, c.input_tokens, c.cached_tokens, c.output_tokens) == (1, 50_100, 50_000, 3_000)
    assert total.input_tokens == 156_100
    assert ledger.compact_cost_usd == pytest.approx(cost_usd(compact, price))
    assert ledger.cost_usd == pytest.approx(2 * cost_usd(main, price) + cost_usd(compact, price))
    assert Ledger.from_dict(ledger.to_dict()) == ledger
    assert ledger.totals("compact").cost == ledger.compact_cost_usd
    assert ledger.totals().input == total.input_tokens
    assert (m.input, m.cached, m.output) == (106_000, 100_000, 1_000)


def test_ledger_unknown_usage_or_price() -> None:
    ledger = Ledger()
    ledger.add("main", Usage(), None)
    t = ledger.get("main")
    assert (t.calls, t.input_tokens, t.cost_usd, t.cost_known) == (1, 0, 0.0, False)

"""Usage is checked, not trusted: the accounting's own estimate stands in for implausible figures."""

from __future__ import annotations

from app.context.accounting import ContextAccounting, Ledger
from app.context import tokens
from app.kernel.messages import Message, ToolSpec
from app.kernel.usage import Usage

SYSTEM = "You are tidegauge, a coding agent. " * 40
TOOLS = [ToolSpec(name=f"tool_{i}", description="does a thing with a file " * 10,
                  input_schema={"type": "object", "properties": {"path": {"type": "string"}}})
         for i in range(5)]


def conversation(turns: int) -> list[Message]:
    history: list[Message] = []
    for i in range(turns):
        history.append(Message.user(f"question {i}: " + "explain the parser please " * 20))
        history.append(Message.assistant_text(f"answer {i}: " + "the parser reads tokens " * 20))
    return history


def fixed_part() -> int:
    return tokens.count_tokens(SYSTEM) + tokens.estimate_tools(TOOLS)


def sent_then_reported(acc: ContextAccounting, history: list[Message], usage: Usage):
    """Project the request (as the engine does before sending), then record its usage."""
    request = acc.project(SYSTEM, TOOLS, history[:-1])
    check = acc.record_usage(usage, len(history))
    return request, check, acc.project(SYSTEM, TOOLS, history)


def test_a_plausible_figure_is_trusted_and_decides() -> None:
    acc = ContextAccounting(window=200_000)
    history = conversation(3)
    request, check, after = sent_then_reported(acc, history, Usage(input_tokens=request_size(history),
                                                                     output_tokens=40))
    assert check.trusted and not check.flag
    assert after.exact_tokens == request_size(history) + 40


def request_size(history: list[Message]) -> int:
    return ContextAccounting().project(SYSTEM, TOOLS, history[:-1]).projected_tokens


def test_usage_far_above_the_window_is_set_aside_for_the_estimate() -> None:
    acc = ContextAccounting(window=32_000)
    history = conversation(3)
    _, check, after = sent_then_reported(acc, history, Usage(input_tokens=10**15, output_tokens=5))
    assert not check.trusted and check.flag and check.kind == "above_window"
    assert "32,000-token window" in check.reason
    whole = ContextAccounting().project(SYSTEM, TOOLS, history).projected_tokens
    assert after.exact_tokens is None and after.projected_tokens == whole


def test_without_a_window_an_absurd_figure_is_still_set_aside() -> None:
    acc = ContextAccounting()
    history = conversation(2)
    _, check, after = sent_then_reported(acc, history, Usage(input_tokens=10**15, output_tokens=5))
    assert not check.trusted
    assert after.projected_tokens < 10**6


def test_negative_usage_never_gives_a_projection_below_the_fixed_part() -> None:
    acc = ContextAccounting(window=200_000)
    history = conversation(1)
    _, check, after = sent_then_reported(acc, history, Usage(input_tokens=-5000, output_tokens=-5))
    assert not check.trusted and check.kind == "negative"
    assert after.projected_tokens >= fixed_part() > 0


def test_usage_far_below_our_estimate_is_flagged_and_the_estimate_stands() -> None:
    """The LiteLLM case: 13 input tokens reported for a request of about a thousand."""
    acc = ContextAccounting(window=200_000)
    history = conversation(2)
    request, check, after = sent_then_reported(acc, history, Usage(input_tokens=13, output_tokens=141))
    assert request.projected_tokens > 10 * 13
    assert not check.trusted and check.kind == "below_estimate"
    assert "13 input tokens" in check.reason
    assert after.projected_tokens >= request.projected_tokens


def test_each_kind_of_distrust_is_flagged_once() -> None:
    acc = ContextAccounting(window=32_000)
    history = conversation(2)
    flags = []
    for _ in range(3):
        _, check, _ = sent_then_reported(acc, history, Usage(input_tokens=10**12, output_tokens=1))
        flags.append(check.flag)
    _, negative, _ = sent_then_reported(acc, history, Usage(input_tokens=-1, output_tokens=1))
    assert flags == [True, False, False] and negative.flag


def test_the_projection_never_shows_less_than_the_fixed_part_of_the_request() -> None:
    acc = ContextAccounting(window=200_000)
    history = conversation(1)
    acc.project(SYSTEM, TOOLS, history[:-1])
    # trusted (no request projected since: no estimate to compare with), yet tiny
    acc._request_estimate = None
    acc.record_usage(Usage(input_tokens=3, output_tokens=1), len(history))
    assert acc.project(SYSTEM, TOOLS, history).projected_tokens >= fixed_part()


def test_negative_counts_never_lower_the_cumulative_totals() -> None:
    ledger = Ledger()
    ledger.add("main", Usage(input_tokens=500, output_tokens=20), 0.0)
    ledger.add("main", Usage(input_tokens=-10**9, output_tokens=-10**9), 0.0)
    totals = ledger.total()
    assert totals.input_tokens == 500 and totals.output_tokens == 20

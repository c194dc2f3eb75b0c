"""Issue 28: the gauge against a server whose tokenizer is not cl100k (a local model's: SmolLM2 on
llama.cpp counted 4-22% more). When a usage figure arrives, the server's count of that request over
our estimate of it scales the estimate of what was appended since, so the gauge before the next call
is within 10% of what the server then reports. A server that counts as cl100k does (within 3%) leaves
the figures as they were; a ratio no tokenizer explains (the server dropped or added whole parts)
is not applied."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from app.context.accounting import ContextAccounting
from app.context.tokens import estimate_message
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from app.kernel.usage import Usage
from cli_in_process import run_cli
from fake_llm_server import counting_usage, openai_text, openai_tool_calls

KEY = "sk-test-fake-key-0123456789"

# Prose a tool returns: large beside the fixed part of a request, so how it is counted decides.
PROSE = ("The harbour gauge reads the water level every thirty seconds and smooths the readings over "
         "five samples; a rise of twenty centimetres in ten minutes raises an alert.\n")


def _headless(tmp_path: Path, base_url: str, prompt: str) -> list[dict[str, Any]]:
    """tidegauge -p, stream-json; its events. The CLI runs in this process (tests/cli_in_process.py):
    what is checked is the figures its events carry, not the process (a start is ~0.5 CPU-s)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "TIDEGAUGE_MEMORY_UPDATE_TOKENS": "0", "OPENAI_API_KEY": KEY})
    proc = run_cli(["-p", prompt, "--provider", "openai", "--model", "local", "--base-url", base_url,
                    "--output-format", "stream-json", "--window", "200000"], cwd=tmp_path / "work", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _gauge_before_each_call(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each main model call, the last (not live) context event before its usage line: what the
    gauge said the request would weigh."""
    figures: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    for event in events:
        if event["type"] == "context" and not event.get("live"):
            last = event
        elif event["type"] == "usage" and event.get("agent", "main") == "main":
            assert last is not None, "a usage line came before any context event"
            figures.append(last)
    return figures


def test_the_gauge_after_a_tool_result_is_within_ten_percent_of_a_server_counting_1_2x_cl100k(fake_llm, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "log.txt").write_text(PROSE * 120)  # about 3,500 cl100k tokens, several times the rest
    reported: list[int] = []
    fake_llm.enqueue(
        counting_usage(1.2, lambda usage: openai_tool_calls([("read_file", {"path": "log.txt"})], usage=usage),
                       reported=reported),
        counting_usage(1.2, lambda usage: openai_text("Nothing alarming.", usage=usage), reported=reported),
    )
    events = _headless(tmp_path, fake_llm.base_url("openai"), "read log.txt")

    gauges = _gauge_before_each_call(events)
    assert len(gauges) == len(reported) == 2, (len(gauges), reported)
    after_tool = gauges[1]
    error = (after_tool["projected_tokens"] - reported[1]) / reported[1]
    assert abs(error) <= 0.10, (f"gauge {after_tool['projected_tokens']:,} before the second call, server counted "
                                f"{reported[1]:,} ({error:+.1%}); exact part {after_tool['exact_tokens']}, "
                                f"estimated {after_tool['estimated_tokens']}, scale {after_tool.get('estimate_scale')}")
    # said as such: the estimated part was scaled, by about the server's ratio
    assert after_tool.get("estimate_scale") == pytest.approx(1.2, abs=0.06), after_tool
    assert after_tool["exact_tokens"] == reported[0] + 20  # the anchor is the server's own figure


def test_a_template_that_frames_the_tools_its_own_way_is_learned_from_the_growth(fake_llm, tmp_path):
    """The server counts tool definitions at twice our estimate (its template) and text at 1.2x: the
    whole first request says ~1.5x, which would overshoot a tool result; from the second figure on,
    the growth between two figures says how the server counts what is appended."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "log.txt").write_text(PROSE * 120)
    (work / "old.txt").write_text(PROSE.replace("thirty", "sixty") * 120)
    reported: list[int] = []

    def calls(*names: str) -> Any:
        return lambda usage: openai_tool_calls([("read_file", {"path": name}) for name in names], usage=usage)

    fake_llm.enqueue(*(counting_usage(1.2, reply, tools_ratio=2.0, reported=reported) for reply in (
        calls("log.txt"), calls("old.txt"), lambda usage: openai_text("Both calm.", usage=usage))))
    events = _headless(tmp_path, fake_llm.base_url("openai"), "read log.txt and old.txt")

    gauges = _gauge_before_each_call(events)
    assert len(gauges) == len(reported) == 3, (len(gauges), reported)
    first_guess, learned = gauges[1], gauges[2]
    assert first_guess["estimate_scale"] > 1.3, first_guess  # the whole request's ratio, tools and all
    assert learned["estimate_scale"] == pytest.approx(1.2, abs=0.06), learned
    error = (learned["projected_tokens"] - reported[2]) / reported[2]
    assert abs(error) <= 0.10, (f"gauge {learned['projected_tokens']:,} before the third call, server counted "
                                f"{reported[2]:,} ({error:+.1%})")


def test_a_server_counting_as_cl100k_does_leaves_the_gauge_as_it_was(fake_llm, tmp_path):
    """A cloud model whose usage agrees with our count: the estimate since is not scaled."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "log.txt").write_text(PROSE * 120)
    fake_llm.enqueue(
        counting_usage(1.0, lambda usage: openai_tool_calls([("read_file", {"path": "log.txt"})], usage=usage)),
        counting_usage(1.0, lambda usage: openai_text("Nothing alarming.", usage=usage)),
    )
    events = _headless(tmp_path, fake_llm.base_url("openai"), "read log.txt")
    after_tool = _gauge_before_each_call(events)[1]
    assert "estimate_scale" not in after_tool, after_tool
    assert after_tool["projected_tokens"] == after_tool["exact_tokens"] + after_tool["estimated_tokens"]


# ---- the accounting alone: the bounds and what resets ----


def _request(text_tokens_hint: int) -> tuple[str, list[ToolSpec], list[Message]]:
    system = "You are a careful assistant. " * max(1, text_tokens_hint // 6)
    return system, [], [Message.typed_by_user("hi")]


def _tool_round(n: int) -> list[Message]:
    use = ToolUseBlock(id=f"call_{n}", name="read_file", input={"path": "log.txt"})
    return [Message(role="assistant", content=[use]),
            Message(role="user", content=[ToolResultBlock(tool_use_id=f"call_{n}", content=PROSE * 20)])]


def _usage_for(accounting: ContextAccounting, system: str, history: list[Message], ratio: float) -> Usage:
    estimate = accounting.project(system, [], history).projected_tokens
    return Usage(input_tokens=round(estimate * ratio), output_tokens=10)


@pytest.mark.parametrize("ratio, applied", [(1.2, 1.2), (0.8, 0.8), (1.02, None), (3.0, None), (0.3, None)])
def test_only_a_ratio_a_tokenizer_explains_scales_the_estimate(ratio, applied):
    system, _, history = _request(600)
    accounting = ContextAccounting(window=200_000)
    usage = _usage_for(accounting, system, history, ratio)
    history = history + _tool_round(1)[:1]  # the reply the figure covers
    accounting.record_usage(usage, len(history))
    history = history + _tool_round(1)[1:]
    since = estimate_message(history[-1])
    projection = accounting.project(system, [], history)
    if applied is None:
        assert projection.estimate_scale is None and projection.estimated_tokens == since
    else:
        assert projection.estimate_scale == pytest.approx(applied, abs=0.01)
        assert projection.estimated_tokens == pytest.approx(since * applied, rel=0.02)


def test_a_request_too_small_to_measure_a_tokenizer_on_does_not_calibrate():
    history = [Message.typed_by_user("hi")]
    accounting = ContextAccounting(window=200_000)
    usage = _usage_for(accounting, "Be brief.", history, 1.5)
    accounting.record_usage(usage, 1)
    history = history + [Message(role="user", content=[TextBlock(text=PROSE * 5)])]
    assert accounting.project("Be brief.", [], history).estimate_scale is None


def _call(accounting: ContextAccounting, system: str, history: list[Message], reported_input: int,
          reply: Message) -> list[Message]:
    """One model call as the engine makes it: the request projected, the reply appended, its usage recorded."""
    accounting.project(system, [], history)
    history = history + [reply]
    accounting.record_usage(Usage(input_tokens=reported_input, output_tokens=10), len(history))
    return history


def test_a_growth_the_server_did_not_count_is_not_a_tokenizer_and_leaves_the_scale():
    """llama-cpp-python's chatml-function-calling template leaves tool results out of the prompt: the
    server's figure hardly grows over a big tool result. That is no tokenizer's ratio, so the scale
    measured before stands and the tool result still counts on the gauge."""
    system = "You are a careful assistant. " * 100
    accounting = ContextAccounting(window=200_000)
    history = [Message.typed_by_user("read the logs")]
    first = accounting.project(system, [], history).projected_tokens
    history = _call(accounting, system, history, round(first * 1.2), _tool_round(1)[0])
    anchor = accounting.exact_tokens
    assert anchor is not None
    history = history + _tool_round(1)[1:]
    assert accounting.project(system, [], history).estimate_scale == pytest.approx(1.2, abs=0.01)
    history = _call(accounting, system, history, anchor + 5, _tool_round(2)[0])  # the result left out
    history = history + _tool_round(2)[1:]
    projection = accounting.project(system, [], history)
    assert projection.estimate_scale == pytest.approx(1.2, abs=0.01)
    assert projection.estimated_tokens == pytest.approx(1.2 * estimate_message(history[-1]), rel=0.02)


def test_a_growth_ratio_outlives_a_compaction_and_the_whole_request_guess_does_not_replace_it():
    system = "You are a careful assistant. " * 100
    accounting = ContextAccounting(window=200_000)
    history = [Message.typed_by_user("read the logs")]
    first = accounting.project(system, [], history).projected_tokens
    history = _call(accounting, system, history, round(first * 1.6), _tool_round(1)[0])  # tools framed big
    anchor = accounting.exact_tokens
    assert anchor is not None
    history = history + _tool_round(1)[1:]
    grown = accounting.project(system, [], history).estimated_tokens / 1.6  # our estimate of the growth
    history = _call(accounting, system, history, anchor + round(1.1 * grown), _tool_round(2)[0])
    assert accounting.estimate_scale == pytest.approx(1.1, abs=0.02)
    accounting.invalidate()  # a compaction: a new history, the same server
    history = [Message.typed_by_user("summary of the logs " * 50)]
    whole = accounting.project(system, [], history).projected_tokens
    history = _call(accounting, system, history, round(whole * 1.6), _tool_round(3)[0])
    assert accounting.estimate_scale == pytest.approx(1.1, abs=0.02)


def test_after_a_compaction_the_whole_estimate_is_scaled_by_the_last_requests_ratio():
    """No figure covers a new history yet: the whole estimate (the same fixed part, a summary) is
    scaled by how the server counted the last whole request, and says so."""
    system = "You are a careful assistant. " * 100
    accounting = ContextAccounting(window=200_000)
    history = [Message.typed_by_user("read the logs")]
    first = accounting.project(system, [], history).projected_tokens
    _call(accounting, system, history, round(first * 0.85), _tool_round(1)[0])
    accounting.invalidate()  # a compaction
    summary = [Message.typed_by_user("summary of the logs " * 50)]
    unscaled = ContextAccounting().project(system, [], summary).projected_tokens
    projection = accounting.project(system, [], summary)
    assert projection.exact_tokens is None and projection.estimate_scale == pytest.approx(0.85, abs=0.01)
    assert projection.projected_tokens == pytest.approx(unscaled * 0.85, rel=0.01)


def test_the_context_report_says_the_estimate_was_scaled_and_by_how_much():
    from app.kernel.describe import describe
    from app.kernel.events import ContextEvent, ReportEvent, ThresholdsModel

    lines = ThresholdsModel(window=4096, reserve=512, effective_window=3584, auto_compact_line=3000,
                            warning_line=2500, blocking_line=3500)
    context = ContextEvent(exact_tokens=1200, estimated_tokens=480, projected_tokens=1680, thresholds=lines,
                           breakdown={}, level="ok", estimate_scale=1.2)
    text = describe(ReportEvent(kind="context", messages=4, context=context)).text
    assert "(exact 1,200 + ~480 since, scaled x1.20 to the server's count)" in text
    plain = describe(ReportEvent(kind="context", messages=4, context=context.model_copy(update={"estimate_scale": None})))
    assert "(exact 1,200 + ~480 since)" in plain.text
    assert "estimate_scale" not in context.model_copy(update={"estimate_scale": None}).model_dump_json()

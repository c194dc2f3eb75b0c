"""Headless text mode: the answer on stdout, tool calls and the engine's lines on stderr.

The words come from ``app.kernel.describe``; which lines stand in brackets is decided by their
kind, never by looking at their text.
"""

from __future__ import annotations

import io

from app.kernel.describe import describe
from app.kernel.events import (
    AssistantMessageEvent, CompactionEvent, ErrorEvent, NoticeEvent, RetryEvent, TextDeltaEvent, ToolResultEvent, ToolStartEvent,
)
from app.kernel.envelope import outside_log
from app.surfaces.headless import TextPrinter


def _print(*events: object) -> tuple[str, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    printer = TextPrinter(out, err)
    for event in events:
        printer(outside_log(event))  # type: ignore[arg-type]
    return out.getvalue(), err.getvalue().splitlines()


def test_engine_lines_are_bracketed_and_errors_are_not() -> None:
    compaction = CompactionEvent(trigger="auto", ok=True, messages_before=40, messages_after=1,
                                 tokens_before=150_000, tokens_after=3_000)
    retry = RetryEvent(attempt=1, max_attempts=4, delay_s=2.0, reason="429 rate limited")
    _, lines = _print(compaction, retry, ErrorEvent(message="connection refused"))
    assert lines == [f"[{describe(compaction).text}]", f"[{describe(retry).text}]",
                     "error: connection refused"]
    assert lines[0].startswith("[context compacted: 40 messages → 1 summary (auto")


def test_a_notice_whose_words_open_with_a_bracket_is_still_bracketed_by_its_kind() -> None:
    """An old transcript's notice may start with "[": its kind decides, as for every line."""
    _, lines = _print(NoticeEvent(level="warning", text="[demo] slow disk"),
                      NoticeEvent(level="info", text="[demo] ready"))
    assert lines == ["[[demo] slow disk]", "[demo] ready"]


def test_nothing_to_compact_is_information_not_a_failure() -> None:
    lone = CompactionEvent(trigger="manual", ok=False, messages_before=1, messages_after=1, tokens_before=900,
                           tokens_after=900, nothing_to_compact=True,
                           reason="nothing to compact: the context is already one summary")
    _, lines = _print(lone)
    assert lines == ["nothing to compact: the context is already one summary (no model call made)"]


def test_tool_lines_and_the_narration_go_to_stderr_and_the_answer_to_stdout() -> None:
    out, lines = _print(
        TextDeltaEvent(text="Looking"),
        AssistantMessageEvent(text="Looking", tool_calls=1),
        ToolStartEvent(id="c1", name="run_bash", input={"command": "cat app.log"}, summary="cat app.log"),
        ToolResultEvent(id="c1", name="run_bash", is_error=False, truncated=True, original_chars=15_188_963,
                        kept_chars=40_000, full_output_path="/s/tool-results/c1.txt", duration_ms=812.4),
        TextDeltaEvent(text="Two errors."),
        AssistantMessageEvent(text="Two errors.", tool_calls=0),
    )
    assert out == "Two errors.\n"
    assert lines == ["Looking", "⏺ run_bash cat app.log",
                     "  ⎿ ok, 15,188,963 chars, truncated to 40,000 (full output: /s/tool-results/c1.txt), 812 ms"]


def test_an_interrupted_reply_goes_to_stderr_without_a_failed_attempts_text() -> None:
    from app.kernel.events import PartialDiscardedEvent, ResultEvent

    out, lines = _print(TextDeltaEvent(text="garbled "), PartialDiscardedEvent(chars=8),
                        TextDeltaEvent(text="half an ans"), ResultEvent(stop_reason="interrupted", text="", steps=1))
    assert out == ""  # stdout is for a final answer only
    assert lines[-1] == "half an ans" and not any("garbled" in line for line in lines)

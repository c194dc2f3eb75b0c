"""Compaction request, summary history, circuit breaker."""

from __future__ import annotations

import pytest

from app.context.compaction import (
    COMPACT_PROMPT,
    RECENT_INTRO,
    SUMMARY_INTRO,
    SUMMARY_OUTRO,
    CircuitBreaker,
    CompactionFailed,
    build_compaction_request,
    build_summary_history,
    extract_summary,
)
from app.context.tokens import count_tokens
from app.context.validate import history_problems
from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolSpec, ToolUseBlock

from test_ctx_support import history_of, tool_round

TOOLS = [ToolSpec(name="read_file", description="Read a file.",
                  input_schema={"type": "object", "properties": {"path": {"type": "string"}}})]


def snapshot(history: list[Message]) -> list[dict]:
    return [m.model_dump() for m in history]


def test_prompt_has_the_handoff_sections() -> None:
    for section in ("## Task goal and acceptance criteria", "## Done so far", "## Key findings",
                    "## In progress / next step", "## User preferences"):
        assert section in COMPACT_PROMPT
    assert "only this summary" in COMPACT_PROMPT.lower()


def test_request_appends_to_a_copy_of_the_last_user_message() -> None:
    history = history_of(3, calls=2)
    before = snapshot(history)
    last = history[-1]
    req = build_compaction_request("SYS", history, TOOLS)
    assert snapshot(history) == before  # original untouched, including the last message
    assert len(history) == len(before)
    assert req.tool_choice == "none"
    assert [t.name for t in req.tools] == ["read_file"]
    assert req.max_tokens == 8_000
    assert req.system == "SYS"
    assert len(req.messages) == len(history)
    sent_last = req.messages[-1]
    assert sent_last is not last
    assert sent_last.content[:-1] == last.content
    assert isinstance(sent_last.content[-1], TextBlock)
    assert sent_last.content[-1].text == COMPACT_PROMPT
    assert req.messages[:-1] == history[:-1]
    assert history_problems(req.messages) == []


def test_request_after_an_assistant_message_adds_a_user_message() -> None:
    history = history_of(2) + [Message.assistant_text("All done.")]
    req = build_compaction_request("SYS", history, TOOLS, focus="the database errors")
    assert len(req.messages) == len(history) + 1
    assert req.messages[-1].role == "user"
    text = req.messages[-1].text
    assert text.startswith(COMPACT_PROMPT)
    assert text.endswith("Focus especially on: the database errors")
    assert history_problems(req.messages) == []
    assert len(history) == 6


def test_request_answers_a_dangling_tool_call() -> None:
    history = history_of(1) + [Message(role="assistant", content=[
        ToolUseBlock(id="dangling", name="run_bash", input={"command": "ls"})])]
    req = build_compaction_request("SYS", history, TOOLS)
    assert history_problems(req.messages) == []


def test_request_on_empty_history_fails() -> None:
    with pytest.raises(CompactionFailed):
        build_compaction_request("SYS", [], TOOLS)


def test_extract_summary_uses_text_only() -> None:
    msg = Message(role="assistant", content=[ThinkingBlock(thinking="hmm"),
                                             TextBlock(text="  ## Task goal\nFix it  ")])
    assert extract_summary(msg) == "## Task goal\nFix it"
    for empty in ([TextBlock(text="   ")], [ThinkingBlock(thinking="only thinking")]):
        with pytest.raises(CompactionFailed, match="empty summary"):
            extract_summary(Message(role="assistant", content=empty))


def test_summary_history_is_one_user_message_with_the_users_words() -> None:
    history = [Message.user("Fix the login bug. Do not change the public API.")]
    history += tool_round(2, 200)
    history += tool_round(1, 50, user_text="Also keep the tests in pytest style, no unittest.")
    history += tool_round(1, 50)
    new = build_summary_history("## Task goal\nFix login", history)
    assert len(new) == 1 and new[0].role == "user"
    text = new[0].text
    assert text.startswith(SUMMARY_INTRO)
    assert "## Task goal\nFix login" in text
    assert text.rstrip().endswith(SUMMARY_OUTRO)
    recent = text.split(RECENT_INTRO, 1)[1]
    assert "Fix the login bug. Do not change the public API." in recent
    assert "Also keep the tests in pytest style, no unittest." in recent
    assert recent.index("Fix the login bug") < recent.index("Also keep the tests")
    assert "call_" not in recent  # no tool results, no tool ids
    assert COMPACT_PROMPT not in text
    assert history_problems(new) == []


def test_every_message_is_kept_a_paste_head_and_tail_and_the_bound_counts_the_oldest() -> None:
    paste = "OLD-TASK-LOG-HEAD\n" + "padding line\n" * 3_000 + "OLD-TASK-LOG-TAIL"
    history = [Message.user(paste)]
    for i in range(20):
        history += [Message.assistant_text("ok"), Message.user(f"instruction {i}: " + "x y " * 150)]
    text = build_summary_history("S", history, kept_budget=100_000)[0].text
    recent = text.split(RECENT_INTRO, 1)[1]
    assert all(f"instruction {i}: " + "x y " * 150 in recent for i in range(20))  # whole, whatever the words
    assert "OLD-TASK-LOG-HEAD" in recent and "OLD-TASK-LOG-TAIL" in recent  # the paste: head and tail
    assert "padding line\n" * 20 not in recent and "pasted message cut by compaction" in recent
    # Under a bound the newest are kept whole and the oldest left out whole, and said.
    text = build_summary_history("S", history, kept_budget=4_000)[0].text
    recent = text.split(RECENT_INTRO, 1)[1]
    kept = [i for i in range(20) if f"instruction {i}:" in recent]
    assert 5 < len(kept) < 20 and kept == list(range(kept[0], 20))  # contiguous, the latest ones
    assert f"{kept[0] + 1:,} of the user's earliest messages" in recent
    assert count_tokens(recent) <= 4_000 + 200


def test_an_overlong_latest_message_is_cut_not_lost() -> None:
    history = [Message.user("START " + "word " * 20_000 + " END-OF-REQUEST")]
    text = build_summary_history("S", history)[0].text
    assert "START" in text and "END-OF-REQUEST" in text
    assert count_tokens(text) < 5_000


def test_second_compaction_carries_the_quoted_words_forward() -> None:
    first = build_summary_history("S1", [Message.user("Never touch src/generated.")])
    history = first + tool_round(1, 30) + tool_round(1, 30)
    second = build_summary_history("S2", history)[0].text
    recent = second.split(RECENT_INTRO, 1)[1]
    assert "Never touch src/generated." in recent
    assert "S1" not in recent and SUMMARY_INTRO not in recent
    assert second.count(SUMMARY_INTRO) == 1


def test_words_merged_into_a_summary_message_are_quoted_by_the_next_summary() -> None:
    """A prompt typed right after a compaction joins the summary message (roles alternate):
    it is the user's latest request and the next summary must quote it."""
    [summary] = build_summary_history("S1", [Message.user("summarize the project")])
    merged = summary.copy_with([*summary.content, TextBlock(text="flood")])
    history = [merged, *tool_round(1, 30)]
    recent = build_summary_history("S2", history)[0].text.split(RECENT_INTRO, 1)[1]
    assert recent.index("summarize the project") < recent.index("flood")


def test_summary_history_without_user_words() -> None:
    text = build_summary_history("S", [])[0].text
    assert RECENT_INTRO not in text and text.endswith(SUMMARY_OUTRO)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_breaker_pauses_after_three_failures_and_allows_one_trial() -> None:
    clock = FakeClock()
    b = CircuitBreaker(clock=clock)
    for _ in range(2):
        b.record_failure()
        assert b.allows_auto() and not b.paused
    b.record_failure()
    assert b.failures == 3
    assert b.paused and not b.allows_auto()
    assert b.retry_at == 1_300.0
    assert b.retry_in() == 300.0
    clock.now += 299
    assert not b.allows_auto()
    clock.now += 1
    assert b.allows_auto() and not b.paused  # the trial
    b.record_failure()  # the trial failed: paused again at once
    assert b.paused and not b.allows_auto()
    assert b.retry_at == 1_600.0
    clock.now += 300
    assert b.allows_auto()
    b.record_success()
    assert b.failures == 0 and b.retry_at is None and b.allows_auto()


def test_breaker_success_resets_the_count() -> None:
    b = CircuitBreaker(clock=FakeClock())
    b.record_failure()
    b.record_failure()
    b.record_success()
    b.record_failure()
    b.record_failure()
    assert b.allows_auto()

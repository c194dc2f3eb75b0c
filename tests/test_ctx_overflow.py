"""Overflow recovery: drop whole rounds, oldest first, keep the task."""

from __future__ import annotations

from typing import Any

from app.context import tokens
from app.context.overflow import DROPPED_NOTE, drop_oldest_rounds, group_rounds
from app.context.validate import history_problems
from app.kernel.messages import Message

from test_ctx_support import history_of, tool_round


def test_group_rounds() -> None:
    history = history_of(3, calls=2)
    rounds = group_rounds(history)
    assert [len(r) for r in rounds] == [1, 2, 2, 2]
    assert rounds[0] == [history[0]]
    assert [m for r in rounds for m in r] == history
    assert group_rounds([]) == []


def test_drops_cover_the_reported_gap() -> None:
    history = history_of(10, result_words=1_000)
    before = [m.model_dump() for m in history]
    kept, dropped = drop_oldest_rounds(history, gap_tokens=2_500)
    assert [m.model_dump() for m in history] == before  # input untouched
    assert tokens.estimate_messages(dropped) >= 2_500 * 1.05
    assert len(dropped) == 6  # three rounds of ~1,000 tokens
    assert dropped == history[1:7]
    assert kept[0].text.startswith(history[0].text)  # the task survives
    assert DROPPED_NOTE in kept[0].text
    assert kept[1:] == history[7:]
    assert history_problems(kept) == []


def test_without_numbers_a_fifth_of_the_rounds_go() -> None:
    history = history_of(19, calls=2)
    kept, dropped = drop_oldest_rounds(history, gap_tokens=None)
    assert len(dropped) == 2 * 4  # 20 rounds (with the task) -> 4 dropped
    assert history_problems(kept) == []
    small = history_of(3)
    kept, dropped = drop_oldest_rounds(small, gap_tokens=None)
    assert len(dropped) == 2  # at least one round
    assert history_problems(kept) == []


def test_a_gap_bigger_than_everything_keeps_task_and_latest_round() -> None:
    history = history_of(5, result_words=200)
    kept, dropped = drop_oldest_rounds(history, gap_tokens=10_000_000)
    assert len(kept) == 3
    assert kept[1:] == history[-2:]
    assert history_problems(kept) == []


def test_nothing_to_drop_is_a_no_op() -> None:
    for history in (history_of(0), history_of(1), [Message.user("t")]):
        kept, dropped = drop_oldest_rounds(history, gap_tokens=1_000)
        assert dropped == []
        assert kept == history


def test_repeated_drops_add_the_note_once() -> None:
    history = history_of(8, result_words=300)
    for _ in range(3):
        history, dropped = drop_oldest_rounds(history, gap_tokens=100)
        assert dropped
        assert history_problems(history) == []
    assert history[0].text.count(DROPPED_NOTE) == 1


def test_tool_pairs_are_never_split() -> None:
    history = [Message.user("t")]
    for n in (3, 0, 2, 1, 3, 0, 2):
        history += tool_round(n, 300, user_text="more" if n == 0 else None)
    for gap in (1, 400, 900, 2_000, 5_000):
        kept, dropped = drop_oldest_rounds(history, gap_tokens=gap)
        assert history_problems(kept) == []
        used = {u.id for m in dropped for u in m.tool_uses}
        answered = {r.tool_use_id for m in dropped for r in m.tool_results}
        assert used == answered


def test_user_instructions_in_dropped_rounds_are_carried_to_the_task():
    """A later user request inside a dropped round must not vanish from the context."""
    from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

    big = "x " * 3000
    history = [Message.user("task: fix the parser")]
    for i in range(4):
        history.append(Message(role="assistant", content=[ToolUseBlock(id=f"t{i}", name="read_file", input={"path": "a"})]))
        blocks: list[Any] = [ToolResultBlock(tool_use_id=f"t{i}", content=big)]
        if i == 1:
            blocks.append(TextBlock(text="also: never touch the public API"))
        history.append(Message(role="user", content=blocks))
    kept, dropped = drop_oldest_rounds(history, gap_tokens=None, max_fraction_without_gap=0.6)
    assert any("never touch the public API" in m.text for m in dropped)
    assert "never touch the public API" in kept[0].text
    assert kept[0].text.startswith("task: fix the parser")

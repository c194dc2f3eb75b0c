"""Builders and a hypothesis strategy for context-engine tests (plus checks of them)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from app.context.validate import history_problems
from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

_ids = itertools.count()


_WORDS = ("the quick brown fox jumps over lazy dog while error log line value test file "
          "code read write data user time system main index error result").split()


def filler(n_words: int, tag: str = "") -> str:
    """About ``n_words`` tokens of text (one token per common word), tagged to be unique."""
    words = " ".join(_WORDS[i % len(_WORDS)] for i in range(n_words))
    return f"{tag}: {words}" if tag else words


def tool_round(n_calls: int = 1, result_words: int = 50, *, text: str | None = None,
               thinking: str | None = None, name: str = "read_file",
               user_text: str | None = None, save_path: bool = True) -> list[Message]:
    """One API round: an assistant message and the user message answering it."""
    blocks: list = []
    if thinking:
        blocks.append(ThinkingBlock(thinking=thinking))
    if text or n_calls == 0:
        blocks.append(TextBlock(text=text or "Done."))
    results: list = []
    for _ in range(n_calls):
        uid = f"call_{next(_ids)}"
        blocks.append(ToolUseBlock(id=uid, name=name, input={"path": f"src/{uid}.py"}))
        results.append(ToolResultBlock(
            tool_use_id=uid, content=filler(result_words, uid),
            full_output_path=f"/s/tool-results/{uid}.txt" if save_path else None))
    if user_text or not results:
        results.append(TextBlock(text=user_text or "go on"))
    return [Message(role="assistant", content=blocks), Message(role="user", content=results)]


def history_of(n_rounds: int, calls: int = 1, result_words: int = 50,
               task: str = "Fix the failing test in tests/test_api.py") -> list[Message]:
    history = [Message.user(task)]
    for _ in range(n_rounds):
        history += tool_round(calls, result_words)
    return history


@st.composite
def rounds_strategy(draw, max_words: int = 400) -> list[Message]:
    """One random valid round: 0-3 tool calls, text, thinking, sizes."""
    n_calls = draw(st.integers(0, 3))
    words = draw(st.integers(1, max_words))
    text = draw(st.sampled_from([None, "Let me look.", "Checking the log."]))
    thinking = draw(st.sampled_from([None, "Think about the error first."]))
    user_text = draw(st.sampled_from([None, None, "also keep the API stable", "please hurry"]))
    return tool_round(n_calls, words, text=text, thinking=thinking, user_text=user_text,
                      save_path=draw(st.booleans()))


@st.composite
def histories(draw, max_rounds: int = 12, min_rounds: int = 0) -> list[Message]:
    history = [Message.user(draw(st.sampled_from(["Fix the bug", "Summarize the project"])))]
    for _ in range(draw(st.integers(min_rounds, max_rounds))):
        history += draw(rounds_strategy())
    return history


def test_builders_make_valid_histories() -> None:
    assert history_problems(history_of(5, calls=3)) == []
    assert history_problems(history_of(3, calls=0)) == []


@settings(max_examples=30, deadline=None)
@given(histories())
def test_strategy_only_generates_valid_histories(history: list[Message]) -> None:
    assert history_problems(history) == []

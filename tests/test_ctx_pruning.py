"""Micro-compaction: old tool results become stubs, pairs stay valid."""

from __future__ import annotations

from app.context import tokens
from app.context.pruning import CLEARED_PREFIX, prune_by_size, prune_by_time
from app.context.validate import history_problems
from app.kernel.messages import Message, ToolResultBlock

from test_ctx_support import history_of, tool_round


def results(history: list[Message]) -> list[ToolResultBlock]:
    return [b for m in history for b in m.tool_results]


def cleared(history: list[Message]) -> list[bool]:
    return [b.content.startswith(CLEARED_PREFIX) for b in results(history)]


def dump(history: list[Message]) -> list[dict]:
    return [m.model_dump() for m in history]


def test_size_prune_keeps_the_newest_40k_and_stubs_the_rest() -> None:
    history = history_of(10, result_words=9_900)  # ~10K tokens per result
    before = dump(history)
    r = prune_by_size(history)
    assert dump(history) == before  # the input is not mutated
    assert history_problems(r.history) == []
    # newest four (~40K) kept whole, the six older ones cleared
    assert cleared(r.history) == [True] * 6 + [False] * 4
    assert r.results_cleared == 6
    assert r.tokens_freed > 55_000
    assert tokens.estimate_messages(history) - tokens.estimate_messages(r.history) == r.tokens_freed
    # same pairs in the same places
    old, new = results(history), results(r.history)
    assert [b.tool_use_id for b in old] == [b.tool_use_id for b in new]
    assert [b.full_output_path for b in old] == [b.full_output_path for b in new]
    # unchanged messages are shared (their token estimates stay cached)
    assert r.history[-1] is history[-1]
    assert r.history[1] is history[1]


def test_stub_names_the_call_and_the_saved_output() -> None:
    history = history_of(3, result_words=10_000)
    r = prune_by_size(history, keep_tokens=15_000, min_free=1_000)
    stub = results(r.history)[0].content
    use = history[1].tool_uses[0]
    assert stub.startswith(CLEARED_PREFIX)
    assert f"read_file(path='{use.input['path']}')" in stub
    assert f"Full output: /s/tool-results/{use.id}.txt." in stub
    assert stub.endswith("Call the tool again if you need it.]")


def test_stub_without_saved_output_says_so() -> None:
    history = [Message.user("t")] + tool_round(1, 5_000, save_path=False) + tool_round(1, 10)
    r = prune_by_time(history, 120, keep_latest=1)
    assert "Full output: not saved." in results(r.history)[0].content


def test_size_prune_never_touches_the_latest_turn() -> None:
    history = history_of(3, result_words=8_000) + tool_round(3, 30_000)  # latest turn ~90K
    r = prune_by_size(history)
    assert r.history[-1] is history[-1]
    assert cleared(r.history) == [True, True, True, False, False, False]
    assert history_problems(r.history) == []


def test_size_prune_needs_min_free() -> None:
    history = history_of(6, result_words=9_000)  # ~54K of results: only ~14K could go
    r = prune_by_size(history)
    assert r.results_cleared == 0 and r.tokens_freed == 0
    assert r.history == history and r.history is not history
    r = prune_by_size(history, min_free=10_000)
    assert r.results_cleared == 2


def test_cleared_results_are_not_counted_again() -> None:
    history = history_of(10, result_words=9_900)
    first = prune_by_size(history)
    assert first.results_cleared == 6
    second = prune_by_size(first.history)
    assert second.results_cleared == 0 and second.tokens_freed == 0
    again = prune_by_time(first.history, 90, keep_latest=2)
    assert again.results_cleared == 2  # only the two not cleared yet outside the latest 2
    assert 19_000 < again.tokens_freed < 20_000


def test_time_prune_does_nothing_within_the_hour() -> None:
    history = history_of(8, result_words=500)
    r = prune_by_time(history, minutes_since_last_assistant=59)
    assert r.results_cleared == 0 and r.history == history


def test_time_prune_keeps_the_latest_five() -> None:
    history = history_of(8, calls=1, result_words=500)
    r = prune_by_time(history, minutes_since_last_assistant=61)
    assert cleared(r.history) == [True] * 3 + [False] * 5
    assert r.results_cleared == 3 and r.tokens_freed > 1_000
    assert history_problems(r.history) == []


def test_error_flag_and_parallel_results_survive() -> None:
    history = [Message.user("t")] + tool_round(3, 800) + tool_round(1, 10)
    msg = history[2]
    history[2] = msg.copy_with([b.model_copy(update={"is_error": True}) if i == 1 else b
                                for i, b in enumerate(msg.content)])
    r = prune_by_time(history, 61, keep_latest=1)
    blocks = r.history[2].tool_results
    assert [b.is_error for b in blocks] == [False, True, False]
    assert all(b.content.startswith(CLEARED_PREFIX) for b in blocks)
    assert history_problems(r.history) == []


def test_text_after_results_stays() -> None:
    history = [Message.user("t")] + tool_round(1, 800, user_text="and check the docs") \
        + tool_round(1, 10)
    r = prune_by_time(history, 61, keep_latest=1)
    assert r.history[2].text == "and check the docs"
    assert history_problems(r.history) == []

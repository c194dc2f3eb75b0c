"""The lines the gauge draws are the lines that trigger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.context.thresholds import Thresholds, compute_thresholds, context_window_for, level
from app.kernel.events import ThresholdsModel


def test_seed_001_figures_for_a_200k_window() -> None:
    t = compute_thresholds(window=200_000, budget=0, compact_max_output=20_000)
    assert t == Thresholds(window=200_000, reserve=20_000, effective_window=180_000,
                           auto_compact_line=167_000, warning_line=147_000, blocking_line=177_000)


def test_default_budget_caps_the_auto_compact_line() -> None:
    t = compute_thresholds(window=200_000, budget=150_000, compact_max_output=8_000)
    assert (t.reserve, t.effective_window) == (8_000, 192_000)
    assert t.auto_compact_line == 150_000
    assert t.warning_line == 130_000
    assert t.blocking_line == 189_000


def test_budget_above_the_window_line_changes_nothing() -> None:
    assert (compute_thresholds(200_000, 500_000, 20_000)
            == compute_thresholds(200_000, 0, 20_000))


def test_small_auto_line_warns_a_quarter_below() -> None:
    t = compute_thresholds(window=200_000, budget=40_000, compact_max_output=8_000)
    assert t.auto_compact_line == 40_000
    assert t.warning_line == 30_000


def test_reserve_never_exceeds_20k() -> None:
    t = compute_thresholds(window=1_047_576, budget=0, compact_max_output=64_000)
    assert t.reserve == 20_000
    assert t.blocking_line == 1_047_576 - 20_000 - 3_000


@settings(max_examples=60, deadline=None)
@given(window=st.integers(1_000, 2_000_000), budget=st.integers(0, 3_000_000),
       out=st.integers(0, 100_000))
def test_lines_stay_positive_and_ordered(window: int, budget: int, out: int) -> None:
    t = compute_thresholds(window, budget, out)
    assert 0 < t.warning_line <= t.auto_compact_line <= t.blocking_line <= t.effective_window
    assert t.effective_window == t.window - t.reserve


def test_level_at_each_line() -> None:
    t = compute_thresholds(200_000, 0, 20_000)
    assert level(146_999, t) == "ok"
    assert level(147_000, t) == "warning"
    assert level(167_000, t) == "compact"
    assert level(176_999, t) == "compact"
    assert level(177_000, t) == "blocking"


def test_the_context_event_carries_every_figure_of_the_lines() -> None:
    from pydantic import TypeAdapter

    t = compute_thresholds(200_000, 150_000, 8_000)
    assert isinstance(t, ThresholdsModel)  # one definition: the engine's lines are the event's
    adapter = TypeAdapter(ThresholdsModel)
    assert adapter.validate_json(adapter.dump_json(t)) == t
    assert adapter.dump_python(t) == {
        "window": 200_000, "reserve": 8_000, "effective_window": 192_000,
        "auto_compact_line": 150_000, "warning_line": 130_000, "blocking_line": 189_000}


def test_context_windows_by_prefix() -> None:
    assert context_window_for("claude-sonnet-4-5-20250929") == 200_000
    assert context_window_for("claude-opus-4-1") == 200_000
    assert context_window_for("gpt-4.1-mini") == 1_047_576
    assert context_window_for("gpt-4o-2024-08-06") == 128_000
    assert context_window_for("gpt-5-mini") == 272_000  # 400K in all, input capped at 272K
    assert context_window_for("o4-mini") == 200_000
    assert context_window_for("deepseek-chat") == 128_000
    assert context_window_for("openai/gpt-4o") == 128_000
    assert context_window_for("GPT-4.1") == 1_047_576


def test_unknown_model_gets_128k() -> None:
    assert context_window_for("my-local-llama") == 128_000
    assert context_window_for("") == 128_000

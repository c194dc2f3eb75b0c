"""The context lines: one function computes them, the engine triggers on them
and the gauge draws exactly the same figures.

For a 200,000-token window and a 20,000-token compaction output this gives
warning 147,000, auto-compact 167,000, blocking 177,000 (seed 001).
"""

from __future__ import annotations

import json
from typing import Literal

from app.context.prices import MAX_MODEL_NAME, catalogue_model, model_key
from app.kernel.context_lines import Thresholds as Thresholds  # computed here, carried by the context event


Level = Literal["ok", "warning", "compact", "blocking"]

MAX_SUMMARY_RESERVE = 20_000  # output room kept for the compaction call
AUTO_COMPACT_BUFFER = 13_000
WARNING_BUFFER = 20_000
BLOCKING_BUFFER = 3_000
DEFAULT_WINDOW = 128_000


MIN_SUMMARY_ROOM = 500  # the shortest useful handoff summary, with the user's latest words


def compaction_floor(fixed_tokens: int, window: int, compact_max_output: int) -> int:
    """The smallest context a compaction can leave: the fixed part of every request
    (system prompt, tools, memory files) plus room for a short summary. An auto-compact
    line below it would compact on every turn without ever getting under it."""
    if fixed_tokens <= 0:
        return 0
    room = min(MIN_SUMMARY_ROOM, int(compact_max_output), max(1, int(window)) // 2)
    return fixed_tokens + max(0, room)


def compute_thresholds(window: int, budget: int, compact_max_output: int, fixed_tokens: int = 0) -> Thresholds:
    """The lines for a context ``window``.

    ``budget`` > 0 caps the auto-compact line (0 turns budget-based compaction
    off, leaving only the window-based line). The fixed buffers (13K, 3K) are
    scaled down for very small windows (below ~52K effective) so the lines
    stay positive and ordered: warning <= auto-compact <= blocking <= effective.
    ``fixed_tokens`` (system prompt + tools + memory) raises the auto-compact line
    to the compaction floor when the budget is below it (never past blocking).
    """
    window = max(1, int(window))
    reserve = max(0, min(int(compact_max_output), MAX_SUMMARY_RESERVE, window // 2))
    effective = window - reserve
    auto = effective - min(AUTO_COMPACT_BUFFER, effective // 4)
    if budget > 0:
        auto = min(int(budget), auto)
    auto = max(1, auto)
    blocking = effective - min(BLOCKING_BUFFER, effective // 10)
    floor = compaction_floor(fixed_tokens, window, compact_max_output)
    if auto < floor:
        auto = max(auto, min(floor, blocking))
    warning = max(1, auto - min(WARNING_BUFFER, auto // 4))
    return Thresholds(
        window=window,
        reserve=reserve,
        effective_window=effective,
        auto_compact_line=auto,
        warning_line=warning,
        blocking_line=blocking,
    )


def budget_floor_warning(budget: int, fixed_tokens: int, window: int, compact_max_output: int) -> str | None:
    """One line for the user when the budget is below what compaction can reach, else None.

    Say it once at start-up and whenever the budget is set (the engine's
    ``budget_floor_warning()`` fills in its own figures).
    """
    floor = compaction_floor(fixed_tokens, window, compact_max_output)
    if budget <= 0 or budget >= floor:
        return None
    return (f"budget {budget:,} tokens is below what compaction can reach: the system prompt, tools and memory "
            f"files alone take ~{fixed_tokens:,} tokens, plus room for the summary; auto-compaction waits until "
            f"~{floor:,} instead of compacting on every turn (raise --budget, or trim the memory files)")


def level(projected: int, t: Thresholds) -> Level:
    """Which line the projected request has reached (reaching a line counts,
    the same comparison the engine uses to act)."""
    if projected >= t.blocking_line:
        return "blocking"
    if projected >= t.auto_compact_line:
        return "compact"
    if projected >= t.warning_line:
        return "warning"
    return "ok"


# Context windows come from the genai-prices catalogue (app.context.prices); these are the
# models where it has no window or one that is not what a request is measured against.
# Longest matching prefix wins, before the catalogue. Overridable per run with --window
# (or window = N in config.toml); a model known nowhere gets DEFAULT_WINDOW, said once.
WINDOW_CORRECTIONS: dict[str, int] = {
    # GPT-5 has 400K in all (the catalogue's figure) but input is capped at 272K (output has its
    # own 128K): the input cap is what "prompt too long" is measured against.
    "gpt-5": 272_000,
    # The catalogue rounds to 1M; the API's limit is 1,047,576.
    "gpt-4.1": 1_047_576,
    # The catalogue still has V3's 64K; the API's V3.x models take 128K.
    "deepseek-": 128_000,
    # Not in the catalogue.
    "claude-instant": 100_000,
    "gpt-4.5": 128_000,
    # Gemini: the catalogue has no window for most of them.
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2": 1_048_576,
}


def _correction(name: str, table: dict[str, int]) -> int | None:
    best = ""
    for prefix in table:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return table[best] if best else None


def known_context_window(model: str) -> int | None:
    """The window of ``model`` from the corrections above, else the catalogue; None when unknown."""
    name = model_key(model)
    corrected = _correction(name, WINDOW_CORRECTIONS)
    if corrected is not None:
        return corrected
    entry = catalogue_model(name)
    if entry is not None and entry.context_window:
        return entry.context_window
    return None


def context_window_for(model: str, table: dict[str, int] | None = None) -> int:
    """Window of ``model`` (a router prefix "openai/..." is ignored); DEFAULT_WINDOW when unknown.

    ``table`` replaces the corrections and the catalogue (longest prefix wins).
    """
    if table is not None:
        return _correction(model_key(model), table) or DEFAULT_WINDOW
    return known_context_window(model) or DEFAULT_WINDOW


def assumed_window_warning(model: str) -> str | None:
    """One line for the user when ``model``'s window is known nowhere (say it once, at start-up)."""
    if known_context_window(model) is not None:
        return None
    name = json.dumps(model_key(model)[:MAX_MODEL_NAME])
    return (f"model {name} has no context window in the catalogue: assuming {DEFAULT_WINDOW:,} tokens "
            f"(set --window N, or window = N in config.toml)")

"""Micro-compaction: clear old tool results, keep every call/result pair.

Lighter than a summary: the model still sees every decision and every tool
call; only the bulky old outputs become a one-line stub naming the call and
the file holding the full output. Nothing is mutated: changed messages are
new objects, the others are shared with the input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from app.kernel.messages import ContentBlock, Message, ToolResultBlock, ToolUseBlock

from app.context import tokens as _tokens

CLEARED_PREFIX = "[Old tool result cleared to save context:"
STUB_TEMPLATE = (CLEARED_PREFIX + " {call}. Full output: {path}. "
                 "Call the tool again if you need it.]")
# The stub of a result the user took out of the context (the tool list's d): the block carries
# ``evicted``, which is what marks it (a tool's output reading like this stub is not one).
EVICTED_TEMPLATE = ("[Tool result taken out of the context by the user: {call}. Full output: {path}. "
                    "Read it again only if the user asks for it.]")


@dataclass
class PruneResult:
    history: list[Message]
    results_cleared: int
    tokens_freed: int

    @property
    def changed(self) -> bool:
        return self.results_cleared > 0


def short_args(args: dict[str, Any], max_chars: int = 80) -> str:
    """``path='a.py', offset=10``: a call's arguments on one short line."""
    parts: list[str] = []
    for key, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                               default=str)
        text = " ".join(str(text).split())
        if len(text) > 40:
            text = text[:37] + "..."
        parts.append(f"{key}={text!r}" if isinstance(value, str) else f"{key}={text}")
    line = ", ".join(parts)
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."


def is_cleared(block: ToolResultBlock) -> bool:
    """Out of the context: cleared by micro-compaction, or evicted by the user."""
    return block.evicted or block.content.startswith(CLEARED_PREFIX)


def call_words(use: ToolUseBlock | None) -> str:
    return f"{use.name}({short_args(use.input)})" if use is not None else "unknown tool()"


def stub_for(block: ToolResultBlock, use: ToolUseBlock | None) -> str:
    return STUB_TEMPLATE.format(call=call_words(use), path=block.full_output_path or "not saved")


def evicted_stub(use: ToolUseBlock | None, path: str) -> str:
    return EVICTED_TEMPLATE.format(call=call_words(use), path=path)


def _uses_by_id(history: Sequence[Message]) -> dict[str, ToolUseBlock]:
    return {u.id: u for m in history if m.role == "assistant" for u in m.tool_uses}


def _result_positions(history: Sequence[Message]) -> list[tuple[int, int]]:
    """(message index, block index) of every tool result, oldest first."""
    return [(i, j) for i, m in enumerate(history) if m.role == "user"
            for j, b in enumerate(m.content) if isinstance(b, ToolResultBlock)]


def _block_tokens(msg: Message, block: ToolResultBlock) -> int:
    """Tokens of one result; a message holding only this block already knows them."""
    if len(msg.content) == 1:
        return max(0, _tokens.estimate_message(msg) - _tokens.MESSAGE_OVERHEAD
                   - _tokens.BLOCK_OVERHEAD)
    return _tokens.count_tokens_cached(block.content)


def _clear(history: Sequence[Message], positions: Sequence[tuple[int, int]]) -> PruneResult:
    """Replace the results at ``positions`` (already-cleared ones are skipped)."""
    uses = _uses_by_id(history)
    by_message: dict[int, dict[int, ToolResultBlock]] = {}
    freed = 0
    cleared = 0
    for i, j in positions:
        block = history[i].content[j]
        assert isinstance(block, ToolResultBlock)
        if is_cleared(block) or block.pinned:  # a pinned result stays verbatim: the user said so
            continue
        stub = stub_for(block, uses.get(block.tool_use_id))
        saved = _block_tokens(history[i], block) - _tokens.count_tokens_cached(stub)
        if saved <= 0:  # a tiny result: the stub would not save anything
            continue
        by_message.setdefault(i, {})[j] = ToolResultBlock(
            tool_use_id=block.tool_use_id, content=stub, is_error=block.is_error,
            full_output_path=block.full_output_path)
        freed += saved
        cleared += 1
    out = list(history)
    for i, replacements in by_message.items():
        msg = history[i]
        out[i] = msg.copy_with([replacements.get(j, b) for j, b in enumerate(msg.content)])
    return PruneResult(out, cleared, freed)


def _noop(history: Sequence[Message]) -> PruneResult:
    return PruneResult(list(history), 0, 0)


def _without(history: Sequence[Message], positions: list[tuple[int, int]],
             keep_ids: frozenset[str]) -> list[tuple[int, int]]:
    """Positions minus the results pinned in the context (restored for the next request)."""
    return [(i, j) for i, j in positions if _result_id(history[i].content[j]) not in keep_ids
            and not _pinned(history[i].content[j])]


def _pinned(block: ContentBlock) -> bool:
    return isinstance(block, ToolResultBlock) and block.pinned


def _result_id(block: ContentBlock) -> str | None:
    """The call a block answers (positions name tool results; anything else answers none)."""
    return block.tool_use_id if isinstance(block, ToolResultBlock) else None


def prune_by_time(history: Sequence[Message], minutes_since_last_assistant: float,
                  threshold_min: float = 60, keep_latest: int = 5,
                  keep_ids: frozenset[str] = frozenset()) -> PruneResult:
    """After a long pause the provider's cache has expired anyway: clear all
    tool results but the latest ``keep_latest`` (and any in ``keep_ids``)."""
    if minutes_since_last_assistant <= threshold_min:
        return _noop(history)
    positions = _without(history, _result_positions(history), keep_ids)
    old = positions[: max(0, len(positions) - keep_latest)]
    return _clear(history, old) if old else _noop(history)


def prune_by_size(history: Sequence[Message], keep_tokens: int = 40_000,
                  min_free: int = 20_000, keep_ids: frozenset[str] = frozenset()) -> PruneResult:
    """Keep the newest ``keep_tokens`` of tool results, clear the older ones,
    but only when that frees at least ``min_free`` tokens. The latest turn (the
    last user message holding results) is never touched; its results count
    toward what is kept."""
    positions = _result_positions(history)
    if not positions:
        return _noop(history)
    latest_turn = positions[-1][0]
    kept = 0
    to_clear: list[tuple[int, int]] = []
    for i, j in reversed(positions):
        block = history[i].content[j]
        assert isinstance(block, ToolResultBlock)
        tokens = _block_tokens(history[i], block)
        if i == latest_turn or block.tool_use_id in keep_ids or block.pinned:
            kept += tokens
            continue
        if to_clear or kept + tokens > keep_tokens:
            to_clear.append((i, j))  # everything older than the boundary goes
        else:
            kept += tokens
    if not to_clear:
        return _noop(history)
    result = _clear(history, sorted(to_clear))
    if result.tokens_freed < min_free:
        return _noop(history)
    return result

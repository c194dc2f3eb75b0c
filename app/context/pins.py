"""Pinned tool results: what a compaction keeps verbatim because the user said so (the tool list's p).

A pinned result is never cleared by micro-compaction (``pruning``), and a compaction, whichever
writes the summary (the model, the extractive fallback, the session memory), carries it past the
summary as it was: its call in an assistant message, the result in the user message after it,
so every wire protocol still finds each result right after its call. The summarizer is told which
results follow its summary, so it does not spend words restating them.

Pure functions over messages.
"""

from __future__ import annotations

from typing import Sequence

from app.context.pruning import call_words, is_cleared
from app.kernel.messages import Message, ToolResultBlock, ToolUseBlock


def pinned_pairs(messages: Sequence[Message]) -> list[tuple[ToolUseBlock, ToolResultBlock]]:
    """(call, result) of every pinned result in ``messages`` that is in the context, oldest first."""
    uses = {u.id: u for m in messages if m.role == "assistant" for u in m.tool_uses}
    return [(uses[b.tool_use_id], b) for m in messages if m.role == "user" for b in m.tool_results
            if b.pinned and not is_cleared(b) and b.tool_use_id in uses]


def pinned_carry(replaced: Sequence[Message]) -> list[Message]:
    """The messages that carry ``replaced``'s pinned results past a summary (none: [])."""
    pairs = pinned_pairs(replaced)
    if not pairs:
        return []
    return [Message(role="assistant", content=[use for use, _ in pairs]),
            Message(role="user", content=[result for _, result in pairs])]


def pinned_note(replaced: Sequence[Message]) -> str | None:
    """What the summarizer's instruction says of the pinned results (None: there are none)."""
    pairs = pinned_pairs(replaced)
    if not pairs:
        return None
    calls = "\n".join(f"- {call_words(use)} (call {use.id})" for use, _ in pairs)
    return ("The user pinned these tool results. They stay in the context verbatim after your summary, "
            "so do not restate their content; refer to them by their call where it matters:\n" + calls)


def only_pinned_carry(messages: Sequence[Message]) -> bool:
    """Do ``messages`` hold nothing but pinned results carried past a summary (and, in the last
    message, the user's new words)? Compacting such a history again would gain nothing."""
    for message in messages:
        if message.role == "assistant":
            if not message.tool_uses or len(message.tool_uses) != len(message.content):
                return False
        elif not message.tool_results or not all(b.pinned and not is_cleared(b) for b in message.tool_results):
            return False
    return True

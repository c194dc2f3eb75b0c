"""Overflow recovery ("reactive compact"): drop the oldest API rounds.

When a request is rejected as too long, the history is grouped into API
rounds (an assistant message plus the user message answering it) and whole
rounds are dropped oldest first, never the task (the first user message)
and never the latest round, so no tool call is split from its result.
"""

from __future__ import annotations

import math
from typing import Sequence

from app.kernel.messages import Message, TextBlock

from app.context import tokens as _tokens

DROPPED_NOTE = ("(Earlier rounds of this conversation were dropped to fit the context window. "
                "Re-read files or re-run commands if you need their results.)")
GAP_MARGIN = 0.05  # drop 5% more than the reported gap: the estimate is not the server's count


def group_rounds(history: Sequence[Message]) -> list[list[Message]]:
    """[[task], [assistant, user], [assistant, user], ...].

    A round starts at each assistant message; stray user messages join the
    round before them, so the groups always concatenate back to the history.
    """
    if not history:
        return []
    rounds: list[list[Message]] = [[history[0]]]
    for msg in history[1:]:
        if msg.role == "assistant":
            rounds.append([msg])
        else:
            rounds[-1].append(msg)
    return rounds


def _with_note(task: Message, carried: Sequence[TextBlock] = ()) -> Message:
    """The task message with the dropped-rounds note appended (once), plus the user's own
    words from the dropped rounds: instructions are what users lose most often."""
    has_note = any(isinstance(b, TextBlock) and b.text == DROPPED_NOTE for b in task.content)
    if has_note and not carried:
        return task
    extra = [] if has_note else [TextBlock(text=DROPPED_NOTE)]
    return task.copy_with([*task.content, *extra, *carried])


def _user_texts(messages: Sequence[Message]) -> list[TextBlock]:
    """Text the user typed in these messages (not tool results, not our own note)."""
    # An MCP server's prompt or resource (from_mcp) is not carried: it is not the user's, and it may be long.
    return [TextBlock(text=b.text, user_message_id=b.user_message_id, paste_copy=b.paste_copy)
            for m in messages if m.role == "user"
            for b in m.content
            if isinstance(b, TextBlock) and b.text.strip() and b.text != DROPPED_NOTE and not b.from_mcp]


def drop_oldest_rounds(history: Sequence[Message], gap_tokens: int | None,
                       max_fraction_without_gap: float = 0.2,
                       ) -> tuple[list[Message], list[Message]]:
    """(kept, dropped). ``dropped == []`` means nothing could be dropped.

    With ``gap_tokens`` (from the error message), drop rounds until their
    estimate covers the gap plus a margin (all droppable rounds if even that is
    not enough); without it, drop ~``max_fraction_without_gap`` of the rounds
    (at least one). The kept history starts with the task, which gets a short
    note about the drop; roles still alternate because each dropped round is an
    assistant message with its answer.
    """
    rounds = group_rounds(history)
    droppable = rounds[1:-1]
    if not droppable:
        return list(history), []
    if gap_tokens is not None:
        target = math.ceil(max(0, gap_tokens) * (1 + GAP_MARGIN)) + 1
        count = 0
        freed = 0
        while count < len(droppable) and freed < target:
            freed += _tokens.estimate_messages(droppable[count])
            count += 1
    else:
        count = max(1, int(len(rounds) * max_fraction_without_gap))
    count = min(count, len(droppable))
    dropped = [m for r in droppable[:count] for m in r]
    task_round = rounds[0]
    kept = [_with_note(task_round[0], _user_texts(dropped)), *task_round[1:]]
    kept += [m for r in droppable[count:] for m in r]
    kept += rounds[-1]
    return kept, dropped

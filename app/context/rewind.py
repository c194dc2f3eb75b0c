"""Rewind: the earlier user messages a conversation can go back to, and the history just before one.

A point is a message the user typed that the live history still holds as it was sent (not a
summary's kept words: going back into a summary would cut it in two). Its turn is its place
among the user's messages the context still knows, a summary's kept words counted first, so the
numbers match what the user sees in the conversation after a compaction too.

Going back to a point keeps everything before the user's words: when they were merged into a
message that starts with tool results (typed after an interrupt), those results stay, so the
history is still a valid request and the next prompt merges into that message again.

Pure functions over messages: the core (app/context/core.py) makes the plans, `tidegauge rewind`
(app/wiring/rewind_command.py) lists the points of a recorded session with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from app.context.compaction import is_summary_message
from app.context.tokens import estimate_messages
from app.context.user_words import user_words
from app.kernel.events import ChartPointEvent, RewindEvent
from app.kernel.messages import Message, TextBlock

# The message put back in the prompt is the user's own text; a paste bigger than this comes back
# as its head (the prompt is one line of input, and a rewind event crosses a pipe).
MAX_PROMPT_CHARS = 100_000


@dataclass(frozen=True)
class RewindTarget:
    """A user message to go back to: the history becomes what stood just before it."""

    turn: int  # 1-based, among the user's messages the context knows
    message_id: str  # TextBlock.user_message_id
    message_index: int  # where it is in the history
    block_index: int  # its first block in that message (results typed after stay)
    text: str  # what the user typed, to put back in the prompt
    # The user's messages from this one on: the turns the rewind abandons (ids, oldest first).
    abandoned_ids: tuple[str, ...] = ()

    @property
    def abandoned_turns(self) -> int:
        return len(self.abandoned_ids)


def rewind_points(history: Sequence[Message]) -> list[RewindTarget]:
    """Every user message the history can be taken back to, oldest first."""
    mine = {id(b) for b in user_words(history)}
    turn = 0
    seen: set[str] = set()
    found: list[RewindTarget] = []
    for i, message in enumerate(history):
        if message.role != "user":
            continue
        # In a summary's message, the words it keeps stand between its frame blocks; what the user
        # typed after the summary was merged in after the last of them.
        frame_end = _last_frame_block(message)
        for j, block in enumerate(message.content):
            if not isinstance(block, TextBlock) or id(block) not in mine:
                continue
            ident = block.user_message_id
            if ident is None or ident in seen:
                continue
            seen.add(ident)
            turn += 1
            if j <= frame_end:
                continue  # kept by a summary: counted, not a point
            text = "".join(b.text for b in message.content
                           if isinstance(b, TextBlock) and b.user_message_id == ident)
            found.append(RewindTarget(turn=turn, message_id=ident, message_index=i, block_index=j,
                                      text=text[:MAX_PROMPT_CHARS]))
    ids = [p.message_id for p in found]
    return [RewindTarget(p.turn, p.message_id, p.message_index, p.block_index, p.text, tuple(ids[n:]))
            for n, p in enumerate(found)]


def _last_frame_block(message: Message) -> int:
    """The index of a summary's last block in ``message`` (-1: not a summary)."""
    if not is_summary_message(message):
        return -1
    frames = [j for j, b in enumerate(message.content) if isinstance(b, TextBlock) and b.in_summary]
    return frames[-1] if frames else 0  # the previous format: the summary is the first block


def history_before(history: Sequence[Message], target: RewindTarget) -> list[Message]:
    """The history just before ``target``'s words: the messages before it, and what its message
    held before them (the results of an interrupted round), if anything."""
    kept = list(history[:target.message_index])
    message = history[target.message_index]
    head = list(message.content[:target.block_index])
    if head:
        kept.append(message.copy_with(head))
    return kept


def rewind_recorded(history: list[Message], target: RewindTarget, tokens_before: int, fixed_tokens: int, *,
                    said: dict[str, Any]) -> tuple[list[Message], RewindEvent, ChartPointEvent]:
    """A rewind done on a recorded session (``tidegauge rewind --to``): the history kept, the
    event that says it, sized as the fixed part (``fixed_tokens``) and the kept messages' estimate
    (its forecast is its figure: nothing ran in between), and the chart's point. The chart's
    points are made in app/context."""
    kept = history_before(history, target)
    tokens_after = fixed_tokens + estimate_messages(kept)
    event = RewindEvent(ok=True, turn=target.turn, message_id=target.message_id, text=target.text,
                        abandoned_turns=target.abandoned_turns, abandoned_ids=list(target.abandoned_ids),
                        messages_before=len(history), messages_after=len(kept), tokens_before=tokens_before,
                        tokens_after=tokens_after, forecast_tokens_after=tokens_after, by="cli", **said)
    return kept, event, ChartPointEvent(tokens=tokens_after, kind="rewind")

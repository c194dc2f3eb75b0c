"""What the user typed, found in a history by its blocks, never by reading text.

Kept apart from ``compaction`` (which writes summaries) so the audit, which compaction
uses, can find the user's words and rules without importing compaction back.
"""

from __future__ import annotations

from typing import Sequence

from app.context.overflow import DROPPED_NOTE
from app.kernel.messages import Message, TextBlock

SUMMARY_INTRO = ("This is a summary of an earlier conversation that was compacted because "
                 "the context grew too long.")


def is_legacy_summary(msg: Message) -> bool:
    """A summary of the previous format: one block holding the summary and the user's words
    quoted as text. Those quotes are never read back (app.session.transcript restores them from
    the transcript's records of what the user typed, see ``upgrade_legacy_summary``)."""
    first = msg.content[0] if msg.role == "user" and msg.content else None
    return (isinstance(first, TextBlock) and not first.in_summary and first.user_message_id is None
            and first.text.startswith(SUMMARY_INTRO))


def _engine_note(text: str) -> bool:
    return text.startswith("[Context compaction]") or text == DROPPED_NOTE or not text.strip()


def user_words(history: Sequence[Message]) -> list[TextBlock]:
    """The blocks holding what the user typed, oldest first (block order is time order).

    A block is the user's when it carries the id of a message the user typed; a text block
    of a user message without one (a history from before ids, a test) is the user's unless
    the engine wrote it (a note, an instruction) or an MCP server did (``from_mcp``: a prompt, a resource). A summary's own blocks never are, whatever
    their text says: the user's words it keeps are blocks of their own, with their ids.
    """
    found: list[TextBlock] = []
    for msg in history:
        if msg.role != "user":
            continue
        legacy = is_legacy_summary(msg)
        for index, block in enumerate(msg.content):
            if not isinstance(block, TextBlock) or block.in_summary or block.from_mcp or (legacy and index == 0):
                continue
            if block.user_message_id is None and _engine_note(block.text):
                continue
            found.append(block)
    return found


def carried_rule_blocks(history: Sequence[Message]) -> list[TextBlock]:
    """The rules summaries in ``history`` carry: blocks of a summary (``in_summary``) that
    hold one rule and the id of the message the user typed it in. Only this module makes
    them; a model's summary is one block without an id, whatever its text imitates."""
    return [b for msg in history if msg.role == "user" for b in msg.content
            if isinstance(b, TextBlock) and b.in_summary and b.user_message_id is not None]

"""Is this history a valid request for both wire protocols?

The rules of Anthropic's Messages API and of OpenAI-compatible Chat
Completions, in the internal format: roles alternate starting with the
user, every tool call is answered right after it, no orphan results.
Used when a transcript is read back (a damaged one is cut to its longest
valid prefix and repaired, app/session/transcript.py) and by the property tests.
"""

from __future__ import annotations

from typing import Sequence

from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock


def history_problems(history: Sequence[Message]) -> list[str]:
    """Every rule the history breaks, as readable lines; [] when it can be sent."""
    problems: list[str] = []
    if not history:
        return ["history is empty"]
    if history[0].role != "user":
        problems.append("message 0: the first message must be from the user")
    if history[-1].role != "user":
        problems.append(f"message {len(history) - 1}: the last message must be from the user")

    seen_ids: set[str] = set()
    for i, msg in enumerate(history):
        if i > 0 and msg.role == history[i - 1].role:
            problems.append(f"message {i}: two {msg.role} messages in a row")
        if not msg.content:
            problems.append(f"message {i}: empty content")
            continue
        for block in msg.content:
            if isinstance(block, TextBlock) and not block.text.strip():
                problems.append(f"message {i}: empty text block")

        if msg.role == "assistant":
            for block in msg.content:
                if isinstance(block, ToolResultBlock):
                    problems.append(f"message {i}: tool_result in an assistant message")
            uses = msg.tool_uses
            for use in uses:
                if use.id in seen_ids:
                    problems.append(f"message {i}: duplicate tool_use id {use.id!r}")
                seen_ids.add(use.id)
            if uses:
                nxt = history[i + 1] if i + 1 < len(history) else None
                answered = ({b.tool_use_id for b in nxt.tool_results}
                            if nxt is not None and nxt.role == "user" else set())
                for use in uses:
                    if use.id not in answered:
                        problems.append(
                            f"message {i}: tool_use {use.id!r} ({use.name}) is not answered "
                            "in the next message")
        else:
            for block in msg.content:
                if isinstance(block, ToolUseBlock):
                    problems.append(f"message {i}: tool_use in a user message")
                elif isinstance(block, ThinkingBlock):
                    problems.append(f"message {i}: thinking in a user message")
            prev = history[i - 1] if i > 0 else None
            asked = ({u.id for u in prev.tool_uses}
                     if prev is not None and prev.role == "assistant" else set())
            answered_here: set[str] = set()
            text_seen = False
            for block in msg.content:
                if isinstance(block, ToolResultBlock):
                    if text_seen:
                        problems.append(
                            f"message {i}: tool_result {block.tool_use_id!r} comes after text")
                    if block.tool_use_id not in asked:
                        problems.append(
                            f"message {i}: tool_result {block.tool_use_id!r} answers no tool_use "
                            "in the message just before")
                    if block.tool_use_id in answered_here:
                        problems.append(
                            f"message {i}: tool_use {block.tool_use_id!r} answered twice")
                    answered_here.add(block.tool_use_id)
                else:
                    text_seen = True
    return problems

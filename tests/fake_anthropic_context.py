"""Anthropic replies that report the server's own context management (issue 17), for the fake server.

Shapes from the Messages API beta types (anthropics/anthropic-sdk-python, types/beta):
``message_delta`` carries ``context_management: {"applied_edits": [{"type":
"clear_tool_uses_20250919", "cleared_tool_uses", "cleared_input_tokens"} | {"type":
"clear_thinking_20251015", "cleared_thinking_turns", "cleared_input_tokens"}]}`` and its
usage may list ``iterations`` (``{"type": "compaction" | "message", input_tokens, output_tokens,
cache_read_input_tokens, cache_creation_input_tokens}``); a server compaction streams as a
``compaction`` content block whose ``compaction_delta`` sets its ``content``.

    with_context_management(anthropic_text("ok", usage=dict(input=900, output=5)),
                            [clear_tool_uses(2, 4_000)])
    anthropic_compacted("summary of earlier work", "carrying on", usage=dict(input=300, output=7),
                        compaction_usage=dict(input=5_000, output=250))
"""

from __future__ import annotations

import json
from typing import Any

from fake_llm_server import DEFAULT_USAGE, Reply, _frame, _pieces, anthropic_events


def clear_tool_uses(uses: int, tokens: int) -> dict[str, Any]:
    return {"type": "clear_tool_uses_20250919", "cleared_tool_uses": uses, "cleared_input_tokens": tokens}


def clear_thinking(turns: int, tokens: int) -> dict[str, Any]:
    return {"type": "clear_thinking_20251015", "cleared_thinking_turns": turns, "cleared_input_tokens": tokens}


def with_context_management(reply: Reply, applied_edits: list[dict[str, Any]]) -> Reply:
    """The same reply, its ``message_delta`` reporting these applied edits."""
    frames = []
    for frame in reply.events:
        text = frame.decode("utf-8")
        if text.startswith("event: message_delta\n"):
            data = json.loads(text.split("data: ", 1)[1])
            data["context_management"] = {"applied_edits": applied_edits}
            frame = _frame(json.dumps(data), "message_delta")
        frames.append(frame)
    return Reply(events=frames)


def anthropic_compacted(summary: str, text: str, *, usage: dict[str, int] = DEFAULT_USAGE,
                        compaction_usage: dict[str, int] | None = None) -> Reply:
    """A reply that starts with a server compaction block, then text; ``usage`` is the top level
    (the sampling after the compaction), ``compaction_usage`` the compaction iteration."""
    if usage is DEFAULT_USAGE:
        usage = {"input": DEFAULT_USAGE["prompt"], "output": DEFAULT_USAGE["completion"]}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_compacted", "type": "message", "role": "assistant",
                                              "model": "fake-model", "content": [], "stop_reason": None,
                                              "usage": {"input_tokens": usage["input"],
                                                        "cache_creation_input_tokens": 0,
                                                        "cache_read_input_tokens": 0, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "compaction", "content": None}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "compaction_delta", "content": summary}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        *[{"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": p}}
          for p in _pieces(text)],
        {"type": "content_block_stop", "index": 1},
    ]
    delta_usage: dict[str, Any] = {"output_tokens": usage["output"]}
    if compaction_usage is not None:
        delta_usage["iterations"] = [
            {"type": "compaction", "input_tokens": compaction_usage["input"],
             "output_tokens": compaction_usage["output"], "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 0},
            {"type": "message", "model": "fake-model", "input_tokens": usage["input"],
             "output_tokens": usage["output"], "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        ]
    events += [{"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": delta_usage},
               {"type": "message_stop"}]
    return anthropic_events(events)

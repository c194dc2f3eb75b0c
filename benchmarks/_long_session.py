"""A long session on disk, written through the real store and transcript writer, to resume.

Running thousands of turns through an agent takes minutes; what ``--resume`` reads is the
transcript, so this writes the lines a real run writes (same models, same writer, same order
as a turn of ``tidegauge -p`` with one ``read_file`` call: see a transcript under
``<data_dir>/sessions``), with what a long session also has: the user's ``/usage`` report
after each turn and an automatic compaction every ``compact_every`` turns (so the live
history stays what a real one would be, and only the drawn events grow with the turns).

``write_long_session(data_dir, cwd, turns) -> session id``; turn ``i`` (from 1) says
``prompt {i}``, calls ``read_file`` on ``file-{i}.txt`` (id ``call_{i}``) and ends with the
reply ``reply {i}`` (``last_reply(turns)``).
"""

from __future__ import annotations

import time
from pathlib import Path
from app.kernel.envelope import EventEnvelope
from app.kernel.events import (
    Event,
    AssistantMessageEvent,
    ChartPointEvent,
    CompactionEvent,
    ContextEvent,
    ReportEvent,
    ResultEvent,
    SessionInfoEvent,
    ThresholdsModel,
    ToolResultEvent,
    ToolStartEvent,
    UsageEvent,
    UserMessageEvent,
)
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.session.store import SessionStore
from app.session.transcript import TurnEndLine


THRESHOLDS = ThresholdsModel(window=128_000, reserve=8_000, effective_window=120_000, auto_compact_line=107_000,
                             warning_line=87_000, blocking_line=117_000)


def last_reply(turns: int) -> str:
    return f"reply {turns}"


def _context(tokens: int, output: int) -> ContextEvent:
    return ContextEvent(exact_tokens=tokens, estimated_tokens=0, projected_tokens=tokens, thresholds=THRESHOLDS,
                        breakdown={"system": 211, "memory": 0, "tools": 1070, "user": tokens - 1281,
                                   "assistant": 0, "tool_results": 0},
                        level="ok", cumulative_input=tokens, cumulative_output=output)


def write_long_session(data_dir: Path, cwd: Path, turns: int, *, compact_every: int = 50) -> str:
    """A session of ``turns`` turns under ``data_dir`` for the project ``cwd``; returns its id."""
    session = SessionStore(data_dir).create(cwd, "openai", "fake-model")
    seq = 0

    def numbered(event: Event) -> EventEnvelope:
        nonlocal seq
        seq += 1
        return EventEnvelope(seq, None, event)

    with session.writer() as writer:
        writer.append_event(numbered(SessionInfoEvent(
            session_id=session.id, provider_label="openai · fake-model", model="fake-model", workspace=str(cwd),
            transcript_path=str(session.transcript_path), max_steps=50, started_in=str(cwd))))
        tokens = 1281
        for turn in range(1, turns + 1):
            if turn > 1 and (turn - 1) % compact_every == 0:
                summary = Message(role="user", content=[TextBlock(
                    text=f"Summary of turns up to {turn - 1}: files were read.", in_summary=True)])
                writer.replace_history([summary], "compaction")
                writer.append_event(numbered(CompactionEvent(
                    trigger="auto", ok=True, messages_before=4 * compact_every, messages_after=1,
                    tokens_before=tokens, tokens_after=1400)))
                writer.append_event(numbered(ChartPointEvent(tokens=1400, kind="compaction")))
                tokens = 1400
            call_id = f"call_{turn}"
            prompt = f"prompt {turn}"
            writer.append_message(Message(role="user", content=[TextBlock(text=prompt,
                                                                          user_message_id=f"u-{turn}")]))
            writer.append_event(numbered(UserMessageEvent(text=prompt)))
            writer.append_event(numbered(_context(tokens, 20 * turn)))
            writer.append_message(Message(role="assistant", content=[
                TextBlock(text=f"Reading file {turn}."),
                ToolUseBlock(id=call_id, name="read_file", input={"path": f"file-{turn}.txt"},
                             raw_arguments=f'{{"path": "file-{turn}.txt"}}')]))
            writer.append_event(numbered(UsageEvent(input_tokens=tokens, cache_read_tokens=0, cache_write_tokens=0,
                                                    output_tokens=20, context_tokens=tokens + 20)))
            writer.append_event(numbered(ChartPointEvent(tokens=tokens + 20, kind="call")))
            writer.append_event(numbered(AssistantMessageEvent(text=f"Reading file {turn}.", tool_calls=1)))
            writer.append_event(numbered(ToolStartEvent(id=call_id, name="read_file",
                                                        input={"path": f"file-{turn}.txt"},
                                                        summary=f"file-{turn}.txt")))
            content = f"     1\tline of file {turn}"
            writer.append_event(numbered(ToolResultEvent(id=call_id, name="read_file", is_error=False,
                                                         truncated=False, original_chars=len(content),
                                                         kept_chars=len(content), duration_ms=1.0,
                                                         content=content)))
            writer.append_message(Message(role="user", content=[ToolResultBlock(tool_use_id=call_id,
                                                                                content=content)]))
            tokens += 40
            reply = last_reply(turn)
            writer.append_message(Message(role="assistant", content=[TextBlock(text=reply)]))
            writer.append_event(numbered(UsageEvent(input_tokens=tokens, cache_read_tokens=0, cache_write_tokens=0,
                                                    output_tokens=10, context_tokens=tokens + 10)))
            writer.append_event(numbered(ChartPointEvent(tokens=tokens + 10, kind="call")))
            writer.append_event(numbered(AssistantMessageEvent(text=reply)))
            writer.append_event(numbered(_context(tokens + 10, 30 * turn)))
            writer.append_event(numbered(ResultEvent(stop_reason="end_turn", text=reply, steps=2,
                                                     session_id=session.id, num_turns=2)))
            writer.append_event(numbered(ReportEvent(kind="usage", messages=4, context=_context(tokens + 10,
                                                                                                 30 * turn))))
            # the turn's end as a real run marks it; one fsync at the end instead of one per turn (speed)
            writer.write_line(TurnEndLine(ts=time.time()))
            tokens += 10
        writer.sync()
    return session.id

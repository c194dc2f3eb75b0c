"""Property tests: the transcript reader fed torn and corrupted bytes never raises,
returns only valid lines, and keeps every line the damage did not touch."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.kernel.events import NoticeEvent, UsageEvent
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.session.transcript import (
    EventLine,
    HistoryLine,
    MessageLine,
    TurnEndLine,
    encode_line,
    parse_line,
    read_transcript,
    restore,
)
from app.context.validate import history_problems

text = st.text(max_size=40)
ids = st.sampled_from(["c1", "c2", "c3"])
blocks = st.one_of(
    st.builds(TextBlock, text=text),
    st.builds(ToolUseBlock, id=ids, name=st.sampled_from(["run_bash", "read_file"]),
              input=st.dictionaries(st.sampled_from(["path", "command"]), text, max_size=2)),
    st.builds(ToolResultBlock, tool_use_id=ids, content=text, is_error=st.booleans()),
)
messages = st.builds(Message, role=st.sampled_from(["user", "assistant"]),
                     content=st.lists(blocks, max_size=3))
timestamps = st.floats(min_value=0, max_value=2e9, allow_nan=False)
lines = st.one_of(
    st.builds(MessageLine, ts=timestamps, message=messages),
    st.builds(HistoryLine, ts=timestamps, reason=st.sampled_from(["compaction", "reset", "overflow"]),
              messages=st.lists(messages, max_size=3)),
    st.builds(EventLine, ts=timestamps, event=st.one_of(
        st.builds(NoticeEvent, text=text).map(lambda e: e.model_dump(mode="json")),
        st.builds(UsageEvent, input_tokens=st.none() | st.integers(0, 10**6), cache_read_tokens=st.none(),
                  cache_write_tokens=st.none(), output_tokens=st.integers(0, 10**5),
                  context_tokens=st.none()).map(lambda e: e.model_dump(mode="json")),
    )),
    st.builds(TurnEndLine, ts=timestamps),
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def _scratch() -> tempfile.TemporaryDirectory[str]:
    # One file written afresh for each example (reading never writes beside it): a directory made
    # and removed for each example was a tenth of the file's CPU. Removed when the process ends.
    return tempfile.TemporaryDirectory(prefix="transcript-fuzz-")


def read_bytes(data: bytes):
    path = Path(_scratch().name) / "transcript.jsonl"
    path.write_bytes(data)
    return read_transcript(path), restore(path)


def encoded(original: list) -> tuple[bytes, list[tuple[int, int]]]:
    chunks = [encode_line(line) for line in original]
    spans, offset = [], 0
    for chunk in chunks:
        spans.append((offset, offset + len(chunk)))
        offset += len(chunk)
    return b"".join(chunks), spans


def dumps(items: list) -> list[dict]:
    return [item.model_dump(mode="json") for item in items]


def assert_all_valid(result) -> None:
    for line in result.lines:
        assert parse_line(encode_line(line)).model_dump(mode="json") == line.model_dump(mode="json")


def is_subsequence(needles: list, haystack: list) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


@FUZZ
@given(original=st.lists(lines, max_size=12), data=st.data())
def test_torn_file_gives_a_prefix_of_the_lines(original: list, data: st.DataObject) -> None:
    raw, spans = encoded(original)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    result, state = read_bytes(raw[:cut])

    whole = sum(1 for _, end in spans if end <= cut)
    got = dumps(result.lines)
    assert got == dumps(original)[: len(got)]
    assert len(got) >= whole
    assert len(result.warnings) <= 1
    assert_all_valid(result)


@FUZZ
@given(original=st.lists(lines, min_size=1, max_size=10), data=st.data())
def test_corrupted_bytes_spare_the_untouched_lines(original: list, data: st.DataObject) -> None:
    encoded_bytes, spans = encoded(original)
    raw = bytearray(encoded_bytes)
    positions = data.draw(st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=8))
    for position in positions:
        raw[position] = data.draw(st.integers(0, 255))
    touched = {i for i, (start, end) in enumerate(spans) for p in positions if start <= p < end}
    result, state = read_bytes(bytes(raw))

    untouched = [line for i, line in enumerate(dumps(original)) if i not in touched]
    assert is_subsequence(untouched, dumps(result.lines))
    assert_all_valid(result)


@FUZZ
@given(original=st.lists(lines, max_size=8), junk=st.lists(st.binary(max_size=60), max_size=6),
       data=st.data())
def test_inserted_junk_never_raises(original: list, junk: list[bytes], data: st.DataObject) -> None:
    chunks = [encode_line(line) for line in original]
    for piece in junk:
        chunks.insert(data.draw(st.integers(0, len(chunks))), piece)
    result, state = read_bytes(b"".join(chunks))
    assert_all_valid(result)
    assert isinstance(state.history, list) and isinstance(state.events, list)


@FUZZ
@given(raw=st.binary(max_size=2000))
def test_random_bytes_never_raise(raw: bytes) -> None:
    result, state = read_bytes(raw)
    assert_all_valid(result)


@FUZZ
@given(data=st.data())
def test_restore_of_a_torn_alternating_conversation_ends_sendable(data: st.DataObject) -> None:
    """A well-formed conversation cut anywhere restores to a history the APIs accept."""
    conversation = well_formed(data)
    raw, _ = encoded([MessageLine(ts=1.0, message=m) for m in conversation])
    cut = data.draw(st.integers(0, len(raw)))
    _, state = read_bytes(raw[:cut])
    if state.history:
        problems = [p for p in history_problems(state.history) if "last message must be from the user" not in p]
        assert problems == []


# Built once, not at every draw: a strategy made inside a draw is validated again each time
# (the same draws, a tenth of the restore property's CPU).
_ROUNDS = st.integers(0, 4)
_CALLS = st.integers(0, 3)
_ASSISTANT_TEXT = st.text(min_size=1, max_size=10).filter(str.strip)


def well_formed(data: st.DataObject) -> list[Message]:
    """user, then rounds of assistant(text and/or tool calls) + user(results), valid throughout."""
    history = [Message.user("the task")]
    counter = 0
    for _ in range(data.draw(_ROUNDS)):
        calls = data.draw(_CALLS)
        content: list = [TextBlock(text=data.draw(_ASSISTANT_TEXT))]
        uses = []
        for _ in range(calls):
            counter += 1
            uses.append(ToolUseBlock(id=f"t{counter}", name="run_bash", input={"command": "ls"}))
        history.append(Message(role="assistant", content=content + uses))
        if uses:
            history.append(Message(role="user", content=[
                ToolResultBlock(tool_use_id=u.id, content="ok") for u in uses]))
        else:
            history.append(Message.user("go on"))
    return history

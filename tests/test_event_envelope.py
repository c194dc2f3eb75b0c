"""An event's place in the session's log (``seq``) and the command that caused it
(``command_id``) are its envelope's, not fields of the event: the session's stream wraps each
event once, the event itself is never changed, and on the wire the envelope is written flat
beside the event's fields, as the lines were before there was an envelope."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.kernel import events as ev
from app.kernel.envelope import ENVELOPE_KEYS, EventEnvelope, envelope_from_json, envelope_from_json_line, outside_log
from app.session.agent_session import EventStream
from app.session.transcript import TranscriptWriter, restore
from event_examples import one_of_each, union_classes


def test_no_event_class_has_a_field_the_envelope_holds() -> None:
    """A payload with a ``seq`` field would be told apart by where it was emitted (and a flat line
    could not say which ``seq`` is whose)."""
    holding = {cls.__name__: sorted(ENVELOPE_KEYS & set(cls.model_fields)) for cls in union_classes()}
    assert {name: keys for name, keys in holding.items() if keys} == {}


def test_an_event_emitted_twice_is_the_same_event_and_each_envelope_says_where() -> None:
    stream = EventStream()
    heard: list[EventEnvelope] = []
    stream.subscribe(heard.append)
    said = ev.NoticeEvent(level="info", text="the same words")
    stream.emit(said, 7)
    stream.emit(said)
    assert [(envelope.seq, envelope.command_id) for envelope in heard] == [(1, 7), (2, None)]
    # Not a copy with fields written into it: the very event, unchanged, equal to one built afresh.
    assert heard[0].event is said and heard[1].event is said
    assert said == ev.NoticeEvent(level="info", text="the same words")
    assert said.model_dump(mode="json") == {"type": "notice", "level": "info", "text": "the same words"}


def test_the_stream_numbers_on_after_a_resumed_transcripts_last_seq() -> None:
    stream = EventStream()
    stream.continue_after(41)
    heard: list[EventEnvelope] = []
    stream.subscribe(heard.append)
    stream.emit(ev.NoticeEvent(text="next"))
    assert heard[0].seq == 42


@pytest.mark.parametrize("event", one_of_each(), ids=lambda event: type(event).__name__)
def test_every_event_goes_flat_onto_the_wire_and_back(event: Any) -> None:
    envelope = EventEnvelope(12, -3, event)  # a background memory update's ids are negative
    line = envelope.to_json()
    assert list(line)[:3] == ["seq", "command_id", "type"]  # the order the lines always had
    assert {key: value for key, value in line.items() if key not in ENVELOPE_KEYS} == event.model_dump(mode="json")
    # The session process's fast path writes the same object.
    assert json.loads(envelope.to_json_bytes()) == line
    assert envelope_from_json(line) == envelope
    assert envelope_from_json_line(envelope.to_json_bytes()) == envelope  # the pipe's reader


def test_outside_the_log_the_line_is_the_event_alone() -> None:
    """Seq 0 and no command are left out, as they were: a line reads as the older lines did."""
    event = ev.NoticeEvent(text="hello")
    assert outside_log(event).to_json() == event.model_dump(mode="json")
    assert outside_log(event).to_json_bytes() == event.model_dump_json().encode()
    assert envelope_from_json({"type": "notice", "level": "info", "text": "hello"}) == outside_log(event)


@pytest.mark.parametrize("bad", [{"seq": "9"}, {"seq": True}, {"seq": -1}, {"seq": 1.5}, {"command_id": "4"},
                                 {"command_id": False}, {"command_id": 2.0}])
def test_a_line_whose_envelope_is_not_whole_numbers_is_refused_naming_it(bad: dict[str, Any]) -> None:
    """A transcript is a file anyone with the user's rights can edit, and the session process's pipe
    is read as lines: a seq or command id that is not a whole number would misplace the event in the
    log (a string "9" sorted among ints) or tie it to a command it is not from."""
    (key, value), = bad.items()
    line = {"type": "notice", "level": "info", "text": "x", **bad}
    with pytest.raises(ValueError, match=f"event {key} {value!r} is not a whole number"):
        envelope_from_json(line)
    with pytest.raises(ValueError, match=key):  # the same line on the session process's pipe
        envelope_from_json_line(json.dumps(line).encode())


def test_a_resumed_transcript_keeps_its_seqs_and_skips_a_doctored_line_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    with TranscriptWriter(path) as writer:
        writer.append_event(EventEnvelope(1, None, ev.NoticeEvent(text="first")))
        writer.append_event(EventEnvelope(2, 1, ev.UserMessageEvent(text="hi")))
        writer.append_event({"type": "notice", "level": "info", "text": "doctored", "seq": "99"})
        writer.append_event(ev.NoticeEvent(text="written before there were seqs"))
    lines = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert lines[1] == {"seq": 2, "command_id": 1, "type": "user_message", "text": "hi"}
    state = restore(path)
    assert [getattr(event, "text", "") for event in state.events] == ["first", "hi", "written before there were seqs"]
    assert state.last_seq == 2  # the doctored 99 did not push the numbering on
    assert any("skipped an event" in warning for warning in state.warnings), state.warnings

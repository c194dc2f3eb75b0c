"""An event as a session's log holds it: its place in the log and the command that caused it,
around the event itself (codex-rs's ``Event { id, msg }``).

The payload (``app.kernel.events``) says what happened, and is the same wherever and however
often it is emitted; the envelope says where it stands in this session's log. ``seq`` rises by
one with every event a session emits (0: outside the log, as the snapshot's own info, context
and state, or an earlier run's events a resumed session redraws); a resumed session goes on after
the last one its transcript holds. ``command_id`` is the id ``submit`` returned for the command
that caused the event (a background memory update's events carry that update's own negative id),
None for what nobody asked for (start-up notices).

On the wire (stream-json lines, the transcript's event lines, the session process's pipe) an
envelope is one flat object: ``seq`` and ``command_id`` beside the event's own fields, each left
out at its "outside the log" value, which is the shape those lines had before there was an
envelope. Scripts read them as they did and old transcripts load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, StrictInt

from app.kernel.events import DEFERRED, Event, event_adapter

# The envelope's keys in a flat line; an event type never has a field of these names
# (tests/test_event_envelope.py checks every class of the union).
ENVELOPE_KEYS = frozenset({"seq", "command_id"})


@dataclass(frozen=True, slots=True)
class EventEnvelope:
    """One event of a session's log: ``seq``, ``command_id`` and the event."""

    seq: int
    command_id: int | None
    event: Event

    def to_json(self) -> dict[str, Any]:
        """The flat line: ``seq`` and ``command_id`` first (when set), then the event's fields."""
        data: dict[str, Any] = {}
        if self.seq:
            data["seq"] = self.seq
        if self.command_id is not None:
            data["command_id"] = self.command_id
        data.update(self.event.model_dump(mode="json"))
        return data

    def to_json_bytes(self) -> bytes:
        """``to_json`` as compact JSON, without building the dict: the event's own JSON (pydantic's
        serialiser, in Rust) with the envelope's keys spliced in after its opening brace. A reply's
        stream goes through here for every line the session process writes."""
        body = self.event.model_dump_json().encode()
        head = b""
        if self.seq:
            head += b'"seq":%d,' % self.seq
        if self.command_id is not None:
            head += b'"command_id":%d,' % self.command_id
        return b"{" + head + body[1:] if head else body


def outside_log(event: Event) -> EventEnvelope:
    """``event`` as a surface folds in what is not one of this run's log (the snapshot's info,
    context and state; an earlier run's events): no place in the log, no command."""
    return EventEnvelope(0, None, event)


def envelope_from_json(data: dict[str, Any]) -> EventEnvelope:
    """A flat line read back (a transcript's event, one in the session process's first line). A line
    written before the envelope's keys existed has neither: outside the log, no command.
    ValueError (pydantic's ValidationError is one) names what is wrong with a bad line."""
    seq = data.get("seq", 0)
    command_id = data.get("command_id")
    # bool is an int to Python: a line saying "seq": true is not a place in the log.
    if type(seq) is not int or seq < 0:
        raise ValueError(f"event seq {seq!r} is not a whole number of at least 0")
    if command_id is not None and type(command_id) is not int:
        raise ValueError(f"event command_id {command_id!r} is not a whole number")
    # The event's validator ignores keys that are no field of it, the envelope's among them.
    return EventEnvelope(seq, command_id, event_adapter().validate_python(data))


class _EnvelopeKeys(BaseModel):
    """The envelope's two keys alone in a flat line (strict: whole numbers, seq at least 0; the
    event's keys ignored). Built on first use, like the events' validators."""

    model_config = DEFERRED

    seq: StrictInt = Field(default=0, ge=0)
    command_id: StrictInt | None = None


def envelope_from_json_line(line: bytes) -> EventEnvelope:
    """``envelope_from_json`` of one line of the session process's pipe, parsed by pydantic's own
    JSON reader (twice, the event and the two keys: under half the time of ``json.loads`` and the
    dict path, on every line of a streamed reply). ValueError when the line is not one."""
    keys = _EnvelopeKeys.model_validate_json(line)
    return EventEnvelope(keys.seq, keys.command_id, event_adapter().validate_json(line))

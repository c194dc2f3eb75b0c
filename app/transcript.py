"""The session transcript: an append-only JSONL file that never loses anything.

One JSON object per line, each with a ``kind`` and a ``ts`` (epoch seconds):

- ``message``: a message appended to the live history;
- ``history``: the live history was replaced (compaction, pruning, overflow
  drop, reset...): the full new live history and the reason;
- ``event``: an engine event, as ``model_dump(mode="json")``;
- ``turn_end``: the end of a turn (the file is fsync'ed there).

The writer only appends, so messages later compacted, pruned or dropped
stay in the file. Each line goes out in one ``write()`` on an O_APPEND
descriptor, so a crash tears at most the last line, which the reader
skips with a warning. Everything passes through ``redact_obj`` first:
API keys never reach disk.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Protocol, Sequence, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from app.events import Event
from app.messages import Message, OpaqueBlock, TextBlock, ToolResultBlock
from app.redact import redact_obj

# Reasons the engine replaces the live history. The field is a plain str so
# a reason added later never makes older readers drop the line.
HistoryReason = Literal["compaction", "micro_compaction", "overflow", "reset", "result_cut", "resume", "merge_user",
                        "server_compaction"]

INTERRUPTED_RESULT = "interrupted: the session ended before this tool finished"


class MessageLine(BaseModel):
    kind: Literal["message"] = "message"
    ts: float
    message: Message


class HistoryLine(BaseModel):
    kind: Literal["history"] = "history"
    ts: float
    reason: str
    messages: list[Message]


class EventLine(BaseModel):
    kind: Literal["event"] = "event"
    ts: float
    # Kept as plain data: an event type this version does not know is
    # skipped at restore time, not treated as a corrupted line.
    event: dict[str, Any]


class TurnEndLine(BaseModel):
    kind: Literal["turn_end"] = "turn_end"
    ts: float


TranscriptLine = Annotated[
    Union[MessageLine, HistoryLine, EventLine, TurnEndLine],
    Field(discriminator="kind"),
]
_line_adapter: TypeAdapter[Any] = TypeAdapter(TranscriptLine)
_event_adapter: TypeAdapter[Any] = TypeAdapter(Event)


# ---------------------------------------------------------------- writing

class TranscriptWriter:
    """Appends lines to one transcript file; safe to use from several threads."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600
        )
        # After a crash the file may end in a torn line; start on a fresh
        # line so that fragment is skipped alone and our first line is whole.
        if not _ends_with_newline(self.path):
            self._write_bytes(b"\n")

    # -- the public operations

    def append_message(self, message: Message) -> None:
        self.write_line(MessageLine(ts=time.time(), message=message))

    def replace_history(self, messages: Sequence[Message], reason: HistoryReason | str) -> None:
        self.write_line(HistoryLine(ts=time.time(), reason=reason, messages=list(messages)))

    def append_event(self, event: BaseModel | dict[str, Any]) -> None:
        data = event.model_dump(mode="json") if isinstance(event, BaseModel) else dict(event)
        self.write_line(EventLine(ts=time.time(), event=data))

    def end_turn(self) -> None:
        """Mark the end of a turn and make everything so far durable (fsync)."""
        self.write_line(TurnEndLine(ts=time.time()))
        self.sync()

    def sync(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> "TranscriptWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals

    def write_line(self, line: MessageLine | HistoryLine | EventLine | TurnEndLine) -> None:
        """Serialise, redact and append one line (one write() call)."""
        self._write_bytes(encode_line(line))

    def _write_bytes(self, data: bytes) -> None:
        with self._lock:
            if self._fd is None:
                raise ValueError(f"transcript {self.path} is closed")
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


def encode_line(line: BaseModel) -> bytes:
    """One redacted JSON line, newline included."""
    data = redact_obj(line.model_dump(mode="json"))
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (undecodable bytes from a tool) cannot be UTF-8;
        # \u escapes keep them and the line stays readable.
        return (json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def _ends_with_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return True
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return True


# ---------------------------------------------------------------- reading

@dataclass
class TranscriptReadResult:
    lines: list[MessageLine | HistoryLine | EventLine | TurnEndLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_line(raw: bytes) -> MessageLine | HistoryLine | EventLine | TurnEndLine:
    """Parse one line; raises ValueError (or ValidationError) when it is not a valid line."""
    data = json.loads(raw)  # stdlib: accepts the \\u escapes of lone surrogates
    return _line_adapter.validate_python(data)


def read_transcript(path: Path | str) -> TranscriptReadResult:
    """Every valid line of the file in order; bad lines are skipped with a warning. Never raises."""
    result = TranscriptReadResult()
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return result
    except OSError as err:
        result.warnings.append(f"transcript {path}: cannot read ({err.strerror or err})")
        return result
    number = 0
    try:
        with f:
            for raw in f:
                number += 1
                complete = raw.endswith(b"\n")
                body = raw.strip()
                if not body:
                    continue
                try:
                    result.lines.append(parse_line(body))
                    continue
                except Exception as err:  # anything at all: bad bytes must never stop a resume
                    error = err
                salvaged = _salvage(body)
                result.lines.extend(salvaged)
                if salvaged:
                    result.warnings.append(
                        f"transcript line {number}: corrupted ({_reason(error)}); "
                        f"recovered {len(salvaged)} entr{'y' if len(salvaged) == 1 else 'ies'} "
                        "joined to it, skipped the rest")
                elif complete:
                    result.warnings.append(f"transcript line {number}: corrupted ({_reason(error)}); skipped")
                else:
                    result.warnings.append(
                        f"transcript line {number}: torn last line (the session ended while it was "
                        "being written); skipped")
    except Exception as err:  # an I/O error half way: keep what was read
        result.warnings.append(f"transcript {path}: read stopped at line {number} ({err})")
    return result


_LINE_START = '{"kind":'
_decoder = json.JSONDecoder()


def _salvage(body: bytes) -> list[MessageLine | HistoryLine | EventLine | TurnEndLine]:
    """Whole lines glued after a damaged one (its newline was lost): parse them back.

    The writer's compact JSON puts ``{"kind":`` only at the start of a line
    (inside strings the quotes are escaped), so it marks where one may begin.
    """
    try:
        text = body.decode("utf-8", errors="replace")
        found: list[MessageLine | HistoryLine | EventLine | TurnEndLine] = []
        start = text.find(_LINE_START, 1)
        while start != -1:
            try:
                data, end = _decoder.raw_decode(text, start)
                found.append(_line_adapter.validate_python(data))
            except Exception:
                end = start + 1
            start = text.find(_LINE_START, max(end, start + 1))
        return found
    except Exception:
        return []


def _reason(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0] if err.errors() else {}
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid"))
        return f"not a transcript line: {loc}: {msg}" if loc else f"not a transcript line: {msg}"
    if isinstance(err, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(err, json.JSONDecodeError):
        return f"not valid JSON: {err.msg}"
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return type(err).__name__


# ---------------------------------------------------------------- restoring

class _HasTranscript(Protocol):
    @property
    def transcript_path(self) -> Path: ...


@dataclass
class RestoredState:
    history: list[Message]
    events: list[Any]  # app.events.Event instances, in order
    warnings: list[str]
    turns: int


def restore(source: _HasTranscript | Path | str) -> RestoredState:
    """The live history, the events and the turn count recorded in a transcript.

    The live history is the last ``history`` line plus the messages after it,
    repaired so the next request is valid (see ``repair_history``).
    """
    path = source if isinstance(source, (str, Path)) else source.transcript_path
    read = read_transcript(path)
    warnings = list(read.warnings)
    history: list[Message] = []
    events: list[Any] = []
    turns = 0
    for line in read.lines:
        if isinstance(line, MessageLine):
            history.append(line.message)
        elif isinstance(line, HistoryLine):
            history = list(line.messages)
        elif isinstance(line, EventLine):
            try:
                events.append(_event_adapter.validate_python(line.event))
            except ValidationError:
                kind = line.event.get("type")
                warnings.append(f"transcript: skipped an event this version cannot read (type {kind!r})")
        else:
            turns += 1
    # A tool's result event is written when the tool finishes, its results message only
    # when every call of the round has: a kill in between must not lose finished work.
    finished = {e.id: e for e in events if getattr(e, "type", None) == "tool_result"}
    history, repairs = repair_history(history, finished)
    warnings.extend(repairs)
    return RestoredState(history=history, events=events, warnings=warnings, turns=turns)


def _has_content(message: Message) -> bool:
    if message.tool_uses:
        return True
    if any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for b in message.content):
        return True  # issue 17: a server's compaction item stands for the whole earlier conversation
    return any(isinstance(b, TextBlock) and b.text.strip() for b in message.content)


def _result_block(call_id: str, event: Any | None) -> ToolResultBlock:
    """The recorded result of a finished call, or the stand-in for one that never finished."""
    if event is None:
        return ToolResultBlock(tool_use_id=call_id, content=INTERRUPTED_RESULT, is_error=True)
    return ToolResultBlock(tool_use_id=call_id, content=event.content, is_error=event.is_error,
                           full_output_path=event.full_output_path)


def repair_history(history: Sequence[Message],
                   finished: Mapping[str, Any] | None = None) -> tuple[list[Message], list[str]]:
    """Make a history that was cut short sendable again; returns it and what was done.

    - a trailing assistant message with no text and no tool calls is dropped;
    - a tool call without a result gets its result from ``finished`` (its
      tool_result event, by call id: the tool ran to the end before the kill), else a
      synthetic error result ("interrupted: ..."), in a user message right
      after the call, as after a kill -9 in the middle of a tool run.
    """
    finished = finished or {}
    messages = list(history)
    notes: list[str] = []
    while messages and messages[-1].role == "assistant" and not _has_content(messages[-1]):
        messages.pop()
        notes.append("restore: dropped an empty assistant message at the end of the history")

    out: list[Message] = []
    for i in range(len(messages)):
        message = messages[i]
        out.append(message)
        uses = message.tool_uses if message.role == "assistant" else []
        if not uses:
            continue
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        existing: dict[str, ToolResultBlock] = {}
        if nxt is not None and nxt.role == "user":
            for block in nxt.tool_results:
                existing.setdefault(block.tool_use_id, block)
        missing = [u for u in uses if u.id not in existing]
        if not missing:
            continue
        recovered = [u for u in missing if u.id in finished]
        lost = [u for u in missing if u.id not in finished]
        if recovered:
            names = ", ".join(u.name for u in recovered)
            notes.append(f"restore: {len(recovered)} finished tool call(s) ({names}) given their recorded result")
        if lost:
            names = ", ".join(u.name for u in lost)
            notes.append(f"restore: {len(lost)} tool call(s) without a result ({names}) marked interrupted")
        ordered: list[Any] = [existing.get(u.id) or _result_block(u.id, finished.get(u.id)) for u in uses]
        if nxt is not None and nxt.role == "user":
            own_ids = {u.id for u in uses}
            rest = [b for b in nxt.content
                    if not (isinstance(b, ToolResultBlock) and b.tool_use_id in own_ids)]
            messages[i + 1] = nxt.copy_with(ordered + rest)
        else:
            out.append(Message(role="user", content=ordered))
    return out, notes

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

import functools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Protocol, Sequence, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from app.kernel.envelope import EventEnvelope, envelope_from_json
from app.kernel.events import Event, ToolResultEvent, UsageDistrustedEvent, UsageEvent
from app.session import lock as session_lock
from app.context.compaction import upgrade_legacy_summary
from app.context.user_words import is_legacy_summary
from app.context.validate import history_problems
from app.kernel.markers import INTERRUPTED_RESULT  # one text for a call that never finished
from app.kernel.messages import ContentBlock, Message, OpaqueBlock, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.kernel.private_files import make_private_dir, open_private_fd, open_private_read, refusal
from app.kernel.redact import redact_obj

# Reasons the engine replaces the live history. The field is a plain str so
# a reason added later never makes older readers drop the line.
HistoryReason = Literal["compaction", "micro_compaction", "overflow", "reset", "result_cut", "resume", "merge_user",
                        "server_compaction", "rewind", "restore", "evict", "pin", "memory_compaction"]

LOST_START = "[the start of this conversation was lost from the session's transcript]"


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


@functools.cache
def _line_adapter() -> TypeAdapter[TranscriptLine]:
    """Built when a transcript is first read (a resume), not by a new session, which only writes."""
    return TypeAdapter(TranscriptLine)


# ---------------------------------------------------------------- writing

class TranscriptWriter:
    """Appends lines to one transcript file; safe to use from several threads."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        make_private_dir(self.path.parent)
        self._lock = threading.Lock()
        # One writer per session: refuses (SessionLocked, naming the process) while another
        # live process writes this transcript. Held until close().
        self._session_lock: Path | None = session_lock.acquire(self.path)
        try:
            # 0600 even when the file existed, and never through a symlink planted at the path.
            self._fd: int | None = open_private_fd(self.path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            session_lock.release(self._session_lock)
            raise
        # After a crash the file may end in a torn line; start on a fresh
        # line so that fragment is skipped alone and our first line is whole.
        if not _ends_with_newline(self.path):
            self._write_bytes(b"\n")

    # -- the public operations

    def append_message(self, message: Message) -> None:
        self.write_line(MessageLine(ts=time.time(), message=message))

    def replace_history(self, messages: Sequence[Message], reason: HistoryReason | str) -> None:
        self.write_line(HistoryLine(ts=time.time(), reason=reason, messages=list(messages)))

    def append_event(self, event: EventEnvelope | BaseModel | dict[str, Any]) -> None:
        """An event line: an envelope flat (its seq and command id beside the event's fields), an
        event outside any log as itself."""
        if isinstance(event, EventEnvelope):
            data = event.to_json()
        else:
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
                if self._session_lock is not None:
                    session_lock.release(self._session_lock)
                    self._session_lock = None

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
        with open_private_read(path) as f:
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
    return _line_adapter().validate_python(data)


def read_transcript(path: Path | str) -> TranscriptReadResult:
    """Every valid line of the file in order; bad lines are skipped with a warning. Never raises."""
    result = TranscriptReadResult()
    path = Path(path)
    try:
        f = open_private_read(path)  # never through a symlink planted in its place
    except FileNotFoundError:
        return result
    except OSError as err:
        result.warnings.append(f"transcript {refusal(path, err)}")
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
                found.append(_line_adapter().validate_python(data))
            except Exception:
                end = start + 1
            start = text.find(_LINE_START, max(end, start + 1))
        return found
    except Exception:
        return []


def _reason(err: Exception) -> str:
    if isinstance(err, ValidationError):
        details = err.errors()
        loc = ".".join(str(p) for p in details[0]["loc"]) if details else ""
        msg = details[0]["msg"] if details else "invalid"
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
    events: list[Event]  # in order
    warnings: list[str]  # every line skipped and every repair made: the caller shows them all
    turns: int
    # The last main call's context figure and the history length it covers, when the live history
    # still starts with what it measured (None: no figure, or the history was replaced since).
    measured: tuple[int, int] | None = None
    # The seq of the last event recorded (0: none numbered): a resumed session numbers on after it.
    last_seq: int = 0


# Results of finished tools, by the assistant message whose call they answer (keyed by
# that message object's identity): servers reuse call ids across turns ("call_0" twice),
# so an id alone could hand a later call the result of an earlier one.
FinishedResults = Callable[[Message], Mapping[str, ToolResultEvent]]


def restore(source: _HasTranscript | Path | str) -> RestoredState:
    """The live history, the events and the turn count recorded in a transcript.

    The live history is the last ``history`` line plus the messages after it,
    repaired so the next request is valid (see ``repair_history``): the
    same validity check the engine and the tests use must find nothing.
    """
    path = source if isinstance(source, (str, Path)) else source.transcript_path
    read = read_transcript(path)
    warnings = list(read.warnings)
    history: list[Message] = []
    events: list[Event] = []
    last_seq = 0
    turns = 0
    finished_by_message: dict[int, dict[str, ToolResultEvent]] = {}
    upgraded: dict[str, Message] = {}
    measured: tuple[int, int] | None = None
    for line in read.lines:
        if isinstance(line, MessageLine):
            history.append(line.message)
        elif isinstance(line, HistoryLine):
            new = _upgrade_legacy_summary(list(line.messages), history, upgraded)
            if measured is not None and not (line.reason == "resume" and _starts_with(new, history[:measured[1]])):
                measured = None  # a compaction, a clearing, a reset, a repair: the figure measured another history
            history = new
        elif isinstance(line, EventLine):
            try:
                envelope = envelope_from_json(line.event)
            except ValueError:  # pydantic's ValidationError is one, and so is a bad seq or command id
                kind = line.event.get("type")
                warnings.append(f"transcript: skipped an event this version cannot read (type {kind!r})")
                continue
            event = envelope.event
            last_seq = max(last_seq, envelope.seq)
            events.append(event)
            if isinstance(event, UsageEvent) and event.agent == "main" and event.context_tokens is not None:
                measured = (event.context_tokens, len(history))  # written after the reply it counts
            elif isinstance(event, UsageDistrustedEvent):
                measured = None  # the engine set that figure aside
            if isinstance(event, ToolResultEvent):
                # A tool's result event is written when the tool finishes, its results message
                # only when every call of the round has: a kill in between must not lose
                # finished work. It answers a call of the assistant message written just before.
                owner = _last_assistant(history)
                if owner is not None and any(u.id == event.id for u in owner.tool_uses):
                    finished_by_message.setdefault(id(owner), {}).setdefault(event.id, event)
        else:
            turns += 1
    raw = history
    history, repairs = repair_history(history, lambda m: finished_by_message.get(id(m), {}))
    warnings.extend(repairs)
    if measured is not None and not _starts_with(history, raw[:measured[1]]):
        measured = None  # the repair changed what the figure measured
    return RestoredState(history=history, events=events, warnings=warnings, turns=turns, measured=measured,
                         last_seq=last_seq)


def _starts_with(history: Sequence[Message], head: Sequence[Message]) -> bool:
    return len(history) >= len(head) and all(a is b or a == b for a, b in zip(history, head))


def _upgrade_legacy_summary(new: list[Message], before: list[Message], upgraded: dict[str, Message]) -> list[Message]:
    """A history line that starts with a summary of the previous format (the user's kept
    words quoted inside its text) gets it in today's format, the user's words taken from
    the records of the history it replaced (``before``), never from the summary's text.
    Later lines repeat that summary (more words merged in, results cleared): the first
    upgrade of a summary text serves them all."""
    if not new or not is_legacy_summary(new[0]):
        return new
    legacy = new[0]
    key = legacy.content[0].text if isinstance(legacy.content[0], TextBlock) else ""
    if key not in upgraded:
        kept_after = len(new) - 1  # a memory compaction keeps the newest messages as they were
        replaced = before[:len(before) - kept_after] if 0 < kept_after <= len(before) else before
        upgraded[key] = upgrade_legacy_summary(legacy.copy_with(legacy.content[:1]), replaced)
    head = upgraded[key]
    return [head.copy_with([*head.content, *legacy.content[1:]]), *new[1:]]


def _last_assistant(history: Sequence[Message]) -> Message | None:
    for message in reversed(history):
        if message.role == "assistant":
            return message
    return None


def _has_content(message: Message) -> bool:
    if message.tool_uses:
        return True
    if any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for b in message.content):
        return True  # a server's compaction item stands for the whole earlier conversation
    return any(isinstance(b, TextBlock) and b.text.strip() for b in message.content)


def _result_block(call_id: str, event: ToolResultEvent | None) -> ToolResultBlock:
    """The recorded result of a finished call, or the stand-in for one that never finished."""
    if event is None:
        return ToolResultBlock(tool_use_id=call_id, content=INTERRUPTED_RESULT, is_error=True)
    return ToolResultBlock(tool_use_id=call_id, content=event.content, is_error=event.is_error,
                           full_output_path=event.full_output_path)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _clean_blocks(message: Message) -> tuple[Message, list[str]]:
    """Blocks that may not stand where they are (a damaged or wrongly typed line) are removed."""
    notes: list[str] = []
    kept: list[ContentBlock] = []
    dropped: dict[str, int] = {}
    for block in message.content:
        if isinstance(block, TextBlock) and not block.text.strip():
            continue  # an empty text block is rejected by both APIs; nothing is lost
        wrong = (isinstance(block, ToolResultBlock) if message.role == "assistant"
                 else isinstance(block, (ToolUseBlock, ThinkingBlock)))
        if wrong:
            dropped[block.type] = dropped.get(block.type, 0) + 1
            continue
        kept.append(block)
    for kind, n in dropped.items():
        notes.append(f"restore: dropped {_plural(n, kind + ' block')} found in a {message.role} message")
    if message.role == "user":
        # Results must come first in a user message; keep each group's own order.
        results = [b for b in kept if isinstance(b, ToolResultBlock)]
        others = [b for b in kept if not isinstance(b, ToolResultBlock)]
        kept = results + others
    if len(kept) == len(message.content) and all(a is b for a, b in zip(kept, message.content)):
        return message, notes
    return message.copy_with(kept), notes


def _same(a: Message, b: Message) -> bool:
    # block equality compares fields and stops at the first difference: cheap for unequal messages
    return a.role == b.role and len(a.content) == len(b.content) and a.content == b.content


def _merge(a: Message, b: Message) -> Message:
    content = [*a.content, *b.content]
    if a.role == "user":
        content = ([x for x in content if isinstance(x, ToolResultBlock)]
                   + [x for x in content if not isinstance(x, ToolResultBlock)])
    merged = a.copy_with(content)
    return merged


def repair_history(history: Sequence[Message],
                   finished: FinishedResults | Mapping[str, ToolResultEvent] | None = None) -> tuple[list[Message], list[str]]:
    """Make a history that was cut short or damaged sendable again; returns it and what was done.

    In order:
    - blocks that cannot stand where they are (results in an assistant message, calls or
      thinking in a user message, empty text) are dropped, and a user message's results
      are put before its text;
    - a message that repeats the one before it exactly (a duplicated line) is dropped;
    - a history that starts with an assistant message gets a stand-in user message first,
      and two messages of one role in a row are merged into one;
    - a result that answers no call of the assistant message just before (an orphan) or
      answers one twice is dropped;
    - a tool call without a result gets its result from ``finished`` (its tool_result
      event, recorded after that same assistant message: the tool ran to the end before
      the kill), else a synthetic error result ("interrupted: ..."), as after a kill -9
      in the middle of a tool run;
    - a call id used earlier in the history (servers reuse ids across turns) is renamed
      in the call and its result, so every id is unique;
    - a trailing assistant message with no text and no tool calls is dropped.
    If the validity check still finds a problem, the history is cut before it.
    """
    def finished_for(message: Message) -> Mapping[str, ToolResultEvent]:
        if finished is None:
            return {}
        if callable(finished):
            return finished(message)
        return finished
    notes: list[str] = []
    messages: list[Message] = []
    # Which original message each working message came from (for its finished results).
    origin: dict[int, tuple[Message, tuple[Message, ...]]] = {}  # id(working) -> (working, originals)
    for original in history:
        cleaned, block_notes = _clean_blocks(original)
        notes.extend(block_notes)
        if not cleaned.content:
            notes.append(f"restore: dropped an empty {original.role} message")
            continue
        if messages and _same(messages[-1], cleaned):
            notes.append(f"restore: dropped a duplicated {original.role} message")
            continue
        origin[id(cleaned)] = (cleaned, (original,))
        messages.append(cleaned)

    if messages and messages[0].role != "user":
        # Its user message was lost (a damaged first line): a stand-in keeps the rest sendable.
        messages.insert(0, Message.user(LOST_START))
        notes.append("restore: the history began with an assistant message; a stand-in user message was put before it")

    while messages and messages[-1].role == "assistant" and not _has_content(messages[-1]):
        messages.pop()
        notes.append("restore: dropped an empty assistant message at the end of the history")

    # Pair calls and results; dropping an orphan-only message can make two messages of one
    # role meet, so merge and pair again until nothing changes (each pass only shrinks).
    for _ in range(len(messages) + 2):
        messages, changed = _merge_runs(messages, origin, notes)
        messages, paired = _pair(messages, origin, finished_for, notes)
        if not (changed or paired):
            break

    messages = _unique_ids(messages, notes)

    while messages and messages[-1].role == "assistant" and not _has_content(messages[-1]):
        messages.pop()
        notes.append("restore: dropped an empty assistant message at the end of the history")

    problems = sendable_problems(messages)
    if problems:
        first = _first_bad_index(messages)
        notes.append(f"restore: {problems[0]}; kept the {_plural(first, 'message')} before it")
        messages = messages[:first]
    return messages, notes


def _origin_of(origin: dict[int, tuple[Message, tuple[Message, ...]]], message: Message) -> tuple[Message, ...]:
    """The messages of the input history a working message came from (the tuples keep the
    objects alive, so an id is never reused for another object while the repair runs)."""
    entry = origin.get(id(message))
    return entry[1] if entry is not None and entry[0] is message else (message,)


def _merge_runs(messages: list[Message], origin: dict[int, tuple[Message, tuple[Message, ...]]],
                notes: list[str]) -> tuple[list[Message], bool]:
    out: list[Message] = []
    changed = False
    for message in messages:
        if out and out[-1].role == message.role:
            merged = _merge(out[-1], message)
            # The merged message asks what both did: the results recorded after either count.
            origin[id(merged)] = (merged, _origin_of(origin, out[-1]) + _origin_of(origin, message))
            notes.append(f"restore: merged two {message.role} messages in a row")
            out[-1] = merged
            changed = True
        else:
            out.append(message)
    return out, changed


def _pair(messages: list[Message], origin: dict[int, tuple[Message, tuple[Message, ...]]], finished_for: FinishedResults,
          notes: list[str]) -> tuple[list[Message], bool]:
    out: list[Message] = []
    changed = False
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.role == "user":
            prev = out[-1] if out and out[-1].role == "assistant" else None
            asked = {u.id for u in prev.tool_uses} if prev is not None else set()
            seen: set[str] = set()
            kept: list[ContentBlock] = []
            orphans = twice = 0
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    if block.tool_use_id not in asked:
                        orphans += 1
                        continue
                    if block.tool_use_id in seen:
                        twice += 1
                        continue
                    seen.add(block.tool_use_id)
                kept.append(block)
            if orphans:
                notes.append(f"restore: dropped {_plural(orphans, 'tool result')} answering no call just before")
            if twice:
                notes.append(f"restore: dropped {_plural(twice, 'second result')} for one call")
            if orphans or twice:
                changed = True
                if not kept:
                    continue
                replacement = message.copy_with(kept)
                origin[id(replacement)] = (replacement, _origin_of(origin, message))
                message = replacement
            out.append(message)
            continue
        out.append(message)
        uses = message.tool_uses
        if not uses:
            continue
        nxt = messages[i] if i < len(messages) and messages[i].role == "user" else None
        existing: dict[str, ToolResultBlock] = {}
        if nxt is not None:
            for block in nxt.tool_results:
                existing.setdefault(block.tool_use_id, block)
        missing = [u for u in uses if u.id not in existing]
        if not missing:
            continue
        changed = True
        recorded: dict[str, ToolResultEvent] = {}
        for source in _origin_of(origin, message):
            for call_id, event in finished_for(source).items():
                recorded.setdefault(call_id, event)
        recovered = [u for u in missing if u.id in recorded]
        lost = [u for u in missing if u.id not in recorded]
        if recovered:
            names = ", ".join(u.name for u in recovered)
            notes.append(f"restore: {len(recovered)} finished tool call(s) ({names}) given their recorded result")
        if lost:
            names = ", ".join(u.name for u in lost)
            notes.append(f"restore: {len(lost)} tool call(s) without a result ({names}) marked interrupted")
        answered: set[str] = set()
        ordered: list[ContentBlock] = []
        for u in uses:
            if u.id in answered:
                continue  # one id twice in one message: one result; the ids are made unique later
            answered.add(u.id)
            ordered.append(existing.get(u.id) or _result_block(u.id, recorded.get(u.id)))
        if nxt is not None:
            own_ids = {u.id for u in uses}
            rest = [b for b in nxt.content if not (isinstance(b, ToolResultBlock) and b.tool_use_id in own_ids)]
            replacement = nxt.copy_with(ordered + rest)
            origin[id(replacement)] = (replacement, _origin_of(origin, nxt))
            messages = messages[:i] + [replacement] + messages[i + 1:]
        else:
            out.append(Message(role="user", content=ordered))
    return out, changed


def _unique_ids(messages: list[Message], notes: list[str]) -> list[Message]:
    """Rename a call id already used earlier (and its result in the next message)."""
    seen: set[str] = set()
    renamed = 0
    out = list(messages)
    for i, message in enumerate(out):
        if message.role != "assistant" or not message.tool_uses:
            continue
        pairs: list[tuple[str, str]] = []
        content: list[ContentBlock] = []
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                new_id, n = block.id, 1
                while new_id in seen:
                    n += 1
                    new_id = f"{block.id}~{n}"
                seen.add(new_id)
                pairs.append((block.id, new_id))
                if new_id != block.id:
                    renamed += 1
                    block = block.model_copy(update={"id": new_id})
            content.append(block)
        if all(old == new for old, new in pairs):
            continue
        out[i] = message.copy_with(content)
        nxt = out[i + 1] if i + 1 < len(out) and out[i + 1].role == "user" else None
        queues: dict[str, list[ToolResultBlock]] = {}
        for block in (nxt.tool_results if nxt is not None else []):
            queues.setdefault(block.tool_use_id, []).append(block)
        results: list[ContentBlock] = []
        for old, new in pairs:
            queue = queues.get(old)
            # one id twice in one message got one result: its twin gets the stand-in
            block = queue.pop(0) if queue else _result_block(new, None)
            results.append(block if block.tool_use_id == new else block.model_copy(update={"tool_use_id": new}))
        others: list[ContentBlock] = (
            [b for b in nxt.content if not isinstance(b, ToolResultBlock)] if nxt is not None else [])
        if nxt is not None:
            out[i + 1] = nxt.copy_with(results + others)
        else:
            out.insert(i + 1, Message(role="user", content=results))
    if renamed:
        notes.append(f"restore: renamed {_plural(renamed, 'reused tool call id')} so every id is unique")
    return out


def sendable_problems(history: Sequence[Message]) -> list[str]:
    """The validity check for a restored history: it is sent after the next user message."""
    if not history:
        return []
    probe = list(history)
    if probe[-1].role == "user":
        return [p for p in history_problems(probe)]
    return history_problems(probe + [Message.user("next")])


def _first_bad_index(messages: list[Message]) -> int:
    """The length of the longest prefix that passes the check (a last resort: quadratic)."""
    good = 0
    for n in range(1, len(messages) + 1):
        if not sendable_problems(messages[:n]):
            good = n
    return good

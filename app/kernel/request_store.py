"""The requests a session sent, kept part by part: what the inspector reads.

Each request is cut into parts (the system prompt, the memory files, each tool schema, each
block of each message). A part is stored once, under the hash of what it holds, in
``parts.jsonl``; a request is one line of ``index.jsonl``: how many parts it shares with the
request before it (the stable prefix: system, tools, the history so far), the hashes of the
parts after those, and its small envelope (the gauge's figure, the usage the server gave back).
So a thousand requests over a long context cost the new parts of each, not a thousand copies.

Every text is redacted here, before it is written (the store is one more place a secret could
leave by), and both files are opened through ``private_files`` (0600, never through a link).
Reading is bounded and tolerant: a line cut by a crash or written by someone else is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from app.kernel.private_files import make_private_dir, open_private_fd, read_private
from app.kernel.redact import redact, secret_count

PARTS_NAME = "parts.jsonl"
INDEX_NAME = "index.jsonl"
# What a reader takes in at most: a session of many 1M-token requests stays well under it, a
# planted or runaway file is cut there rather than read whole.
MAX_PARTS_BYTES = 1 << 31
MAX_INDEX_BYTES = 1 << 28
# How much of a long part's text the JSON output and the inspector show: head and tail.
TEXT_HEAD_CHARS = 600
TEXT_TAIL_CHARS = 300

PartKind = Literal["system", "memory", "tool", "text", "thinking", "tool_use", "tool_result", "opaque"]
ChangeKind = Literal["added", "removed", "changed", ""]


@dataclass(frozen=True)
class RequestPart:
    """One part of a request as sent: its text (redacted) and what the engine knew of it."""

    kind: str
    role: str  # system | tools | user | assistant
    origin: str  # user, model, tool call <id>, summary, session memory, kept user words, ...
    text: str
    tokens: int  # the engine's estimate of this part (its share of the message overhead included)
    # The part's identity across requests: a part with the same key in the next request is the
    # same part changed (a result cleared, the system prompt with other memory files).
    key: str = ""

    @property
    def digest(self) -> str:
        data = json.dumps([self.kind, self.role, self.origin, self.text, self.tokens, self.key],
                          ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:20]


# Where a provider put a prompt-cache breakpoint (Anthropic's ``cache_control``), by what the marked
# block is: ("tool", name), ("system", ""), ("tool_use", call id), ("tool_result", call id) or
# ("text", the block's text). The context package finds the part each names.
CacheMark = tuple[str, str]


@dataclass(frozen=True)
class RequestEnvelope:
    """What goes with a request: its number, the gauge's figure when it was sent, the usage."""

    number: int
    gauge_tokens: int
    model: str = ""
    max_tokens: int = 0
    input_tokens: int | None = None  # as the server reported them (None: no usage came back)
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    # Indexes of the parts a cache breakpoint follows (where the provider marks them).
    breakpoints: tuple[int, ...] = ()
    ok: bool = True  # False: the call failed (its request was still sent)


@dataclass(frozen=True)
class PartView:
    """A part as the inspector shows it: tokens scaled to the gauge's figure, cached or not,
    the text cut to its head and tail."""

    kind: str
    role: str
    origin: str
    tokens: int
    cached: bool
    text: str
    chars: int  # the whole text's length
    change: ChangeKind = ""
    tokens_before: int | None = None  # a changed part: its tokens in the request before
    breakpoint: bool = False  # a cache breakpoint follows this part

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "role": self.role, "origin": self.origin,
                               "tokens": self.tokens, "cached": self.cached, "text": self.text}
        if self.tokens_before is not None:
            out["tokens_before"] = self.tokens_before
        return out


def head_and_tail(text: str, head: int = TEXT_HEAD_CHARS, tail: int = TEXT_TAIL_CHARS) -> str:
    if len(text) <= head + tail + 40:
        return text
    return f"{text[:head]}\n… [{len(text) - head - tail:,} characters not shown] …\n{text[-tail:]}"


class RequestStore:
    """The writer: one per session, in ``<session>/requests/`` (appends only)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._known: set[str] | None = None
        self._last: list[str] | None = None
        self._count = 0
        self._digests: dict[RequestPart, str] = {}
        self._secrets = secret_count()

    def _load(self) -> None:
        if self._known is not None:
            return
        reader = StoredRequests.load(self.folder)
        self._known = set(reader.part_hashes())
        self._count = reader.count
        self._last = reader.hashes(reader.count) if reader.count else []

    def record(self, parts: Sequence[RequestPart], envelope: RequestEnvelope) -> int:
        """Keep one request; returns its number (1-based). The number in ``envelope`` is ignored."""
        self._load()
        assert self._known is not None and self._last is not None
        make_private_dir(self.folder)
        if secret_count() != self._secrets:  # a secret registered since: redact everything again
            self._secrets = secret_count()
            self._digests.clear()
        hashes = []
        new_lines = []
        for part in parts:
            # A part sent before is the same object's text again: found by hash (cached on the
            # str) and identity, so a long history is not redacted and hashed on every request.
            digest = self._digests.get(part)
            if digest is None:
                redacted = _redacted(part)
                digest = redacted.digest
                self._digests[part] = digest
                if digest not in self._known:
                    self._known.add(digest)
                    new_lines.append(json.dumps({"h": digest, **asdict(redacted)}, ensure_ascii=False,
                                                separators=(",", ":")))
            hashes.append(digest)
        if new_lines:
            _append(self.folder / PARTS_NAME, "\n".join(new_lines) + "\n")
        keep = 0
        for before, now in zip(self._last, hashes):
            if before != now:
                break
            keep += 1
        self._count += 1
        fields = asdict(envelope)
        fields["number"] = self._count
        line = {"keep": keep, "add": hashes[keep:], **fields}
        _append(self.folder / INDEX_NAME, json.dumps(line, separators=(",", ":")) + "\n")
        self._last = hashes
        if len(self._digests) > 4 * len(parts) + 1_000:  # forget the parts no longer sent
            sent = set(parts)
            self._digests = {p: d for p, d in self._digests.items() if p in sent}
        return self._count


def _redacted(part: RequestPart) -> RequestPart:
    text = redact(part.text)
    origin = redact(part.origin)
    if text is part.text and origin is part.origin:
        return part
    return RequestPart(part.kind, part.role, origin, text, part.tokens, part.key)


def _append(path: Path, text: str) -> None:
    fd = open_private_fd(path, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(text.encode("utf-8", "surrogatepass"))
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


@dataclass
class StoredRequests:
    """The reader: the requests of one session folder."""

    folder: Path
    envelopes: list[RequestEnvelope] = field(default_factory=list)
    _lists: list[tuple[int, list[str]]] = field(default_factory=list)
    _parts: dict[str, RequestPart] | None = None
    _offsets: dict[str, int] = field(default_factory=dict)  # bytes read of each file

    @classmethod
    def load(cls, folder: Path) -> "StoredRequests":
        stored = cls(folder)
        stored.refresh()
        return stored

    def refresh(self) -> "StoredRequests":
        """Read what was appended since the last read (whole lines only: a line being written,
        or cut by a crash, waits or is skipped). The dashboard keeps one reader per session and
        refreshes it as requests are kept, so opening the inspector reads nothing."""
        for line in self._new_lines(INDEX_NAME, MAX_INDEX_BYTES):
            try:
                entry = json.loads(line)
                keep, add = int(entry["keep"]), [str(h) for h in entry["add"]]
                envelope = RequestEnvelope(
                    number=len(self.envelopes) + 1, gauge_tokens=int(entry["gauge_tokens"]),
                    model=str(entry.get("model", "")), max_tokens=int(entry.get("max_tokens", 0)),
                    input_tokens=_int_or_none(entry.get("input_tokens")),
                    cache_read_tokens=_int_or_none(entry.get("cache_read_tokens")),
                    cache_write_tokens=_int_or_none(entry.get("cache_write_tokens")),
                    output_tokens=_int_or_none(entry.get("output_tokens")),
                    breakpoints=tuple(int(i) for i in entry.get("breakpoints", ())),
                    ok=bool(entry.get("ok", True)))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash
            self.envelopes.append(envelope)
            self._lists.append((keep, add))
        lines = [line for line in self._new_lines(PARTS_NAME, MAX_PARTS_BYTES) if line.strip()]
        try:  # one call into the C decoder for all of them: a line at a time cost 4× as much
            entries = json.loads("[" + ",".join(lines) + "]")
        except ValueError:  # a line cut by a crash: each line on its own, the cut one skipped
            entries = []
            for line in lines:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    continue
        parts = self._parts if self._parts is not None else {}
        for entry in entries:
            try:
                parts[str(entry["h"])] = RequestPart(
                    kind=str(entry["kind"]), role=str(entry["role"]), origin=str(entry["origin"]),
                    text=str(entry["text"]), tokens=int(entry["tokens"]), key=str(entry.get("key", "")))
            except (KeyError, TypeError, ValueError):
                continue
        self._parts = parts
        return self

    def _new_lines(self, name: str, max_bytes: int) -> list[str]:
        offset = self._offsets.get(name, 0)
        try:
            raw = read_private(self.folder / name, max(0, max_bytes - offset), offset)
        except FileNotFoundError:
            return []
        end = raw.rfind(b"\n") + 1  # whole lines only
        self._offsets[name] = offset + end
        return raw[:end].decode("utf-8", "replace").splitlines()

    @property
    def count(self) -> int:
        return len(self.envelopes)

    def hashes(self, number: int) -> list[str]:
        """The part hashes of request ``number`` (1-based), rebuilt from the prefixes."""
        current: list[str] = []
        for keep, add in self._lists[:number]:
            current = current[:keep] + add
        return current

    def part_hashes(self) -> list[str]:
        return list(self._all_parts())

    def _all_parts(self) -> dict[str, RequestPart]:
        return self._parts if self._parts is not None else {}

    def parts(self, number: int) -> list[RequestPart]:
        known = self._all_parts()
        return [known[h] for h in self.hashes(number) if h in known]

    def envelope(self, number: int) -> RequestEnvelope:
        return self.envelopes[number - 1]

    def views(self, number: int, *, whole_text: bool = False) -> list[PartView]:
        """Request ``number``'s parts as shown: tokens apportioned to the gauge's figure."""
        return _views(self.parts(number), self.envelope(number), whole_text=whole_text)

    def diff(self, number: int, *, whole_text: bool = False) -> dict[str, list[PartView]]:
        """What request ``number`` added, removed and changed against the one before it."""
        now = self.views(number, whole_text=whole_text)
        if number <= 1:
            return {"added": [_with(v, "added") for v in now], "removed": [], "changed": []}
        known = self._all_parts()
        now_hashes = [h for h in self.hashes(number) if h in known]
        before_hashes = [h for h in self.hashes(number - 1) if h in known]
        now_parts = [known[h] for h in now_hashes]
        before_parts = [known[h] for h in before_hashes]
        before = self.views(number - 1, whole_text=whole_text)
        left = _multiset(before_hashes)
        added_at = []
        for index, digest in enumerate(now_hashes):
            if left.get(digest, 0):
                left[digest] -= 1
            else:
                added_at.append(index)
        right = _multiset(now_hashes)
        removed_at = []
        for index, digest in enumerate(before_hashes):
            if right.get(digest, 0):
                right[digest] -= 1
            else:
                removed_at.append(index)
        removed_by_key = {before_parts[i].key: i for i in removed_at if before_parts[i].key}
        changed: list[PartView] = []
        added: list[PartView] = []
        paired: set[int] = set()
        for index in added_at:
            key = now_parts[index].key
            old = removed_by_key.get(key) if key else None
            if old is not None and old not in paired:
                paired.add(old)
                changed.append(_with(now[index], "changed", tokens_before=before[old].tokens))
            else:
                added.append(_with(now[index], "added"))
        removed = [_with(before[i], "removed") for i in removed_at if i not in paired]
        return {"added": added, "removed": removed, "changed": changed}


def _with(view: PartView, change: ChangeKind, tokens_before: int | None = None) -> PartView:
    return PartView(view.kind, view.role, view.origin, view.tokens, view.cached, view.text, view.chars,
                    change, tokens_before, view.breakpoint)


def _multiset(items: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def apportion(estimates: Sequence[int], total: int) -> list[int]:
    """``estimates`` scaled to add up to ``total`` exactly (largest remainders get the rest)."""
    whole = sum(estimates)
    if whole <= 0 or total <= 0:
        return [0] * len(estimates) if total <= 0 else list(estimates)
    exact = [e * total / whole for e in estimates]
    shares = [int(x) for x in exact]
    rest = total - sum(shares)
    for index in sorted(range(len(exact)), key=lambda i: exact[i] - shares[i], reverse=True)[:rest]:
        shares[index] += 1
    return shares


def _views(parts: Sequence[RequestPart], envelope: RequestEnvelope, *, whole_text: bool) -> list[PartView]:
    tokens = apportion([p.tokens for p in parts], envelope.gauge_tokens)
    cached_parts = cached_prefix(tokens, envelope)
    breakpoints = set(envelope.breakpoints)
    return [PartView(part.kind, part.role, part.origin, share, index < cached_parts,
                     part.text if whole_text else head_and_tail(part.text), len(part.text),
                     breakpoint=index in breakpoints)
            for index, (part, share) in enumerate(zip(parts, tokens))]


# How far a breakpoint's running total (our estimate) may be from what the server read from the
# cache (its count) for the read to be taken as ending there: two tokenizers weigh parts apart.
BREAKPOINT_TOLERANCE = 0.15


def cached_prefix(shares: Sequence[int], envelope: RequestEnvelope) -> int:
    """How many parts, from the first, the prompt cache served. A cache serves a prefix: with
    breakpoints, up to the last one the usage confirms (its running total within
    ``BREAKPOINT_TOLERANCE`` of what the server read: the cache reads up to a breakpoint); without
    (OpenAI-style automatic prefix caching), or when none is near, the parts wholly inside what
    was read."""
    read = envelope.cache_read_tokens or 0
    if read <= 0:
        return 0
    # The parts' shares add up to the gauge's figure, which stands on the server's last count:
    # what it read is compared with them as it is.
    served = float(read)
    running: list[int] = []
    total = 0
    for share in shares:
        total += share
        running.append(total)
    confirmed = [i for i in envelope.breakpoints
                 if 0 <= i < len(running) and abs(running[i] - served) <= BREAKPOINT_TOLERANCE * served]
    if confirmed:
        return max(confirmed) + 1
    inside = 0
    while inside < len(running) and 0 < running[inside] <= served:
        inside += 1
    return inside


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)

"""The policy what-if: a recorded session replayed offline under other context settings.

The recorded replies and tool outputs stand; what changes is what the context engine does
with them. Each policy gets a fresh ``ContextEngine`` (the live session's own service over
``ContextCore``: the same lines, the same clearing, compaction and fallback decisions, in the
same order as before a live request), fed the transcript's messages in order. Where the live
session called a model, the replay calls none:

- a compaction's summary is the extractive one (``app/context/summarizer.py``), and with
  ``summarizer="memory"`` the session memory's updates are extractive too, so a compaction
  from the memory keeps the latest messages verbatim as it would live;
- a model call's usage is the engine's own estimate of the request, split as the recorded
  provider split it: the prefix shared with the previous request read from the cache, the
  rest written to it when the recorded run ever reported cache writes (else billed as
  uncached input), and the recorded reply's output tokens.

What the transcript does not hold stands in: the fixed part of every request (system
prompt, memory files, tool definitions) is a text of the token count the recorded gauge
showed for it; settings the transcript does not record (micro-compaction's, the tool output
cap) are tidegauge's defaults unless the policy names them.

Only files inside the session's own ``tool-results/`` folder are read back (a larger
``max_output`` needs the full outputs the recorded run cut), bounded, without following
links: a transcript naming any other path gets its recorded text, nothing more.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Sequence

from app.context.engine import ContextEngine, EngineConfig
from app.context.memory import MemoryBundle
from app.context.prices import Price, cost_usd, price_for
from app.context.pruning import is_cleared
from app.context.summarizer import extractive_summary
from app.context.tokens import count_tokens, estimate_message
from app.context.truncation import truncate_head_tail
from app.kernel.events import CompactionEvent, Event
from app.kernel.messages import Message, TextBlock, ToolResultBlock
from app.kernel.private_files import read_private_ends
from app.kernel.usage import Usage
from app.providers.base import ModelRequest
from app.session.transcript import HistoryLine, MessageLine, parse_line

__all__ = ["DEFAULT_MAX_OUTPUT", "MicroCompact", "Policy", "PolicyError", "Recording", "WhatIfCurve",
           "load_recording", "parse_policy", "run_whatif"]

Summarizer = Literal["memory", "extractive"]

# Defaults of the settings a transcript does not record (app/wiring/config.py's).
DEFAULT_MAX_OUTPUT = 40_000
DEFAULT_MEMORY_UPDATE_TOKENS = 10_000
# A saved full output is read back at most this far (a head and a tail of the cap each).
MAX_SAVED_READ = 64 * 1024 * 1024
RECORDED = "recorded"
_ANY_ASSISTANT = Message.assistant_text("")
# The usage agents a policy changes: the main requests, compactions, memory updates.
_COUNTED_AGENTS = ("main", "compact", "memory")


class PolicyError(ValueError):
    """A policy that cannot be replayed; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class MicroCompact:
    """Micro-compaction's settings (None: the default); ``off``: never clears."""

    off: bool = False
    idle_minutes: float | None = None
    keep_latest: int | None = None
    keep_tokens: int | None = None
    min_free: int | None = None


@dataclass(frozen=True)
class Policy:
    """What to change; a field left None keeps the recorded run's figure (or the default)."""

    name: str
    window: int | None = None
    auto_compact: float | None = None  # the auto-compact line as a fraction of the window
    warning: float | None = None  # the warning line as a fraction of the window
    max_output: int | None = None  # characters of a tool output kept (0: no cut)
    micro: MicroCompact | None = None
    summarizer: Summarizer | None = None


@dataclass
class WhatIfCurve:
    """One policy's outcome: the curve (context after each model call) and its totals."""

    name: str
    compactions: int
    peak_tokens: int
    input_tokens: int
    cost_usd: float | None
    points: list[tuple[int, int]]
    window: int
    warning_line: int
    auto_compact_line: int
    blocking_line: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "compactions": self.compactions, "peak_tokens": self.peak_tokens,
                "input_tokens": self.input_tokens, "cost_usd": self.cost_usd,
                "points": [[n, tokens] for n, tokens in self.points],
                "lines": {"window": self.window, "warning": self.warning_line,
                          "auto_compact": self.auto_compact_line, "blocking": self.blocking_line}}


# ---- the recording: what the transcript says, once, shared by every policy ----

@dataclass(frozen=True)
class _Append:
    message: Message
    ts: float
    call: bool = False  # an assistant message a completed model call produced
    output_tokens: int | None = None


@dataclass(frozen=True)
class _MergeUser:
    blocks: list[Any]
    ts: float


@dataclass(frozen=True)
class _Reset:
    ts: float


_Step = _Append | _MergeUser | _Reset


@dataclass
class Recording:
    session_id: str
    model: str
    steps: list[_Step]
    recorded: WhatIfCurve
    fixed_tokens: int
    budget: int
    compact_max_output: int
    summarizer: Summarizer
    cache_writes: bool
    price: Price | None
    tool_results_dir: Path | None
    usages: list[dict[str, Any]] = field(default_factory=list)


def load_recording(transcript: Path, *, session_id: str = "", model: str = "",
                   tool_results_dir: Path | None = None,
                   price_overrides: dict[str, dict[str, Any]] | None = None,
                   price: Price | None = None) -> Recording:
    """Read a transcript into the steps a replay feeds the engine and the recorded curve
    (``price``: the live session's own; else the catalogue's for the model)."""
    lines = _read_lines(transcript)
    steps: list[_Step] = []
    live: list[Message] = []  # the recorded live history's last message, to see what a merge added
    points: list[tuple[int, int]] = []
    usages: list[dict[str, Any]] = []
    compactions = 0
    thresholds: dict[str, Any] | None = None
    fixed = 0
    memory_updates = False
    pending: int | None = None  # index in steps of the last assistant message, until its call is known
    for line in lines:
        if isinstance(line, MessageLine):
            pending = None
            live = [line.message]
            steps.append(_Append(line.message, line.ts))
            if line.message.role == "assistant":
                pending = len(steps) - 1
        elif isinstance(line, _History):
            if line.reason == "merge_user":
                # what the user typed into a trailing user message: the blocks the merge added
                merged = line.messages()
                if live and merged and live[-1].role == "user":
                    added = merged[-1].content[len(live[-1].content):]
                    if added:
                        steps.append(_MergeUser(list(added), line.ts))
                live = merged[-1:]
            elif line.reason == "reset":
                steps.append(_Reset(line.ts))
                live = []
            else:
                live = [_ANY_ASSISTANT]  # the recorded policy's change: only the last message's role matters
        elif isinstance(line, _Event):
            event = line.event
            kind = event.get("type")
            if kind == "usage" and event.get("agent") in _COUNTED_AGENTS:
                usages.append(event)
                if event.get("agent") == "main" and pending is not None:
                    step = steps[pending]
                    assert isinstance(step, _Append)
                    steps[pending] = replace(step, output_tokens=_int(event.get("output_tokens")))
            elif kind == "chart_point" and event.get("kind") == "call":
                points.append((len(points) + 1, _int(event.get("tokens")) or 0))
                if pending is not None:
                    step = steps[pending]
                    assert isinstance(step, _Append)
                    steps[pending] = replace(step, call=True)
                    pending = None
            elif kind == "compaction" and event.get("ok"):
                compactions += 1
            elif kind == "session_memory" and event.get("ok"):
                memory_updates = True
            elif kind == "session" and not model and isinstance(event.get("model"), str):
                model = event["model"]  # a session whose meta.json has none
            elif kind == "context" and thresholds is None and isinstance(event.get("thresholds"), dict):
                thresholds = event["thresholds"]
                breakdown = event.get("breakdown") or {}
                fixed = sum(_int(breakdown.get(part)) or 0 for part in ("system", "memory", "tools"))
    if thresholds is None:
        raise PolicyError(f"session {session_id or transcript}: its transcript holds no context figures "
                          "(nothing was asked in it)")
    window = _int(thresholds.get("window")) or 0
    reserve = _int(thresholds.get("reserve")) or 0
    lines_of = {k: _int(thresholds.get(k)) or 0 for k in ("warning_line", "auto_compact_line", "blocking_line")}
    cache_writes = any((_int(u.get("cache_write_tokens")) or 0) > 0 for u in usages)
    price = price if price is not None else _price(model, price_overrides, usages)
    recorded = WhatIfCurve(
        name=RECORDED, compactions=compactions, peak_tokens=max((t for _, t in points), default=0),
        input_tokens=sum(_total_input(u) for u in usages),
        cost_usd=_recorded_cost(usages, price), points=points, window=window,
        warning_line=lines_of["warning_line"], auto_compact_line=lines_of["auto_compact_line"],
        blocking_line=lines_of["blocking_line"])
    return Recording(session_id=session_id, model=model, steps=steps, recorded=recorded, fixed_tokens=fixed,
                     budget=lines_of["auto_compact_line"], compact_max_output=reserve or 8_000,
                     summarizer="memory" if memory_updates else "extractive", cache_writes=cache_writes,
                     price=price, tool_results_dir=tool_results_dir, usages=usages)


# The lines a replay needs parsed into models; the rest stay plain JSON (a history line's
# messages are needed only for a merge of what the user typed).
_EVENT_PREFIX = b'{"kind":"event"'
_HISTORY_PREFIX = b'{"kind":"history"'
_MESSAGE_PREFIX = b'{"kind":"message"'
_EVENT_TYPES = tuple(b'"type":"%s"' % t for t in (b"usage", b"chart_point", b"compaction", b"session_memory",
                                                   b"session", b"context"))  # context last: read once


@dataclass(frozen=True)
class _Event:
    ts: float
    event: dict[str, Any]


@dataclass(frozen=True)
class _History:
    reason: str
    ts: float
    raw: bytes

    def messages(self) -> list[Message]:
        line = parse_line(self.raw)
        return line.messages if isinstance(line, HistoryLine) else []


def _read_lines(transcript: Path) -> list[MessageLine | _History | _Event]:
    """The transcript's lines, a bad or torn one skipped (as a resume skips it); the history
    lines' messages left unparsed until needed: a long session's replay reads mostly events."""
    out: list[MessageLine | _History | _Event] = []
    seen_context = False  # only the first context event is read (the recorded lines and fixed part)
    try:
        f = open(transcript, "rb")
    except OSError as err:
        raise PolicyError(f"transcript {transcript}: cannot read ({err.strerror or err})") from None
    with f:
        for raw in f:
            body = raw.strip()
            if not body:
                continue
            try:
                if body.startswith(_EVENT_PREFIX):
                    # most events are of no use here: not even parsed (a line naming a wanted type
                    # anywhere is parsed, and its real type checked after)
                    wanted = _EVENT_TYPES if not seen_context else _EVENT_TYPES[:-1]
                    if not any(t in body for t in wanted):
                        continue
                if body.startswith(_EVENT_PREFIX) or body.startswith(_HISTORY_PREFIX):
                    data = json.loads(body)
                    if not isinstance(data, dict):
                        continue
                    if data.get("kind") == "event" and isinstance(data.get("event"), dict):
                        seen_context = seen_context or data["event"].get("type") == "context"
                        out.append(_Event(float(data.get("ts") or 0), data["event"]))
                    elif data.get("kind") == "history":
                        out.append(_History(str(data.get("reason")), float(data.get("ts") or 0), body))
                    continue
                if body.startswith(_MESSAGE_PREFIX):
                    out.append(MessageLine.model_validate_json(body))
            except Exception:  # anything at all: a damaged line is skipped, as a resume skips it
                continue
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _total_input(usage: dict[str, Any]) -> int:
    return sum(_int(usage.get(k)) or 0 for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens"))


def _usage_of(event: dict[str, Any]) -> Usage:
    return Usage(input_tokens=_int(event.get("input_tokens")), cache_read_tokens=_int(event.get("cache_read_tokens")),
                 cache_write_tokens=_int(event.get("cache_write_tokens")),
                 output_tokens=_int(event.get("output_tokens")))


def _price(model: str, overrides: dict[str, dict[str, Any]] | None, usages: list[dict[str, Any]]) -> Price | None:
    """The catalogue's price of the recorded model (under the user's [prices]); a model it does
    not know whose every recorded call cost exactly 0 (a free provider, the demo) is free."""
    try:
        price = price_for(model, overrides) if model else None
    except ValueError:
        price = None
    if price is None and usages and all(u.get("cost_usd") == 0 for u in usages):
        return Price(0.0, 0.0, 0.0, 0.0)
    return price


def _recorded_cost(usages: list[dict[str, Any]], price: Price | None) -> float | None:
    if price is None:
        return None
    total = 0.0
    for event in usages:
        cost = cost_usd(_usage_of(event), price)
        if cost is None:
            return None
        total += cost
    return total


# ---- the policies ----

_POLICY_KEYS = ("window", "auto-compact", "warning", "max-output", "micro-compact", "summarizer")


def parse_fraction(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PolicyError(f"{what}: {text!r} is not a number (a fraction of the window, e.g. 0.8)") from None
    if not 0 < value <= 1:
        raise PolicyError(f"{what}: {text} is outside 0-1 (a fraction of the window, e.g. 0.8)")
    return value


def parse_positive(text: str, what: str, *, zero: bool = False) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise PolicyError(f"{what}: {text!r} is not a whole number") from None
    if value < 0 or (value == 0 and not zero):
        raise PolicyError(f"{what}: {text} must be {'0 or more' if zero else 'more than 0'}")
    return value


def parse_micro(text: str) -> MicroCompact:
    """``off``, or ``idle=MINUTES;keep=N;keep-tokens=N;min-free=N`` (any of them, ``;`` or ``/`` between)."""
    text = text.strip()
    if text == "off":
        return MicroCompact(off=True)
    fields: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.replace("/", ";").split(";"))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep:
            raise PolicyError(f"--micro-compact: {part!r} is not KEY=VALUE (idle, keep, keep-tokens, min-free; or off)")
        if key == "idle":
            try:
                minutes = float(value)
            except ValueError:
                raise PolicyError(f"--micro-compact idle: {value!r} is not a number of minutes") from None
            if minutes <= 0:
                raise PolicyError(f"--micro-compact idle: {value} must be more than 0 minutes")
            fields["idle_minutes"] = minutes
        elif key in ("keep", "keep-tokens", "min-free"):
            name = {"keep": "keep_latest", "keep-tokens": "keep_tokens", "min-free": "min_free"}[key]
            fields[name] = parse_positive(value.strip(), f"--micro-compact {key}", zero=True)
        else:
            raise PolicyError(f"--micro-compact: unknown setting {key!r} (idle, keep, keep-tokens, min-free; or off)")
    if not fields:
        raise PolicyError("--micro-compact: nothing given (off, or idle=MIN;keep=N;keep-tokens=N;min-free=N)")
    return MicroCompact(**fields)


def parse_summarizer(text: str) -> Summarizer:
    if text == "memory":
        return "memory"
    if text == "extractive":
        return "extractive"
    raise PolicyError(f"--summarizer: {text!r} is neither memory nor extractive")


def make_policy(*, window: str | None = None, auto_compact: str | None = None, warning: str | None = None,
                max_output: str | None = None, micro: str | None = None, summarizer: str | None = None,
                name: str | None = None) -> Policy:
    """A policy from the flags' texts, each checked (PolicyError: one line naming the flag)."""
    given = [(k, v) for k, v in zip(_POLICY_KEYS, (window, auto_compact, warning, max_output, micro, summarizer))
             if v is not None]
    return Policy(
        name=name or ",".join(f"{k}={v}" for k, v in given) or "replayed",
        window=parse_positive(window, "--window") if window is not None else None,
        auto_compact=parse_fraction(auto_compact, "--auto-compact") if auto_compact is not None else None,
        warning=parse_fraction(warning, "--warning") if warning is not None else None,
        max_output=parse_positive(max_output, "--max-output", zero=True) if max_output is not None else None,
        micro=parse_micro(micro) if micro is not None else None,
        summarizer=parse_summarizer(summarizer) if summarizer is not None else None,
    )


def parse_policy(spec: str) -> Policy:
    """``--policy "window=100000,auto-compact=0.6"``: the flags' names without dashes, comma-separated."""
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _POLICY_KEYS:
            raise PolicyError(f"--policy {spec!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(_POLICY_KEYS)}")
        if key in values:
            raise PolicyError(f"--policy {spec!r}: {key} given twice")
        values[key] = value.strip()
    if not values:
        raise PolicyError(f"--policy {spec!r}: nothing given (e.g. window=100000,auto-compact=0.6)")
    return make_policy(window=values.get("window"), auto_compact=values.get("auto-compact"),
                       warning=values.get("warning"), max_output=values.get("max-output"),
                       micro=values.get("micro-compact"), summarizer=values.get("summarizer"),
                       name=",".join(f"{k}={v}" for k, v in values.items()))


# ---- the replay ----

def run_whatif(recording: Recording, policies: Sequence[Policy]) -> list[WhatIfCurve]:
    """The recorded curve first, then each policy's replay."""
    return [recording.recorded, *(asyncio.run(_replay(recording, p)) for p in policies)]


@dataclass
class _Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def _engine_config(recording: Recording, policy: Policy) -> EngineConfig:
    window = policy.window or recording.recorded.window or 128_000
    if policy.auto_compact is not None:
        budget = max(1, int(window * policy.auto_compact))
    elif policy.window is not None and recording.recorded.window:
        # the recorded line keeps its share of the new window
        budget = max(1, int(recording.budget * window / recording.recorded.window))
    else:
        budget = recording.budget
    summarizer = policy.summarizer or recording.summarizer
    config = EngineConfig(window=window, budget=budget, compact_max_output=recording.compact_max_output,
                          memory_update_tokens=DEFAULT_MEMORY_UPDATE_TOKENS if summarizer == "memory" else 0)
    micro = policy.micro
    if micro is not None:
        if micro.off:
            config.micro_idle_minutes = float("inf")
            config.micro_min_free = 1 << 62  # a clearing never frees this much
        else:
            if micro.idle_minutes is not None:
                config.micro_idle_minutes = micro.idle_minutes
            if micro.keep_latest is not None:
                config.micro_keep_latest = micro.keep_latest
            if micro.keep_tokens is not None:
                config.micro_keep_tokens = micro.keep_tokens
            if micro.min_free is not None:
                config.micro_min_free = micro.min_free
    return config


async def _extractive_call(request: ModelRequest) -> tuple[Message, Usage]:
    """A compaction or memory update answered without a model: the extractive summary of what
    it was sent, with the usage a model would have reported for it."""
    summary = extractive_summary(list(request.messages))
    sent = count_tokens(request.system) + sum(estimate_message(m) for m in request.messages)
    return Message.assistant_text(summary), Usage(input_tokens=sent, output_tokens=count_tokens(summary))


async def _replay(recording: Recording, policy: Policy) -> WhatIfCurve:
    clock = _Clock()
    compactions = 0

    def emit(event: Event) -> None:
        nonlocal compactions
        if isinstance(event, CompactionEvent) and event.ok:
            compactions += 1

    config = _engine_config(recording, policy)
    engine = ContextEngine(system_prompt=" x" * recording.fixed_tokens, memory=MemoryBundle(), tools=[],
                           config=config, price=recording.price, compact_price=recording.price, emit=emit,
                           clock=clock, memory_summarize=_extractive_call)
    if policy.warning is not None:
        # the warning line is the one setting the live session derives instead of taking
        engine.core.set_warning_line(int(config.window * policy.warning))
    max_output = policy.max_output
    points: list[tuple[int, int]] = []
    for step in recording.steps:
        clock.now = step.ts
        if isinstance(step, _Reset):
            engine.reset()
            continue
        if isinstance(step, _MergeUser):
            _append_user_blocks(engine, step.blocks)
            continue
        message = step.message
        if message.role == "assistant" and step.call:
            await engine.before_request(_extractive_call)
            await engine.wait_memory_update()
            request_tokens = engine.core.projected()
            cached = min(engine.core.cached_prefix, request_tokens)
            rest = request_tokens - cached
            engine.append(message)
            output = step.output_tokens if step.output_tokens is not None else estimate_message(message)
            usage = Usage(input_tokens=0 if recording.cache_writes else rest, cache_read_tokens=cached,
                          cache_write_tokens=rest if recording.cache_writes else 0, output_tokens=output)
            engine.record_usage("main", usage, recording.price)
            point = engine.core.note_model_call()
            points.append((len(points) + 1, point.tokens))
        elif message.role == "user" and message.tool_results:
            engine.append(_with_results_cut(engine, message, max_output, recording))
        elif message.role == "user" and engine.history and engine.history[-1].role == "user":
            _append_user_blocks(engine, list(message.content))  # merged, as the live session merges it
        else:
            engine.append(message)
    await engine.cancel_background()
    t = engine.core.thresholds
    total = engine.core.ledger.total()
    cost = total.cost_usd if recording.price is not None else None
    return WhatIfCurve(name=policy.name, compactions=compactions, peak_tokens=max((p for _, p in points), default=0),
                       input_tokens=total.input_tokens, cost_usd=cost, points=points, window=t.window,
                       warning_line=t.warning_line, auto_compact_line=t.auto_compact_line,
                       blocking_line=t.blocking_line)


def _typed_blocks(blocks: Sequence[Any]) -> list[TextBlock]:
    return [b for b in blocks if isinstance(b, TextBlock) and b.user_message_id and not b.in_summary]


def _append_user_blocks(engine: ContextEngine, blocks: list[Any]) -> None:
    """What the user typed goes in as the live session puts it (merged into a trailing user message)."""
    typed = _typed_blocks(blocks)
    others = [b for b in blocks if b not in typed]
    if typed and all(isinstance(b, TextBlock) for b in others):
        engine.append_user_text("\n".join(b.text for b in typed), [b for b in others if isinstance(b, TextBlock)])
    else:
        engine.append(Message(role="user", content=list(blocks)))


def _with_results_cut(engine: ContextEngine, message: Message, max_output: int | None,
                      recording: Recording) -> Message:
    """The tool results as this policy's registry and engine would have kept them."""
    uses = {u.id: u.name for m in reversed(engine.history[-2:]) if m.role == "assistant" for u in m.tool_uses}
    blocks: list[Any] = []
    results: list[ToolResultBlock] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock) and not is_cleared(block):
            block = _recut(block, max_output, recording.tool_results_dir)
            pending = [Message(role="user", content=list(results))] if results else []
            block = engine.fit_tool_result(block, uses.get(block.tool_use_id, "tool"), pending)
            results.append(block)
        blocks.append(block)
    if all(a is b for a, b in zip(blocks, message.content)):
        return message  # unchanged: its token count, made once, serves every policy
    return message.copy_with(blocks)


def _recut(block: ToolResultBlock, max_output: int | None, tool_results_dir: Path | None) -> ToolResultBlock:
    if max_output is None:
        return block  # the recorded cut stands
    full = _saved_output(block.full_output_path, max_output, tool_results_dir) if block.full_output_path else None
    if full is None:
        text, total = block.content, None
    else:
        text, total = full
    if max_output > 0 and len(text) > max_output:
        text = truncate_head_tail(text, max_output, block.full_output_path, total)
    cut = block.full_output_path if (full is not None and total is not None and len(text) < total) else None
    return ToolResultBlock(tool_use_id=block.tool_use_id, content=text, is_error=block.is_error,
                           full_output_path=cut or (block.full_output_path if full is None else None))


def _saved_output(path_text: str, max_output: int, tool_results_dir: Path | None) -> tuple[str, int] | None:
    """The saved full output (its text, or only its head and tail when only those can be kept,
    and its size), read only from the session's own tool-results folder; None otherwise."""
    if tool_results_dir is None:
        return None
    try:
        folder = tool_results_dir.resolve(strict=True)
        path = Path(path_text)
        # resolved: a link inside the folder that leads out of it is outside too
        if not path.is_absolute() or folder not in path.resolve(strict=True).parents:
            return None
        limit = MAX_SAVED_READ if max_output <= 0 else max_output
        head, tail, size = read_private_ends(path, limit, limit)
    except (OSError, RuntimeError):
        return None
    # bytes stand in for characters in the size of an output read only by its ends
    return head.decode("utf-8", errors="replace") + tail.decode("utf-8", errors="replace"), size


def sparkline(points: Sequence[tuple[int, int]], top: int, width: int = 40) -> str:
    """The curve in block characters, ``width`` wide at most (each a bucket's maximum)."""
    if not points:
        return ""
    bars = "▁▂▃▄▅▆▇█"
    values = [t for _, t in points]
    buckets = min(width, len(values))
    out = []
    for i in range(buckets):
        chunk = values[i * len(values) // buckets:(i + 1) * len(values) // buckets] or [values[-1]]
        level = max(chunk) / top if top > 0 else 0
        out.append(bars[min(len(bars) - 1, max(0, int(level * (len(bars) - 1) + 0.5)))])
    return "".join(out)


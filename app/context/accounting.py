"""How big is the context now, and how big will the next request be.

The exact figure is the last call's usage (total input incl. cache + output);
the projection adds a tiktoken estimate of what was appended since, scaled by
how the server counted the last request against our estimate of it (its
tokenizer is not cl100k). Each message is estimated once (cached on the
message) and sums are kept incrementally, so every call costs O(new messages),
not O(history).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from app.kernel.messages import Message, ToolResultBlock, ToolSpec
from app.kernel.usage import Usage

from app.context import tokens as _tokens

BREAKDOWN_KEYS = ("system", "memory", "tools", "user", "assistant", "tool_results")


# Usage is checked, not trusted (a proxy once reported 13 input tokens for a request of
# about 950; a hostile server 10**15 or negative counts). A figure is set aside when:
USAGE_WINDOW_FACTOR = 4  # the context it implies is over this many times the window,
MAX_PLAUSIBLE_TOKENS = 10_000_000  # (or over this when the window is not known),
USAGE_FLOOR_RATIO = 0.25  # or the input is under this share of our estimate of the request
USAGE_FLOOR_MARGIN = 256  # and under it by at least this many tokens (small requests vary).

# Calibration: a server whose tokenizer is not cl100k (SmolLM2's counted 4-22% more on
# a local llama.cpp server) counts what we append at a steady ratio to our estimate of it; the
# estimate of what was appended since the last figure is scaled by that ratio. It is measured on
# the growth between two figures (the server's count of the messages appended between them over our
# estimate of the same messages): the fixed part (tools, system prompt) is framed by each server's
# chat template its own way, which says nothing about the next tool result. Until one growth was
# measured, the ratio over the whole request stands in. With no figure for the history (after a
# compaction, a clearing, a drop) the whole estimate is scaled by the whole last request's ratio:
# the same fixed part, framed the same way, and text. A ratio outside these bounds is not a
# tokenizer's: the server added or dropped whole parts (a chat template that leaves tool results
# out, its own context editing), and it is not applied.
CALIBRATION_BOUNDS = (0.5, 2.0)
# Below this our estimate of a request is mostly per-message overhead guesses, not text; below the
# second, a growth is too small to tell a tokenizer from the few tokens a template adds around a reply.
CALIBRATION_MIN_TOKENS = 256
CALIBRATION_MIN_GROWTH = 128
# Within this of 1 the server counts as we do (a cloud model's tokenizer close to cl100k): the
# estimate is left as it is, so the gauge does not move on the noise of one request.
CALIBRATION_DEAD_BAND = 0.03


# "auto-compact in N–M model calls": how far apart the forecast may be from the recent calls'
# growths. The range runs from the biggest recent growth (fewest calls) to the lower quartile (most
# calls), the middle figure from the median: one big read widens the range's near end and does not
# move the middle, so the figure does not jump on it.
GROWTH_WINDOW = 8  # growths measured: the last this many model calls since the last restart
GROWTH_MIN_SAMPLES = 3  # no figure below this many (two calls' "median" is their mean)


@dataclass(frozen=True)
class CallsToLine:
    """Model calls that still run before the context reaches a line, at the recent calls' growth
    (each call's growth: its reply and the results of the tools it called): ``fewest`` if every
    call grows as much as the biggest recent one, ``most`` at the lower quartile, ``typical`` at
    the median. All 0 at the line. A single tool result bigger than the remaining room reaches the
    line sooner than any pace: the range is about the pace, not about one result."""

    typical: int
    fewest: int
    most: int

    def less_one(self) -> "CallsToLine":
        """One growth of the pace is not a model call's (tool results still to come before the next)."""
        return CallsToLine(max(0, self.typical - 1), max(0, self.fewest - 1), max(0, self.most - 1))


def _quantile(ordered: Sequence[int], share: float) -> float:
    """The ``share`` quantile of sorted values, interpolated between neighbours."""
    at = (len(ordered) - 1) * share
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass(frozen=True)
class UsageCheck:
    """What ``record_usage`` made of a call's usage.

    ``trusted`` False: the figure was set aside and our estimate stands in.
    ``flag`` True the first time each kind of problem is seen in this accounting:
    the engine emits one UsageDistrustedEvent then (later ones are silent).
    """

    trusted: bool
    flag: bool = False
    kind: str = ""  # "negative", "above_window", "below_estimate"
    reason: str = ""  # one line for the user
    reported_tokens: int | None = None
    estimated_tokens: int = 0


@dataclass(frozen=True)
class Projection:
    exact_tokens: int | None  # last figure from usage; None when there is none
    estimated_tokens: int  # estimate of what the exact figure does not cover
    projected_tokens: int  # what the next request will weigh: this decides
    # The server's count over ours for the last request, applied to ``estimated_tokens`` (None:
    # the estimate is cl100k's as it is).
    estimate_scale: float | None = None


class _RunningSums:
    """Sums over a growing history, extended by the messages appended since.

    It recognises "the same history, grown" by the identity of the list and of
    its first and last summed messages; anything else (a new list from
    compaction, pruning or a drop) is re-summed. ``invalidate`` forces it.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.length = 0
        self.source: Sequence[Message] | None = None
        self.first: Message | None = None
        self.last: Message | None = None
        self.total = 0
        self.by_part = {"user": 0, "assistant": 0, "tool_results": 0}

    def _matches(self, history: Sequence[Message]) -> bool:
        if self.length == 0:
            return True
        return (history is self.source and len(history) >= self.length
                and history[0] is self.first and history[self.length - 1] is self.last)

    def update(self, history: Sequence[Message]) -> None:
        if not self._matches(history):
            self.clear()
        for msg in history[self.length:]:
            est = _tokens.estimate_message(msg)
            self.total += est
            if msg.role == "assistant":
                self.by_part["assistant"] += est
            elif not any(isinstance(b, ToolResultBlock) for b in msg.content):
                self.by_part["user"] += est
            else:
                # Tool results plus maybe some text: count only the (short) text again.
                text = sum(tokens for b, tokens in zip(msg.content, _tokens.block_estimates(msg))
                           if not isinstance(b, ToolResultBlock))
                text = min(text, est)
                self.by_part["user"] += text
                self.by_part["tool_results"] += est - text
        self.length = len(history)
        self.source = history
        self.first = history[0] if history else None
        self.last = history[-1] if history else None


class _TextCount:
    """One-entry memo for the system prompt / memory text."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.tokens = 0

    def __call__(self, text: str) -> int:
        if text is not self.text and text != self.text:
            self.text = text
            self.tokens = _tokens.count_tokens(text)
        return self.tokens


class ContextAccounting:
    """The exact figure, the projection, the breakdown and the growth history."""

    def __init__(self, window: int | None = None) -> None:
        self.exact_tokens: int | None = None
        self.exact_history_len = 0
        self.points: list[int] = []  # context size after each model call, and after each drop
        self._run_start = 0  # index in ``points`` where the current pace began (the last drop)
        self._sums = _RunningSums()
        self._system = _TextCount()
        self._memory = _TextCount()
        # tokens the server's context editing cleared from the last request, by part
        self.server_cleared: dict[str, int] = {}
        # The model's window, for the plausibility check of usage (None: an absolute cap).
        self.window = window
        # Our own estimate of the last request projected (what the next usage should cover).
        self._request_estimate: int | None = None
        self._flagged: set[str] = set()
        # The server's count over our estimate (see CALIBRATION_BOUNDS): of what is appended
        # (estimate_scale), of a whole request (request_scale). Not saved: a resumed session may
        # talk to another server, so it measures afresh.
        self.estimate_scale = 1.0
        self.request_scale = 1.0
        self._scale_from_growth = False  # measured on a growth (not the whole-request first guess)
        # The last request projected from an exact figure: (that figure, our estimate of what was
        # appended since). Its usage then tells how the server counted those messages.
        self._request_growth: tuple[int, int] | None = None

    # ---- exact figure ----

    def record_usage(self, usage: Usage, history_len: int) -> UsageCheck:
        """Record a call's usage; ``history_len`` is the history length the figure
        covers (including the assistant message that call produced).

        The figure is checked first (see ``check_usage``): one that is negative, far
        above the window or far below our estimate of the request just sent is set
        aside, and the projection falls back to the estimate of the whole request, so
        a bad figure can never trigger a cut or a compaction by itself.
        """
        check = self.check_usage(usage)
        exact = usage.context_tokens if check.trusted else None
        if exact is None:
            self.exact_tokens = None
            self.exact_history_len = 0
            self._request_growth = None
        else:
            self.exact_tokens = exact
            self.exact_history_len = history_len
            self._calibrate(usage.total_input)
        return check

    def _calibrate(self, reported_input: int | None) -> None:
        """The server counted our last request as ``reported_input`` tokens: how it counted what
        was appended since the figure before (or, until that is known, the whole request) against
        our estimate of the same scales the estimates until the next figure."""
        growth, self._request_growth = self._request_growth, None
        if not reported_input:
            return
        whole = None
        if self._request_estimate is not None and self._request_estimate >= CALIBRATION_MIN_TOKENS:
            whole = _bounded_ratio(reported_input / self._request_estimate)
            if whole is not None:
                self.request_scale = whole
        if growth is not None and growth[1] >= CALIBRATION_MIN_GROWTH:
            anchor, since = growth
            grown = _bounded_ratio((reported_input - anchor) / since)
            if grown is not None:
                self.estimate_scale, self._scale_from_growth = grown, True
            return  # a growth no tokenizer explains keeps the scale measured before
        if whole is not None and not self._scale_from_growth:
            self.estimate_scale = whole

    def server_shrank_the_request(self) -> None:
        """The server compacted or edited the request it got (provider-side context management):
        a figure far below our estimate of what we sent is expected, not suspicious."""
        self._request_estimate = None
        self._request_growth = None

    def check_usage(self, usage: Usage) -> UsageCheck:
        """Is this usage plausible for the request we just projected? (See the constants above.)"""
        reported = usage.context_tokens
        estimate = self._request_estimate or 0
        if reported is None:
            return UsageCheck(trusted=True, estimated_tokens=estimate)
        fields = (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens)
        ceiling = self.window * USAGE_WINDOW_FACTOR if self.window else MAX_PLAUSIBLE_TOKENS
        total_input = usage.total_input or 0
        if any(v is not None and v < 0 for v in fields):
            kind, reason = "negative", f"the server reported negative usage ({_fields_text(usage)})"
        elif reported > ceiling:
            kind = "above_window"
            where = f"{USAGE_WINDOW_FACTOR}x the {self.window:,}-token window" if self.window else f"{ceiling:,} tokens"
            reason = f"the server reported a context of {reported:,} tokens, over {where}"
        elif (self._request_estimate is not None and total_input < estimate * USAGE_FLOOR_RATIO
              and estimate - total_input >= USAGE_FLOOR_MARGIN):
            kind = "below_estimate"
            reason = (f"the server reported {total_input:,} input tokens for a request we estimate at "
                      f"~{estimate:,} (system prompt and tools included)")
        else:
            return UsageCheck(trusted=True, reported_tokens=reported, estimated_tokens=estimate)
        first = kind not in self._flagged
        self._flagged.add(kind)
        return UsageCheck(trusted=False, flag=first, kind=kind,
                          reason=reason + "; using our own estimate instead",
                          reported_tokens=reported, estimated_tokens=estimate)

    def invalidate(self) -> None:
        """The history was replaced (compaction, pruning, drop): estimate afresh."""
        self.exact_tokens = None
        self.exact_history_len = 0
        self._request_growth = None
        self._sums.clear()
        self.server_cleared = {}  # the server reports afresh for the new history

    def reset(self) -> None:
        """A conversation reset: forget everything, growth history included."""
        self.invalidate()
        self.points.clear()
        self._run_start = 0

    # ---- projection ----

    def copy(self) -> ContextAccounting:
        """A copy to project with and throw away (a forecast): this one's running sums and the
        estimate the next usage is checked against stay as they are."""
        twin = copy.copy(self)
        twin._sums = copy.copy(self._sums)
        twin._sums.by_part = dict(self._sums.by_part)
        twin._system = copy.copy(self._system)
        twin._memory = copy.copy(self._memory)
        return twin

    def project(self, system: str, tools: Sequence[ToolSpec], history: Sequence[Message],
                memory_text: str = "") -> Projection:
        """The size of the next request.

        ``memory_text`` is counted only when there is no exact figure; pass ""
        when ``system`` already contains it. The projection is never less than the
        fixed part of the request (system prompt, memory, tools): a server's figure
        below what we know we send is not believed.
        """
        fixed = self._system(system) + self._memory(memory_text) + _tokens.estimate_tools(tools)
        self._sums.update(history)
        # Our own estimate of this request, kept to check the usage that comes back for it.
        self._request_estimate = fixed + self._sums.total
        if self.exact_tokens is not None and self.exact_history_len <= len(history):
            since = _tokens.estimate_messages(history[self.exact_history_len:])
            self._request_growth = (self.exact_tokens, since)
            scale = self.estimate_scale if since and self.estimate_scale != 1.0 else None
            if scale is not None:
                since = round(since * scale)
            projected = max(self.exact_tokens + since, fixed)
            return Projection(self.exact_tokens, projected - self.exact_tokens, projected, scale)
        self._request_growth = None
        # what the server's context editing cleared is not in the request it sees
        whole = self._request_estimate - sum(self.server_cleared.values())
        scale = self.request_scale if self.request_scale != 1.0 else None
        if scale is not None:
            whole = round(whole * scale)
        whole = max(fixed, whole)
        return Projection(None, whole, whole, scale)

    def tool_result_tokens(self, history: Sequence[Message]) -> int:
        """Estimated tokens of the messages holding tool results (their other blocks left out),
        kept up to date as the history grows: no clearing of ``history`` can free more."""
        self._sums.update(history)
        return self._sums.by_part["tool_results"]

    def breakdown(self, system: str, memory_text: str, tools: Sequence[ToolSpec],
                  history: Sequence[Message],
                  tool_owner: Callable[[str], str | None] | None = None) -> dict[str, int]:
        """Estimated tokens by part, for the dashboard (never sent to the model).

        With ``tool_owner`` (tool name -> MCP server, None for the built-ins) each
        server's definitions get their own ``mcp:<server>`` key and ``tools`` keeps
        the rest, so the parts still add up to the whole.
        """
        self._sums.update(history)
        parts = {
            "system": self._system(system),
            "memory": self._memory(memory_text),
            "tools": _tokens.estimate_tools(tools),
            **self._sums.by_part,
        }
        if tool_owner is not None:
            by_server: dict[str, list[ToolSpec]] = {}
            for spec in tools:
                owner = tool_owner(spec.name)
                if owner is not None:
                    by_server.setdefault(owner, []).append(spec)
            for owner, specs in by_server.items():
                tokens = _tokens.estimate_tools(specs)
                parts[f"mcp:{owner}"] = tokens
                parts["tools"] -= tokens
        for part, cleared in self.server_cleared.items():  # as the server saw it
            parts[part] = max(0, parts[part] - cleared)
        return parts

    def note_server_cleared(self, by_part: dict[str, int]) -> None:
        """The server's context editing cleared these tokens (by breakdown part) from
        the last request; the local history stays whole, the breakdown shows what was sent."""
        self.server_cleared = {part: tokens for part, tokens in by_part.items() if tokens > 0}

    # ---- growth ----

    def record_point(self, projected: int) -> None:
        """The context size after a model call (one point of the gauge's chart)."""
        self.points.append(int(projected))

    def restart_growth(self, projected: int) -> None:
        """A compaction, a clearing or a reset left the context at ``projected``: the pace of
        the old context says nothing about the new one, so it is measured afresh from here
        (even when the new size is not below the last point)."""
        self._run_start = len(self.points)
        self.points.append(int(projected))

    def recent_growths(self) -> list[int]:
        """The growth of each model call since the last restart, oldest first (at most
        GROWTH_WINDOW of them: the pace of the work now, not of an hour ago)."""
        run = self.points[self._run_start:]
        return [b - a for a, b in zip(run, run[1:])][-GROWTH_WINDOW:]

    def calls_to(self, line: int, projected: int) -> CallsToLine | None:
        """Model calls until ``projected`` reaches ``line``, as a range (see CallsToLine).

        None until GROWTH_MIN_SAMPLES calls were measured since the last compaction, clearing or
        reset; when the context is not steadily growing (the lower quartile of the growths is not
        above 0); and when even the slow end would lie further ahead than the calls measured: a
        pace seen over three calls says little about the next thirty (the demo's file reads grow
        as it goes, and every longer forecast from their start came too late)."""
        if projected >= line:
            return CallsToLine(0, 0, 0)
        growths = sorted(self.recent_growths())
        if len(growths) < GROWTH_MIN_SAMPLES:
            return None
        slow = _quantile(growths, 0.25)
        if slow <= 0:
            return None
        left = line - projected
        most = math.ceil(left / slow)
        if most > len(growths):
            return None
        typical = math.ceil(left / _quantile(growths, 0.5))
        fewest = math.ceil(left / growths[-1])
        return CallsToLine(typical=typical, fewest=fewest, most=most)

    def turns_to(self, line: int, projected: int) -> int | None:
        """The typical figure of ``calls_to`` (0 at the line; None when no range is shown)."""
        calls = self.calls_to(line, projected)
        return calls.typical if calls is not None else None

    def restore(self, exact_tokens: int | None, history_len: int, points: Sequence[tuple[int, bool]]) -> None:
        """A resumed session: the last measured figure of the history it resumes (None: there is
        none, the estimate stands in), and its chart points in order, (tokens, a model call's)
        (any other point restarts the pace), so the figure and the calls to compact read as they
        did when the session was left."""
        self.exact_tokens = exact_tokens
        self.exact_history_len = history_len if exact_tokens is not None else 0
        self.points.clear()
        self._run_start = 0
        for tokens, call in points:
            if call:
                self.record_point(tokens)
            else:
                self.restart_growth(tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"exact_tokens": self.exact_tokens, "exact_history_len": self.exact_history_len,
                "points": list(self.points)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ContextAccounting":
        acc = cls()
        acc.exact_tokens = data.get("exact_tokens")
        acc.exact_history_len = int(data.get("exact_history_len") or 0)
        acc.points = [int(p) for p in data.get("points", [])]
        return acc


def _bounded_ratio(ratio: float) -> float | None:
    """A server's count over ours as a scale: None outside CALIBRATION_BOUNDS (no tokenizer's
    ratio), 1.0 within CALIBRATION_DEAD_BAND (it counts as we do)."""
    low, high = CALIBRATION_BOUNDS
    if not low <= ratio <= high:
        return None
    return 1.0 if abs(ratio - 1.0) <= CALIBRATION_DEAD_BAND else ratio


def _fields_text(usage: Usage) -> str:
    names = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    return ", ".join(f"{n}={getattr(usage, n)}" for n in names if getattr(usage, n) is not None)


# ---- the ledger: cumulative tokens and cost per agent ----

@dataclass
class AgentTotals:
    calls: int = 0
    input_tokens: int = 0  # all input, cache reads and writes included
    cached_tokens: int = 0  # cache reads
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False once any call had no price or no usage
    reasoning_tokens: int = 0  # of output_tokens: reasoning, where the server reported it

    # Short names (the engine reads these).
    @property
    def input(self) -> int:
        return self.input_tokens

    @property
    def cached(self) -> int:
        return self.cached_tokens

    @property
    def output(self) -> int:
        return self.output_tokens

    @property
    def cost(self) -> float:
        return self.cost_usd

    def add(self, other: "AgentTotals") -> "AgentTotals":
        return AgentTotals(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            cost_known=self.cost_known and other.cost_known,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass
class Ledger:
    """Cumulative usage by agent ("main", "compact", "memory": the session memory's updates),
    kept across resets."""

    agents: dict[str, AgentTotals] = field(default_factory=dict)

    def add(self, agent: str, usage: Usage, cost: float | None) -> AgentTotals:
        t = self.agents.setdefault(agent, AgentTotals())
        t.calls += 1
        if usage.known:
            # A negative count (a broken server) never lowers the totals.
            t.input_tokens += max(0, usage.total_input or 0)
            t.cached_tokens += max(0, usage.cache_read_tokens or 0)
            t.cache_write_tokens += max(0, usage.cache_write_tokens or 0)
            t.output_tokens += max(0, usage.output_tokens or 0)
            t.reasoning_tokens += max(0, usage.reasoning_tokens or 0)
        if cost is None:
            t.cost_known = False
        else:
            t.cost_usd += cost
        return t

    def get(self, agent: str) -> AgentTotals:
        return self.agents.get(agent, AgentTotals())

    def totals(self, agent: str | None = None) -> AgentTotals:
        """One agent's totals, or all agents' together when ``agent`` is None."""
        return self.total() if agent is None else self.get(agent)

    def total(self) -> AgentTotals:
        out = AgentTotals()
        for t in self.agents.values():
            out = out.add(t)
        return out

    @property
    def cost_usd(self) -> float:
        return self.total().cost_usd

    @property
    def compact_cost_usd(self) -> float:
        return self.get("compact").cost_usd

    @property
    def memory(self) -> AgentTotals:
        """The session memory's background updates (a line of their own)."""
        return self.get("memory")

    def to_dict(self) -> dict[str, Any]:
        return {name: vars(t).copy() for name, t in self.agents.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        return cls({name: AgentTotals(**vals) for name, vals in data.items()})

"""A small benchmark harness: side-by-side timing, pass/fail against a target, the table.

Absolute times on a shared 2-core machine drift, so most targets compare the
subject with a baseline measured in the same process, interleaved
(baseline, subject, subject, baseline, ...) so that slow phases of the
machine hit both sides alike, and the medians are compared.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Literal, Sequence

Status = Literal["pass", "fail", "skip", "error"]
Comparison = Literal["<=", ">="]


@dataclass
class Check:
    """One target and what was measured against it.

    ``value`` is the compared figure (a ratio against the baseline, or an
    absolute figure for the few bound-style targets) and passes when
    ``value <op> limit``. ``status`` is set only for skip/error; otherwise it
    follows from the comparison.
    """

    name: str
    figure: str  # what was measured, for people: "0.09 s vs 2.1 s (tiktoken of the whole)"
    target: str  # the target, for people: ">= 10x faster"
    value: float | None = None
    limit: float | None = None
    op: Comparison = "<="
    unit: str = "x"  # "x": a ratio against a baseline; anything else: an absolute bound
    reason: str = ""  # why it was skipped or errored
    forced_status: Status | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        if self.forced_status is not None:
            return self.forced_status
        return "pass" if passes(self.value, self.op, self.limit) else "fail"

    @property
    def ratio_text(self) -> str:
        if self.value is None or self.status in ("skip", "error"):
            return "—"
        if self.unit == "x":
            return f"{self.value:.2f}×"
        return f"{self.value:.3g} {self.unit}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("forced_status")
        data["status"] = self.status
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Check":
        status = data.get("status")
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "forced_status"}
        check = cls(**fields)
        if status in ("skip", "error"):
            check.forced_status = status
        return check


class Unavailable(Exception):
    """The code a benchmark exercises has not landed yet: it is skipped (never passed), with this reason."""


def passes(value: float | None, op: Comparison, limit: float | None) -> bool:
    """The target is met. A missing or NaN figure never passes."""
    if value is None or limit is None or math.isnan(value) or math.isnan(limit):
        return False
    return value <= limit if op == "<=" else value >= limit


def skipped(name: str, target: str, reason: str) -> Check:
    return Check(name=name, figure="not measured", target=target, reason=reason, forced_status="skip")


def errored(name: str, target: str, reason: str) -> Check:
    return Check(name=name, figure="benchmark crashed", target=target, reason=reason, forced_status="error")


def exit_code(checks: Sequence[Check], strict: bool = False) -> int:
    """1 when a target is missed or a benchmark crashed (or, with ``strict``, was skipped)."""
    bad: tuple[str, ...] = ("fail", "error", "skip") if strict else ("fail", "error")
    return 1 if any(c.status in bad for c in checks) else 0


# ---- timing ----


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def abba_order(reps: int) -> list[bool]:
    """Which side runs at each step, ABBA-style: True = baseline. Each side runs ``reps`` times."""
    order: list[bool] = []
    for i in range(reps):
        order += [True, False] if i % 2 == 0 else [False, True]
    return order


def interleaved(baseline: Callable[[], float], subject: Callable[[], float],
                reps: int) -> tuple[list[float], list[float]]:
    """Run both ``reps`` times, interleaved; each callable returns its own measured seconds
    (so setup can stay outside the timing). Returns (baseline times, subject times)."""
    base: list[float] = []
    subj: list[float] = []
    for is_base in abba_order(reps):
        (base if is_base else subj).append(baseline() if is_base else subject())
    return base, subj


async def interleaved_async(baseline: Callable[[], Awaitable[float]],
                            subject: Callable[[], Awaitable[float]],
                            reps: int) -> tuple[list[float], list[float]]:
    base: list[float] = []
    subj: list[float] = []
    for is_base in abba_order(reps):
        if is_base:
            base.append(await baseline())
        else:
            subj.append(await subject())
    return base, subj


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def seconds(value: float) -> str:
    """A duration for the table: 2.1 s, 83 ms, 410 µs."""
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def run_async(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


# ---- the report ----


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    try:
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    try:
        import textual

        info["textual"] = getattr(textual, "__version__", "?")
    except ImportError:
        pass
    return info


_STATUS_TEXT = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}


def format_table(checks: Sequence[Check], info: dict[str, Any] | None = None) -> str:
    """The results as a plain-text table, with the machine above and reasons below."""
    headers = ("benchmark", "figure", "target", "ratio", "result")
    rows = [(c.name, c.figure, c.target, c.ratio_text, _STATUS_TEXT[c.status]) for c in checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines: list[str] = []
    if info:
        lines.append(f"date: {info.get('date', '?')}")
        machine = f"machine: {info.get('platform', '?')}, {info.get('cpu_count', '?')} CPUs, Python {info.get('python', '?')}"
        if "textual" in info:
            machine += f", textual {info['textual']}"
        if "load_avg_1m" in info:
            machine += f", load {info['load_avg_1m']}"
        lines += [machine, ""]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines.append(fmt.format(*headers).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += [fmt.format(*row).rstrip() for row in rows]
    notes = [c for c in checks if c.reason]
    if notes:
        lines.append("")
        lines += [f"{_STATUS_TEXT[c.status]} {c.name}: {c.reason}" for c in notes]
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "fail", "skip", "error")}
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no benchmarks run")
    return "\n".join(lines)


def write_json(path: str, checks: Sequence[Check], info: dict[str, Any], quick: bool) -> None:
    payload = {"machine": info, "quick": quick, "results": [c.to_json() for c in checks],
               "exit_code": exit_code(checks)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, ensure_ascii=False)
        f.write("\n")

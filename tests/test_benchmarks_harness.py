"""The benchmark harness decides pass/fail and prints the table correctly (fake figures, no timing)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import Check, errored, exit_code, format_table, skipped  # noqa: E402


def ratio_check(value: float | None, limit: float = 2.0, op: str = "<=") -> Check:
    return Check(name="fake", figure="1 s vs 1 s", target=f"{op} {limit}×", value=value, limit=limit, op=op)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "op", "limit", "expected"),
    [
        (1.99, "<=", 2.0, "pass"),
        (2.0, "<=", 2.0, "pass"),  # the bound itself meets an "at most" target
        (2.01, "<=", 2.0, "fail"),
        (10.0, ">=", 10.0, "pass"),
        (9.99, ">=", 10.0, "fail"),
        (math.nan, "<=", 2.0, "fail"),
        (None, "<=", 2.0, "fail"),
    ],
)
def test_a_target_passes_only_when_the_figure_meets_it(value, op, limit, expected) -> None:
    assert ratio_check(value, limit, op).status == expected


def test_a_missed_target_or_a_crash_makes_the_run_exit_non_zero() -> None:
    ok = ratio_check(1.0)
    assert exit_code([ok]) == 0
    assert exit_code([ok, ratio_check(3.0)]) == 1
    assert exit_code([ok, errored("crash", "t", "boom")]) == 1


def test_a_skip_is_never_a_pass_and_fails_a_strict_run() -> None:
    skip = skipped("2 expand", "<= 1.5×", "widgets/tool_output.py does not exist yet")
    assert skip.status == "skip"
    assert exit_code([skip]) == 0
    assert exit_code([skip], strict=True) == 1


def test_the_table_shows_each_figure_ratio_and_verdict_with_the_machine() -> None:
    checks = [
        Check(name="ingest", figure="0.09 s vs 2.1 s", target=">= 10×", value=23.4, limit=10, op=">="),
        Check(name="stream", figure="3.0 s vs 1.0 s", target="<= 2.2×", value=3.0, limit=2.2),
        Check(name="compact", figure="12 ms", target="< 50 ms", value=12.0, limit=50, unit="ms"),
        skipped("expand", "<= 1.5×", "viewer not there yet"),
    ]
    info = {"date": "2026-11-29T12:00:00+00:00", "platform": "Linux-x", "cpu_count": 2, "python": "3.11.7"}
    table = format_table(checks, info)
    lines = table.splitlines()
    assert "2026-11-29" in lines[0]
    assert "2 CPUs" in lines[1] and "3.11.7" in lines[1]
    row = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in {"ingest", "stream", "compact", "expand"}}
    assert "23.40×" in row["ingest"] and row["ingest"].rstrip().endswith("PASS")
    assert "3.00×" in row["stream"] and row["stream"].rstrip().endswith("FAIL")
    assert "12 ms" in row["compact"] and row["compact"].rstrip().endswith("PASS")
    assert row["expand"].rstrip().endswith("SKIP")
    assert "SKIP expand: viewer not there yet" in table
    assert lines[-1] == "2 pass, 1 fail, 1 skip"
    # Columns line up: every verdict starts at the same column.
    starts = {line.rfind(word) for line in row.values() for word in ("PASS", "FAIL", "SKIP") if word in line}
    assert len(starts) == 1


def test_json_round_trip_keeps_the_verdicts(tmp_path: Path) -> None:
    checks = [ratio_check(1.0), ratio_check(5.0), skipped("s", "t", "why"), errored("e", "t", "boom")]
    out = tmp_path / "results.json"
    harness.write_json(str(out), checks, {"date": "d"}, quick=True)
    data = json.loads(out.read_text())
    assert [r["status"] for r in data["results"]] == ["pass", "fail", "skip", "error"]
    assert data["exit_code"] == 1 and data["quick"] is True
    again = [Check.from_json(r) for r in data["results"]]
    assert [c.status for c in again] == ["pass", "fail", "skip", "error"]


def test_interleaving_runs_both_sides_equally_in_abba_order() -> None:
    calls: list[str] = []

    def base() -> float:
        calls.append("B")
        return 1.0

    def subj() -> float:
        calls.append("S")
        return 2.0

    b, s = harness.interleaved(base, subj, reps=4)
    assert calls == list("BSSBBSSB")
    assert b == [1.0] * 4 and s == [2.0] * 4


@pytest.mark.parametrize(
    ("raised", "expected"),
    [(harness.Unavailable("app/tui.py does not exist yet"), "skip"), (RuntimeError("boom"), "error")],
)
def test_a_benchmark_that_cannot_run_is_reported_never_passed(monkeypatch, capsys, raised, expected) -> None:
    from benchmarks import run as runner

    class FakeBench:
        @staticmethod
        def run(quick: bool) -> list[Check]:
            raise raised

    monkeypatch.setitem(runner.BENCHMARKS, "bench_fake", [("fake a", "<= 2×"), ("fake b", "< 50 ms")])
    monkeypatch.setattr(runner.importlib, "import_module", lambda name: FakeBench)
    runner._run_child("bench_fake", quick=True)
    out = capsys.readouterr().out
    payload = json.loads(out.split(runner._MARKER, 1)[1].strip())
    checks = [Check.from_json(item) for item in payload]
    assert [c.name for c in checks] == ["fake a", "fake b"]
    assert {c.status for c in checks} == {expected}
    assert str(raised) in checks[0].reason
    assert exit_code(checks, strict=True) == 1

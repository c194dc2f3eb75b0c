"""The demo scripted in two orders, every forecast and ETA held to what then happened.

Each prompt goes through the headless CLI with stream-json, one session per order (``--continue``),
as tests/test_demo_orders.py runs them (its ``Sessions``). What is checked is what the user reads:

- the gauge's "auto-compact in N–M model calls": none until three calls were measured since the last
  compaction; a range shown brackets the number of model calls until the compaction that followed
  (and is never overrun by a session that did not compact); the next call's figure stays in the
  range, less the calls made since;
- the compaction's forecast of the size after: its range holds the size after (exact for a compaction
  from the session memory), and the compaction line shows it beside what happened;
- the session memory: at the end of every demo prompt its input is at most 0.2 of the main
  requests' (ledger input, cache reads included: what the compaction dialog says it cost);
- the demo's own words: counts that agree with what happened, no dashboard key in -p, the recall
  after an overflow recovery, plurals.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_in_process import run_cli

from test_demo_orders import PROMPT_OF, Run, Sessions

ORDER_A = ("errors", "summarize", "flood", "recall", "delegate")
ORDER_B = ("delegate", "recall", "flood", "summarize", "errors")
MEMORY_SHARE = 0.2


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Sessions:
    return Sessions(tmp_path_factory.mktemp("figures"))


def session_events(runs: list[Run]) -> list[dict]:
    return [e for run in runs for e in run.events]


def shown_ranges(events: list[dict]) -> list[tuple[int, int, int, int, str]]:
    """(calls made so far, fewest, middle, most, how the segment ended) for every range the gauge was
    given; a segment ends at a compaction ("compaction:<trigger>"), a reset, or the session's end."""
    calls = 0
    segment: list[tuple[int, int, int, int]] = []
    out: list[tuple[int, int, int, int, str]] = []
    for e in events:
        if e["type"] == "chart_point" and e["kind"] == "call":
            calls += 1
        elif e["type"] == "chart_point":  # a compaction, a clearing, a reset: the pace restarts
            out += [(*s, f"{e['kind']}@{calls}") for s in segment]
            segment = []
        elif e["type"] == "context" and not e.get("live") and e.get("calls_to_compact_most") is not None:
            if e["projected_tokens"] < e["thresholds"]["auto_compact_line"]:  # at the line: not a forecast
                segment.append((calls, e["calls_to_compact_fewest"], e["turns_to_compact"],
                                e["calls_to_compact_most"]))
    out += [(*s, f"end@{calls}") for s in segment]
    return out


@pytest.mark.parametrize("order", [ORDER_A, ORDER_B], ids=["-".join(ORDER_A), "-".join(ORDER_B)])
def test_every_calls_to_compact_range_held_to_what_then_happened(played: Sessions, order: tuple[str, ...]) -> None:
    events = session_events(played.run(order))
    ranges = shown_ranges(events)
    assert ranges, "the gauge never gave a range in a session that auto-compacts"
    for calls, fewest, middle, most, ended in ranges:
        assert fewest <= middle <= most, (calls, fewest, middle, most)
        how, at = ended.split("@")
        ran = int(at) - calls  # model calls that ran from there before the compaction
        if how in ("memory", "compaction"):
            assert fewest <= ran <= most, (
                f"after {calls} calls the gauge said {fewest}–{most} model calls to compact; {ran} ran first")
        elif how == "end":
            assert ran <= most, f"said at most {most} calls; {ran} ran without compacting"
    # no jump: the next figure in the same segment stays in the range before it, less the calls since
    for (c1, f1, _m1, s1, e1), (c2, _f2, m2, _s2, e2) in zip(ranges, ranges[1:]):
        if e1 == e2 and c2 > c1:
            gone = c2 - c1
            assert f1 - gone - 1 <= m2 <= s1 - gone + 1, (
                f"{f1}–{s1} after {c1} calls, then ~{m2} after {c2}: a jump beyond the stated range")


@pytest.mark.parametrize("order", [ORDER_A, ORDER_B], ids=["-".join(ORDER_A), "-".join(ORDER_B)])
def test_no_range_until_three_calls_after_a_compaction(played: Sessions, order: tuple[str, ...]) -> None:
    since = None
    for e in session_events(played.run(order)):
        if e["type"] == "chart_point":
            since = 0 if e["kind"] != "call" else (None if since is None else since + 1)
        elif e["type"] == "context" and since is not None and since < 3:
            at_line = e["projected_tokens"] >= e["thresholds"]["auto_compact_line"]
            assert e.get("calls_to_compact_most") is None or at_line, (
                f"a range {since} calls after a compaction: {e}")


@pytest.mark.parametrize("order", [ORDER_A, ORDER_B], ids=["-".join(ORDER_A), "-".join(ORDER_B)])
def test_every_compaction_forecast_holds_the_size_after(played: Sessions, order: tuple[str, ...]) -> None:
    runs = played.run(order)
    compactions = [e for e in session_events(runs) if e["type"] == "compaction" and e["ok"]
                   and e["trigger"] in ("auto", "memory")]
    assert {c["trigger"] for c in compactions} >= ({"auto", "memory"} if order == ORDER_B else {"memory"})
    notices = [e["text"] for e in session_events(runs) if e["type"] == "notice" and "forecast" in e["text"]]
    for c in compactions:
        low, high = c["forecast_tokens_after_low"], c["forecast_tokens_after_high"]
        assert low <= c["tokens_after"] <= high, (
            f"{c['trigger']}: forecast {low:,}–{high:,}, after {c['tokens_after']:,}")
        if c["trigger"] == "memory":
            assert low == high  # nothing is written: the size after is known
    assert len(notices) == len(compactions), notices  # the compaction line shows the forecast beside it


@pytest.mark.parametrize("order", [ORDER_A, ORDER_B], ids=["-".join(ORDER_A), "-".join(ORDER_B)])
def test_session_memory_costs_at_most_a_fifth_of_the_work_in_a_session(played: Sessions,
                                                                       order: tuple[str, ...]) -> None:
    main = memory = 0
    for name, run in zip(order, played.run(order)):
        by_agent = run.result["usage_by_agent"]
        main += ledger_input(by_agent.get("main", {}))
        memory += ledger_input(by_agent.get("memory", {}))
        assert memory <= MEMORY_SHARE * main, f"after {name}: memory {memory:,} of main {main:,}"


@pytest.mark.parametrize("name", list(PROMPT_OF))
def test_session_memory_costs_at_most_a_fifth_of_each_prompt_alone(played: Sessions, name: str) -> None:
    [run] = played.run((name,))
    assert run.code == 0
    by_agent = run.result["usage_by_agent"]
    main, memory = ledger_input(by_agent.get("main", {})), ledger_input(by_agent.get("memory", {}))
    assert memory <= MEMORY_SHARE * main, f"{name}: memory {memory:,} of main {main:,}"


def ledger_input(usage: dict) -> int:
    return sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens"))


# ---- the demo's words ----

def answers(runs: list[Run]) -> str:
    return "\n".join(e.get("text") or "" for run in runs for e in run.events
                     if e["type"] in ("assistant_message", "thinking_delta", "result"))


@pytest.mark.parametrize("order", [ORDER_A, ORDER_B], ids=["-".join(ORDER_A), "-".join(ORDER_B)])
def test_the_demo_counts_files_as_they_were_read(played: Sessions, order: tuple[str, ...]) -> None:
    import re

    runs = played.run(order)
    [summarize] = [run for name, run in zip(order, runs) if name == "summarize"]
    text = answers([summarize])
    carried = [int(n) for n in re.findall(r"I had read (\d+) files? before the context was compacted", text)]
    assert carried, text[-2000:]
    final = re.search(r"I read (\d+) files, (?:all (\d+)|(\d+) of them) before the context was compacted", text)
    assert final is not None, text[-800:]
    before = int(final.group(2) or final.group(3))
    assert before == carried[-1], f"said {carried[-1]} read before the compaction, then {before}"
    reads = [e for e in summarize.events if e["type"] == "tool_start" and e["name"] == "read_file"]
    assert int(final.group(1)) == len(reads) or order != ("summarize",)


@pytest.mark.parametrize("order", [ORDER_A, ORDER_B], ids=["-".join(ORDER_A), "-".join(ORDER_B)])
def test_headless_answers_name_no_dashboard_key_and_plurals_are_right(played: Sessions,
                                                                      order: tuple[str, ...]) -> None:
    text = answers(played.run(order))
    assert "ctrl+" not in text.lower()
    assert "(s)" not in text
    assert "grep found 1 line;" in text


def test_recall_after_an_overflow_recovery_says_what_it_did(played: Sessions) -> None:
    flood, recall = played.run(("flood", "recall"))
    assert any(c["trigger"] == "reactive" and c["ok"] for c in flood.of("compaction"))
    text = recall.result["text"]
    assert "Nothing has been compacted yet" not in text
    assert "overflow recovery dropped older rounds" in text


# ---- resume: the figure is the last one measured ----

def test_a_resumed_session_starts_from_the_measured_figure(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"))
    work = tmp_path / "work"
    work.mkdir()

    def run(*extra: str) -> list[dict]:
        # In-process: what is checked is the figure a resume starts from, not the process.
        proc = run_cli(["--demo-speed", "0", "--yes", "--output-format", "stream-json", *extra], cwd=work, env=env)
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines()]

    first = run("-p", PROMPT_OF["errors"])
    last = [e for e in first if e["type"] == "context" and not e.get("live")][-1]
    assert last["exact_tokens"] and last["estimated_tokens"] == 0
    resumed = run("--continue", "-p", PROMPT_OF["recall"])
    opening = next(e for e in resumed if e["type"] == "context")
    # before any call of this run: the last call's figure, and only the new prompt estimated
    assert opening["exact_tokens"] == last["exact_tokens"], (opening, last)
    assert opening["estimated_tokens"] < 100, opening

"""15. `tidegauge whatif` over a 1,000-turn session, three policies: the whole process.

A session on disk (``benchmarks/_long_session.py``: the real store and transcript writer, a
prompt, a ``read_file`` call and a reply per turn, 2,000 model calls, a compaction every 50
turns) is replayed by the real binary, ``python -m app whatif ID --json`` with three policies:
the recorded settings as they were (a 128K window: the context never reaches a line), a 200K
window, and a 32K window (its auto-compact line is crossed again and again: the engine compacts
six times, and then waits, as what a summary keeps is over the warning line). Median of three runs after an unmeasured one (which
writes bytecode and loads the tokenizer's cache). The target is the issue's absolute figure.
Quick: 300 turns.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._fixtures import require
from benchmarks.harness import Check, median

NAME = "17 whatif: 1,000 turns, three policies"
LIMIT_SECONDS = 5.0
ROOT = Path(__file__).resolve().parents[1]
POLICIES = ["--policy", "window=128000", "--policy", "window=200000", "--policy", "window=32000"]


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp / "config"), TIDEGAUGE_DATA_DIR=str(tmp / "data"), PYTHONPATH=str(ROOT))
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(session_id: str, cwd: Path, env: dict[str, str]) -> tuple[float, float, dict[str, object]]:
    """Wall time, CPU time (the process's own: what other work on the machine moves least) and output."""
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "app", "whatif", session_id, "--json", *POLICIES],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"whatif exited {proc.returncode}: {tail}")
    return elapsed, cpu, json.loads(proc.stdout)


def run(quick: bool) -> list[Check]:
    require("app.session.whatif")
    from benchmarks._long_session import write_long_session

    turns = 300 if quick else 1_000
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp_name:
        tmp = Path(tmp_name)
        project = tmp / "project"
        project.mkdir()
        session_id = write_long_session(tmp / "data", project, turns)
        env = _env(tmp)
        _timed(session_id, project, env)  # unmeasured: bytecode, the tokenizer's cache
        runs = [_timed(session_id, project, env) for _ in range(3)]
    took = median(t for t, _, _ in runs)
    cpu = median(c for _, c, _ in runs)
    result = runs[0][2]
    policies = result["policies"] if isinstance(result, dict) else []
    calls = len(policies[0]["points"]) if policies else 0
    compactions = ", ".join(f"{p['name']}: {p['compactions']}" for p in policies[1:])
    return [Check(NAME, f"{took:.2f} s for {turns:,} turns ({calls:,} model calls; CPU {cpu:.2f} s); "
                        f"compactions {compactions}",
                  f"<= {LIMIT_SECONDS:g} s", value=took, limit=LIMIT_SECONDS, unit="s",
                  extra={"seconds": [round(t, 3) for t, _, _ in runs], "cpu_seconds": [round(c, 3) for _, c, _ in runs],
                         "turns": turns})]

"""12. A one-turn headless run, whole process, against importing httpx and pydantic.

Subject: ``python -m app -p hi --provider openai`` against the loopback server
(benchmarks/_live.py: tests/fake_llm_server.py in its own process, real SSE), from spawn
to exit: start, settings, session, one request, the answer on stdout, the transcript
written. The data directory is the one earlier runs used (the catalogue's answer for the model
and the counted pieces of the words are kept there); the figure also shows the median of three
runs in a new data directory each, which look the model up and load the tokenizer. Baseline: ``python -c "import httpx, pydantic"``, the two libraries every run
needs. Runs are interleaved, medians compared.

The children may write bytecode (PYTHONDONTWRITEBYTECODE is dropped for them) as an
installed tidegauge has it; an unmeasured run of each writes it and warms the page cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._fixtures import require
from benchmarks.harness import Check, interleaved, median, seconds

NAME = "12 one-turn headless run"
MAX_RATIO = 2.5
ROOT = Path(__file__).resolve().parents[1]
BASELINE_CODE = "import httpx, pydantic"
ANSWER = ["The ", "answer ", "is ", "42."]
KEY = "sk-bench-headless-0123456789abcdef"


def _child_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp / "config"), TIDEGAUGE_DATA_DIR=str(tmp / "data"),
               OPENAI_API_KEY=KEY, PYTHONPATH=str(ROOT))
    return env


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], expect_stdout: str | None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or (expect_stdout is not None and proc.stdout != expect_stdout):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(cmd[1:4])} exited {proc.returncode}, stdout {proc.stdout[:80]!r}: {tail}")
    return elapsed


def run(quick: bool) -> list[Check]:
    require("app.wiring.cli")
    from benchmarks._live import LoopbackLLM

    reps = 7
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp_name, LoopbackLLM() as server:
        tmp = Path(tmp_name)
        cwd = tmp / "project"
        cwd.mkdir()
        env = _child_env(tmp)
        subject_cmd = [sys.executable, "-m", "app", "-p", "hi", "--provider", "openai", "--model", "bench-model",
                       "--base-url", server.base_url("openai")]
        baseline_cmd = [sys.executable, "-c", BASELINE_CODE]

        def subject() -> float:
            server.reply_text(ANSWER)
            return _timed(subject_cmd, cwd, env, "".join(ANSWER) + "\n")

        def baseline() -> float:
            return _timed(baseline_cmd, cwd, env, None)

        subject()  # unmeasured: bytecode, page cache, the config and data directories
        baseline()
        base, subj = interleaved(baseline, subject, reps)

        # Shown beside the figure, not held to the target: a run in a data directory that has
        # never seen this model or these words looks the model up in the price catalogue and
        # loads the tokenizer (the measured runs count from the pieces the first run kept).
        def cold() -> float:
            fresh = Path(tempfile.mkdtemp(prefix="data-", dir=tmp))
            server.reply_text(ANSWER)
            return _timed(subject_cmd, cwd, {**env, "TIDEGAUGE_DATA_DIR": str(fresh)}, "".join(ANSWER) + "\n")

        first_runs = [cold() for _ in range(3)]
    b, s = median(base), median(subj)
    return [Check(
        name=NAME,
        figure=(f"{seconds(s)} vs import httpx, pydantic {seconds(b)} (median of {reps}); "
                f"in a new data directory {seconds(median(first_runs))}"),
        target=f"<= {MAX_RATIO:g}× import httpx, pydantic", value=s / b, limit=MAX_RATIO, op="<=",
        extra={"subject_s": subj, "baseline_s": base},
    )]

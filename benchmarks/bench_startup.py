"""5. Start-up to the first frame of the dashboard, against importing textual.app.

Subject: ``python benchmarks/_first_frame.py`` — the real ``tidegauge`` start
(CLI, settings, session, agent on the offline demo provider since no key is
set, the app mounted and laid out) in headless mode, until the first frame is
composed. Baseline: ``python -c "import textual.app"``. Both are timed from
the parent's spawn to the wall-clock time the child prints at its point, so
interpreter start-up counts on both sides; runs are interleaved.

The children may write bytecode (PYTHONDONTWRITEBYTECODE is dropped for them) as an
installed tidegauge has it; textual's own is compiled when it is installed, so with the
variable set only tidegauge's modules were compiled from source on every run. An
unmeasured run of each writes it and warms the page cache.
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

NAME = "5 start-up to first frame"
MAX_RATIO = 1.3
ROOT = Path(__file__).resolve().parents[1]
BASELINE_CODE = "import time; import textual.app; print(f'FIRST_FRAME {time.time():.6f}', flush=True)"


def _child_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(XDG_CONFIG_HOME=str(tmp / "config"), XDG_DATA_HOME=str(tmp / "data"),
               XDG_CACHE_HOME=str(tmp / "cache"), PYTHONPATH=str(ROOT), TERM="xterm-256color")
    return env


def _spawn_until_mark(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.time()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    marks = [line for line in proc.stdout.splitlines() if line.startswith("FIRST_FRAME ")]
    if proc.returncode != 0 or not marks:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{' '.join(cmd[1:3])} exited {proc.returncode} without a first frame: {tail}")
    return float(marks[0].split()[1]) - started


def run(quick: bool) -> list[Check]:
    require("app.surfaces.dashboard.app")
    require("app.wiring.cli")
    reps = 5 if quick else 7
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp_name:
        tmp = Path(tmp_name)
        cwd = tmp / "project"
        cwd.mkdir()
        env = _child_env(tmp)
        subject_cmd = [sys.executable, str(ROOT / "benchmarks" / "_first_frame.py")]
        baseline_cmd = [sys.executable, "-c", BASELINE_CODE]
        # One unmeasured run each: the first start writes the config dir and warms the page cache.
        _spawn_until_mark(subject_cmd, cwd, env)
        _spawn_until_mark(baseline_cmd, cwd, env)
        base, subj = interleaved(lambda: _spawn_until_mark(baseline_cmd, cwd, env),
                                 lambda: _spawn_until_mark(subject_cmd, cwd, env), reps)
    b, s = median(base), median(subj)
    return [Check(
        name=NAME,
        figure=f"{seconds(s)} vs import textual.app {seconds(b)} (median of {reps})",
        target=f"<= {MAX_RATIO:g}× import textual.app", value=s / b, limit=MAX_RATIO, op="<=",
        extra={"subject_s": subj, "baseline_s": base},
    )]

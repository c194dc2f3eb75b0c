"""8. The same demo scenario in the dashboard and headless (issue 11): the dashboard
must not slow the agent it watches.

``summarize the project`` on the demo model at the same --demo-speed, both ways,
interleaved:

- headless: ``tidegauge -p "summarize the project" --output-format stream-json
  --yes --demo-speed N`` as a child process; the time between its
  ``user_message`` line and its ``result`` line as they arrive on the pipe;
- dashboard: the App (headless ``run_test``, 160×50) on a session running on its
  own thread as ``tidegauge`` runs it; from the session's ``user_message`` event
  to the first frame drawn after its ``result`` event.

Start-up is outside both figures (benchmark 5 measures it). Target: the
dashboard's median at most 1.15× the headless median.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._dashboard import FrameClock
from benchmarks._fixtures import require
from benchmarks._live import demo_settings, isolate_user_dirs, live_dashboard
from benchmarks.harness import Check, interleaved, median, seconds

ROOT = Path(__file__).resolve().parents[1]
NAME = "8 demo scenario: dashboard vs headless"
MAX_RATIO = 1.15
PROMPT = "summarize the project"


def headless_once(tmp: Path, speed: float) -> float:
    """Seconds from the ``user_message`` line to the ``result`` line of ``tidegauge -p``."""
    workspace = tmp / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TIDEGAUGE_DATA_DIR=str(tmp / "data"), TIDEGAUGE_CONFIG_DIR=str(tmp / "config"),
               XDG_CONFIG_HOME=str(tmp / "xdg-config"), XDG_DATA_HOME=str(tmp / "xdg-data"))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "app", "-p", PROMPT, "--provider", "demo", "--output-format", "stream-json",
           "--yes", "--demo-speed", f"{speed:g}"]
    proc = subprocess.Popen(cmd, cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    started = ended = None
    for raw in proc.stdout:
        kind = json.loads(raw).get("type")
        if kind == "user_message" and started is None:
            started = time.perf_counter()
        elif kind == "result":
            ended = time.perf_counter()
    code = proc.wait(timeout=300)
    if started is None or ended is None:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"headless run exited {code} without a user_message and a result: {err[-300:]}")
    return ended - started


async def dashboard_once(tmp: Path, speed: float) -> float:
    """Seconds from the session's ``user_message`` event to the first frame after its ``result``."""
    from app.kernel.commands import UserInput
    from app.kernel.envelope import EventEnvelope

    marks: dict[str, float] = {}

    def note(envelope: EventEnvelope) -> None:  # called on the session's thread
        kind = envelope.event.type
        if kind in ("user_message", "result") and kind not in marks:
            marks[kind] = time.perf_counter()

    async with live_dashboard(tmp, demo_settings(tmp, speed)) as (app, pilot):
        app.session.subscribe(note)
        clock = FrameClock(app)
        done = clock.expect(lambda: "result" in marks)
        app.submit(UserInput(text=PROMPT))
        drawn = await asyncio.wait_for(done, 600)
        return drawn - marks["user_message"]


def run(quick: bool) -> list[Check]:
    require("app.surfaces.dashboard.app")
    require("app.demo")
    speed = 800.0 if quick else 400.0
    reps = 2 if quick else 3
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
        isolate_user_dirs(Path(tmp))
        counter = iter(range(1_000))
        base, subj = interleaved(
            lambda: headless_once(Path(tmp) / f"h{next(counter)}", speed),
            lambda: asyncio.run(dashboard_once(Path(tmp) / f"d{next(counter)}", speed)),
            reps)
    b, s = median(base), median(subj)
    return [Check(name=NAME,
                  figure=f"dashboard {seconds(s)} vs headless {seconds(b)} (\"{PROMPT}\", --demo-speed {speed:g}, "
                         f"median of {reps})",
                  target=f"<= {MAX_RATIO:g}× headless", value=s / b, limit=MAX_RATIO, op="<=",
                  extra={"headless_s": base, "dashboard_s": subj, "demo_speed": speed})]

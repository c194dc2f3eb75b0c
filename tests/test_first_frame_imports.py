"""The dashboard's first frame waits for nothing the session needs: the session's vocabulary
(the events' pydantic models, the commands, the reply's Markdown parser) loads after it.

The real start: ``tidegauge`` as the console script runs it (``benchmarks/_first_frame.py``'s
headless wrapper, the one benchmark 5 times), in a process of its own, which reports the modules
loaded at the moment its first frame is drawn, then quits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Not needed to draw the first frame (each is imported in the session-build thread or when first used).
# The commands are ~20 frozen dataclasses: building them cost a tenth of `import textual.app`.
NOT_BEFORE_FIRST_FRAME = ("pydantic", "app.kernel.events", "app.kernel.protocol", "app.session.process",
                          "app.surfaces.view_model", "app.surfaces.dashboard.bridge", "markdown_it",
                          "app.kernel.commands")

AT_FIRST_FRAME = """\
import sys
from benchmarks._first_frame import run_cli_headless
import app.surfaces.dashboard.app as tui

# The session process the dashboard starts after its first frame would only be started and stopped;
# one built before the frame still is, and what it loads is seen below.
build = tui.TidegaugeApp._build_session
tui.TidegaugeApp._build_session = lambda app: None if getattr(app, "_first_frame_seen", False) else build(app)

def report(app):
    print("LOADED " + " ".join(sorted(name for name in sys.modules if sys.modules[name] is not None)), flush=True)
    app.exit(0)

sys.exit(run_cli_headless([], report))
"""


def _loaded(names: set[str], package: str) -> list[str]:
    return sorted(n for n in names if n == package or n.startswith(package + "."))


def test_the_first_frame_is_drawn_before_the_sessions_vocabulary_is_imported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT), TERM="xterm-256color")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", AT_FIRST_FRAME], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    marks = [line for line in proc.stdout.splitlines() if line.startswith("LOADED ")]
    assert proc.returncode == 0 and marks, proc.stderr[-800:]
    names = set(marks[0].split()[1:])
    assert "app.surfaces.dashboard.app" in names and "textual.app" in names, "the report came from elsewhere"
    loaded = {package: _loaded(names, package) for package in NOT_BEFORE_FIRST_FRAME}
    assert {package: found for package, found in loaded.items() if found} == {}


def test_importing_the_dashboard_imports_no_pydantic() -> None:
    """The module alone, as a later import added at its top would load it."""
    code = ("import sys, app.surfaces.dashboard.app, app.surfaces.tool_calls, widgets.tool_call_line;"
            " print(sorted(n for n in sys.modules if n.split('.')[0] == 'pydantic' or n == 'app.kernel.events'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert proc.stdout.strip() == "[]"

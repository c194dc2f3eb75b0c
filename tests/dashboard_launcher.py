"""Run ``tidegauge`` (the dashboard path of app.wiring.cli) headless, for tests in a child process.

Prints ``FIRST_FRAME pydantic=<loaded?>`` at the dashboard's first frame, then
exits there when TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME is set (without starting the session
process, which comes after the first frame); otherwise the app runs on (it ends by itself when
the agent cannot be built).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from benchmarks._first_frame import run_cli_headless


def _no_session(app: Any) -> None:
    """What the dashboard builds after its first frame, left out of a run that ends there: its
    session process would only be started and stopped (a Python start and its imports)."""


def at_first_frame(app: Any) -> None:
    print(f"FIRST_FRAME pydantic={'pydantic' in sys.modules}", flush=True)
    if os.environ.get("TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME"):
        app.exit(0)


if __name__ == "__main__":
    if os.environ.get("TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME"):
        import app.surfaces.dashboard.app as tui

        tui.TidegaugeApp._build_session = _no_session  # type: ignore[method-assign,assignment]
    sys.exit(run_cli_headless(sys.argv[1:], at_first_frame))

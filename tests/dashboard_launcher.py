"""Run ``tidegauge`` (the dashboard path of app.wiring.cli) headless, for tests in a child process.

Prints ``FIRST_FRAME pydantic=<loaded?>`` at the dashboard's first frame, then
exits there when TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME is set (without starting the session
process, which comes after the first frame, unless it came before); otherwise the app runs
on (it ends by itself when the agent cannot be built).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from benchmarks._first_frame import run_cli_headless


def _build_before_the_first_frame_only(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The dashboard's session build, left out once the first frame is drawn: a run that ends there
    would only start and stop its session process (a Python start and its imports). A build that
    came before the frame still runs, and what it loads is still seen at the frame."""
    def build_unless_drawn(app: Any) -> Any:
        return None if getattr(app, "_first_frame_seen", False) else build(app)

    return build_unless_drawn


def at_first_frame(app: Any) -> None:
    print(f"FIRST_FRAME pydantic={'pydantic' in sys.modules}", flush=True)
    if os.environ.get("TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME"):
        app.exit(0)


if __name__ == "__main__":
    if os.environ.get("TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME"):
        import app.surfaces.dashboard.app as tui

        tui.TidegaugeApp._build_session = _build_before_the_first_frame_only(  # type: ignore[method-assign]
            tui.TidegaugeApp._build_session)
    sys.exit(run_cli_headless(sys.argv[1:], at_first_frame))

"""Start ``tidegauge`` the way the console script does, headless, and stop at its first frame.

Used by bench_startup as a subprocess. Before anything else is imported it
records nothing; at the first frame the dashboard composes it prints the
wall-clock time (``time.time()``) on stdout and exits, so the parent can
measure from the moment it spawned the process. Everything in between is
the real start-up: interpreter, imports, the app's mount and layout (the
settings and the agent load in a thread after the first frame).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable


def run_cli_headless(argv: list[str], at_first_frame: Callable[[Any], None]) -> int:
    """``app.wiring.cli.main(argv)`` with the dashboard headless; ``at_first_frame(app)`` once it is drawn."""
    from textual.app import App

    import app.surfaces.dashboard.app as tui

    original_display = App._display
    original_run = App.run

    def display(self: App, screen, renderable) -> None:  # type: ignore[no-untyped-def]
        original_display(self, screen, renderable)
        if renderable is not None and not getattr(self, "_first_frame_seen", False):
            self._first_frame_seen = True
            at_first_frame(self)

    def run_headless(self: App, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["headless"] = True
        return original_run(self, *args, **kwargs)

    tui.TidegaugeApp._display = display  # type: ignore[method-assign]
    tui.TidegaugeApp.run = run_headless  # type: ignore[method-assign]

    from app.wiring.cli import main as cli_main

    return cli_main(argv)


def main() -> int:
    # What the console script does before any import (app/wiring/entry.py).
    from app.wiring.entry import prepare

    prepare()

    def stop(app: Any) -> None:
        print(f"FIRST_FRAME {time.time():.6f}", flush=True)
        app.exit(0)

    return run_cli_headless(sys.argv[1:], stop)


if __name__ == "__main__":
    sys.exit(main())

"""Run ``tidegauge`` (the dashboard path of app.cli) headless, for tests in a child process.

Prints ``FIRST_FRAME pydantic=<loaded?>`` at the dashboard's first frame, then
exits there when TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME is set; otherwise the app
runs on (it ends by itself when the agent cannot be built).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    from textual.app import App

    import app.tui as tui

    original_display = App._display
    original_run = App.run

    def display(self: App, screen, renderable) -> None:  # type: ignore[no-untyped-def]
        original_display(self, screen, renderable)
        if renderable is not None and not getattr(self, "_first_frame_seen", False):
            self._first_frame_seen = True
            print(f"FIRST_FRAME pydantic={'pydantic' in sys.modules}", flush=True)
            if os.environ.get("TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME"):
                self.exit(0)

    def run_headless(self: App, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["headless"] = True
        return original_run(self, *args, **kwargs)

    tui.TidegaugeApp._display = display  # type: ignore[method-assign]
    tui.TidegaugeApp.run = run_headless  # type: ignore[method-assign]

    from app.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

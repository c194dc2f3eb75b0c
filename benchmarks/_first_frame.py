"""Start ``tidegauge`` the way the console script does, headless, and stop at its first frame.

Used by bench_startup as a subprocess. Before anything else is imported it
records nothing; at the first frame the dashboard composes it prints the
wall-clock time (``time.time()``) on stdout and exits, so the parent can
measure from the moment it spawned the process. Everything in between is
the real start-up: interpreter, imports, settings, the session on disk,
the agent (demo provider when no key is set), the app's mount and layout.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    from textual.app import App

    import app.tui as tui

    original_display = App._display
    original_run = App.run

    def display(self: App, screen, renderable) -> None:  # type: ignore[no-untyped-def]
        original_display(self, screen, renderable)
        if renderable is not None and not getattr(self, "_first_frame_seen", False):
            self._first_frame_seen = True
            print(f"FIRST_FRAME {time.time():.6f}", flush=True)
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

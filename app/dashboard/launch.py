"""Open the dashboard on a session that runs on its own thread.

The session's loop lives on a thread of its own: the agent's work (streaming,
token counting, tools) never waits for a frame, and a slow frame never slows the
agent. The App reaches it only through ``submit`` and the bridge's messages.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from app.agent_session import AgentSession
    from app.config import Settings


class SessionThread:
    """Runs ``session.run()`` on a daemon thread with its own event loop."""

    def __init__(self, session: "AgentSession") -> None:
        self.session = session
        self.thread = threading.Thread(target=self._main, name="tidegauge-session", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> "AgentSession":
        self.thread.start()
        return self.session

    def _main(self) -> None:
        try:
            asyncio.run(self.session.run())
        except BaseException as error:  # noqa: BLE001 - reported on stderr after the screen closes
            self.error = error

    def stop(self, timeout: float = 2.0) -> None:
        from app.commands import Shutdown

        # The App's unmount has usually stopped the session already, and its loop may be
        # closed by now: submitting to a closed loop raised "Event loop is closed" (a
        # traceback and exit code 1 on ctrl+q, about one quit in two).
        if self.thread.is_alive():
            try:
                self.session.submit(Shutdown(now=True))
            except RuntimeError:  # the loop closed between the check and the submit
                pass
        self.thread.join(timeout)


def _is_the_tidegauge_process() -> bool:
    """Was this process started as ``tidegauge`` (the console script or ``python -m app``),
    rather than the dashboard being opened inside another program (a test run)?"""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "app.__main__":
        return True
    return os.path.basename(getattr(main, "__file__", "") or "") == "tidegauge"


def exit_now(code: int) -> None:
    """End the process without tearing the interpreter down.

    After the dashboard closes, Python's own finalization (freeing every module and
    the ~80K objects the dashboard, the agent and the token encoder built) took about
    1 s of the 1.1-3.4 s quit (issue 13), longer than everything before it. Nothing is
    left for it to do: the session thread has stopped, transcripts are written with
    ``os.write`` and fsync'ed, so the exit handlers run, the standard streams are
    flushed and the process ends.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_dashboard(load_settings: "Callable[[], Settings]", resume: str | None = None,
                  continue_latest: bool = False) -> int:
    """Open the dashboard (the CLI calls this when there is no -p). Returns the exit code.

    A new session paints first: the settings (pydantic and pydantic-settings take
    ~150 ms to import here), the session and its first context figures are all
    loaded in a thread after the first frame; a bad setting or a missing key then
    closes the dashboard with one line on stderr. Resuming a session builds first,
    so a bad session id is one line on stderr without the screen opening.
    """
    from app.dashboard.app import TidegaugeApp

    runners: list[SessionThread] = []

    def build(settings: "Settings") -> "AgentSession":
        from app.runtime import build_session

        runner = SessionThread(build_session(settings, approvals=True, resume=resume,
                                             continue_latest=continue_latest))
        runners.append(runner)
        return runner.start()

    if resume or continue_latest:
        try:
            session = build(load_settings())
        except Exception as error:  # a bad setting or session id: one line, no traceback
            print(f"tidegauge: {error}", file=sys.stderr)
            return 2
        app = TidegaugeApp(session)
    else:
        app = TidegaugeApp(session_factory=lambda: build(load_settings()))
    app.run()
    for runner in runners:
        runner.stop()
    if app.startup_error is not None:
        print(f"tidegauge: {app.startup_error}", file=sys.stderr)
        return 2
    for runner in runners:
        print(f"resume with: tidegauge --resume {runner.session.info.session_id}", file=sys.stderr)
    code = app.return_code or 0
    if _is_the_tidegauge_process() and all(not runner.thread.is_alive() for runner in runners):
        exit_now(code)
    return code

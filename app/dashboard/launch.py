"""Open the dashboard on a session that runs on its own thread.

The session's loop lives on a thread of its own: the agent's work (streaming,
token counting, tools) never waits for a frame, and a slow frame never slows the
agent. The App reaches it only through ``submit`` and the bridge's messages.
"""

from __future__ import annotations

import asyncio
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

        self.session.submit(Shutdown(now=True))
        self.thread.join(timeout)


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
    return app.return_code or 0

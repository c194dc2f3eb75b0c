"""The session on a thread of the test's own process, for driving the App under Pilot.

``tidegauge`` runs its session in a child process (``app.session.process``); the
dashboard tests run it on a thread instead so they can read its state (``pending``,
the agent) while the App draws. Both satisfy ``app.kernel.protocol.SessionSurface``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.session.agent_session import AgentSession


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
            # Printed now as well: a test waiting on the session's commands then fails with
            # the reason in its captured stderr, not only "did not finish".
            traceback.print_exc(file=sys.stderr)
        if self.error is not None or self.session.pending:
            # Only what a failing test needs: a clean end said nothing, and the line, printed after
            # its test's capture had ended, showed up in the suite's progress dots.
            print(f"session thread: run() ended (pending {self.session.pending})", file=sys.stderr)

    def stop(self, timeout: float = 2.0) -> None:
        from app.kernel.commands import Shutdown

        # The App's unmount has usually stopped the session already, and its loop may be
        # closed by now: submitting to a closed loop raised "Event loop is closed" (a
        # traceback and exit code 1 on ctrl+q, about one quit in two).
        if self.thread.is_alive():
            try:
                self.session.submit(Shutdown(now=True))
            except RuntimeError:  # the loop closed between the check and the submit
                pass
        self.thread.join(timeout)

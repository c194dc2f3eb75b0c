"""Open the dashboard on a session that runs in a process of its own.

The session runs in a child process (``app.session.process``): the agent's work
(streaming, token counting, tools) never waits for a frame, a slow frame never
slows the agent, and the two never share an interpreter lock. The App reaches it
only through ``submit`` and the bridge's messages.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable
import asyncio
import signal
import threading

from app.system import startup
from app.system.process_exit import exit_without_teardown, end_everything_on, exit_after_signal

if TYPE_CHECKING:
    from app.session.process import SessionProcess

# /resume's and --resume's list: (id, what it says) of this directory's sessions, newest first.
ListSessions = Callable[[], "list[tuple[str, str]]"]


def exit_now(code: int) -> None:
    """End the process once the dashboard has closed and the session process has stopped.

    Python's own finalization (freeing every module and the ~80K objects the dashboard
    built) took about 1 s of the 1.1-3.4 s quit, longer than everything
    before it, and nothing is left for it to do.
    """
    exit_without_teardown(code)


# How long the orderly quit a SIGTERM or SIGHUP asks for may take before the dashboard ends the
# hard way. The orderly one (~0.3 s) runs on the App's loop and ends by restoring the terminal;
# a terminal that is gone or no longer read (a hung ssh, a closed tmux) fills Textual's output
# queue, and the loop then waits for ever on its next frame (seen after tmux kill-session).
SIGNAL_QUIT_GRACE_S = 5.0


def _quit_on_signals(app: Any, sessions: "list[Any]") -> None:
    """SIGTERM and SIGHUP (the terminal closed) quit as ctrl+q does: the session process stops
    with its tools and MCP servers, the terminal is restored. A second one, or one while no App
    runs, ends every process at once (``process_exit.end_everything_on``). If the orderly quit
    has not ended the process ``SIGNAL_QUIT_GRACE_S`` after the signal, a thread of its own
    stops the session processes (``sessions``: each finishes what it was writing), ends every
    other process the dashboard started and exits, writing nothing that could block."""
    def quit_the_hard_way(signum: int) -> None:
        for session in sessions:
            session.stop()
        ids = " ".join(session.session_id for session in sessions if session.session_id)
        exit_after_signal(signum, f"resume with: tidegauge --resume {ids}" if ids else "")

    def quit_app(signum: int, _frame: object) -> None:
        end_everything_on(signal.SIGTERM, signal.SIGHUP)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in the App's loop: no orderly quit to ask for
            signal.raise_signal(signum)
            return
        loop.call_soon_threadsafe(app.exit, None, 128 + signum)
        fallback = threading.Timer(SIGNAL_QUIT_GRACE_S, quit_the_hard_way, args=(signum,))
        fallback.daemon = True  # the orderly quit, when it ends the process in time, ends it too
        fallback.start()

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, quit_app)


def run_dashboard(overrides: dict[str, Any], list_sessions: ListSessions, resume: str | None = None,
                  continue_latest: bool = False) -> int:
    """Open the dashboard (the CLI calls this when there is no -p). Returns the exit code.

    The session runs in a child process (``app.session.process``): the UI process
    keeps its interpreter lock for drawing. A new session paints first: the child
    (settings, session, token encoder) starts in a thread after the first frame, and
    a bad setting or a missing key then closes the dashboard with the child's one
    line on stderr. Resuming starts the child first, so a bad session id is one line
    on stderr without the screen opening. ``list_sessions``: the CLI's, which knows the settings.
    """
    # Textual and the App load when the dashboard opens; is_the_tidegauge_process goes with them.
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.system.process_exit import is_the_tidegauge_process

    runners: list[SessionProcess] = []

    def build(resume_id: str | None = resume) -> SessionProcess:
        # Imported here: its events and commands (pydantic) load in the session-build thread, after the first frame.
        from app.session.process import SessionProcess

        if is_the_tidegauge_process():  # all below is the session's; orphans it leaves come to us
            from app.system import proctree

            proctree.claim_every_descendant()
        runner = SessionProcess(overrides, resume=resume_id or None, continue_latest=continue_latest and not resume_id)
        runners.append(runner)
        return runner.start()

    if resume == "":  # --resume without an id: the picker first
        app = TidegaugeApp(resume_factory=build, list_sessions=list_sessions, pick_session=True)
    elif resume or continue_latest:
        try:
            session = build()
        except Exception as error:  # a bad setting or session id: one line, no traceback
            print(f"tidegauge: {error}", file=sys.stderr)
            return 2
        app = TidegaugeApp(session, list_sessions=list_sessions)
    else:
        app = TidegaugeApp(session_factory=build, list_sessions=list_sessions)
    if is_the_tidegauge_process():
        _quit_on_signals(app, runners)
    startup.started()  # the dashboard lives long: the collector as usual from here
    try:
        app.run()
    finally:  # also when the App fails: the session process (and all it started) never outlives us
        for runner in runners:
            runner.stop()
    if app.startup_error is not None:
        print(f"tidegauge: {app.startup_error}", file=sys.stderr)
        return 2
    if app.exit_note is not None:
        print(f"tidegauge: {app.exit_note}", file=sys.stderr)
    for runner in runners:
        if runner.returncode not in (0, None):
            print(f"tidegauge: the session process ended with exit code {runner.returncode}: {runner.stderr_tail()}",
                  file=sys.stderr)
        print(f"resume with: tidegauge --resume {runner.info.session_id}", file=sys.stderr)
    code = app.return_code or 0
    if app.resume_request is not None and app.startup_error is None:  # /resume: open the chosen one
        return run_dashboard(overrides, list_sessions, resume=app.resume_request)
    if is_the_tidegauge_process() and all(not runner.alive for runner in runners):
        exit_now(code)
    return code

"""The session process's own side: ``python -m app.wiring.session_child REQUEST_JSON``.

The dashboard starts it (``app.session.process.SessionProcess``, which owns the line protocol:
commands in on stdin, ``@ready`` or ``@failed`` then events out on stdout). It lives in wiring
because it builds a session from settings exactly as ``tidegauge`` does; the session layer
only speaks to it.
"""

# ruff: noqa: E402  (the imports come after dataclass_code.install(), on purpose)
from __future__ import annotations

from app.system import dataclass_code, startup

if __name__ == "__main__":
    # The session's own process starts as headless tidegauge's does (app/wiring/entry.py and
    # app/system/startup.py), before the imports below: the collector's start-up thresholds
    # (build_session freezes what start-up made), no search for pydantic plug-ins, genai-prices
    # without its updater, and httpx without its command-line client (rich, click and pygments,
    # which nothing in this process uses).
    startup.begin()
    startup.skip_pydantic_plugins()
    startup.skip_price_updater()
    startup.skip_httpx_command_line()
dataclass_code.install()  # before the imports below make their dataclasses (app/system/dataclass_code.py)

import json
import os
import signal
import sys
import threading
from typing import Any
import asyncio

from app.kernel import commands as cmd
from app.session.process import CHILD_MODULE, EventWriter, decode_command_line, failed_line, ready_line


def serve(request: dict[str, Any]) -> int:
    """The child's main: build the session, say ``@ready`` (or ``@failed``), run it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Everything the session starts (tools, MCP servers, what they leave) ends with it: at the
    # end of input (the dashboard closed, or killed), a Shutdown, a SIGTERM or a SIGHUP.
    from app.system import proctree
    from app.system.process_exit import end_everything_on

    proctree.claim_every_descendant()
    end_everything_on(signal.SIGTERM, signal.SIGHUP)
    # The protocol owns the real stdout; anything printed by accident goes to stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    try:
        # Inside the try: a failure while they load is one @failed line as well.
        from app.wiring.config import load_settings
        from app.wiring.runtime import build_session

        settings = load_settings(request.get("overrides") or {})
        session = build_session(settings, approvals=True, resume=request.get("resume"),
                                continue_latest=bool(request.get("continue_latest")))
    except Exception as error:  # noqa: BLE001 - every setup failure is one line for the user
        os.write(out, failed_line(str(error) or type(error).__name__))
        return 2
    writer = EventWriter(out)
    snapshot, _unsubscribe = session.attach(writer)
    writer.open(ready_line(snapshot))

    def read_commands() -> None:
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            try:
                command_id, command = decode_command_line(line)
            except ValueError as error:
                print(f"tidegauge session: {error}", file=sys.stderr)
                continue
            if command_id is None:
                session.submit(command)
            else:
                session.submit_as(command_id, command)
        session.submit(cmd.Shutdown(now=True))

    threading.Thread(target=read_commands, name="tidegauge-commands", daemon=True).start()
    try:
        asyncio.run(session.run())
    finally:
        writer.close()
        proctree.kill_all_descendants()  # what run_bash or a server left running ends with the session
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {CHILD_MODULE} REQUEST_JSON (started by the dashboard)", file=sys.stderr)
        return 2
    return serve(json.loads(args[0]))


if __name__ == "__main__":
    # No interpreter teardown: the command reader is still blocked on stdin, and a daemon
    # thread holding stdin's lock at finalization aborts the process (exit -6).
    from app.system.process_exit import exit_without_teardown

    exit_without_teardown(main())

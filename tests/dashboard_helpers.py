"""Driving the dashboard under Pilot: type a prompt, wait until the session is done."""

from __future__ import annotations

import asyncio
from typing import Any

from widgets.engine_line import EngineLine


async def send(pilot: Any, text: str) -> None:
    prompt = pilot.app.query_one("#prompt")
    prompt.value = text
    prompt.focus()
    await pilot.press("enter")


async def settle(pilot: Any, rounds: int = 20_000) -> None:
    """Until every command submitted has finished and the widgets drew what it sent.

    The session may run on its own thread: wait on its ``pending`` count (taken at
    submit, so it never races one), then let the App handle the posted messages.
    """
    app = pilot.app
    for _ in range(rounds):
        session = app.session
        if session is not None and not session.pending:
            break
        await asyncio.sleep(0.005)  # polls the condition above; Pilot.pause would wait for a busy screen
    else:
        session = app.session
        raise AssertionError(f"the session did not finish its commands (pending {getattr(session, 'pending', None)}, "
                             f"busy {getattr(session, 'busy', None)})")
    for _ in range(rounds):  # the other widgets' messages held until a reply's text was drawn
        bridge = app.bridge
        if bridge is None or not bridge.holding:
            break
        await pilot.pause()
    await pilot.pause()
    await pilot.pause()


async def frame(pilot: Any) -> None:
    """One frame, as ``Pilot.pause`` ends one: the messages queued handled and the screen updated,
    without its wait for an idle process first (20 ms sleeps until one passes with under 1 ms of
    CPU, up to a second), a wait of its own each time a test draws a frame per delta."""
    await pilot._wait_for_screen()
    pilot.app.screen._on_timer_update()
    await pilot._wait_for_screen()


def engine_texts(app: Any, kind: str | None = None) -> list[str]:
    return [line.text for line in app.query(EngineLine) if kind is None or line.kind == kind]


def demo_app(tmp_path: Any, **overrides: Any) -> Any:
    """The real App on a real session (demo provider, speed 0) running on its own thread,
    as ``tidegauge`` runs it; the App's unmount stops the session."""
    from app.wiring.config import load_settings
    from app.surfaces.dashboard.app import TidegaugeApp
    from session_thread import SessionThread
    from app.wiring.runtime import build_session

    settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(tmp_path / "data"), **overrides})
    session = SessionThread(build_session(settings, approvals=True, cwd=tmp_path)).start()
    return TidegaugeApp(session, cursor_blink=False)


async def until(pilot: Any, condition: Any, rounds: int = 2_000) -> None:
    """Pause until ``condition()`` holds: a real session's turn takes a few loop rounds to reach
    what a test waits for (its model call, the tool's start, the approval it asks)."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause()
    raise AssertionError(f"never came true: {condition}")

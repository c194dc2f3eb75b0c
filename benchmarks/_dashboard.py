"""The real dashboard for the benchmarks, and a clock that sees its frames.

The app is built the way ``tidegauge`` builds it (``runtime.build_agent`` from
Settings, ``TidegaugeApp(agent)``), on an OpenAI-compatible provider pointed at
a closed loopback port: nothing is ever sent, the benchmarks feed the app the
engine events a worker would emit, through ``agent.emit`` (which the app
turns into messages to its widgets).

``FrameClock`` wraps the app's ``_display`` (where each composed frame goes to
the terminal; in headless mode the frame is composed and rendered, just not
written) so a benchmark can ask "when was the first frame on which X was
true?" rather than guess with sleeps.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks._fixtures import require

SIZE = (160, 50)
_BENCH_KEY_ENV = "TIDEGAUGE_BENCH_FAKE_KEY"


def isolate_user_dirs(tmp: Path) -> None:
    """Point config and data dirs at ``tmp`` (this is a child process: nothing leaks out)."""
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    os.environ["XDG_DATA_HOME"] = str(tmp / "data")
    os.environ[_BENCH_KEY_ENV] = "sk-benchmark-not-a-real-key"


def build_app(tmp: Path, **app_kwargs: Any) -> Any:
    """A TidegaugeApp around a real session (real agent, engine, registry, transcript).

    The session is not started on its thread: the benchmark feeds its event stream itself
    (``emit``), as the agent does, and the bridge hands each event to the widgets."""
    require("app.surfaces.dashboard.app")
    require("app.wiring.runtime")
    from app.wiring.config import Settings
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.runtime import build_session

    isolate_user_dirs(tmp)
    workspace = tmp / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    settings = Settings(provider="openai", model="gpt-4o", base_url="http://127.0.0.1:9/v1",
                        api_key_env=_BENCH_KEY_ENV, data_dir=tmp / "data", yes=True)
    session = build_session(settings, approvals=False, cwd=workspace)
    app_kwargs.pop("auto_approve", None)  # --yes: the session never asks
    app_kwargs.setdefault("cursor_blink", False)
    return TidegaugeApp(session, **app_kwargs)


class FrameClock:
    """Times of the app's frames, and waiting for the first frame where a condition holds."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.frames = 0
        self.update: Any = None  # what the frame being looked at wrote to the screen
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[float]]] = []
        original = app._display

        def display(screen: Any, renderable: Any) -> None:
            original(screen, renderable)
            if renderable is None or app._batch_count:
                return
            now = time.perf_counter()
            self.frames += 1
            self.update = renderable
            for predicate, future in list(self._waiters):
                if not future.done() and predicate():
                    future.set_result(now)
            self._waiters = [(p, f) for p, f in self._waiters if not f.done()]

        app._display = display

    def drew(self, text: str) -> bool:
        """Does the frame being looked at write ``text`` on one line of the screen?"""
        update = self.update
        if hasattr(update, "chops"):  # a partial update: the changed spans of some lines
            lines = (strips.values() for strips in update.chops)
        else:  # a full one: every line of a region
            lines = getattr(update, "strips", [])
        return any(text in "".join(strip.text for strip in line if strip is not None) for line in lines)

    def expect(self, predicate: Callable[[], bool]) -> "asyncio.Future[float]":
        """A future resolved with the time of the first frame on which ``predicate()`` holds.

        Register it before triggering the change so no frame can be missed.
        """
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        return future

    async def first_frame(self, predicate: Callable[[], bool], timeout: float = 60.0) -> float:
        return await asyncio.wait_for(self.expect(predicate), timeout)


def emit(app: Any, event: Any) -> None:
    """Send an engine event the way the agent does: into the session's event stream."""
    app.session.stream.emit(event)


class DashboardStopped(RuntimeError):
    """The app's message loop ended while the benchmark was still feeding it."""


async def settle(app: Any, pilot: Any, when: str) -> None:
    """``pilot.pause()``, but fail at once with a clear reason if the app has stopped
    (pilot would otherwise wait 30 s for widgets that will never answer)."""
    await asyncio.sleep(0)
    if not app.is_running:
        raise DashboardStopped(
            f"the dashboard stopped processing messages {when} without an error "
            "(a CancelledError escaping a message handler ends Textual's App loop silently)")
    await pilot.pause()

"""The real path for the dashboard benchmarks: a loopback SSE server, the OpenAI chat
provider, the agent, an ``AgentSession`` in its own process and the dashboard App.

Nothing is injected: the server (tests/fake_llm_server.py, real HTTP/1.1 with
chunked SSE) streams a scripted reply, the provider parses it, the agent and
the session turn it into events in the session process (``app.session.process``),
they come over its pipe, and the bridge posts them to the widgets on the UI loop,
exactly as ``tidegauge`` runs.

The server records when it wrote the frame holding a marker (``perf_counter``,
the same monotonic clock as the App's frames) so a benchmark can measure the
lag from "the last delta left the server" to "its text is on screen", and it
can pace a reply at a given number of deltas per second, like a model does.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

import fake_llm_server as fls  # noqa: E402  (tests/ is not a package)

SIZE = (160, 50)
KEY_ENV = "TIDEGAUGE_BENCH_FAKE_KEY"
MARKER = "ENDOFSTREAMMARKER"

_WORDS = ("the context engine keeps a running sum of message estimates so each turn "
          "costs only what was appended since the last exact usage figure from the API").split()


def markdown_deltas(count: int, marker: str = MARKER) -> list[str]:
    """``count`` deltas of ~4 characters, like a model's tokens: paragraphs, bullet lists,
    a short code block now and then, ending with a paragraph that holds ``marker``."""
    deltas: list[str] = []
    i = 0
    while len(deltas) < count - 12:
        n = len(deltas)
        if n % 600 == 300:
            deltas += ["\n\n```python\n", "def handle", "(request):", "\n    return", " request", ".user", "\n```\n\n"]
        elif n % 90 == 0:
            deltas.append("\n\n")
        elif n % 250 == 40:
            deltas += ["\n\n- ", "first", " point", "\n- ", "second", " point", "\n\n"]
        else:
            deltas.append(" " + _WORDS[i % len(_WORDS)])
            i += 1
    deltas = deltas[: count - 12]
    deltas += ["\n\n", "That", " is", " all", " for", " this", " answer", ":", " the", " end", " ", marker + "."]
    assert len(deltas) == count
    return deltas


class _TimedHandler(fls._RequestHandler):
    """The fake server's handler, pacing the frames of a reply and timing the marker."""

    def _send(self, reply: fls.Reply) -> None:
        self._frames_sent = 0
        self._paced_from = time.perf_counter()
        super()._send(reply)

    def _chunk(self, data: bytes) -> None:
        fake = self.server.fake
        assert isinstance(fake, _PacedServer)
        rate = fake.frames_per_second
        if rate:
            # Sleep only when ahead by more than a millisecond: at 2,000 frames/s a sleep
            # per frame would be all timer slack.
            ahead = self._paced_from + self._frames_sent / rate - time.perf_counter()
            if ahead > 0.001:
                time.sleep(ahead)
        super()._chunk(data)
        self._frames_sent += 1
        if fake.marker_bytes in data:
            fake.marker_sent_at.value = time.perf_counter()


class _PacedServer(fls.FakeLLMServer):
    """``FakeLLMServer`` with pacing (``frames_per_second``, 0 = as fast as it can), noting when
    the marker's frame was written in ``marker_sent_at`` (shared with the benchmark's process)."""

    handler_class = _TimedHandler

    def __init__(self, marker: bytes, marker_sent_at: Any) -> None:
        super().__init__()
        self.frames_per_second = 0.0
        self.marker_bytes = marker
        self.marker_sent_at = marker_sent_at


def _serve(connection: Any, marker: bytes, marker_sent_at: Any) -> None:
    """The server process: start, say where it listens, then script replies as told until told to stop."""
    with _PacedServer(marker, marker_sent_at) as server:
        connection.send(server.url)
        while True:
            message = connection.recv()
            if message is None:
                return
            deltas, rate = message
            server.frames_per_second = rate
            server.enqueue(fls.openai_text(deltas, usage={"prompt": 2_000, "completion": len(deltas)}))
            connection.send("queued")


class LoopbackLLM:
    """The loopback server in its own process, as a model's API is: a server thread in the
    dashboard's process would take the UI's interpreter lock thousands of times a second.

    ``reply_text`` scripts the next reply; ``marker_sent_at`` is when its frame holding
    the marker was written (``perf_counter``: the same monotonic clock in every process)."""

    def __init__(self, marker: str = MARKER) -> None:
        import multiprocessing

        self._context = multiprocessing.get_context("spawn")
        self._marker = marker.encode()
        self._marker_sent_at = self._context.Value("d", 0.0, lock=False)
        self._url = ""

    def __enter__(self) -> "LoopbackLLM":
        self._connection, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child, self._marker, self._marker_sent_at),
                                              name="loopback-llm", daemon=True)
        self._process.start()
        self._url = self._connection.recv()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._connection.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()

    def base_url(self, provider: str = "openai") -> str:
        return fls.base_url_for(self._url, provider)

    @property
    def marker_sent_at(self) -> float | None:
        return self._marker_sent_at.value or None

    def reply_text(self, deltas: list[str], frames_per_second: float = 0.0) -> None:
        """Script the next reply: these text deltas, one SSE frame (one HTTP chunk) each."""
        self._marker_sent_at.value = 0.0
        self._connection.send((deltas, frames_per_second))
        assert self._connection.recv() == "queued"


def isolate_user_dirs(tmp: Path) -> None:
    """Config and data dirs under ``tmp`` (the benchmark is a child process: nothing leaks)."""
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    os.environ["XDG_DATA_HOME"] = str(tmp / "data")
    os.environ["TIDEGAUGE_CONFIG_DIR"] = str(tmp / "config")
    os.environ["TIDEGAUGE_DATA_DIR"] = str(tmp / "data")
    os.environ[KEY_ENV] = "sk-benchmark-not-a-real-key"


@asynccontextmanager
async def live_dashboard(tmp: Path, overrides: dict[str, Any],
                         size: tuple[int, int] = SIZE) -> AsyncIterator[tuple[Any, Any]]:
    """The dashboard App (headless, ``run_test``) on a real session in its own process,
    as ``app.surfaces.dashboard.launch`` runs it. Yields (app, pilot) once the session is
    attached; stops the session process after the App has closed."""
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.session.process import SessionProcess

    workspace = tmp / "work"
    workspace.mkdir(parents=True, exist_ok=True)
    runner = SessionProcess(overrides, cwd=workspace)
    app = TidegaugeApp(runner.start(), cursor_blink=False)
    try:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            yield app, pilot
    finally:
        runner.stop()


def openai_settings(tmp: Path, server: LoopbackLLM) -> dict[str, Any]:
    """The settings (as the CLI's overrides) for the OpenAI chat provider on the loopback server."""
    isolate_user_dirs(tmp)
    return {"provider": "openai", "model": "gpt-4o", "base_url": server.base_url("openai"),
            "api_key_env": KEY_ENV, "data_dir": str(tmp / "data"), "yes": True}


def demo_settings(tmp: Path, speed: float) -> dict[str, Any]:
    isolate_user_dirs(tmp)
    return {"provider": "demo", "demo_speed": speed, "data_dir": str(tmp / "data"), "yes": True}

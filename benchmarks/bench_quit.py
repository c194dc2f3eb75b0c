"""9. Quitting the dashboard: ctrl+q to the exit of every process, within 100 ms.

The dashboard waits for its session process (and what that started) before it exits, so its
exit is the last of them.

``tidegauge`` runs as a child process on a pseudo-terminal (80 columns are
not needed: 100×30), as a person starts it, on the demo model. Once its header
shows the session idle, ctrl+q (byte 0x11) is written to the terminal and the
time to the process's exit is measured: idle, and in the middle of a streaming
reply (``summarize the project`` at --demo-speed 400), when the session thread
is busy and must be told to stop.
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Callable

from benchmarks._fixtures import require
from benchmarks.harness import Check, median, seconds

ROOT = Path(__file__).resolve().parents[1]
NAME_IDLE = "9a quit: ctrl+q to exit, idle"
NAME_BUSY = "9b quit: ctrl+q to exit, mid-reply"
MAX_QUIT_S = 0.1
CTRL_Q = b"\x11"


class Terminal:
    """``tidegauge`` on a pseudo-terminal; everything it draws is kept (and drained, so
    the child never blocks on a full terminal)."""

    def __init__(self, tmp: Path, args: list[str], size: tuple[int, int] = (100, 30)) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        env = dict(os.environ, TERM="xterm-256color", TIDEGAUGE_DATA_DIR=str(tmp / "data"),
                   TIDEGAUGE_CONFIG_DIR=str(tmp / "config"), XDG_CONFIG_HOME=str(tmp / "xdg-config"),
                   XDG_DATA_HOME=str(tmp / "xdg-data"), PYTHONPATH=str(ROOT))  # this checkout's tidegauge
        for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
            env.pop(key, None)
        workspace = tmp / "work"
        workspace.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, *(args if args[0].endswith(".py") else ["-m", "app", *args])], stdin=slave, stdout=slave,
                                     stderr=slave, cwd=workspace, env=env, start_new_session=True)
        os.close(slave)
        self.master = master
        self.output = bytearray()
        self._closed = False  # no process holds the terminal any more: all it drew is in ``output``
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._closed = True
                    self._changed.notify_all()
                    return
                self.output += data
                self._changed.notify_all()

    def wait_for(self, *texts: bytes, since: int = 0, timeout: float = 90.0) -> int:
        """Until everything in ``texts`` has been drawn after offset ``since``; returns the offset now."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not all(t in self.output[since:] for t in texts):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = bytes(self.output[-400:]).decode(errors="replace")
                    raise RuntimeError(f"tidegauge never drew {texts!r} (exit {self.proc.poll()}): …{tail}")
                self._changed.wait(min(left, 0.5))
            return len(self.output)

    def wait_until(self, condition: "Callable[[], bool]", timeout: float = 90.0) -> None:
        """Until ``condition()`` holds, checked whenever the terminal shows more (or every 0.1 s)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"gave up waiting (exit {self.proc.poll()})")
                self._changed.wait(0.1)

    def read_to_end(self, timeout: float = 30.0) -> bytes:
        """All that was drawn, once the last process holding the terminal has closed it: the
        process's exit is seen before the reader has taken what it wrote last (its last lines)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._closed and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(min(left, 0.5))
            return bytes(self.output)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass


def _turn_started(tmp: Path) -> bool:
    """The session has recorded the prompt: the turn is under way."""
    return any(b'"role":"user"' in path.read_bytes() for path in (tmp / "data").glob("sessions/*/transcript.jsonl"))


def quit_once(tmp: Path, busy: bool) -> float:
    """Seconds from ctrl+q written to the terminal to the process's exit."""
    term = Terminal(tmp, ["--demo-speed", "400" if busy else "0"])
    try:
        term.wait_for(b"scripted model", b"idle")
        if busy:
            term.type(b"summarize the project\r")
            term.wait_until(lambda: _turn_started(tmp))  # the turn is under way
        # Told by a pidfd the moment the process ends: Popen.wait(timeout) polls with sleeps that
        # double up to 50 ms, which read every exit as 31.5, 63.5 or 113.5 ms.
        exited = os.pidfd_open(term.proc.pid)
        try:
            started = time.perf_counter()
            term.type(CTRL_Q)
            ready, _, _ = select.select([exited], [], [], 30)
            elapsed = time.perf_counter() - started
        finally:
            os.close(exited)
        if not ready:
            raise RuntimeError("tidegauge did not exit within 30 s of ctrl+q")
        code = term.proc.wait()
        if code != 0:
            tail = bytes(term.output[-3000:]).decode(errors="replace")
            raise RuntimeError(f"tidegauge exited {code} on ctrl+q: …{tail}")
        return elapsed
    finally:
        term.close()


def run(quick: bool) -> list[Check]:
    require("app.surfaces.dashboard.launch")
    reps = 3 if quick else 5
    idle: list[float] = []
    busy: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
        for i in range(reps):
            idle.append(quit_once(Path(tmp) / f"idle{i}", busy=False))
            busy.append(quit_once(Path(tmp) / f"busy{i}", busy=True))
    checks = []
    for name, times, what in ((NAME_IDLE, idle, "idle"), (NAME_BUSY, busy, "while a reply streams")):
        value = median(times)
        checks.append(Check(name=name, figure=f"{seconds(value)} {what} (median of {reps}; worst {seconds(max(times))})",
                            target=f"< {MAX_QUIT_S:g} s (absolute)", value=value, limit=MAX_QUIT_S, op="<=",
                            unit="s", extra={"seconds": times}))
    return checks

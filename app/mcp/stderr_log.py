"""An MCP server's stderr, kept in ``mcp-NAME.log``: redacted, capped, the owner's only.

The server does not write the file itself: its stderr is a pipe, and a thread
here reads it, redacts every registered secret and the values of the server's
own ``env`` table (a server that prints its environment prints its token),
and writes through a cap: the first part of the log, then the newest part, with
a line saying how much was left out between them (``MAX_LOG_BYTES`` in all).
The file is opened 0600 with ``O_NOFOLLOW`` (app.kernel.private_files): a symlink
planted at the path leaves the log unwritten, never the link's target written.
"""

from __future__ import annotations

import codecs
import os
import re
import select
import threading
from pathlib import Path
from typing import IO, Iterable, TextIO

from app.kernel.private_files import make_private_dir, open_private_fd
from app.kernel.redact import MIN_SECRET_LENGTH, REDACTED, redact
from app.kernel.sanitize import sanitize_for_display
from app.tools.registry import CappedFile

MAX_LOG_BYTES = 1024 * 1024
# Room kept under the cap for the "left out" line, so the file never passes MAX_LOG_BYTES.
_MARKER_ROOM = 512
# How long a stopped log waits for the last bytes of a server that is already gone
# (a grandchild that kept the pipe open would otherwise keep the reader forever).
_DRAIN_SECONDS = 2.0


class _CappedLog(CappedFile):
    def marker(self) -> str:
        return (f"\n… [tidegauge: server log capped at {self.max_bytes:,} bytes: {self.dropped:,} bytes left out "
                f"here; the newest {self.tail_bytes:,} bytes follow] …\n")


class ServerStderrLog:
    """The pipe a server's stderr goes into, and the thread that files what comes out of it.

    ``writer`` is handed to the SDK (the child gets it as fd 2); ``spawned`` drops our
    copy of it once the process exists; ``close`` waits for the end of what the server
    wrote and closes the file. With ``path`` None (or unopenable) the output is read and dropped.
    """

    # A line with no whitespace longer than this is cut anyway (keys contain no whitespace)
    _LONG_LINE = 64 * 1024
    _KEY_WINDOW = 4096

    def __init__(self, path: Path | None, env_values: Iterable[str] = (), max_bytes: int = MAX_LOG_BYTES) -> None:
        self.path = path
        values = sorted({v.strip() for v in env_values if len(v.strip()) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        self._own_secrets = re.compile("|".join(map(re.escape, values))) if values else None
        self.file: _CappedLog | None = self._open(path, max_bytes)
        read_fd, write_fd = os.pipe()
        self._read_fd = read_fd
        self.writer: TextIO | None = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        # The server's last non-blank stderr line, redacted and bounded: a failure's one line quotes it.
        self.last_line = ""
        self._stop = threading.Event()
        self._file_lock = threading.Lock()  # the reader thread and write_line share the file
        self._reader = threading.Thread(target=self._read_all, name="mcp-stderr-log", daemon=True)
        self._reader.start()

    @staticmethod
    def _open(path: Path | None, max_bytes: int) -> _CappedLog | None:
        if path is None:
            return None
        try:
            make_private_dir(path.parent)
            fd = open_private_fd(path, os.O_WRONLY | os.O_APPEND)
        except OSError:
            return None  # a symlink or a special file at the path: this run keeps no log
        try:
            existing = os.fstat(fd).st_size
            if existing > max_bytes // 2:
                os.ftruncate(fd, 0)  # an earlier run's log, big: start anew rather than grow past the cap
                existing = 0
        except OSError:
            os.close(fd)
            return None
        raw: IO[bytes] = os.fdopen(fd, "ab", buffering=0)  # unbuffered: the log is current while it runs
        return _CappedLog(raw, max(1024, max_bytes - existing - _MARKER_ROOM))

    def write_line(self, text: str) -> None:
        """A line from tidegauge itself (the server's log notifications): redacted and capped like stderr."""
        self._flush(text.rstrip("\n") + "\n", from_server=False)

    def spawned(self) -> None:
        """The server process holds its own copy of the pipe: drop ours, so its exit is an EOF."""
        if self.writer is not None:
            try:
                self.writer.close()
            except OSError:
                pass
            self.writer = None

    def close(self) -> None:
        """After the server stopped: file what is left, write the kept tail and close the file."""
        self.spawned()
        self._reader.join(_DRAIN_SECONDS)
        self._stop.set()  # a process we did not start may hold the pipe: stop waiting for it
        self._reader.join()

    # ---- the reader thread ----

    def _read_all(self) -> None:
        try:
            while True:
                if self._stop.is_set():
                    ready, _, _ = select.select([self._read_fd], [], [], 0)
                    if not ready:
                        break
                else:
                    # Woken four times a second only to look at the stop flag, once the server is gone.
                    ready, _, _ = select.select([self._read_fd], [], [], 0.25)
                    if not ready:
                        continue
                chunk = os.read(self._read_fd, 65536)
                if not chunk:
                    break
                self._write(self._decoder.decode(chunk))
            self._write(self._decoder.decode(b"", final=True))
            self._flush(self._pending)
        except (OSError, ValueError):
            pass  # a disk error: the server runs on, its log stops here
        finally:
            os.close(self._read_fd)
            with self._file_lock:
                file, self.file = self.file, None
            if file is not None:
                try:
                    file.close()
                except OSError:
                    pass

    def _write(self, text: str) -> None:
        pending = self._pending + text
        # Up to the last whitespace: a key cut between two reads is redacted whole once its end arrives.
        cut = max(pending.rfind("\n"), pending.rfind(" "), pending.rfind("\t")) + 1
        if cut == 0 and len(pending) > self._LONG_LINE:
            # One endless word: cut where no secret lies across the cut.
            cut = len(pending) - self._KEY_WINDOW
            around = pending[cut - self._KEY_WINDOW:]
            if self._redact(around) != around and len(pending) < 4 * self._LONG_LINE:
                cut = 0
        if cut:
            self._flush(pending[:cut])
        self._pending = pending[cut:]

    def _flush(self, text: str, from_server: bool = True) -> None:
        if text and from_server:
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                last = sanitize_for_display(self._redact(lines[-1][-2000:])).strip()
                self.last_line = last if len(last) <= 200 else last[:199] + "…"
        if text and self.file is not None:
            data = self._redact(text).encode("utf-8", errors="replace")
            with self._file_lock:
                if self.file is not None:
                    self.file.write(data)

    def _redact(self, text: str) -> str:
        text = redact(text)
        return self._own_secrets.sub(REDACTED, text) if self._own_secrets is not None else text

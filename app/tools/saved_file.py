"""Where a tool's full output is saved: a file name from a call id, a file with a size cap.

Below both the registry (which saves what it truncates) and run_bash (which spills
a long output while it runs): the registry registers run_bash, so neither may hold
what the other needs.
"""

from __future__ import annotations

import re
import uuid
from collections import deque
from typing import IO


def safe_file_stem(call_id: str) -> str:
    """A file name stem from a tool call id (ids come from the model's server)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id).strip(".")[:120]
    return stem or f"call-{uuid.uuid4().hex[:12]}"


class CappedFile:
    """A binary file that stops growing at ``max_bytes``: the head up to the cap, then the tail.

    Past ``max_bytes - tail_bytes`` written bytes, what arrives is held in a
    bounded in-memory tail instead; ``close`` writes a marker saying how much
    was left out, then the tail. The tail is what matters most in a long
    output (errors, summaries, exit codes), so it is never what gets dropped.
    """

    _MAX_TAIL_BYTES = 8 * 1024 * 1024

    def __init__(self, file: IO[bytes], max_bytes: int) -> None:
        self.file = file
        self.max_bytes = max(1, max_bytes)
        self.tail_bytes = max(1, min(self.max_bytes // 4, self._MAX_TAIL_BYTES))
        self.head_bytes = self.max_bytes - self.tail_bytes
        self.written = 0
        self.dropped = 0
        self._tail: deque[bytes] = deque()
        self._tail_size = 0

    def write(self, data: bytes) -> None:
        room = self.head_bytes - self.written
        if room > 0:
            self.file.write(data[:room])
            self.written += min(room, len(data))
            data = data[room:]
        if not data:
            return
        self._tail.append(data)
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0]) >= self.tail_bytes:
            self.dropped += len(self._tail[0])
            self._tail_size -= len(self._tail.popleft())

    @property
    def capped(self) -> bool:
        return self.dropped > 0 or self._tail_size > self.tail_bytes

    def close(self) -> None:
        try:
            tail = b"".join(self._tail)
            if len(tail) > self.tail_bytes:
                self.dropped += len(tail) - self.tail_bytes
                tail = tail[-self.tail_bytes :]
            if self.dropped:
                self.file.write(self.marker().encode())
            self.file.write(tail)
            self._tail.clear()
        finally:
            self.file.close()

    def marker(self) -> str:
        return (
            f"\n\n… [saved output capped at {self.max_bytes:,} bytes: {self.dropped:,} bytes left out "
            f"here; the last {self.tail_bytes:,} bytes follow] …\n\n"
        )

    def note(self) -> str:
        """For the truncation notice: '' when the file holds the whole output."""
        if not self.dropped:
            return ""
        return (
            f"capped at {self.max_bytes:,} bytes (max_saved_output): {self.dropped:,} bytes in the "
            f"middle were not saved; the file keeps the first {self.head_bytes:,} and the last "
            f"{self.tail_bytes:,} bytes"
        )

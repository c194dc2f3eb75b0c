"""What a process reads back of the files kept beside the bytecode and in the data directory,
when what lies at the path is not what tidegauge wrote."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from app.kernel.private_files import read_kept_json, write_private_atomic
from app.system.kept_files import read_kept, write_kept

HEADER = b"tidegauge kept test 1\n"


def test_a_fifo_planted_at_a_kept_files_name_is_not_read_and_start_up_goes_on(tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: a start-up that opened it so would hang."""
    planted = tmp_path / "kept.bin"
    os.mkfifo(planted)
    answers: list[bytes | None] = []
    reader = threading.Thread(target=lambda: answers.append(read_kept(str(planted), HEADER, 1_000)), daemon=True)
    reader.start()
    reader.join(timeout=30)  # a hang guard, not a synchronisation: the read returns at once or never
    if reader.is_alive():  # the old open: free the thread before failing
        with open(planted, "wb"):
            pass
    assert answers == [None]


def test_a_folder_or_a_file_with_another_header_or_too_big_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "folder.bin").mkdir()
    assert read_kept(str(tmp_path / "folder.bin"), HEADER, 1_000) is None
    other = tmp_path / "other.bin"
    other.write_bytes(b"another format 1\npayload")
    assert read_kept(str(other), HEADER, 1_000) is None
    big = tmp_path / "big.bin"
    big.write_bytes(HEADER + b"x" * 2_000)
    assert read_kept(str(big), HEADER, 1_000) is None
    kept = tmp_path / "kept.bin"
    assert write_kept(str(kept), HEADER + b"payload")
    assert read_kept(str(kept), HEADER, 1_000) == b"payload"


def test_a_kept_json_file_nested_deeper_than_json_parses_is_started_afresh(tmp_path: Path) -> None:
    """A cache in the data directory nested 100,000 deep: json raises RecursionError, not
    ValueError. The reader starts afresh instead of ending the process with a traceback."""
    path = tmp_path / "cache.json"
    write_private_atomic(path, b"[" * 100_000 + b"]" * 100_000)

    assert read_kept_json(path, 1_000_000) == {}
    assert read_kept_json(path, 1_000_000, ours=True) == {}

"""The demo's scratch workspace: the seed's 15 MB log plus a small project to read.

The project is real files shipped as package data (``app/demo/project/``),
copied with ``importlib.resources`` so it works from a source checkout, an
editable install or a wheel alike. ``app.log`` is generated: 15 MB is not
worth shipping, and it is written once per data dir and hard-linked into each
new workspace.

The scripted model's scenarios run real tools here: ``cat app.log`` meets the
registry's truncation (seed 000, experiments 1 and 2) and reading the
``inventory`` project file after file climbs through the demo's small budget
into an auto-compaction (experiment 3).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Iterator

LOG_NAME = "app.log"
LOG_LINES = 300_000
LOG_INFO_PREFIX = "2026-10-18 12:00:00 INFO request handled id="
LOG_ERROR_LINE = "2026-10-18 12:00:01 ERROR database connection refused"
PROJECT_PACKAGE = "app.demo"
PROJECT_DIR = "project"
# Never copied: byte-code a developer's interpreter may have left in the source tree.
_SKIPPED = ("__pycache__", ".pytest_cache")


def _expected_log_bytes() -> int:
    """Size of a complete app.log, computed without writing it (for the idempotence check)."""
    total = 0
    low = 1
    width = 1
    while low <= LOG_LINES:
        high = min(LOG_LINES, 10 ** width - 1)
        total += (high - low + 1) * (len(LOG_INFO_PREFIX) + width + 1)
        low = high + 1
        width += 1
    return total + len(LOG_ERROR_LINE) + 1


def _log_blocks() -> Iterator[str]:
    """The INFO lines, ids 1 to LOG_LINES, a thousand ids at a time: from 1000 on, a block's lines
    differ only in their last three digits, so each block is one ``join`` of the same thousand
    endings in C, not a thousand formatted strings (19 ms instead of 116: the log is written once
    per data directory, and the dashboard's demo session waits for it before it is ready)."""
    yield "".join(f"{LOG_INFO_PREFIX}{n}\n" for n in range(1, min(LOG_LINES, 999) + 1))
    endings = [f"{n:03d}" for n in range(1000)]
    for thousands in range(1, LOG_LINES // 1000 + 1):
        head = f"{LOG_INFO_PREFIX}{thousands}"
        last = min(999, LOG_LINES - thousands * 1000)
        yield head + ("\n" + head).join(endings[:last + 1]) + "\n"


def write_app_log(path: Path) -> None:
    """300,000 INFO lines and one ERROR line at the very end, as in the seed.

    Written under a name of its own (O_EXCL) and renamed into place: demos that start at once
    (two browser tabs) share the log cache, and a fixed temporary name let one truncate the
    other's half-written file, or write through a symlink left at that name."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with open(fd, "w", encoding="ascii", newline="\n") as f:
            for block in _log_blocks():
                f.write(block)
            f.write(LOG_ERROR_LINE + "\n")
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _walk(node: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    """(relative path, file) of every file under ``node``, sorted."""
    found: list[tuple[str, Traversable]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name in _SKIPPED or child.name.endswith(".pyc"):
            continue
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            found += _walk(child, rel + "/")
        else:
            found.append((rel, child))
    return found


def _project_root() -> Traversable:
    return files(PROJECT_PACKAGE).joinpath(PROJECT_DIR)


def project_files() -> dict[str, str]:
    """Relative path -> content of every file of the demo project (not app.log)."""
    return {rel: node.read_text(encoding="utf-8") for rel, node in _walk(_project_root())}


def _complete_log(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == _expected_log_bytes()


def _place_log(log: Path, log_cache: Path | None) -> None:
    if log_cache is None:
        write_app_log(log)
        return
    log_cache.mkdir(parents=True, exist_ok=True)
    cached = log_cache / LOG_NAME
    if not _complete_log(cached):
        write_app_log(cached)
    log.unlink(missing_ok=True)
    try:
        os.link(cached, log)
    except OSError:  # another file system: copy instead
        shutil.copyfile(cached, log)


def create_demo_workspace(root: Path, log_cache: Path | None = None) -> Path:
    """Create (or complete) the demo workspace under ``root`` and return it.

    Idempotent: files that exist are left alone (the demo may have edited them
    in an earlier run of a resumed session); ``app.log`` is rewritten only when
    missing or not the expected size. With ``log_cache`` the 15 MB log is
    written once there and hard-linked into each new workspace, so opening the
    demo does not spend start-up time writing it again.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    log = root / LOG_NAME
    if not _complete_log(log):
        _place_log(log, log_cache)
    for rel, node in _walk(_project_root()):
        target = root / rel
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(node.read_bytes())  # bytes: the files arrive exactly as shipped
    return root

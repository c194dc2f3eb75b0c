"""The demo workspace: the seed's log and a project that actually works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.demo.workspace import LOG_ERROR_LINE, create_demo_workspace, project_files


def test_app_log_has_300001_lines_with_the_error_last(tmp_path: Path) -> None:
    root = create_demo_workspace(tmp_path / "ws")
    log = root / "app.log"
    data = log.read_bytes()
    lines = data.decode("ascii").splitlines()
    assert len(lines) == 300_001
    assert lines[0] == "2026-10-18 12:00:00 INFO request handled id=1"
    assert lines[299_999] == "2026-10-18 12:00:00 INFO request handled id=300000"
    # every id once, in order, none padded (the log is written a thousand ids at a time)
    assert lines[:-1] == [f"2026-10-18 12:00:00 INFO request handled id={n}" for n in range(1, 300_001)]
    assert lines[-1] == LOG_ERROR_LINE == "2026-10-18 12:00:01 ERROR database connection refused"
    assert sum("ERROR" in line for line in lines) == 1
    assert 14_000_000 < len(data) < 16_000_000  # "about 15 MB", as in the seed


def test_idempotent_and_keeps_edits(tmp_path: Path) -> None:
    root = create_demo_workspace(tmp_path)
    edited = root / "inventory" / "models.py"
    edited.write_text("# edited by the agent\n")
    log = root / "app.log"
    log.write_text("truncated by a crash\n")
    assert create_demo_workspace(tmp_path) == root
    assert edited.read_text() == "# edited by the agent\n"  # an earlier run's edits survive a resume
    assert log.read_text().splitlines()[-1] == LOG_ERROR_LINE  # a damaged log is rebuilt
    assert len(log.read_bytes().splitlines()) == 300_001


def test_project_has_modules_memory_file_and_passing_tests(tmp_path: Path) -> None:
    root = create_demo_workspace(tmp_path)
    files = project_files()
    modules = [p for p in files if p.startswith("inventory/") and p.endswith(".py")]
    assert len(modules) >= 8
    for rel in files:
        assert (root / rel).is_file(), rel
    assert "Never change public function signatures" in (root / "AGENTS.md").read_text()
    # The project is real code: its own test suite passes.
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_log_cache_is_written_once_and_linked_into_each_workspace(tmp_path):
    from app.demo.workspace import LOG_ERROR_LINE, create_demo_workspace

    cache = tmp_path / "cache"
    first = create_demo_workspace(tmp_path / "s1", log_cache=cache)
    second = create_demo_workspace(tmp_path / "s2", log_cache=cache)
    cached = cache / "app.log"
    assert (first / "app.log").stat().st_ino == cached.stat().st_ino == (second / "app.log").stat().st_ino
    assert (second / "app.log").read_text().rstrip("\n").endswith(LOG_ERROR_LINE)


def test_a_log_being_written_never_writes_through_a_name_another_demo_uses(tmp_path):
    """Demos that start at once (two browser tabs) share the log cache. The log was written under
    a fixed temporary name: one demo truncated the other's half-written log, and a symlink left at
    that name was written through."""
    from app.demo.workspace import write_app_log

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    log = tmp_path / "app.log"
    (tmp_path / "app.log.tmp").symlink_to(precious)
    write_app_log(log)
    assert precious.read_text() == "keep me"
    assert log.read_text().endswith(LOG_ERROR_LINE + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.log", "app.log.tmp", "precious.txt"]  # nothing left behind

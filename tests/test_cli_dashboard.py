"""`tidegauge` (no -p) as a user starts it: a real process, the dashboard headless.

The dashboard paints before the settings and the agent are loaded; what goes
wrong while loading them still ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAUNCHER = Path(__file__).with_name("dashboard_launcher.py")
ROOT = Path(__file__).resolve().parents[1]


def _start(tmp_path: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT), **env_extra)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(LAUNCHER), *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_first_frame_is_drawn_before_pydantic_and_the_settings_are_loaded(tmp_path: Path) -> None:
    proc = _start(tmp_path, TIDEGAUGE_TEST_EXIT_AT_FIRST_FRAME="1")
    assert proc.returncode == 0, proc.stderr
    assert "FIRST_FRAME pydantic=False" in proc.stdout


def test_a_missing_api_key_closes_the_dashboard_with_one_line(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--provider", "openai")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["tidegauge: provider openai: no API key (set OPENAI_API_KEY, or --base-url URL for a server of your own)"]


def test_a_bad_setting_in_the_environment_closes_the_dashboard_with_one_line_naming_it(tmp_path: Path) -> None:
    proc = _start(tmp_path, TIDEGAUGE_MAX_STEPS="lots")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tidegauge: ") and "max_steps" in line and "lots" in line


def test_an_unknown_session_id_is_one_line_and_the_screen_never_opens(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--resume", "no-such-session")
    assert proc.returncode == 2
    assert "FIRST_FRAME" not in proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert "no-such-session" in line

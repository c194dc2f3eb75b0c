"""The CLI's words: ``--help`` explains every flag, ``--config-path`` names the file that is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.wiring.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _tidegauge(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=cwd, env=env | {"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}


def test_help_explains_every_flag(tmp_path: Path) -> None:
    """Each flag (those added later too) has words, and ``tidegauge --help`` shows them."""
    flags = [action for action in build_parser()._actions if action.option_strings]
    assert [a.option_strings for a in flags if not (a.help or "").strip()] == []
    proc = _tidegauge("--help", env=_clean_env(), cwd=tmp_path)
    assert proc.returncode == 0
    shown = "".join(proc.stdout.split())  # argparse wraps lines (and breaks after hyphens)
    for action in flags:
        assert "".join(action.help.split()) in shown, action.option_strings
    for flag in ("--model", "--base-url", "--output-format", "--web", "--web-port", "--config-path"):
        assert flag in shown


def test_config_path_prints_the_file_that_is_read(tmp_path: Path) -> None:
    env = _clean_env() | {"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "conf"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data")}
    proc = _tidegauge("--config-path", env=env, cwd=tmp_path)
    assert proc.returncode == 0
    path = Path(proc.stdout.strip())
    assert path.parent == tmp_path / "conf"

    # The printed file is the one the settings come from: a bad value there is reported with that path.
    path.parent.mkdir(parents=True)
    path.write_text("max_steps = 0\n")
    run = _tidegauge("-p", "hi", "--provider", "demo", env=env, cwd=tmp_path)
    assert run.returncode == 2
    assert str(path) in run.stderr and "max_steps" in run.stderr


def test_config_path_defaults_to_the_users_config_dir(tmp_path: Path) -> None:
    env = _clean_env() | {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    proc = _tidegauge("--config-path", env=env, cwd=tmp_path)
    assert proc.returncode == 0
    assert Path(proc.stdout.strip()) == tmp_path / "xdg" / "tidegauge" / "config.toml"

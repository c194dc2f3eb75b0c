"""A config.toml that someone else could have written is refused, as ssh refuses (StrictModes).

config.toml starts programs ([mcp_servers] commands): obeying a file another local user
can write would run their command as us. The real CLI must exit 2 with one line naming
the file and the fix, before anything of the file is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_cli

from app.wiring.config import load_settings
from app.kernel.errors import ConfigError


def _config_starting_a_server(config_dir: Path, ran: Path) -> Path:
    """A config whose MCP server command leaves ``ran`` behind when it is started."""
    config_dir.mkdir(parents=True, exist_ok=True)
    toml = config_dir / "config.toml"
    touch = f"open({str(ran)!r}, 'w').close()"
    toml.write_text(
        f"[mcp_servers.planted]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [\"-c\", {json.dumps(touch)}]\nstartup_timeout = 20\n",
        encoding="utf-8")
    return toml


def _tidegauge(tmp_path: Path, config_dir: Path, *, in_process: bool = False) -> subprocess.CompletedProcess[str]:
    """``tidegauge -p hello`` on the demo; ``in_process``: the same CLI in this process
    (tests/cli_in_process.py), for a run whose outcome is not the process's own exit and streams."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(config_dir), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    argv = ["-p", "hello", "--provider", "demo", "--demo-speed", "0"]
    if in_process:
        return run_cli(argv, cwd=work, env=env)
    return subprocess.run([sys.executable, "-m", "app", *argv], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_config_others_can_write_is_refused_and_its_server_command_never_runs(tmp_path):
    ran = tmp_path / "server-ran"
    toml = _config_starting_a_server(tmp_path / "config", ran)
    toml.chmod(0o666)

    proc = _tidegauge(tmp_path, tmp_path / "config")

    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"tidegauge: config: refusing {toml}: others can write it (mode 0666); fix: chmod go-w {toml}"]
    assert proc.stdout == ""
    assert not ran.exists(), "the MCP server command of a refused config.toml was started"
    assert not (tmp_path / "data").exists(), "a session was started from a refused config.toml"

    # The fix it names works: the same file, no longer writable by others, is obeyed (its server starts).
    # What is checked is the file's effect, not the process: the same CLI runs in this process.
    toml.chmod(0o644)
    fixed = _tidegauge(tmp_path, tmp_path / "config", in_process=True)
    assert fixed.returncode == 0, fixed.stderr
    assert ran.exists(), "with the fix applied the config's server should have been started"


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("TIDEGAUGE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TIDEGAUGE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def _use(monkeypatch: pytest.MonkeyPatch, config_dir: Path) -> Path:
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(config_dir))
    toml = _config_starting_a_server(config_dir, config_dir / "never")
    toml.chmod(0o600)
    return toml


def _refusal(monkeypatch: pytest.MonkeyPatch) -> str:
    with pytest.raises(ConfigError) as err:
        load_settings({})
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_group_writable_config_is_refused(config_home, monkeypatch):
    toml = _use(monkeypatch, config_home / "config")
    toml.chmod(0o620)
    assert _refusal(monkeypatch) == f"config: refusing {toml}: others can write it (mode 0620); fix: chmod go-w {toml}"


def test_a_config_in_a_folder_anyone_can_write_is_refused_unless_the_folder_is_sticky(config_home, monkeypatch):
    shared = config_home / "shared"
    shared.mkdir()
    toml = _use(monkeypatch, shared / "tidegauge")
    shared.chmod(0o777)  # anyone could rename tidegauge/ away and put their own in its place
    assert _refusal(monkeypatch) == (f"config: refusing {toml}: others can write its folder {shared} (mode 0777) "
                                     f"and replace it; fix: chmod go-w {shared}")
    shared.chmod(0o1777)  # sticky, like /tmp: only the owner may rename or remove what is in it
    assert "planted" in load_settings({}).mcp_servers


def test_a_config_reached_through_a_symlink_into_a_writable_folder_is_refused(config_home, monkeypatch):
    shared = config_home / "shared"
    shared.mkdir()
    real = _use(monkeypatch, shared)
    shared.chmod(0o777)
    mine = config_home / "mine"
    mine.mkdir()
    (mine / "config.toml").symlink_to(real)
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(mine))
    assert f"others can write its folder {shared} (mode 0777)" in _refusal(monkeypatch)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_config_owned_by_another_user_is_refused(config_home, monkeypatch):
    toml = _use(monkeypatch, config_home / "config")
    os.chown(toml, 65534, -1)
    message = _refusal(monkeypatch)
    assert message.startswith(f"config: refusing {toml}: it is owned by another user (uid 65534); fix: chown ")
    assert message.endswith(f" {toml} (and check what it holds)")


def test_a_private_config_is_obeyed(config_home, monkeypatch):
    _use(monkeypatch, config_home / "config")
    assert "planted" in load_settings({}).mcp_servers

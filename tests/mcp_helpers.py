"""``tidegauge -p`` in stream-json through the real CLI, with MCP servers from a config.toml:
the one way the MCP tests run a whole headless task.

A run goes through the CLI inside the test process (``tests/cli_in_process.py``) unless the test
asks for the real process: a ``python -m app`` start costs about a CPU-second of interpreter and
imports, and most MCP tests check what the servers, the model and the user see, not the process.
Those that check the process itself (its exit on a signal, its children, the real binary's
wiring) pass ``real_process=True``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_in_process import run_cli

KEY = "sk-test-fake-key-0123456789"


def tidegauge_run(argv: list[str], *, cwd: Path, env: dict[str, str],
                  real_process: bool = False) -> subprocess.CompletedProcess[str]:
    """``tidegauge ARGV`` with exactly ``env``: in this process, or with ``real_process`` as
    ``python -m app``; the outcome shaped as ``subprocess.run(..., capture_output=True, text=True)``."""
    if not real_process:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run_cli(argv, cwd=cwd, env=env)
        # Called from an async test: the CLI's own asyncio.run needs a thread without a running
        # loop. The caller's loop waits, as it did for subprocess.run.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(run_cli, argv, cwd=cwd, env=env).result()
    return subprocess.run([sys.executable, "-m", "app", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)


def run_headless(fake_llm: Any, tmp_path: Path, servers_toml: str, prompt: str, *flags: str,
                 env_extra: dict[str, str] | None = None,
                 real_process: bool = False) -> subprocess.CompletedProcess[str]:
    """Run one task against ``fake_llm`` (Chat Completions) with ``servers_toml`` as the config file."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(servers_toml, encoding="utf-8")
    (config / "config.toml").chmod(0o600)
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY, **(env_extra or {})})
    return tidegauge_run(["--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai"),
                          "--output-format", "stream-json", *flags, "-p", prompt],
                         cwd=tmp_path / "work", env=env, real_process=real_process)

"""How a finished headless run ends: the real ``python -m app``, its stdout a block-buffered pipe
(no PYTHONUNBUFFERED), in a new data directory. It ends without the interpreter's teardown when no
thread is left to wait for, so what the teardown used to do that anyone sees must still happen:
every byte printed reaches the reader, the exit handlers write their files, the exit code is the
run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fake_llm_server import http_error, openai_error_body, openai_text

KEY = "sk-test-fake-key-0123456789"


def _run(tmp_path: Path, base_url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_") and k != "PYTHONUNBUFFERED"}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               OPENAI_API_KEY=KEY)
    (tmp_path / "work").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "app", "-p", "say it", "--provider", "openai", "--model", "m",
                           "--base-url", base_url, *flags], cwd=tmp_path / "work", env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_finished_run_hands_over_every_byte_and_what_its_exit_handlers_write(fake_llm, tmp_path) -> None:
    # Far more than a pipe holds, and than the stream's buffer: all of it reaches the reader.
    reply = "".join(f"line {n} of a long answer\n" for n in range(20_000))
    fake_llm.enqueue(openai_text(reply))
    proc = _run(tmp_path, fake_llm.base_url("openai"), "--output-format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == reply
    # Written by an exit handler (the token pieces this run counted), in this new data directory.
    pieces = json.loads((tmp_path / "data" / "token-pieces.json").read_text())
    assert pieces, "the exit handler wrote no token pieces"


def test_a_failed_run_keeps_its_exit_code_and_its_last_words(fake_llm, tmp_path) -> None:
    fake_llm.enqueue(http_error(400, openai_error_body("the model m does not exist")))
    proc = _run(tmp_path, fake_llm.base_url("openai"))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert "error: HTTP 400: [invalid_request_error] the model m does not exist" in lines, proc.stderr
    assert lines[-1].startswith("resume with: tidegauge --resume "), proc.stderr  # the last thing printed

"""End to end: kill -9 the CLI while a tool runs, then --continue the session.

The resumed request must be valid (the unfinished tool call answered by a
synthetic "interrupted" result), keep the earlier conversation, and the API
key must be nowhere on disk or in the output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fake_llm_server import openai_text, openai_tool_calls

from app.session.store import SessionStore
from app.kernel.markers import INTERRUPTED_RESULT
from app.session.transcript import restore

API_KEY = "sk-test-resume-secret-31415926"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items()
                 if not k.startswith("TIDEGAUGE_") and not k.endswith("_API_KEY")}
    variables.update(TIDEGAUGE_DATA_DIR=str(tmp_path / "data"), TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"),
                     OPENAI_API_KEY=API_KEY, PYTHONUNBUFFERED="1")
    return variables


def cli(fake_llm, *args: str) -> list[str]:
    return [sys.executable, "-m", "app", "--provider", "openai", "--model", "fake-model",
            "--base-url", fake_llm.base_url("openai"), "--output-format", "stream-json", *args]


def test_kill_mid_tool_then_continue(fake_llm, env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    fifo = project / "tool-started"  # in the workspace: what a sandboxed command reaches
    os.mkfifo(fifo)
    command = f"echo started > {fifo}; exec sleep 600"
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": command}, "call_long")],
                                       text="Running the long job.",
                                       usage=dict(prompt=500, completion=20)))

    proc = subprocess.Popen(cli(fake_llm, "-p", "run the long job", "--yes"), cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.append(fifo.read_text().strip()), daemon=True)
    reader.start()
    reader.join(timeout=60)
    try:
        assert said == ["started"], "the tool never started: " + (
            proc.stderr.read1().decode() if proc.poll() is not None else "")
    finally:
        # The crash: no cleanup, no goodbye. The command dies with it (PR_SET_PDEATHSIG; sandboxed,
        # its PID namespace with it), so there is nothing of it to end here.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()

    store = SessionStore(tmp_path / "data")
    session = store.latest_for(project)
    assert session is not None
    state = restore(session)
    assert state.history[-1].tool_results[0].content == INTERRUPTED_RESULT

    fake_llm.enqueue(openai_text("The job was interrupted; I will run it in the background next time.",
                                 usage=dict(prompt=700, completion=15)))
    resumed = subprocess.run(cli(fake_llm, "-p", "what happened?", "--continue"), cwd=project, env=env,
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr

    sent = fake_llm.last_json["messages"]
    texts = json.dumps(sent)
    assert "run the long job" in texts  # the earlier conversation came back
    tool_messages = [m for m in sent if m["role"] == "tool"]
    assert [(m["tool_call_id"], INTERRUPTED_RESULT in m["content"]) for m in tool_messages] == [("call_long", True)]
    assert sent[-1]["role"] == "user" and "what happened?" in json.dumps(sent[-1])
    results = [json.loads(line) for line in resumed.stdout.splitlines() if '"type":"result"' in line.replace(" ", "")]
    assert [r["stop_reason"] for r in results] == ["end_turn"]

    # one session, resumed in place; the key is nowhere on disk or in the output
    assert [s.id for s in store.list_for(project)] == [session.id]
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
    assert API_KEY not in resumed.stdout and API_KEY not in resumed.stderr

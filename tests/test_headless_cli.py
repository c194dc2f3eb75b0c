"""`tidegauge -p` as a user runs it: a real process, the fake server on loopback (a variation on
what a real run here already showed runs the same CLI in-process, tests/cli_in_process.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_in_process import run_cli
from fake_llm_server import anthropic_text, openai_text, openai_tool_calls, stall_after


KEY = "sk-test-fake-key-0123456789"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({
        "TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"),
        "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


def _run(args: list[str], tmp_path: Path, env: dict[str, str], cwd: Path | None = None,
         real_process: bool = True) -> subprocess.CompletedProcess:
    """The real process; ``real_process=False``: the same CLI in this process with exactly ``env``
    (tests/cli_in_process.py), for a variation on what a real run here already showed."""
    workdir = cwd or tmp_path / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    if not real_process:
        return run_cli(args, cwd=workdir, env=env)
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=120)


def test_stream_json_lines_usage_tool_result_and_result(fake_llm, tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("hello\n")
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "a.txt"})], usage=dict(prompt=500, completion=10, cached=300)),
        openai_text("It says hello.", usage=None),  # a server that sends no usage at all
    )
    env = _env(tmp_path, OPENAI_API_KEY=KEY)
    proc = _run(["-p", "read a.txt", "--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai"),
                 "--output-format", "stream-json"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all("type" in e for e in events)
    usage = [e for e in events if e["type"] == "usage"]
    assert usage[0] == {"type": "usage", "agent": "main", "input_tokens": 200, "cache_read_tokens": 300,
                        "cache_write_tokens": 0, "output_tokens": 10, "context_tokens": 510,
                        "cost_usd": usage[0]["cost_usd"], "seq": usage[0]["seq"], "command_id": 1}
    assert usage[1]["context_tokens"] is None and usage[1]["input_tokens"] is None
    tool = [e for e in events if e["type"] == "tool_result"][0]
    assert {"id", "name", "is_error", "truncated", "original_chars", "kept_chars", "full_output_path"} <= tool.keys()
    assert tool["name"] == "read_file" and tool["truncated"] is False
    assert events[-1]["type"] == "result"
    result = events[-1]
    assert {k: result[k] for k in ("type", "stop_reason", "text", "steps")} == {
        "type": "result", "stop_reason": "end_turn", "text": "It says hello.", "steps": 2}
    assert result["subtype"] == "success" and result["is_error"] is False and result["num_turns"] == 2
    assert result["usage"]["input_tokens"] == 200 and result["usage"]["cache_read_tokens"] == 300
    assert KEY not in proc.stdout and KEY not in proc.stderr


def test_text_mode_prints_the_answer_and_step_limit_exit_code(fake_llm, tmp_path):
    fake_llm.default = lambda body, path: openai_tool_calls([("list_files", {})])
    env = _env(tmp_path, OPENAI_API_KEY=KEY)
    proc = _run(["-p", "loop", "--provider", "openai", "--base-url", fake_llm.base_url("openai"), "--max-steps", "2"],
                tmp_path, env)
    assert proc.returncode == 3
    assert "step limit reached" in proc.stderr
    assert len(fake_llm.requests) == 2


def test_anthropic_text_mode_streams_the_answer(fake_llm, tmp_path):
    fake_llm.enqueue(anthropic_text(["The ", "answer ", "is 42."]))
    env = _env(tmp_path, ANTHROPIC_API_KEY=KEY)
    proc = _run(["-p", "question", "--provider", "anthropic", "--base-url", fake_llm.base_url("anthropic")],
                tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "The answer is 42."


@pytest.mark.parametrize("args, needle", [
    (["--max-steps", "0"], "max_steps"),
    (["--budget", "-5"], "budget"),
    (["--provider", "nosuch"], "provider"),
])
def test_bad_settings_give_one_line_errors(tmp_path, args, needle):
    # the first through the real binary; the others are the same check on other settings
    proc = _run(["-p", "x", *args], tmp_path, _env(tmp_path), real_process=args == ["--max-steps", "0"])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr


def test_missing_key_for_a_named_provider_is_one_line(tmp_path):
    proc = _run(["-p", "x", "--provider", "anthropic"], tmp_path, _env(tmp_path), real_process=False)
    assert proc.returncode == 2
    assert "ANTHROPIC_API_KEY" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_kill_9_mid_turn_then_continue(fake_llm, tmp_path):
    """The process dies while a tool call is unanswered; --continue resumes with a valid history."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("first file\n")
    second_request = threading.Event()

    def stall_and_signal(body, path):
        second_request.set()
        return stall_after(openai_text("never arrives"), 1)

    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "a.txt"})]), stall_and_signal)
    env = _env(tmp_path, OPENAI_API_KEY=KEY)
    args = ["--provider", "openai", "--base-url", fake_llm.base_url("openai"), "--output-format", "stream-json"]
    proc = subprocess.Popen([sys.executable, "-m", "app", "-p", "read a.txt then think", *args], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The second request is on the wire (the tool result is in the history) and stalls: kill now.
    assert second_request.wait(timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    fake_llm.release()

    fake_llm.enqueue(openai_text("resumed fine"))
    resumed = run_cli(["-p", "go on", "--continue", *args], cwd=work, env=env)  # the kill is what is tested
    assert resumed.returncode == 0, resumed.stderr
    body = fake_llm.requests[-1].json
    contents = json.dumps(body["messages"])
    assert "read a.txt then think" in contents and "first file" in contents
    assert body["messages"][-1] == {"role": "user", "content": "go on"}
    roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "user"]


def test_sigint_interrupts_headless_cleanly(fake_llm, tmp_path):
    on_the_wire = threading.Event()

    def stall_and_signal(body, path):
        on_the_wire.set()
        return stall_after(openai_text("slow"), 1)

    fake_llm.enqueue(stall_and_signal)
    env = _env(tmp_path, OPENAI_API_KEY=KEY)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "app", "-p", "hi", "--provider", "openai", "--base-url",
                             fake_llm.base_url("openai"), "--output-format", "stream-json"], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert on_the_wire.wait(timeout=60)
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    proc.wait(timeout=30)
    fake_llm.release()
    assert proc.returncode == 130
    last = json.loads(rest.strip().splitlines()[-1])
    assert last["type"] == "result" and last["stop_reason"] == "interrupted"


def test_a_key_file_others_can_read_is_said_at_start_and_the_task_still_runs(fake_llm, tmp_path):
    """Like ssh with a private key: a config.toml holding API keys at mode 0644 is named with the fix."""
    config = tmp_path / "config"
    config.mkdir()
    toml = config / "config.toml"
    toml.write_text(f'[api_keys]\nopenai = "{KEY}"\n', encoding="utf-8")
    toml.chmod(0o644)
    fake_llm.enqueue(openai_text("done"), openai_text("done"))
    args = ["-p", "hi", "--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai")]
    proc = _run(args, tmp_path, _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "readable by others" in line]
    assert warning == [f"[{toml} holds API keys and is readable by others (mode 0644): chmod 600 {toml}]"]
    assert KEY not in proc.stderr and proc.stdout.strip() == "done"
    toml.chmod(0o600)
    quiet = _run(args, tmp_path, _env(tmp_path), real_process=False)
    assert quiet.returncode == 0 and "readable by others" not in quiet.stderr

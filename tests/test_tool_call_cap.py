"""A reply asking for thousands of tool calls runs the first ``max_tool_calls_per_turn`` (64
by default); every other call is answered "not run", so the next request still answers each
call and the history stays valid. Through the CLI (in the test process: what is checked is the
requests, the one line on stderr and the transcript, not the process) against the loopback fake
server, on the Chat Completions and the Messages wire."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli
from fake_llm_server import anthropic_text, anthropic_tool_calls, openai_text, openai_tool_calls

from app.session.transcript import restore
from app.wiring.config import load_settings

CALLS = 100
CAP = 64


def _run(tmp_path: Path, fake_llm: Any, provider: str, *flags: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "a.txt").write_text("a\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": "sk-test-cap-0123456789", "ANTHROPIC_API_KEY": "sk-ant-test-cap-0123456789",
                "TIDEGAUGE_MEMORY_UPDATE_TOKENS": "0", "PYTHONUNBUFFERED": "1"})
    return run_cli(["-p", "list everything", "--provider", provider, "--model", "m",
                    "--base-url", fake_llm.base_url(provider), *flags], cwd=work, env=env)


def _answers(provider: str, body: dict[str, Any]) -> dict[str, str]:
    """Each tool call of the reply, by id, and the text it was answered with in the next request."""
    if provider == "openai":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    last_user = body["messages"][-1]
    assert last_user["role"] == "user"
    out = {}
    for block in last_user["content"]:
        if block["type"] == "tool_result":
            content = block["content"]
            out[block["tool_use_id"]] = content if isinstance(content, str) else content[0]["text"]
    return out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_reply_of_100_calls_runs_the_first_64_and_answers_every_one(fake_llm, tmp_path, provider):
    calls = [("list_files", {"path": "."}, f"call_{i}") for i in range(CALLS)]
    if provider == "openai":
        fake_llm.enqueue(openai_tool_calls(calls, fragments=1), openai_text("done"))
    else:
        fake_llm.enqueue(anthropic_tool_calls(calls, fragments=1), anthropic_text("done"))

    proc = _run(tmp_path, fake_llm, provider)

    assert proc.returncode == 0, proc.stderr
    assert len(fake_llm.requests) == 2
    answers = _answers(provider, fake_llm.requests[1].json)
    assert sorted(answers) == sorted(call_id for _, _, call_id in calls)  # every call answered, once
    not_run = [call_id for call_id, text in answers.items() if "Not run: over the per-turn cap" in text]
    assert sorted(not_run) == sorted(f"call_{i}" for i in range(CAP, CALLS))  # the first 64 ran, in order
    assert all("a.txt" in answers[f"call_{i}"] for i in range(CAP))
    said = [line for line in proc.stderr.splitlines() if "tool calls in one reply" in line]
    assert len(said) == 1 and "100" in said[0] and "first 64 ran" in said[0] and "max_tool_calls_per_turn" in said[0]
    session_dir = next((tmp_path / "data" / "sessions").iterdir())
    restored = restore(session_dir / "transcript.jsonl")
    assert restored.warnings == []  # the recorded history needed no repair


def test_the_cap_is_a_config_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "config.toml").write_text("max_tool_calls_per_turn = 8\n")
    assert load_settings({}).max_tool_calls_per_turn == 8
    (tmp_path / "config.toml").write_text("")
    assert load_settings({}).max_tool_calls_per_turn == CAP
    from app.kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="max_tool_calls_per_turn"):
        load_settings({"max_tool_calls_per_turn": 0})

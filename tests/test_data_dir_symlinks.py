"""Every file tidegauge reads under its data directory is read through ``private_files``:
a symlink planted at its path is refused, not followed, and said in one line. Through the
real binary for the two files a session reads at start (the saved permission rules and the
answers about memory imports); directly for the session store's own files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_llm_server import openai_text, openai_tool_calls

from app.context.memory import APPROVALS_FILE
from app.agent.permissions import SAVED_RULES_FILE
from app.session.lock import read_holder
from app.session.store import META_NAME, SessionStore
from app.session.transcript import read_transcript

KEY = "sk-test-symlink-key-0123456789abcdef"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": KEY, "TIDEGAUGE_MEMORY_UPDATE_TOKENS": "0"})
    return env


def _run(tmp_path: Path, fake_llm: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "-p", "go", "--provider", "openai", "--model", "m",
         "--base-url", fake_llm.base_url("openai")],
        cwd=tmp_path / "work", env=_env(tmp_path), capture_output=True, text=True, timeout=120)


def test_symlinks_planted_at_the_saved_rules_and_the_import_answers_are_not_followed(fake_llm, tmp_path):
    work, data, elsewhere = tmp_path / "work", tmp_path / "data", tmp_path / "elsewhere"
    (work / ".git").mkdir(parents=True)
    data.mkdir(mode=0o700)
    elsewhere.mkdir()
    outside = elsewhere / "secret.txt"
    outside.write_text("OUTSIDE-TEXT-5d2a\n")
    project = str(work.resolve())
    # What the links point at would allow any command and approve an import from outside.
    (elsewhere / "rules.json").write_text(json.dumps({project: ["run_bash(touch:*)"]}))
    (elsewhere / "answers.json").write_text(json.dumps({"version": 1, "projects": {
        project: {"approved": [str(outside.resolve())], "declined": []}}}))
    os.symlink(elsewhere / "rules.json", data / SAVED_RULES_FILE)
    os.symlink(elsewhere / "answers.json", data / APPROVALS_FILE)
    (work / "AGENTS.md").write_text(f"@{outside}\n")
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "touch pwned"}, "c1")]), openai_text("done"))

    proc = _run(tmp_path, fake_llm)

    assert proc.returncode == 0, proc.stderr
    assert not (work / "pwned").exists()  # headless without --yes: refused, the linked rule was not read
    assert "1 tool call refused (run_bash)" in proc.stderr
    assert "OUTSIDE-TEXT-5d2a" not in json.dumps([r.json for r in fake_llm.requests])
    lines = proc.stderr.splitlines()
    for name in (SAVED_RULES_FILE, APPROVALS_FILE):
        said = [line for line in lines if f"{name} is a symlink" in line]
        assert len(said) == 1 and "not followed" in said[0], proc.stderr
    # The links' targets are untouched, and the links themselves still point where they did.
    assert json.loads((elsewhere / "rules.json").read_text()) == {project: ["run_bash(touch:*)"]}
    assert (data / SAVED_RULES_FILE).is_symlink()


def test_the_session_stores_own_files_are_not_read_through_symlinks(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"pid": 1, "since": 0}))
    lock = tmp_path / "lock"
    os.symlink(victim, lock)
    assert read_holder(lock) == {}  # a linked lock file says nothing about a holder

    transcript = tmp_path / "transcript.jsonl"
    os.symlink(victim, transcript)
    result = read_transcript(transcript)
    assert result.lines == [] and len(result.warnings) == 1 and "is a symlink" in result.warnings[0]

    store = SessionStore(tmp_path / "data")
    session = store.create(tmp_path, "openai", "m")
    meta = session.dir / META_NAME
    planted = tmp_path / "planted-meta.json"
    planted.write_bytes(meta.read_bytes())
    meta.unlink()
    os.symlink(planted, meta)
    assert store.list_all() == []  # a session whose meta.json is a link is not offered

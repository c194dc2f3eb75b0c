"""`tidegauge inspect` through the CLI (the real binary for the text diff and one bad argument, the
same CLI in-process for the rest), on sessions the CLI recorded in-process against the fake LLM
server: the figures it shows are the gauge's, its diff shows what a compaction removed and what
replaced it, the store stays small, and bad arguments are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_cli
from fake_llm_server import openai_text, openai_tool_calls
from test_engine_support import is_compaction, summary_text, write_words

KEY = "sk-test-fake-key-0123456789"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY})
    return env


def _run_session(args: list[str], tmp_path: Path, fake) -> list[dict]:
    """A recorded session: in-process (tests/cli_in_process.py), as it only makes what is inspected."""
    proc = run_cli(["--provider", "openai", "--model", "m", "--base-url", fake.base_url("openai"),
                    "--output-format", "stream-json", *args], cwd=tmp_path / "work", env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _inspect(args: list[str], tmp_path: Path, real_process: bool = False) -> subprocess.CompletedProcess[str]:
    """``tidegauge inspect ARGS``: the same CLI in this process with exactly the process's environment
    (a ``python -m app`` start is ~0.5 CPU-s), or ``real_process``: the real binary's wiring."""
    if not real_process:
        return run_cli(["inspect", *args], cwd=tmp_path / "work", env=_env(tmp_path))
    return subprocess.run([sys.executable, "-m", "app", "inspect", *args], cwd=tmp_path / "work",
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)


def _inspect_json(args: list[str], tmp_path: Path) -> dict:
    proc = _inspect([*args, "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _gauge_before_each_request(events: list[dict]) -> list[int]:
    """The figure the gauge showed when each main request went out: the last context event
    before each step's "streaming" state."""
    shown, last = [], None
    for event in events:
        if event["type"] == "context":
            last = event["projected_tokens"]
        elif event["type"] == "state" and event["state"] == "streaming" and event.get("attempt", 0) == 0:
            assert last is not None
            shown.append(last)
    return shown


@pytest.fixture
def compacted_session(fake_llm, tmp_path: Path) -> list[dict]:
    """read big.txt, then more.txt: the context crosses the line, the engine compacts, one more
    request. The server's first usage counts 10% over our estimate, so the gauge is calibrated."""
    (tmp_path / "work").mkdir()
    write_words(tmp_path / "work" / "big.txt", 700, "big")
    write_words(tmp_path / "work" / "more.txt", 700, "more")
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "big.txt"})], usage=dict(prompt=1_300, completion=12)),
        openai_tool_calls([("read_file", {"path": "more.txt"})], usage=None),
        openai_text(summary_text("cli"), usage=None),
        openai_text("The last word is more96.", usage=None),
    )
    return _run_session(["-p", "read big.txt and more.txt", "--budget", "4000", "--window", "20000"],
                        tmp_path, fake_llm)


def test_each_request_adds_up_to_the_figure_the_gauge_showed(compacted_session, tmp_path):
    shown = _gauge_before_each_request(compacted_session)
    recorded = [e for e in compacted_session if e["type"] == "request_recorded"]
    assert [e["request"] for e in recorded] == [1, 2, 3] and len(shown) == 3
    for number, figure in enumerate(shown, start=1):
        inspected = _inspect_json(["--request", str(number)], tmp_path)
        assert inspected["request"] == number and inspected["total_tokens"] == figure
        total = sum(p["tokens"] for p in inspected["parts"])
        assert abs(total - figure) <= 0.02 * figure
    first = _inspect_json(["--request", "1"], tmp_path)
    kinds = [p["kind"] for p in first["parts"]]
    assert kinds[0] == "system" and "tool" in kinds and kinds[-1] == "text"
    assert first["parts"][-1]["origin"] == "user" and first["parts"][-1]["text"] == "read big.txt and more.txt"
    assert {p["origin"] for p in first["parts"] if p["kind"] == "tool"} == {"built-in"}


def test_the_diff_after_a_compaction_shows_what_was_removed_and_what_replaced_it(compacted_session, tmp_path):
    session_id = next(e["session_id"] for e in compacted_session if e["type"] == "session")
    latest = _inspect_json(["--diff"], tmp_path)
    named = _inspect_json([session_id[:12], "--request", "3", "--diff"], tmp_path)
    assert latest == named and latest["session"] == session_id
    removed = {p["origin"].split(" · ")[0]: p for p in latest["removed"]}
    # the user's words, the model's call and the file it read went; the summary and the kept words came
    assert {"user", "model", "read_file"} <= set(removed)
    assert removed["read_file"]["tokens"] > 1_000 and "BEGIN big" in removed["read_file"]["text"]
    assert "[" in removed["read_file"]["text"] and "characters not shown" in removed["read_file"]["text"]
    added = {p["origin"]: p for p in latest["added"]}
    assert "summary-cli: finish the task" in added["summary"]["text"]
    assert added["kept user words"]["text"] == "read big.txt and more.txt"
    moved = sum(p["tokens"] for p in latest["added"]) - sum(p["tokens"] for p in latest["removed"])
    assert moved < -1_000

    text = _inspect(["--diff"], tmp_path, real_process=True)
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"session {session_id} · request 3 of 3 · ")
    assert any(line.lstrip().startswith("removed") and "read_file · call" in line for line in lines)
    assert any(line.lstrip().startswith("added") and "summary" in line for line in lines)


@pytest.mark.parametrize("args, words", [
    (["--request", "9"], "--request 9: session"),
    (["--request", "x"], "argument --request: invalid int value"),
    (["--colour"], "unrecognized arguments: --colour"),
    (["nosuchsession"], "no session 'nosuchsession'"),
])
def test_bad_arguments_are_one_line_and_exit_2(compacted_session, tmp_path, args, words):
    proc = _inspect(args, tmp_path, real_process=args == ["nosuchsession"])  # the rest: the same parser in-process
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr


def test_no_session_in_this_directory_is_one_line(tmp_path):
    (tmp_path / "work").mkdir()
    proc = _inspect([], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "inspect: no session for" in proc.stderr


def test_a_hundred_turn_session_keeps_its_requests_in_under_twice_the_transcript(fake_llm, tmp_path):
    """100 requests, each one tool result bigger: the store keeps each part once."""
    work = tmp_path / "work"
    work.mkdir()
    for i in range(100):
        write_words(work / f"f{i}.txt", 150, f"w{i}x")
    calls = iter(range(100))

    def reply(body: dict, _path: str):
        if is_compaction(body) or not body.get("tools"):  # the session memory's updates
            return openai_text(summary_text("memory"), usage=None)
        i = next(calls, None)
        if i is None or i == 99:
            return openai_text("read them all", usage=None)
        return openai_tool_calls([("read_file", {"path": f"f{i}.txt"})], usage=None)

    fake_llm.default = reply
    events = _run_session(["-p", "read every file", "--max-steps", "120", "--window", "1000000", "--budget", "900000"], tmp_path, fake_llm)
    recorded = [e for e in events if e["type"] == "request_recorded"]
    assert len(recorded) == 100
    [session] = list((tmp_path / "data" / "sessions").iterdir())
    store = sum(f.stat().st_size for f in (session / "requests").iterdir())
    transcript = (session / "transcript.jsonl").stat().st_size
    # every request re-sends the whole history: 100 copies would be ~50x the transcript
    whole = sum(e["total_tokens"] for e in recorded) * 4
    assert whole > 20 * transcript
    assert store <= 2 * transcript, (store, transcript)
    last = _inspect_json([], tmp_path)
    assert last["request"] == 100 and sum(1 for p in last["parts"] if p["kind"] == "tool_result") == 99

"""`tidegauge rewind` through the CLI, on a session the CLI recorded against the fake LLM server
(its turns run in-process: they only make the session; the first test's list and rewind run the
real binary, the others the same CLI in-process): the list, going back with the files,
and a `--continue` that starts from just before the chosen message (the abandoned turns out of the
request, still in the append-only transcript)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_cli
from fake_llm_server import openai_text, openai_tool_calls

KEY = "sk-test-fake-key-0123456789"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY})
    return env


def _tidegauge(args: list[str], tmp_path: Path, real_process: bool = False) -> subprocess.CompletedProcess[str]:
    """``tidegauge ARGS``: the same CLI in this process with exactly the process's environment (a
    ``python -m app`` start is ~0.5 CPU-s), or ``real_process``: the real binary's wiring."""
    if not real_process:
        return run_cli(args, cwd=tmp_path / "work", env=_env(tmp_path))
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=tmp_path / "work", env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)


def _turn(prompt: str, tmp_path: Path, fake, *, first: bool = False) -> None:
    """One recorded turn: in-process (tests/cli_in_process.py), as it only makes the session rewound."""
    proc = run_cli(["--provider", "openai", "--model", "m", "--base-url", fake.base_url("openai"), "--yes",
                    *([] if first else ["--continue"]), "-p", prompt], cwd=tmp_path / "work", env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def three_turns(fake_llm, tmp_path: Path):
    """Turn 1 writes notes.txt, turn 2 rewrites it and adds extra.txt, turn 3 only talks."""
    (tmp_path / "work").mkdir()
    fake_llm.enqueue(openai_tool_calls([("write_file", {"path": "notes.txt", "content": "first version\n"})]),
                     openai_text("done one"))
    _turn("write the notes", tmp_path, fake_llm, first=True)
    fake_llm.enqueue(openai_tool_calls([("write_file", {"path": "notes.txt", "content": "second version\n"}),
                                        ("write_file", {"path": "extra.txt", "content": "extra\n"})]),
                     openai_text("done two"))
    _turn("rewrite the notes", tmp_path, fake_llm)
    fake_llm.enqueue(openai_text("done three"))
    _turn("just talk", tmp_path, fake_llm)
    return fake_llm


def test_list_then_rewind_with_files_then_continue_from_there(three_turns, tmp_path: Path) -> None:
    work = tmp_path / "work"
    listed = _tidegauge(["rewind", "--list", "--json"], tmp_path, real_process=True)
    assert listed.returncode == 0, listed.stderr
    points = json.loads(listed.stdout)["points"]
    assert [(p["turn"], p["text"]) for p in points] == [(3, "just talk"), (2, "rewrite the notes"),
                                                        (1, "write the notes")]
    assert points[0]["tokens_after"] > points[1]["tokens_after"] > points[2]["tokens_after"]  # newest first
    assert points[1]["files"] == ["extra.txt", "notes.txt"] and points[1]["abandoned_turns"] == 2

    done = _tidegauge(["rewind", "--to", "2", "--files", "--json"], tmp_path, real_process=True)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["text"] == "rewrite the notes" and said["abandoned_turns"] == 2
    assert sorted(said["files_restored"]) == ["extra.txt", "notes.txt"]
    assert said["tokens_after"] < said["tokens_before"]
    assert (work / "notes.txt").read_text() == "first version\n" and not (work / "extra.txt").exists()

    three_turns.enqueue(openai_text("done again"))
    _turn("rewrite the notes, shorter", tmp_path, three_turns)
    sent = json.dumps(three_turns.requests[-1].json["messages"])
    assert "write the notes" in sent and "done one" in sent
    assert "just talk" not in sent and "done two" not in sent and "done three" not in sent

    # append-only: the abandoned turns and the branch record stay in the transcript
    transcript = next((tmp_path / "data").rglob("transcript.jsonl")).read_text()
    assert "just talk" in transcript and '"type":"rewind"' in transcript
    # numbered on after the session's last event, as the session itself would have numbered them
    recorded = [line["event"] for line in map(json.loads, transcript.splitlines()) if line["kind"] == "event"]
    rewound = next(index for index, event in enumerate(recorded) if event["type"] == "rewind")
    before = max(event.get("seq", 0) for event in recorded[:rewound])
    assert [(e["type"], e["seq"]) for e in recorded[rewound:rewound + 2]] == [("rewind", before + 1),
                                                                            ("chart_point", before + 2)]
    assert _tidegauge(["rewind", "--list", "--json"], tmp_path).stdout.count('"turn"') == 2


def test_a_file_changed_since_is_named_and_left_alone(three_turns, tmp_path: Path) -> None:
    (tmp_path / "work" / "notes.txt").write_text("my own edit\n")
    done = _tidegauge(["rewind", "--to", "2", "--files"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "left as they are (changed since tidegauge wrote them): notes.txt" in done.stdout
    assert (tmp_path / "work" / "notes.txt").read_text() == "my own edit\n"


def test_bad_input_is_one_line(three_turns, tmp_path: Path) -> None:
    proc = _tidegauge(["rewind", "--to", "9"], tmp_path)
    assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0
    assert "can go back to turn(s) 1, 2, 3" in proc.stderr
    proc = _tidegauge(["rewind", "--files"], tmp_path)
    assert proc.returncode != 0 and "--files goes with --to N" in proc.stderr


def test_the_demo_adds_a_changelog_entry_and_a_rewind_with_files_takes_it_back(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    proc = _tidegauge(["--provider", "demo", "--demo-speed", "0", "--yes", "--output-format", "stream-json",
                       "-p", "add a changelog entry"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    changelog = Path(next(e for e in events if e["type"] == "session")["workspace"]) / "CHANGELOG.md"
    assert "## Unreleased" in changelog.read_text()
    assert "Esc Esc" in next(e for e in events if e["type"] == "result")["text"]
    done = _tidegauge(["rewind", "--to", "1", "--files", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files_restored"] == ["CHANGELOG.md"]
    assert "## Unreleased" not in changelog.read_text() and changelog.read_text().startswith("# Changelog")


def test_whatif_replays_a_rewound_session_without_the_abandoned_turns(three_turns, tmp_path: Path) -> None:
    assert _tidegauge(["rewind", "--to", "2"], tmp_path).returncode == 0
    three_turns.enqueue(openai_text("done again"))
    _turn("rewrite the notes, shorter", tmp_path, three_turns)
    proc = _tidegauge(["whatif", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    recorded, replayed = json.loads(proc.stdout)["policies"][:2]
    # the last request came after the rewind: the replay's is as small as the recorded one
    last_recorded, last_replayed = recorded["points"][-1][1], replayed["points"][-1][1]
    assert abs(last_replayed - last_recorded) <= 0.05 * last_recorded
    assert last_replayed < max(point[1] for point in replayed["points"])

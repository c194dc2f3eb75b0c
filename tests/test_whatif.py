"""`tidegauge whatif`: a session recorded against the fake LLM server, replayed through the real binary.

The session is recorded once per module: a headless run reading eight files of ~1,500 tokens
each with a 20,000-token window and a 6,000-token budget compacts on the way. The fake server
is stopped before any whatif runs, so the session's base URL is a closed port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_in_process import run_cli
from fake_llm_server import FakeLLMServer, counting_usage, openai_text, openai_tool_calls
from test_engine_support import is_compaction, summary_text, write_words

from app.session.transcript import TranscriptWriter
from app.session.whatif import load_recording, make_policy, parse_policy, run_whatif
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-fake-key-0123456789"
FILES = 8

# Every connection the process tries, and the modules it loaded, written at exit (sitecustomize).
WATCH_HOOK = """\
import atexit, os, sys

_tried = []

def _audit(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
        _tried.append(f"{event} {args!r}")

sys.addaudithook(_audit)

def _write():
    with open(os.environ["WHATIF_TEST_WATCH_FILE"], "w", encoding="utf-8") as out:
        json.dump({"network": _tried, "modules": sorted(n for n, m in sys.modules.items() if m is not None)}, out)

import json
atexit.register(_write)
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(home / "config"), TIDEGAUGE_DATA_DIR=str(home / "data"), **extra)
    return env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A session that compacted, and its stream-json events."""
    home = tmp_path_factory.mktemp("whatif")
    work = home / "work"
    work.mkdir()
    for i in range(FILES):
        write_words(work / f"f{i}.txt", 1_500, f"w{i}x")
    calls = [f"f{i}.txt" for i in range(FILES)]

    def answer(body: dict[str, Any], path: str) -> Any:
        if is_compaction(body):
            return counting_usage(1.0, lambda u: openai_text(summary_text("w"), usage=u))(body, path)
        if calls:
            name = calls.pop(0)
            return counting_usage(1.0, lambda u: openai_tool_calls([("read_file", {"path": name})], usage=u))(body, path)
        return counting_usage(1.0, lambda u: openai_text("All eight files read.", usage=u))(body, path)

    fake = FakeLLMServer().start()
    fake.default = answer
    try:
        # The recording only makes the session replayed: in-process (tests/cli_in_process.py).
        proc = run_cli(
            ["--provider", "openai", "--model", "gpt-4o", "--base-url",
             fake.base_url("openai"), "--output-format", "stream-json", "--window", "20000", "--budget", "6000",
             "--max-output", "3000", "-p", "read the eight files"],
            cwd=work, env=_env(home, OPENAI_API_KEY=KEY, TIDEGAUGE_MEMORY_UPDATE_TOKENS="0"))
    finally:
        fake.stop()
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e for e in events if e["type"] == "compaction" and e["ok"]], "the recording must compact"
    return {"home": home, "work": work, "events": events}


def whatif(recorded: dict[str, Any], *args: str, watch: Path | None = None,
           real_process: bool = False) -> subprocess.CompletedProcess[str]:
    """``tidegauge whatif ARGS``: in this process (tests/cli_in_process.py: the same parsing and
    replay, without a ~0.5 CPU-s interpreter start) unless the test watches the process itself
    (``watch``: every connection it tried and every module it loaded) or asks for the real binary."""
    extra = {"TIDEGAUGE_BASE_URL": "http://127.0.0.1:9/v1"}  # a closed port: whatif must not care
    if watch is None and not real_process:
        return run_cli(["whatif", *args], cwd=recorded["work"], env=_env(recorded["home"], **extra))
    if watch is not None:
        hook = watch.parent / "hook"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(WATCH_HOOK)
        extra.update(PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]), WHATIF_TEST_WATCH_FILE=str(watch))
    return subprocess.run([sys.executable, "-m", "app", "whatif", *args], cwd=recorded["work"],
                          env=_env(recorded["home"], **extra), capture_output=True, text=True, timeout=120)


def policies(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)["policies"]
    assert listed[0]["name"] == "recorded"
    return {p["name"]: p for p in listed}


def test_a_larger_window_compacts_less_and_peaks_higher_a_smaller_one_compacts_more(recorded, tmp_path):
    watch = tmp_path / "watch.json"
    [folder] = (recorded["home"] / "data" / "sessions").iterdir()
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))
    proc = whatif(recorded, "--json", "--policy", "window=100000", "--policy", "window=12000", watch=watch)
    # the session is read, never written (its memory and cleared outputs stay in the replay's RAM)
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")) == before
    by_name = policies(proc)
    base, large, small = by_name["recorded"], by_name["window=100000"], by_name["window=12000"]
    assert large["compactions"] < base["compactions"] < small["compactions"]
    assert large["peak_tokens"] > base["peak_tokens"] > small["peak_tokens"]
    # every policy replays the same model calls
    assert len(large["points"]) == len(small["points"]) == len(base["points"]) == FILES + 1
    # the recorded curve is the recorded gauge's own points, one per model call
    calls = [e["tokens"] for e in recorded["events"] if e["type"] == "chart_point" and e["kind"] == "call"]
    assert base["points"] == [[n, tokens] for n, tokens in enumerate(calls, start=1)]
    assert base["peak_tokens"] == max(calls)
    usage = [e for e in recorded["events"] if e["type"] == "usage"]
    assert base["input_tokens"] == sum(e["input_tokens"] + (e["cache_read_tokens"] or 0) for e in usage)
    # priced from the catalogue: a smaller context sends fewer tokens and costs less
    assert large["cost_usd"] > small["cost_usd"] > 0
    # no connection tried (the session's base URL is a closed port), no plotting library loaded
    seen = json.loads(watch.read_text())
    assert seen["network"] == []
    assert not [m for m in seen["modules"] if m.startswith(("matplotlib", "textual"))]


def test_the_table_names_each_policy_with_its_curve_and_the_plot_is_drawn(recorded, tmp_path):
    png, svg = tmp_path / "curves.png", tmp_path / "curves.svg"
    proc = whatif(recorded, "--window", "100000", "--auto-compact", "0.5", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].split()[:3] == ["policy", "window", "auto-compact"]
    assert lines[2].split()[0] == "recorded" and lines[3].split()[:3] == [
        "window=100000,auto-compact=0.5", "100,000", "50,000"]
    sparks = [line for line in lines if line.startswith(("recorded ", "window=100000"))][2:]
    assert len(sparks) == 2 and all(set(line.split()[-1]) <= set("▁▂▃▄▅▆▇█") for line in sparks)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    proc = whatif(recorded, "--json", "--policy", "window=12000", "--plot", str(svg))
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text


def test_a_larger_max_output_reads_the_saved_full_outputs(recorded):
    # the recording kept 3,000 characters of each ~9,000-character file; the saved outputs hold the rest
    by_name = policies(whatif(recorded, "--json", "--policy", "window=200000,max-output=0",
                              "--policy", "window=200000"))
    whole, cut = by_name["window=200000,max-output=0"], by_name["window=200000"]
    assert whole["compactions"] == cut["compactions"] == 0
    assert whole["peak_tokens"] > cut["peak_tokens"] + FILES * 1_000


@pytest.mark.parametrize(("args", "says"), [
    (["nosuchsession"], "no session 'nosuchsession'"),
    (["--auto-compact", "1.5"], "--auto-compact: 1.5 is outside 0-1"),
    (["--warning", "-0.1"], "--warning: -0.1 is outside 0-1"),
    (["--window", "0"], "--window: 0 must be more than 0"),
    (["--policy", "window=-5"], "--window: -5 must be more than 0"),
    (["--policy", "colour=red"], "'colour=red' is not KEY=VALUE"),
    (["--plot", "curves.gif"], "must end in .svg or .png"),
    (["--windw", "5"], "whatif: unrecognized arguments: --windw"),
])
def test_bad_input_is_one_line_and_exit_2(recorded, args, says):
    # The first through the real binary (its exit code and stderr as a shell sees them); the
    # same parser and messages for the rest, in-process.
    proc = whatif(recorded, *args, real_process=args == ["nosuchsession"])
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("tidegauge: ") and says in line


# ---- the replay in process: a transcript written by hand (the attacker's) ----

def _hostile_session(tmp_path: Path, saved_path: str) -> tuple[Path, Path]:
    """A transcript whose one tool result claims its full output is at ``saved_path``."""
    folder = tmp_path / "session"
    results = folder / "tool-results"
    results.mkdir(parents=True, exist_ok=True)
    transcript = folder / "transcript.jsonl"
    context = {"type": "context", "exact_tokens": None, "estimated_tokens": 100, "projected_tokens": 100,
               "thresholds": {"window": 20000, "reserve": 8000, "effective_window": 12000, "auto_compact_line": 6000,
                              "warning_line": 4500, "blocking_line": 10800},
               "breakdown": {"system": 50, "memory": 0, "tools": 50}, "level": "ok"}
    with TranscriptWriter(transcript) as writer:
        writer.append_event(context)
        writer.append_message(Message.typed_by_user("read it"))
        writer.append_message(Message(role="assistant", content=[ToolUseBlock(id="c1", name="read_file",
                                                                              input={"path": "x"})]))
        writer.append_event({"type": "chart_point", "tokens": 120, "kind": "call"})
        writer.append_message(Message(role="user", content=[ToolResultBlock(
            tool_use_id="c1", content="short head … [output truncated] … short tail", full_output_path=saved_path)]))
        writer.append_message(Message(role="assistant", content=[TextBlock(text="done")]))
        writer.append_event({"type": "chart_point", "tokens": 160, "kind": "call"})
    return transcript, results


def _peak(transcript: Path, results: Path) -> int:
    recording = load_recording(transcript, tool_results_dir=results)
    return run_whatif(recording, [make_policy(max_output="0")])[1].peak_tokens


def test_a_transcript_naming_a_file_outside_the_session_gets_its_recorded_text_only(tmp_path):
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("secret words " * 20_000)
    outside = _peak(*_hostile_session(tmp_path / "a", str(secret)))
    # a link planted in the session's own folder that leads out of it is refused alike
    planted = tmp_path / "b" / "session" / "tool-results" / "c1.txt"
    transcript, results = _hostile_session(tmp_path / "b", str(planted))
    planted.symlink_to(secret)
    linked = _peak(transcript, results)
    # the same session with its own saved output in its folder: that one is read
    own_file = tmp_path / "c" / "session" / "tool-results" / "c1.txt"
    transcript, results = _hostile_session(tmp_path / "c", str(own_file))
    own_file.write_text("saved words " * 20_000)
    own = _peak(transcript, results)
    assert outside == linked < 1_000 < own


def test_the_dashboards_whatif_is_the_same_replay_as_the_command_line(recorded, tmp_path, monkeypatch):
    """``WhatIf`` to the live session (as the dashboard sends it): the curve the command line prints."""
    import asyncio
    import queue
    import shutil
    import threading

    from app.kernel.commands import Shutdown, WhatIf
    from app.wiring.config import Settings
    from app.wiring.runtime import build_session

    expected = policies(whatif(recorded, "--json", "--policy", "window=100000,auto-compact=0.3"))[
        "window=100000,auto-compact=0.3"]
    data = tmp_path / "data"  # a copy: resuming writes to the transcript the other tests replay
    shutil.copytree(recorded["home"] / "data", data)
    [session_id] = [d.name for d in (data / "sessions").iterdir()]
    monkeypatch.setenv("WHATIF_TEST_KEY", KEY)
    session = build_session(Settings(provider="openai", model="gpt-4o", base_url="http://127.0.0.1:9/v1",
                                     api_key_env="WHATIF_TEST_KEY", data_dir=data),
                            approvals=False, resume=session_id, cwd=recorded["work"])
    answers: queue.Queue[Any] = queue.Queue()

    def listen(envelope: Any) -> None:  # an EventEnvelope
        if envelope.event.type == "whatif":
            answers.put(envelope.event)

    session.subscribe(listen)
    runner = threading.Thread(target=lambda: asyncio.run(session.run()))
    runner.start()
    try:
        session.submit(WhatIf(window=0, auto_compact=0.3))  # from the web surface too: checked again
        session.submit(WhatIf(window=100_000, auto_compact=0.3))
        refused, replayed = answers.get(timeout=60), answers.get(timeout=60)  # a hang guard, not a wait
    finally:
        session.submit(Shutdown(now=True))
        runner.join(60)
    assert refused.reason == "window 0: must be a whole number of tokens, more than 0" and not refused.points
    assert replayed.reason is None and replayed.name == expected["name"]
    assert replayed.points == [tokens for _, tokens in expected["points"]]
    assert (replayed.compactions, replayed.peak_tokens) == (expected["compactions"], expected["peak_tokens"])
    assert replayed.recorded_peak_tokens == max(e["tokens"] for e in recorded["events"]
                                                if e["type"] == "chart_point" and e["kind"] == "call")


def test_micro_compaction_settings_change_the_curve(recorded):
    """Clearing old results at a low warning line keeps the context lower than with clearing off."""
    [folder] = (recorded["home"] / "data" / "sessions").iterdir()
    recording = load_recording(folder / "transcript.jsonl", tool_results_dir=folder / "tool-results")
    _, cleared, kept = run_whatif(recording, [
        parse_policy("window=100000,warning=0.05,micro-compact=keep-tokens=1000;min-free=100"),
        parse_policy("window=100000,warning=0.05,micro-compact=off")])
    assert cleared.compactions == kept.compactions == 0
    assert cleared.peak_tokens < kept.peak_tokens - 2_000
    assert cleared.warning_line == kept.warning_line == 5_000


@pytest.mark.parametrize(("fields", "says"), [
    ('{"window": "100000", "auto_compact": 0.5}', "window '100000': must be a whole number"),
    ('{"window": true, "auto_compact": 0.5}', "window True: must be a whole number"),
    ('{"window": 1000000000000, "auto_compact": 0.5}', "more than 100,000,000 tokens"),
    ('{"window": 100000, "auto_compact": NaN}', "auto-compact nan: must be a fraction"),
    ('{"window": 100000, "auto_compact": "0.5"}', "auto-compact '0.5': must be a fraction"),
    ('{"window": 100000, "auto_compact": 1.5}', "auto-compact 1.5: must be a fraction"),
])
def test_a_whatif_command_from_a_pipe_or_a_browser_tab_is_checked_before_any_replay(fields, says):
    """The web surface's commands reach the session as JSON lines, typed by nobody: the session checks them."""
    from app.session.agent_session import _whatif_problem
    from app.session.process import decode_command

    command = decode_command(('{"command": "WhatIf", "fields": %s}' % fields).encode())
    problem = _whatif_problem(command)  # type: ignore[arg-type]
    assert problem is not None and says in problem

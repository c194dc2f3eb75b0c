"""Each demo scenario end to end in headless mode: real tools, no network.

The first scenario runs as a real process (``python -m app``); the others run the same CLI in
this process (tests/cli_in_process.py): what they check is the scenario's events, and a start
of the interpreter with its imports and token encoder costs more than most of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_cli


def run_demo(tmp_path: Path, prompt: str, *extra: str, real_process: bool = False,
             **settings: str) -> tuple[int, list[dict]]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"))
    env.update({f"TIDEGAUGE_{name.upper()}": value for name, value in settings.items()})
    argv = ["-p", prompt, "--demo-speed", "0", "--yes", "--output-format", "stream-json", *extra]
    if real_process:
        proc = subprocess.run([sys.executable, "-m", "app", *argv],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    else:
        proc = run_cli(argv, cwd=tmp_path, env=env)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def test_find_errors_cats_then_follows_the_notice_with_grep(tmp_path):
    code, events = run_demo(tmp_path, "find errors in app.log", real_process=True)
    assert code == 0
    starts = [e["input"].get("command") for e in of(events, "tool_start")]
    assert starts == ["cat app.log", "grep -n ERROR app.log"]
    cat = of(events, "tool_result")[0]
    assert cat["truncated"] and cat["original_chars"] > 15_000_000 and cat["kept_chars"] <= 40_000
    assert Path(cat["full_output_path"]).stat().st_size > 15_000_000
    result = events[-1]
    assert result["type"] == "result" and result["stop_reason"] == "end_turn"
    assert "300001" in result["text"]
    # usage is reported for every model call, as a server would (the session memory's own calls apart)
    main_usage = [u for u in of(events, "usage") if u["agent"] == "main"]
    assert len(main_usage) == result["steps"] and all(u["context_tokens"] for u in main_usage)


def test_summarize_crosses_the_warning_line_and_compacts_from_the_session_memory(tmp_path):
    code, events = run_demo(tmp_path, "summarize the project")
    assert code == 0
    assert of(events, "warning_crossed") and of(events, "session_memory")
    compactions = of(events, "compaction")
    assert compactions and compactions[0]["trigger"] == "memory" and compactions[0]["ok"]
    assert compactions[0]["messages_after"] > 1 and compactions[0]["tokens_after"] < compactions[0]["tokens_before"]
    assert compactions[0]["facts_checked"] > 0  # the audit checked the memory's summary too
    assert events[-1]["stop_reason"] == "end_turn"


def test_summarize_without_session_memory_auto_compacts_into_a_summary(tmp_path):
    code, events = run_demo(tmp_path, "summarize the project", memory_update_tokens="0")
    assert code == 0
    assert of(events, "warning_crossed") and not of(events, "session_memory")
    compactions = of(events, "compaction")
    assert compactions and compactions[0]["trigger"] == "auto" and compactions[0]["ok"]
    assert compactions[0]["messages_after"] == 1 and compactions[0]["tokens_after"] < compactions[0]["tokens_before"]
    # the compaction call is kept apart in the ledger
    assert any(u["agent"] == "compact" for u in of(events, "usage"))
    reads = [e["input"]["path"] for e in of(events, "tool_start") if e["name"] == "read_file"]
    assert len(reads) == len(set(reads))  # carried on from the summary: nothing read twice
    assert events[-1]["stop_reason"] == "end_turn"


def test_flood_is_cut_before_sending_then_recovers_from_prompt_too_long(tmp_path):
    code, events = run_demo(tmp_path, "flood")
    assert code == 0
    cut = of(events, "result_cut")
    assert cut and cut[0]["original_chars"] > 15_000_000 and cut[0]["kept_chars"] < 100_000
    reactive = [c for c in of(events, "compaction") if c["trigger"] == "reactive"]
    assert reactive and reactive[0]["ok"]
    assert events[-1]["stop_reason"] == "end_turn"


@pytest.mark.parametrize("prompt", ["hello"])
def test_anything_else_gets_the_list_of_scenarios(tmp_path, prompt):
    code, events = run_demo(tmp_path, prompt)
    assert code == 0
    text = events[-1]["text"]
    assert "find errors in app.log" in text and "summarize the project" in text and "flood" in text

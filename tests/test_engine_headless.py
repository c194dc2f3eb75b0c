"""`tidegauge -p` with --budget and --window: the engine's lines as a user sets them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_in_process import run_cli
from fake_llm_server import openai_text, openai_tool_calls
from test_engine_support import bodies, is_compaction, summary_text, wire_messages, write_words

from app.context.compaction import SUMMARY_INTRO

KEY = "sk-test-fake-key-0123456789"


def _tidegauge(args: list[str], tmp_path: Path, fake) -> list[dict]:
    """The CLI's stream-json events, run in this process (tests/cli_in_process.py): the flags' parsing
    and the requests they lead to are what is checked, not the process (a start is ~0.5 CPU-s)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY})
    proc = run_cli(["--provider", "openai", "--model", "m", "--base-url", fake.base_url("openai"),
                    "--output-format", "stream-json", *args], cwd=tmp_path / "work", env=env)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_headless_budget_and_window_trigger_compaction_before_the_next_request(fake_llm, tmp_path):
    (tmp_path / "work").mkdir()
    write_words(tmp_path / "work" / "big.txt", 1_300, "big")
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "big.txt"})], usage=None),
        openai_text(summary_text("cli"), usage=None),
        openai_text("The last word is big96.", usage=None),
    )
    events = _tidegauge(["-p", "read big.txt", "--budget", "2000", "--window", "20000"], tmp_path, fake_llm)

    assert [is_compaction(b) for b in bodies(fake_llm)] == [False, True, False]
    convo = wire_messages(fake_llm.requests[-1].json)
    assert len(convo) == 1 and convo[0]["content"].startswith(SUMMARY_INTRO)
    [compaction] = [e for e in events if e["type"] == "compaction"]
    assert {k: compaction[k] for k in ("trigger", "ok", "messages_before", "messages_after")} == {
        "trigger": "auto", "ok": True, "messages_before": 3, "messages_after": 1}
    assert 0 < compaction["tokens_after"] < compaction["tokens_before"]
    context = [e for e in events if e["type"] == "context"]
    lines = context[-1]["thresholds"]
    assert (lines["window"], lines["auto_compact_line"], lines["blocking_line"]) == (20_000, 2_000, 10_800)
    assert events[-1]["type"] == "result" and events[-1]["stop_reason"] == "end_turn"


def test_headless_default_budget_does_not_compact_the_same_task(fake_llm, tmp_path):
    (tmp_path / "work").mkdir()
    write_words(tmp_path / "work" / "big.txt", 1_300, "big")
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "big.txt"})], usage=None),
        openai_text("The last word is big96.", usage=None),
    )
    events = _tidegauge(["-p", "read big.txt"], tmp_path, fake_llm)
    assert not any(is_compaction(b) for b in bodies(fake_llm))
    assert not [e for e in events if e["type"] == "compaction"]
    assert "BEGIN big" in json.dumps(fake_llm.requests[-1].json["messages"])

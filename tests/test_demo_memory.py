"""The demo's "summarize the project" with the session memory on (issue 15): the memory is
written in the background while the files are read, the compaction at the auto-compact line
comes from it without a model call, and the audit reports on it. In process, the real
runtime wiring (demo provider, real tools, real engine), no network."""

from __future__ import annotations

from pathlib import Path

from agent_helpers import EventLog

from app.wiring.config import load_settings
from app.wiring.runtime import build_agent


async def test_summarize_the_project_compacts_from_the_session_memory(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings({"provider": "demo", "data_dir": tmp_path / "data", "demo_speed": 0, "yes": True})
    work = tmp_path / "work"
    work.mkdir()
    events = EventLog()
    agent = build_agent(settings, emit=events, cwd=work)
    try:
        result = await agent.run_turn("summarize the project")
        await agent.engine.wait_memory_update()
        agent.engine.flush_background_events()
    finally:
        await agent.aclose()

    assert result.stop_reason == "end_turn"
    memory = events.of("session_memory")
    assert memory and all(m.ok for m in memory)
    assert Path(memory[-1].path).read_text().strip()
    compactions = events.of("compaction")
    assert compactions and compactions[0].trigger == "memory" and compactions[0].ok
    first = compactions[0]
    assert first.tokens_after < agent.engine.thresholds.warning_line <= first.tokens_before
    assert first.messages_after > 1  # the memory plus the latest messages verbatim
    # no summary was asked for: no compaction call, and every memory-ledger call is a memory update
    assert sum(1 for u in events.of("usage") if u.agent == "memory") == len(memory)
    assert not any(u.agent == "compact" for u in events.of("usage"))
    notice = next(line for line in events.lines() if "from the session memory" in line)
    assert "no model call" in notice and "audit" in notice  # the audit reports on the memory too
    reads = [e.input["path"] for e in events.of("tool_start") if e.name == "read_file"]
    assert len(reads) == len(set(reads))  # carried on from the memory: nothing read twice
    assert agent.context_event().breakdown.get("session_memory", 0) > 0

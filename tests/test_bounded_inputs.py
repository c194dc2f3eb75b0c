"""Issue 24: what a model sends (arguments, reports) and what the tools save stay bounded."""

from __future__ import annotations

from typing import Any
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from agent_helpers import make_agent
from app.providers.anthropic import AnthropicStreamAssembler
from app.providers.json_fields import BAD_ARGUMENTS_KEY
from app.providers.openai import OpenAIStreamAssembler
from app.providers.sse import SSEDecoder
from app.agent.subagent import TASK_TOOL, SubAgentLimits, register_task_tool
from app.context.tokens import count_tokens
from fake_llm_server import anthropic_text, anthropic_tool_calls, openai_text, openai_tool_calls

KEY = "sk-test-fake-key-0123456789"
MB = 1024 * 1024


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": KEY})
    return env


# The child's ru_maxrss (wait4) also holds the high-water mark of the process it was forked
# from, carried across exec: forked from a pytest worker that had grown to 446 MB (after the url
# bounds tests), tidegauge "peaked" at 446 MB. So a fresh interpreter, small, forks it and reports
# its ru_maxrss: then that is tidegauge's own.
PEAK_OF_CHILD = """
import json, os, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "app", *argv])
_pid, status, usage = os.wait4(pid, 0)
with open(report, "w") as out:
    json.dump({"code": os.waitstatus_to_exitcode(status), "maxrss_kb": usage.ru_maxrss}, out)
"""


def _run_measuring_peak_rss(args: list[str], tmp_path: Path, timeout: float = 120) -> tuple[int, int, list[dict]]:
    """Run ``python -m app`` to its end: (exit code, peak RSS in bytes from the kernel, stream-json events).

    The peak is the child's own ``ru_maxrss`` (wait4, in a small parent of its own: see
    PEAK_OF_CHILD), so no sample can miss it and no other process's peak is counted.
    """
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    out_path = tmp_path / "stdout.jsonl"
    report = tmp_path / "peak.json"
    with open(out_path, "wb") as out, open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", PEAK_OF_CHILD, str(report), *args], cwd=work,
                                env=_env(tmp_path), stdout=out, stderr=err)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        import psutil

        for process in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
            process.kill()
        proc.wait(10)
        pytest.fail(f"tidegauge still running after {timeout:.0f} s; its output so far: "
                    f"{out_path.read_text()[-2000:]!r}")
    assert proc.returncode == 0 and report.exists(), (tmp_path / "stderr.txt").read_text()[-2000:]
    measured = json.loads(report.read_text())
    events = [json.loads(line) for line in out_path.read_text().splitlines()]
    return measured["code"], measured["maxrss_kb"] * 1024, events


def test_a_30_mb_and_a_900_level_argument_go_back_to_the_model_and_the_turn_goes_on(fake_llm, tmp_path):
    huge = json.dumps({"path": "big.txt", "content": "a" * (30 * MB)})
    deep = '{"path": "deep.txt", "content": ' + "[" * 900 + "]" * 900 + "}"
    fake_llm.enqueue(
        # 64 KB fragments, as a server streams them (one SSE event each)
        openai_tool_calls([("write_file", huge, "call_huge"), ("write_file", deep, "call_deep")],
                          fragments=len(huge) // (64 * 1024)),
        openai_text("I will write it in smaller parts."),
    )
    code, peak_rss, events = _run_measuring_peak_rss(
        ["-p", "write the files", "--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai"),
         "--output-format", "stream-json", "--yes"], tmp_path)

    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 0, f"exit {code}; stderr: {stderr[-2000:]}"
    result = events[-1]
    assert {k: result.get(k) for k in ("type", "stop_reason", "text", "steps", "subtype", "is_error")} == {
        "type": "result", "stop_reason": "end_turn", "text": "I will write it in smaller parts.", "steps": 2,
        "subtype": "success", "is_error": False}
    assert not [e for e in events if e["type"] == "error"]
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results["call_huge"]["is_error"] and "31,457,3" in results["call_huge"]["content"]
    assert "over the limit of 2,097,152 characters" in results["call_huge"]["content"]
    assert results["call_deep"]["is_error"] and "more than 64 levels deep" in results["call_deep"]["content"]
    assert not (tmp_path / "work" / "big.txt").exists() and not (tmp_path / "work" / "deep.txt").exists()
    # The model was told, in the tool results of its next request; the arguments it gets back are small.
    sent = fake_llm.requests[1].json["messages"]
    told = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert "refused and nothing was run" in told["call_huge"] and "levels deep" in told["call_deep"]
    assert len(json.dumps(fake_llm.requests[1].json)) < 64 * 1024
    # Held whole, the argument took 1,655 MB. Bounded: 165 MB on a quiet machine, 301 MB under
    # stress-ng --cpu 2 (the stream is read more slowly than it arrives, so more of it waits in
    # buffers): the bound is about what no loaded machine reaches and a held argument always does.
    assert peak_rss < 400 * MB, f"peak RSS {peak_rss / MB:.0f} MB"


async def test_brackets_inside_strings_are_text_not_depth_and_such_a_file_is_written(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, yes=True)
    content = "[" * 5000 + '{"a": "\\"]"}' + "]" * 5000
    fake_llm.enqueue(openai_tool_calls([("write_file", {"path": "brackets.txt", "content": content}, "call_w")]),
                     openai_text("Written."))

    result = await agent.run_turn("write it")

    assert result.stop_reason == "end_turn"
    assert (tmp_path / "work" / "brackets.txt").read_text() == content
    assert not events.of("tool_result")[0].is_error


async def test_too_deep_anthropic_arguments_are_refused_and_the_model_is_told(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    deep = '{"path": ' + "[" * 900 + "]" * 900 + "}"
    fake_llm.enqueue(anthropic_tool_calls([("read_file", deep, "toolu_deep")]), anthropic_text("Sorry."))

    result = await agent.run_turn("read it")

    assert result.stop_reason == "end_turn"
    (tool_result,) = events.of("tool_result")
    assert tool_result.is_error and "more than 64 levels deep" in tool_result.content
    answer = fake_llm.requests[1].json["messages"][2]["content"][0]
    assert answer["tool_use_id"] == "toolu_deep" and "levels deep" in answer["content"]


async def test_an_output_the_engine_saves_is_0600_and_never_follows_a_planted_symlink(fake_llm, tmp_path, monkeypatch):
    # No registry truncation, a small window: the engine itself cuts and saves each result.
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, max_output=0, budget=0, window=20_000)
    lines = "".join(f"line {i:05d} of a long file that alone crosses the blocking line\n" for i in range(1, 1_801))
    (agent.workspace / "big.txt").write_text(lines)
    saved_dir = agent.tool_context.tool_results_dir
    saved_dir.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    (saved_dir / "call_planted.txt").symlink_to(victim)
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "big.txt"}, "call_planted")]),
        openai_tool_calls([("read_file", {"path": "big.txt", "offset": 2}, "call_clean")]),
        openai_text("Read twice."),
    )

    result = await agent.run_turn("read big.txt twice")

    assert result.stop_reason == "end_turn"
    planted, clean = events.of("result_cut")
    assert victim.read_text() == "someone else's file\n"  # nothing written through the link
    assert (saved_dir / "call_planted.txt").is_symlink() and planted.full_output_path is None
    assert clean.full_output_path == str(saved_dir / "call_clean.txt")
    assert (saved_dir / "call_clean.txt").stat().st_mode & 0o777 == 0o600
    assert "line 01800" in (saved_dir / "call_clean.txt").read_text()


def _tool_result(body: dict, call_id: str) -> str:
    [content] = [m["content"] for m in body["messages"] if m["role"] == "tool" and m["tool_call_id"] == call_id]
    return content


async def test_a_2_mb_sub_agent_report_is_cut_for_the_parent_and_saved_whole(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    register_task_tool(agent, SubAgentLimits(report_tokens=500))
    # Twice the parent's whole window in tokens, a thousand times the report's limit: the cut and
    # the saved file are the same as for 10 MB, which spent ~2 CPU-s more counting its tokens.
    report = "FIRST: the importer drops rows at importer.py:203.\n" + "detail line of the report\n" * 84_000 \
        + "LAST: nothing else found.\n"
    assert len(report) > 2 * MB
    assert 84_000 * count_tokens("detail line of the report\n") > 2 * agent.engine.config.window
    fake_llm.enqueue(
        openai_tool_calls([(TASK_TOOL, {"description": "find it", "prompt": "Find the drop."}, "call_task")]),
        openai_text(report),  # the sub-agent's report
        openai_text("Found it."),
    )

    result = await agent.run_turn("why are rows missing?")

    assert result.stop_reason == "end_turn"
    seen = _tool_result(fake_llm.requests[-1].json, "call_task")
    assert len(seen) < 500 * 4 + 1_000  # the report's limit (~4 characters a token) and the notice
    assert seen.startswith("FIRST: the importer drops rows") and seen.rstrip().endswith("LAST: nothing else found.")
    (tool_result,) = events.of("tool_result")
    assert tool_result.truncated and tool_result.full_output_path
    assert tool_result.full_output_path in seen  # the notice names the file
    assert Path(tool_result.full_output_path).read_text() == report.strip()


async def test_a_sub_agent_and_its_parent_using_the_same_call_id_each_read_their_own_saved_output(
        fake_llm, tmp_path, monkeypatch):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, max_output=2_000)
    register_task_tool(agent, SubAgentLimits())
    (agent.workspace / "parent.txt").write_text("".join(f"PARENT line {i}\n" for i in range(1, 501)))
    (agent.workspace / "sub.txt").write_text("".join(f"SUB line {i}\n" for i in range(1, 501)))
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "parent.txt"}, "call_same")]),
        # the task call's id names the sub-agent's folder: one that climbs stays inside
        openai_tool_calls([(TASK_TOOL, {"prompt": "Read sub.txt whole."}, "../../escape")]),
        # the sub-agent: the same call id as the parent's first call
        openai_tool_calls([("read_file", {"path": "sub.txt"}, "call_same")]),
        openai_tool_calls([("read_saved_output", {"call_id": "call_same", "offset": 250, "limit": 1}, "sub_read")]),
        openai_text("The sub file has 500 lines."),
        # back in the parent
        openai_tool_calls([("read_saved_output", {"call_id": "call_same", "offset": 250, "limit": 1}, "main_read")]),
        openai_text("Both read."),
    )

    result = await agent.run_turn("read both")

    assert result.stop_reason == "end_turn"
    sub_read = _tool_result(fake_llm.requests[4].json, "sub_read")
    main_read = _tool_result(fake_llm.requests[6].json, "main_read")
    assert "SUB line 250" in sub_read and "PARENT" not in sub_read
    assert "PARENT line 250" in main_read and "SUB" not in main_read
    saved_dir = agent.tool_context.tool_results_dir
    [sub_saved] = [p for p in saved_dir.rglob("call_same.txt") if p.parent != saved_dir]
    assert sub_saved.parent.parent == saved_dir / "agents" and "SUB line 250" in sub_saved.read_text()


async def test_past_the_session_cap_outputs_are_cut_but_not_saved_and_the_notice_says_why(
        fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, max_output=2_000, yes=True,
                               max_session_saved_output=100_000)
    for name in ("a", "b", "c"):  # ~57 KB of numbered lines each, as read_file returns them
        (agent.workspace / f"{name}.txt").write_text("".join(f"{name} line {i:05d} of 2000\n" for i in range(1, 2_001)))
    fake_llm.enqueue(
        openai_tool_calls([("read_file", {"path": "a.txt"}, "call_a")]),
        openai_tool_calls([("read_file", {"path": "b.txt"}, "call_b")]),
        openai_tool_calls([("read_file", {"path": "c.txt"}, "call_c")]),
        openai_tool_calls([("run_bash", {"command": "seq 1 100000"}, "call_bash")]),
        openai_text("Read them."),
    )

    result = await agent.run_turn("read them all")

    assert result.stop_reason == "end_turn"
    a, b, c, bash = events.of("tool_result")
    saved_dir = agent.tool_context.tool_results_dir
    assert a.full_output_path == str(saved_dir / "call_a.txt") and "c line" not in a.content
    assert b.full_output_path == str(saved_dir / "call_b.txt")  # what was left of the cap, and it says so
    assert "what was left of this session's cap of 100,000 bytes, max_session_saved_output" in b.content
    for capped in (c, bash):  # still cut for the model, but nothing saved
        assert capped.truncated and capped.full_output_path is None and len(capped.content) < 3_000
        assert ("The full output was not saved: this session's saved outputs reached their cap of 100,000 bytes "
                "(the max_session_saved_output setting raises it)") in capped.content
    assert sorted(p.name for p in saved_dir.iterdir()) == ["call_a.txt", "call_b.txt"]
    assert sum(p.stat().st_size for p in saved_dir.iterdir()) < 100_000 + 1_024  # the cap, and b's marker
    told = _tool_result(fake_llm.requests[-1].json, "call_bash")
    assert "max_session_saved_output" in told


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_the_stream_does_not_hold_a_30_mb_argument_past_the_cap(protocol):
    raw = json.dumps({"path": "big.txt", "content": "a" * (30 * MB)})
    build = openai_tool_calls if protocol == "openai" else anthropic_tool_calls
    chunks = build([("write_file", raw, "call_huge")], fragments=len(raw) // (64 * 1024)).events
    assembler = OpenAIStreamAssembler() if protocol == "openai" else AnthropicStreamAssembler()

    tracemalloc.start()
    try:
        decoder = SSEDecoder()  # chunk by chunk, as the provider reads them
        for chunk in chunks:
            for event in decoder.feed(chunk):
                assembler.feed(event)  # the deltas it gives out are dropped here, as the agent drops them
        completed = assembler.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    (use,) = completed.message.tool_uses
    assert use.input == {BAD_ARGUMENTS_KEY: f"they were {len(raw):,} characters, over the limit of 2,097,152 "
                                            "characters for one call"}
    assert peak < 8 * MB, f"{peak / MB:.0f} MB allocated at the peak for a {len(raw) / MB:.0f} MB argument"


async def test_a_refused_call_is_never_put_to_the_user_for_approval(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    asked: list[str] = []

    async def approver(use):
        asked.append(use.id)
        return "yes"

    agent.approver = approver
    big = json.dumps({"path": "big.txt", "content": "b" * (3 * MB)})
    fake_llm.enqueue(openai_tool_calls([("write_file", big, "call_big")], fragments=64), openai_text("Smaller then."))

    result = await agent.run_turn("write it")

    assert result.stop_reason == "end_turn"
    assert asked == []  # nothing to approve: the call cannot run
    assert "over the limit of 2,097,152 characters" in events.of("tool_result")[0].content
    assert not (tmp_path / "work" / "big.txt").exists()


async def test_a_resumed_session_counts_the_outputs_it_already_saved_against_its_cap(fake_llm, tmp_path, monkeypatch):
    from agent_helpers import EventLog, _settings

    from app.wiring.runtime import build_agent

    options: dict[str, Any] = {"max_output": 2_000, "max_session_saved_output": 60_000}
    first, _ = make_agent(fake_llm, tmp_path, monkeypatch, **options)
    (first.workspace / "a.txt").write_text("".join(f"a line {i:05d} of 2000\n" for i in range(1, 2_001)))
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "a.txt"}, "call_a")]), openai_text("Read."))
    await first.run_turn("read a")
    await first.aclose()
    assert (first.tool_context.tool_results_dir / "call_a.txt").stat().st_size > 50_000

    events = EventLog()
    second = build_agent(_settings(fake_llm, tmp_path, monkeypatch, "openai", dict(options)), emit=events,
                         resume=first.session_id, cwd=first.workspace)
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "a.txt"}, "call_again")]), openai_text("Again."))
    await second.run_turn("read it again")
    await second.aclose()

    (again,) = events.of("tool_result")
    # ~56 KB of the 60,000 were used before the resume: only what is left is saved, and it says so
    assert "what was left of this session's cap of 60,000 bytes, max_session_saved_output" in again.content
    saved_dir = second.tool_context.tool_results_dir
    assert sum(p.stat().st_size for p in saved_dir.iterdir()) < 60_000 + 1_024

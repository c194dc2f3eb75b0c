"""Issue 28 (wire fidelity, second round) through the CLI: `tidegauge -p` against the loopback
server, whose streams are shaped like the real services' (nested stream errors, refusal parts,
``phase`` on message items, the model's own argument bytes). The runs go through the CLI in this
process (tests/cli_in_process.py); the first test runs the real binary, `python -m app`, so its
exit code and stderr are the ones a shell sees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli
from fake_llm_server import (
    CACHE_CONTROL_REFUSAL,
    Reply,
    anthropic_text,
    anthropic_tool_calls,
    openai_chunk,
    openai_events,
    openai_text,
    openai_tool_calls,
    openai_usage,
    SYSTEM_LIST_REFUSAL,
    http_error,
    refusing_cache_control,
    refusing_system_blocks,
)
from fake_responses_server import (
    responses_error,
    responses_refusal,
    responses_text,
    responses_tool_calls,
)
from test_headless_cli import KEY, _env

QUOTA = "You exceeded your current quota, please check your plan and billing details."
REFUSAL = "I'm sorry, I can't help with that."


def _cli(fake_llm: Any, provider: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "app", "--provider", provider, "--model", "m",
            "--base-url", fake_llm.base_url(provider), *args]


def _run(fake_llm: Any, tmp_path: Path, provider: str, *args: str, real_process: bool = False,
         **env: str) -> subprocess.CompletedProcess[str]:
    """``tidegauge ARGS`` against ``fake_llm``: the same CLI in this process (what reaches the wire,
    stdout, stderr and the exit code do not depend on the interpreter it runs in, and a start costs
    ~0.5 CPU-s), or ``real_process`` as ``python -m app`` where the real binary is the point."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    variables = _env(tmp_path, OPENAI_API_KEY=KEY, ANTHROPIC_API_KEY=KEY, **env)
    if not real_process:
        return run_cli(_cli(fake_llm, provider, *args)[3:], cwd=work, env=variables)
    return subprocess.run(_cli(fake_llm, provider, *args), cwd=work, env=variables,
                          capture_output=True, text=True, timeout=120)


def _stream_json(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


# ---- errors inside a Responses stream ----

def test_a_quota_error_in_the_stream_is_shown_in_the_services_words_and_never_retried(fake_llm, tmp_path) -> None:
    # what the service sends: nested under "error" (the flat shape and response.failed: test_providers_wire_round2)
    fake_llm.enqueue(responses_error("insufficient_quota", QUOTA))
    proc = _run(fake_llm, tmp_path, "responses", "-p", "hello", real_process=True)  # the binary's exit and stderr
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert QUOTA in proc.stderr, proc.stderr
    assert "the response failed" not in proc.stderr, proc.stderr
    assert len(fake_llm.requests) == 1, f"retried a quota error: {len(fake_llm.requests)} requests\n{proc.stderr}"
    assert KEY not in proc.stdout + proc.stderr


# ---- refusals: one behaviour on both OpenAI protocols ----

def _chat_refusal() -> Reply:
    head = openai_chunk({"role": "assistant", "content": None, "refusal": ""})
    pieces = [openai_chunk({"refusal": p}) for p in ["I'm", " sorry,", " I can't", " help with that."]]
    return openai_events([head, *pieces, openai_chunk({}, "stop"),
                          openai_chunk(usage=openai_usage(30, 9), choices=False)])


@pytest.mark.parametrize("provider, reply", [
    ("openai", _chat_refusal()),
    ("responses", responses_refusal(["I'm", " sorry,", " I can't", " help with that."])),
], ids=["chat_completions", "responses"])
def test_a_refusal_ends_as_a_refusal_with_exit_1_on_either_protocol(fake_llm, tmp_path, provider: str,
                                                                    reply: Reply) -> None:
    fake_llm.enqueue(reply)
    proc = _run(fake_llm, tmp_path, provider, "-p", "do something bad", "--output-format", "stream-json")
    events = _stream_json(proc)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    result = events[-1]
    assert {k: result.get(k) for k in ("type", "stop_reason", "text", "steps", "subtype", "is_error")} == {
        "type": "result", "stop_reason": "refusal", "text": REFUSAL, "steps": 1, "subtype": "refusal",
        "is_error": True}, result
    streamed = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert streamed == REFUSAL, f"the refusal did not stream as it came: {streamed!r}"


# ---- phase and the model's own argument bytes, through the history and a resumed session ----

def _inputs_of(request: Any) -> list[dict[str, Any]]:
    return request.json["input"]


def test_phase_and_argument_bytes_go_back_as_the_model_sent_them_also_after_resume(fake_llm, tmp_path) -> None:
    written = '{"path":"."}'  # compact, as models write it; json.dumps would send '{"path": "."}'
    fake_llm.enqueue(
        responses_tool_calls([("list_files", written, "call_lf")], text="Looking at the files.", phase="commentary"),
        responses_text("Two files.", phase="final_answer"),
        responses_text("Still two.", phase="final_answer"),
    )
    first = _run(fake_llm, tmp_path, "responses", "-p", "what is here?")
    assert first.returncode == 0, first.stderr
    resumed = _run(fake_llm, tmp_path, "responses", "-p", "and now?", "--continue")
    assert resumed.returncode == 0, resumed.stderr
    assert len(fake_llm.requests) == 3
    for number in (1, 2):  # the tool loop's next request, and the first request of the resumed session
        items = _inputs_of(fake_llm.requests[number])
        calls = [i for i in items if i.get("type") == "function_call"]
        assert [c["arguments"] for c in calls] == [written], (number, calls)
        said = [(i["content"], i.get("phase")) for i in items if i.get("role") == "assistant"]
        expected = [("Looking at the files.", "commentary")] + ([("Two files.", "final_answer")] if number == 2 else [])
        assert said == expected, (number, said)


def test_chat_completions_sends_back_the_arguments_as_written(fake_llm, tmp_path) -> None:
    written = '{"path":"."}'
    fake_llm.enqueue(openai_tool_calls([("list_files", written)]), openai_text("Two files."))
    proc = _run(fake_llm, tmp_path, "openai", "-p", "what is here?")
    assert proc.returncode == 0, proc.stderr
    assistant = [m for m in fake_llm.requests[1].json["messages"] if m["role"] == "assistant"][0]
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [written]


# ---- reasoning: summary parts apart, reasoning tokens on the usage line ----

def test_stream_json_shows_the_summary_parts_apart_and_the_reasoning_tokens(fake_llm, tmp_path) -> None:
    fake_llm.enqueue(responses_text("A map.", reasoning=("Looking at the street.", "**Explaining the map**"),
                                    usage=dict(input=300, output=120, reasoning=96)))
    proc = _run(fake_llm, tmp_path, "responses", "-p", "explain", "--output-format", "stream-json")
    assert proc.returncode == 0, proc.stderr
    events = _stream_json(proc)
    thinking = "".join(e["text"] for e in events if e["type"] == "thinking_delta")
    assert thinking == "Looking at the street.\n\n**Explaining the map**", thinking
    usage = [e for e in events if e["type"] == "usage"][-1]
    assert usage["reasoning_tokens"] == 96 and usage["output_tokens"] == 120, usage


# ---- prompt caching behind a gateway ----

def _marked(request: Any) -> bool:
    return "cache_control" in json.dumps(request.json) or isinstance(request.json.get("system"), list)


def test_cache_marks_go_to_any_anthropic_server_and_a_refusal_turns_them_off_for_the_session(
        fake_llm, tmp_path) -> None:
    fake_llm.default = refusing_cache_control(
        anthropic_tool_calls([("list_files", {"path": "."})], usage=dict(input=900, output=12)),
        anthropic_text("Two files.", usage=dict(input=200, cache_read=800, output=5)),
        anthropic_text("Still two.", usage=dict(input=250, cache_read=800, output=4)),
    )
    first = _run(fake_llm, tmp_path, "anthropic", "-p", "what is here?")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "Two files."
    lines = [line for line in first.stderr.splitlines() if "prompt caching off" in line]
    assert len(lines) == 1, first.stderr  # said once, not on every call
    assert CACHE_CONTROL_REFUSAL in lines[0] and "sent again without cache marks" in lines[0]
    # the first request carried the marks (a gateway host, not anthropic.com); after the 400, none did
    assert [_marked(r) for r in fake_llm.requests] == [True, False, False]
    assert fake_llm.requests[1].json["system"] == fake_llm.requests[2].json["system"]
    assert isinstance(fake_llm.requests[1].json["system"], str)

    resumed = _run(fake_llm, tmp_path, "anthropic", "-p", "and now?", "--continue", "--output-format", "stream-json")
    assert resumed.returncode == 0, resumed.stderr
    assert [_marked(r) for r in fake_llm.requests[3:]] == [False], "a resumed session tried the marks again"
    assert KEY not in first.stdout + first.stderr + resumed.stdout + resumed.stderr


def test_stream_json_carries_the_cache_fallback_as_a_typed_line(fake_llm, tmp_path) -> None:
    fake_llm.default = refusing_cache_control(anthropic_text("Hi."), message="system: Input should be a valid string")
    proc = _run(fake_llm, tmp_path, "anthropic", "-p", "hello", "--output-format", "stream-json")
    assert proc.returncode == 0, proc.stderr
    [line] = [e for e in _stream_json(proc) if e["type"] == "prompt_cache_off"]
    assert line == {"type": "prompt_cache_off", "provider": "anthropic", "base_url": fake_llm.base_url("anthropic"),
                    "reason": "HTTP 400: system: Input should be a valid string", "remembered": False,
                    "seq": line["seq"], "command_id": 1}
    assert len(fake_llm.requests) == 2


def test_a_gateway_answering_500_to_system_blocks_gets_one_plain_retry_remembered_for_the_url(
        fake_llm, tmp_path) -> None:
    """LiteLLM in front of llama-cpp-python answers 500 to the system prompt as blocks, without a
    word about cache marks: the first cached request is sent once more without them (the system
    a plain string), said in one line, and the next session sends none from its first request."""
    fake_llm.default = refusing_system_blocks(anthropic_text("Bonjour."), anthropic_text("Encore."))
    first = _run(fake_llm, tmp_path, "anthropic", "-p", "hello")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "Bonjour."
    lines = [line for line in first.stderr.splitlines() if "prompt caching off" in line]
    assert len(lines) == 1, first.stderr
    assert fake_llm.base_url("anthropic") in lines[0] and "HTTP 500" in lines[0] and SYSTEM_LIST_REFUSAL in lines[0]
    assert [_marked(r) for r in fake_llm.requests] == [True, False]
    assert isinstance(fake_llm.requests[1].json["system"], str)
    kept = tmp_path / "data" / "prompt-cache-refused.json"
    assert oct(kept.stat().st_mode & 0o777) == "0o600"

    again = _run(fake_llm, tmp_path, "anthropic", "-p", "and again", "--output-format", "stream-json")
    assert again.returncode == 0, again.stderr
    assert [_marked(r) for r in fake_llm.requests[2:]] == [False], "a new session tried the marks again"
    [said] = [e for e in _stream_json(again) if e["type"] == "prompt_cache_off"]
    assert said["remembered"] is True and SYSTEM_LIST_REFUSAL in said["reason"]


@pytest.mark.parametrize("status", [401, 403, 429, 529])
def test_a_key_rights_or_rate_failure_is_not_blamed_on_the_cache_marks(fake_llm, tmp_path, status) -> None:
    fake_llm.default = refusing_system_blocks(status=status, message="denied")
    proc = _run(fake_llm, tmp_path, "anthropic", "-p", "hello", TIDEGAUGE_MAX_RETRIES="0")
    assert proc.returncode == 1, proc.stderr
    assert "prompt caching off" not in proc.stderr
    assert [_marked(r) for r in fake_llm.requests] == [True]
    assert not (tmp_path / "data" / "prompt-cache-refused.json").exists()


def test_a_server_failing_without_the_marks_too_keeps_them_and_remembers_nothing(fake_llm, tmp_path) -> None:
    fake_llm.default = lambda body, path: http_error(500, {"error": {"message": "model not loaded"}})
    proc = _run(fake_llm, tmp_path, "anthropic", "-p", "hello", TIDEGAUGE_MAX_RETRIES="0")
    assert proc.returncode == 1, proc.stderr
    assert "prompt caching off" not in proc.stderr
    assert [_marked(r) for r in fake_llm.requests] == [True, False]  # one plain try, then the error
    assert not (tmp_path / "data" / "prompt-cache-refused.json").exists()


def test_the_remembered_refusals_file_is_private_and_a_planted_link_is_not_followed(tmp_path) -> None:
    from app.providers.anthropic import CacheRefusals

    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"http://gw.example": {"reason": "planted"}}), encoding="utf-8")
    kept = tmp_path / "prompt-cache-refused.json"
    kept.symlink_to(outside)
    refusals = CacheRefusals(kept)
    assert refusals.reason_for("http://gw.example") is None  # a link is not read
    refusals.remember("http://gw.example/", "HTTP 500: " + "x" * 1_000)
    assert json.loads(outside.read_text(encoding="utf-8")) == {"http://gw.example": {"reason": "planted"}}
    assert not kept.is_symlink() and oct(kept.stat().st_mode & 0o777) == "0o600"
    assert refusals.reason_for("http://gw.example") == ("HTTP 500: " + "x" * 1_000)[:200]

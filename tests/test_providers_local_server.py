"""Small local servers (llama.cpp, vLLM, Ollama-style): no usage, tools ignored, sometimes
no streaming at all. `tidegauge -p` must still finish the task, with every figure estimated.

The CLI (`tidegauge -p ... --output-format stream-json`) against the loopback server, run in the
test process (tests/cli_in_process.py): what is checked is the events' figures and the requests,
not the process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cli_in_process import run_cli
from fake_llm_server import Reply, anthropic_events, raw_sse

KEY = "sk-test-fake-key-0123456789"
LOCAL_STREAM = (Path(__file__).parent / "replay" / "openai" / "local-server-no-usage.sse").read_bytes()


def _headless(fake_llm, tmp_path: Path, provider: str, *extra: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "PYTHONUNBUFFERED": "1", f"{provider.upper()}_API_KEY": KEY})
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("one\ntwo\n")
    proc = run_cli(["-p", "how many lines are in notes.txt?", "--provider", provider,
                    "--model", "qwen2.5-coder-1.5b-instruct", "--base-url", fake_llm.base_url(provider),
                    "--output-format", "stream-json", *extra], cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _check_estimated(events: list[dict[str, Any]], answer: str) -> None:
    result = events[-1]
    assert result["type"] == "result" and result["stop_reason"] == "end_turn" and result["text"] == answer
    usage = [e for e in events if e["type"] == "usage"]
    assert usage and all(e["input_tokens"] is None and e["context_tokens"] is None for e in usage)
    contexts = [e for e in events if e["type"] == "context"]
    # no exact figure ever: the gauge's figures are the estimate, and it grows with the conversation
    assert contexts and all(e["exact_tokens"] is None for e in contexts)
    assert contexts[-1]["projected_tokens"] > contexts[0]["projected_tokens"] > 0


def test_a_streaming_server_without_usage_or_tools(fake_llm, tmp_path) -> None:
    fake_llm.enqueue(raw_sse(LOCAL_STREAM))
    events = _headless(fake_llm, tmp_path, "openai")
    _check_estimated(events, "Hello! The file has 42 lines.")
    sent = fake_llm.requests[0].json
    assert sent["tools"] and sent["stream"] is True  # offered; the server simply never calls them


def test_a_server_that_ignores_stream_true_and_sends_one_json_body(fake_llm, tmp_path) -> None:
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1764547500, "model": "local",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Two lines."}, "finish_reason": "stop"}]}
    fake_llm.enqueue(Reply(body=json.dumps(body).encode(), content_type="application/json"))
    events = _headless(fake_llm, tmp_path, "openai")
    _check_estimated(events, "Two lines.")


def test_an_anthropic_compatible_local_server_without_usage(fake_llm, tmp_path) -> None:
    fake_llm.enqueue(anthropic_events([
        {"type": "message_start", "message": {"id": "msg_local", "type": "message", "role": "assistant",
                                              "model": "local", "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Two "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lines."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}},
        {"type": "message_stop"},
    ]))
    events = _headless(fake_llm, tmp_path, "anthropic")
    _check_estimated(events, "Two lines.")

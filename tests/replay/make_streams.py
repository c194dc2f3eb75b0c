"""Writes the replay streams under tests/replay/<protocol>/ (run once; the files are committed).

Each stream copies the *structure* of what a real service sends (field order, chunking,
framing, null and empty fields, comment lines, where usage goes) as published in the
official SDKs' recorded fixtures and open-source agent frameworks' cassettes; the
content (ids, text, arguments, figures) is our own. README.md says which real shape
each file reproduces. Regenerate with ``python tests/replay/make_streams.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def dumps(obj: Any) -> str:
    # the services send compact JSON with raw UTF-8
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def data(obj: Any) -> str:
    return f"data: {obj if isinstance(obj, str) else dumps(obj)}\n\n"


def event(obj: dict[str, Any]) -> str:
    return f"event: {obj['type']}\ndata: {dumps(obj)}\n\n"


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


# ---------------------------------------------------------------- OpenAI -----

class OpenAIChunks:
    """api.openai.com chunks with stream_options.include_usage: every chunk carries
    "usage":null and an "obfuscation" pad, the last one has "choices":[] and the usage."""

    def __init__(self, cid: str, model: str, fingerprint: str, *, created: int = 1764547200,
                 usage_null: bool = True, obfuscation: bool = True) -> None:
        self.cid, self.model, self.fp, self.created = cid, model, fingerprint, created
        self.usage_null, self.obfuscation = usage_null, obfuscation
        self.n = 0

    def chunk(self, delta: dict[str, Any] | None, finish: str | None = None, *,
              usage: dict[str, Any] | None = None, empty_choices: bool = False) -> str:
        self.n += 1
        body: dict[str, Any] = {"id": self.cid, "object": "chat.completion.chunk", "created": self.created,
                                "model": self.model, "service_tier": "default", "system_fingerprint": self.fp}
        if empty_choices:
            body["choices"] = []
        else:
            body["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if usage is not None:
            body["usage"] = usage
        elif self.usage_null:
            body["usage"] = None
        if self.obfuscation:
            body["obfuscation"] = "aZ3kQ9xWp"[: 1 + self.n % 9]
        return data(body)


def openai_usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def openai_text_basic() -> str:
    c = OpenAIChunks("chatcmpl-Cq1tgRzX0bLwA7n2", "gpt-4o-mini-2024-07-18", "fp_560af6e559")
    out = c.chunk({"role": "assistant", "content": "", "refusal": None})
    for p in ["The", " tide", " gauge", " reads", " 3", ".2", " m", " at", " high", " water", "."]:
        out += c.chunk({"content": p})
    out += c.chunk({}, "stop")
    out += c.chunk(None, usage=openai_usage(412, 11), empty_choices=True)
    return out + data("[DONE]")


def openai_tool_call_split() -> str:
    c = OpenAIChunks("chatcmpl-Cq1u0bJ7kM2sYd4e", "gpt-4.1-2025-04-14", "fp_b3f1157249")
    out = c.chunk({"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_Jk2QmVb7nWc1xTz9LpRa", "type": "function",
         "function": {"name": "read_file", "arguments": ""}}], "refusal": None})
    for p in ['{"', "path", '":"', "src", "/ti", "des", ".py", '","', "offset", '":', "120", "}"]:
        out += c.chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
    out += c.chunk({}, "tool_calls")
    out += c.chunk(None, usage=openai_usage(1893, 27, cached=1024), empty_choices=True)
    return out + data("[DONE]")


def openai_parallel_tool_calls() -> str:
    c = OpenAIChunks("chatcmpl-Cq1uK3pLr8nVq0aZ", "gpt-4o-2024-08-06", "fp_cbac5b1d2a")
    out = c.chunk({"role": "assistant", "content": None, "refusal": None})
    calls = [("call_Aq7Zr1LmN3bV5cX8kJ2wPq0e", "list_files", '{"path": "tests"}'),
             ("call_Wm4Tq9Hs2Kd6Fy1Bn8Lc3Vx7", "grep", '{"pattern": "def test_", "path": "tests"}')]
    for index, (cid, name, args) in enumerate(calls):
        out += c.chunk({"tool_calls": [{"index": index, "id": cid, "type": "function",
                                        "function": {"name": name, "arguments": ""}}]})
        for p in pieces(args, 5):
            out += c.chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
    out += c.chunk({}, "tool_calls")
    out += c.chunk(None, usage=openai_usage(2210, 58), empty_choices=True)
    return out + data("[DONE]")


def openai_refusal() -> str:
    c = OpenAIChunks("chatcmpl-Cq1ua8sQ2vHf5nLb", "gpt-4o-2024-08-06", "fp_f33640a400")
    out = c.chunk({"role": "assistant", "content": None, "refusal": ""})
    for p in ["I'm", " sorry", ",", " but", " I", " can't", " help", " with", " disabling", " the", " alarms", "."]:
        out += c.chunk({"refusal": p})
    out += c.chunk({}, "stop")
    out += c.chunk(None, usage=openai_usage(96, 13), empty_choices=True)
    return out + data("[DONE]")


def openai_length_in_tool_call() -> str:
    c = OpenAIChunks("chatcmpl-Cq1upW5yN1kD3mHc", "gpt-4.1-mini-2025-04-14", "fp_6f2eabb9a5")
    out = c.chunk({"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_Lr5Nw2Qe8Tz4Ks1Vb6Hm0Yc3", "type": "function",
         "function": {"name": "write_file", "arguments": ""}}], "refusal": None})
    args = '{"path":"report.md","content":"# Tide report\\n\\n| station | height |\\n|---|---|\\n| Brest | 6.1 |\\n| Cherbo'
    for p in pieces(args, 9):
        out += c.chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
    out += c.chunk({}, "length")
    out += c.chunk(None, usage=openai_usage(745, 64), empty_choices=True)
    return out + data("[DONE]")


def openai_text_then_tool() -> str:
    c = OpenAIChunks("chatcmpl-Cq1v4Gd9sB2pXe6f", "gpt-4.1-2025-04-14", "fp_799e4ca3f1")
    out = c.chunk({"role": "assistant", "content": "", "refusal": None})
    for p in ["Let", " me", " check", " the", " config", " first", "."]:
        out += c.chunk({"content": p})
    out += c.chunk({"tool_calls": [{"index": 0, "id": "call_Pz8Mq3Lk6Vn1Wb4Xc7Tr2Ys5", "type": "function",
                                    "function": {"name": "read_file", "arguments": ""}}]})
    for p in ['{"pa', 'th":"', "pypro", "ject.", 'toml"}']:
        out += c.chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
    out += c.chunk({}, "tool_calls")
    out += c.chunk(None, usage=openai_usage(3320, 31, cached=3072), empty_choices=True)
    return out + data("[DONE]")


def openai_no_final_newline() -> str:
    return openai_text_basic().rstrip("\n")


def openai_midstream_error() -> str:
    c = OpenAIChunks("chatcmpl-Cq1vJ0aTq4mR7nXg", "gpt-4o-2024-08-06", "fp_a7d06e42a7")
    out = c.chunk({"role": "assistant", "content": "", "refusal": None})
    for p in ["Sure", ",", " the"]:
        out += c.chunk({"content": p})
    # the API's in-stream failure: a data line whose JSON is only an error object
    return out + data({"error": {"message": "The server had an error while processing your request. Sorry about that!",
                                 "type": "server_error", "param": None, "code": None}})


# Azure OpenAI: keys in alphabetical order, a first chunk with "choices":[] carrying
# prompt_filter_results, content_filter_results on every choice, no service_tier/obfuscation.

_SAFE = {"hate": {"filtered": False, "severity": "safe"}, "self_harm": {"filtered": False, "severity": "safe"},
         "sexual": {"filtered": False, "severity": "safe"}, "violence": {"filtered": False, "severity": "safe"}}


def _azure_chunk(delta: dict[str, Any] | None, finish: str | None, filters: dict[str, Any],
                 usage: dict[str, Any] | None = None, *, empty: bool = False) -> str:
    body: dict[str, Any] = {}
    if empty:
        body["choices"] = []
    else:
        body["choices"] = [{"content_filter_results": filters, "delta": delta, "finish_reason": finish,
                            "index": 0, "logprobs": None}]
    body.update({"created": 1764547300, "id": "chatcmpl-Cq1w0Az7Ure5Lq2b", "model": "gpt-4o-2024-11-20",
                 "object": "chat.completion.chunk", "system_fingerprint": "fp_ee1d74bde0"})
    if usage is not None:
        body["usage"] = usage
    return data(body)


def azure_content_filter_chunks() -> str:
    out = data({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
                    **_SAFE, "jailbreak": {"filtered": False, "detected": False}}}]})
    out += _azure_chunk({"content": "", "refusal": None, "role": "assistant"}, None, {})
    for p in ["Low", " tide", " is", " at", " 14", ":", "05", "."]:
        out += _azure_chunk({"content": p}, None, _SAFE)
    out += _azure_chunk({}, "stop", {})
    out += _azure_chunk(None, None, {}, usage={"completion_tokens": 9, "completion_tokens_details": {
        "accepted_prediction_tokens": 0, "audio_tokens": 0, "reasoning_tokens": 0, "rejected_prediction_tokens": 0},
        "prompt_tokens": 220, "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": 0},
        "total_tokens": 229}, empty=True)
    return out + data("[DONE]")


def azure_content_filter_finish() -> str:
    out = data({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": _SAFE}]})
    out += _azure_chunk({"content": "", "refusal": None, "role": "assistant"}, None, {})
    for p in ["Here", " is", " how"]:
        out += _azure_chunk({"content": p}, None, _SAFE)
    flagged = {**_SAFE, "violence": {"filtered": True, "severity": "medium"}}
    out += _azure_chunk({}, "content_filter", flagged)
    return out + data("[DONE]")


# OpenRouter: ": OPENROUTER PROCESSING" comment lines while queued, "provider" and
# "native_finish_reason" in chunks, usage (with cost and cache_write_tokens) in the last chunk.

def _openrouter_chunk(delta: dict[str, Any], finish: str | None, native: str | None,
                      usage: dict[str, Any] | None = None) -> str:
    body: dict[str, Any] = {"id": "gen-1764547400-Hq2Zr8LmT5bV1cX9", "provider": "Anthropic",
                            "model": "anthropic/claude-sonnet-4.5", "object": "chat.completion.chunk",
                            "created": 1764547400,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                         "native_finish_reason": native, "logprobs": None}]}
    if usage is not None:
        body["usage"] = usage
    return data(body)


def openrouter_comments_and_cache_write() -> str:
    out = ": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n"
    out += _openrouter_chunk({"role": "assistant", "content": ""}, None, None)
    for p in ["All", " three", " stations", " report", " normally", "."]:
        out += _openrouter_chunk({"role": "assistant", "content": p}, None, None)
    out += ": OPENROUTER PROCESSING\n\n"
    out += _openrouter_chunk({"role": "assistant", "content": ""}, "stop", "end_turn")
    out += data({"id": "gen-1764547400-Hq2Zr8LmT5bV1cX9", "provider": "Anthropic",
                 "model": "anthropic/claude-sonnet-4.5", "object": "chat.completion.chunk", "created": 1764547400,
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                              "native_finish_reason": None, "logprobs": None}],
                 "usage": {"prompt_tokens": 5120, "completion_tokens": 12, "total_tokens": 5132, "cost": 0.00561,
                           "is_byok": False,
                           "prompt_tokens_details": {"cached_tokens": 3900, "cache_write_tokens": 1200,
                                                     "audio_tokens": 0},
                           "cost_details": {"upstream_inference_cost": None},
                           "completion_tokens_details": {"reasoning_tokens": 0, "image_tokens": 0}}})
    return out + data("[DONE]")


def openrouter_tool_call_whole_arguments() -> str:
    out = ": OPENROUTER PROCESSING\n\n"
    out += _openrouter_chunk({"role": "assistant", "content": "", "tool_calls": [
        {"index": 0, "id": "toolu_vrtx_01Hq7ZrLmT5bV1cX9kJ2", "type": "function",
         "function": {"name": "run_bash", "arguments": ""}}]}, None, None)
    out += _openrouter_chunk({"role": "assistant", "content": "", "tool_calls": [
        {"index": 0, "type": "function", "function": {"arguments": '{"command": "pytest -q tests/test_tides.py"}'}}]},
        None, None)
    out += _openrouter_chunk({"role": "assistant", "content": ""}, "tool_calls", "tool_use",
                             usage={"prompt_tokens": 1377, "completion_tokens": 40, "total_tokens": 1417,
                                    "cost": 0.004731, "is_byok": False,
                                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                                    "completion_tokens_details": {"reasoning_tokens": 0, "image_tokens": 0}})
    return out + data("[DONE]")


def local_server_no_usage() -> str:
    # llama.cpp's server: alphabetical-ish keys, no usage (stream_options ignored), no tool calls
    out = ""
    for i, p in enumerate(["Hello", "!", " The", " file", " has", " 42", " lines", "."]):
        delta = {"role": "assistant", "content": p} if i == 0 else {"content": p}
        out += data({"choices": [{"finish_reason": None, "index": 0, "delta": delta}], "created": 1764547500,
                     "id": "chatcmpl-k2J9sLq0", "model": "qwen2.5-coder-1.5b-instruct-q8_0.gguf",
                     "system_fingerprint": "b6297-8b1a5e2f", "object": "chat.completion.chunk"})
    out += data({"choices": [{"finish_reason": "stop", "index": 0, "delta": {}}], "created": 1764547500,
                 "id": "chatcmpl-k2J9sLq0", "model": "qwen2.5-coder-1.5b-instruct-q8_0.gguf",
                 "system_fingerprint": "b6297-8b1a5e2f", "object": "chat.completion.chunk"})
    return out + data("[DONE]")


# --------------------------------------------------------------- DeepSeek ----

def _ds_chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None,
              cid: str = "5f2c7b1e-8d3a-4c9f-b6e2-1a0d9c8b7e6f", model: str = "deepseek-reasoner") -> str:
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": 1764547600, "model": model,
                            "system_fingerprint": "fp_ffc7281d48_prod0820_fp8_kvcache",
                            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return data(body)


def _ds_usage(prompt: int, completion: int, hit: int, reasoning: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": hit}}
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    usage["prompt_cache_hit_tokens"] = hit
    usage["prompt_cache_miss_tokens"] = prompt - hit
    return usage


def deepseek_reasoning_cache() -> str:
    out = _ds_chunk({"role": "assistant", "content": None, "reasoning_content": ""})
    for p in ["The", " user", " wants", " the", " mean", ".", " 3", "+", "5", "=", "8", ",", " /2", " =", " 4", "."]:
        out += _ds_chunk({"content": None, "reasoning_content": p})
    for p in ["The", " mean", " is", " **", "4", "**", "."]:
        out += _ds_chunk({"content": p, "reasoning_content": None})
    # usage rides on the finishing chunk, not on a separate choices:[] chunk
    out += _ds_chunk({"content": "", "reasoning_content": None}, "stop",
                     usage=_ds_usage(1536, 48, hit=1408, reasoning=33))
    return out + data("[DONE]")


def deepseek_tool_call_keepalive() -> str:
    out = ": keep-alive\n\n: keep-alive\n\n"
    cid = "9a1b3c5d-7e9f-4a2b-8c4d-6e8f0a1b2c3d"
    out += _ds_chunk({"role": "assistant", "content": ""}, cid=cid, model="deepseek-chat")
    out += _ds_chunk({"tool_calls": [{"index": 0, "id": "call_00_Tq4Zr8LmN2bV6cX1kJ9wPq3e", "type": "function",
                                      "function": {"name": "grep", "arguments": ""}}]}, cid=cid, model="deepseek-chat")
    out += ": keep-alive\n\n"
    for p in ['{"', "pattern", '":"', "TODO", '","', "path", '":"', "app", '"}']:
        out += _ds_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}, cid=cid, model="deepseek-chat")
    out += _ds_chunk({"content": ""}, "tool_calls", usage=_ds_usage(2048, 24, hit=1920), cid=cid,
                     model="deepseek-chat")
    return out + data("[DONE]")


def deepseek_reasoning_then_tool() -> str:
    cid = "0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f"
    out = _ds_chunk({"role": "assistant", "content": None, "reasoning_content": ""}, cid=cid)
    for p in ["I", " should", " list", " the", " directory", " first", "."]:
        out += _ds_chunk({"content": None, "reasoning_content": p}, cid=cid)
    out += _ds_chunk({"content": None, "reasoning_content": None, "tool_calls": [
        {"index": 0, "id": "call_00_Hm3Ks9Ld2Qw7Ez5Rt1Yu8Io4", "type": "function",
         "function": {"name": "list_files", "arguments": ""}}]}, cid=cid)
    for p in ['{"path', '": "."', "}"]:
        out += _ds_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}, cid=cid)
    out += _ds_chunk({"content": None, "reasoning_content": None}, "tool_calls",
                     usage=_ds_usage(980, 41, hit=0, reasoning=12), cid=cid)
    return out + data("[DONE]")


# -------------------------------------------------------------- Anthropic ----

def _msg_start(mid: str, model: str, usage: dict[str, Any]) -> str:
    return event({"type": "message_start", "message": {
        "model": model, "id": mid, "type": "message", "role": "assistant", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})


def _a_usage(inp: int, read: int = 0, write: int = 0, out: int = 1) -> dict[str, Any]:
    return {"input_tokens": inp, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
            "output_tokens": out, "service_tier": "standard"}


def _block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> str:
    out = event({"type": "content_block_start", "index": index, "content_block": start})
    for d in deltas:
        out += event({"type": "content_block_delta", "index": index, "delta": d})
    return out + event({"type": "content_block_stop", "index": index})


def _text(index: int, parts: list[str]) -> str:
    return _block(index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in parts])


def _tool(index: int, tid: str, name: str, parts: list[str]) -> str:
    return _block(index, {"type": "tool_use", "id": tid, "name": name, "input": {}},
                  [{"type": "input_json_delta", "partial_json": p} for p in parts])


def _thinking(index: int, parts: list[str], signature: str) -> str:
    return _block(index, {"type": "thinking", "thinking": "", "signature": ""},
                  [{"type": "thinking_delta", "thinking": p} for p in parts]
                  + [{"type": "signature_delta", "signature": signature}])


def _msg_end(stop: str, usage: dict[str, Any]) -> str:
    return (event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage})
            + event({"type": "message_stop"}))


def _end_usage(inp: int, out: int, read: int = 0, write: int = 0) -> dict[str, Any]:
    # the current API repeats the cumulative input figures in message_delta
    return {"input_tokens": inp, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
            "output_tokens": out}


SIG = "EqQBCkYIBxgCKkAx7m1Zk9s3Qe0oWvL4p2hTn8yR6cJ5bF1dG3aK7uV0iX9wE2rT4yU6iO8pA1sD3fG5hJ7kL9zX1cV3bN5mQ0wEgwZ5oT0pL3kQ8rN2vYaDF7a"


def anthropic_text() -> str:
    out = _msg_start("msg_01TgQm8Zr3LkV5bN1cX7wP2e", "claude-sonnet-4-5-20250929", _a_usage(1210))
    out += event({"type": "ping"})
    out += _text(0, ["The", " high", " water mark", " was", " 6.1 m at Brest", "."])
    return out + _msg_end("end_turn", _end_usage(1210, 14))


def anthropic_thinking_signature() -> str:
    out = _msg_start("msg_01Hq2Zr8LmT5bV1cX9kJ4wPe", "claude-sonnet-4-5-20250929", _a_usage(845))
    out += event({"type": "ping"})
    out += _thinking(0, ["The user asks", " for the tidal range.", " 6.1 - 0.9 = 5.2."], SIG)
    out += _text(1, ["The", " tidal range", " is", " 5.2 m."])
    return out + _msg_end("end_turn", _end_usage(845, 62))


def anthropic_redacted_thinking_tool() -> str:
    out = _msg_start("msg_01Rd4Ks9Lq2Mw7Ez5Tt1Yu8I", "claude-3-7-sonnet-20250219", _a_usage(2301))
    out += event({"type": "ping"})
    out += _thinking(0, ["I need", " the log first."], SIG)
    out += _block(1, {"type": "redacted_thinking",
                      "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB8URj2pLmODBiHPdDzCFK+zsBoz"},
                  [])
    out += _tool(2, "toolu_01Vb6Hm0Yc3Lr5Nw2Qe8Tz4K", "read_file", ["", '{"path": "lo', 'gs/app.log", "limit": ', "200}"])
    return out + _msg_end("tool_use", _end_usage(2301, 118))


def anthropic_tool_use_split() -> str:
    out = _msg_start("msg_01Ks1Vb6Hm0Yc3Lr5Nw2Qe8T", "claude-sonnet-4-5-20250929", _a_usage(3012, read=2816))
    out += event({"type": "ping"})
    out += _text(0, ["I'll", " search", " for the failing test."])
    out += _tool(1, "toolu_01Ez5Rt1Yu8Io4Hm3Ks9Ld2Q", "grep",
                 ["", '{"pattern"', ': "test_tide', '_range", "pa', 'th": "tests"}'])
    return out + _msg_end("tool_use", _end_usage(3012, 71, read=2816))


def anthropic_parallel_tools() -> str:
    out = _msg_start("msg_01Pz8Mq3Lk6Vn1Wb4Xc7Tr2Y", "claude-opus-4-5-20251101", _a_usage(1502, write=1400))
    out += event({"type": "ping"})
    out += _tool(0, "toolu_01Aq7Zr1LmN3bV5cX8kJ2wPq", "read_file", ["", '{"path": "a.py"}'])
    out += _tool(1, "toolu_01Wm4Tq9Hs2Kd6Fy1Bn8Lc3V", "read_file", ["", '{"path": ', '"b.py"}'])
    return out + _msg_end("tool_use", _end_usage(1502, 90, write=1400))


def anthropic_overloaded_midstream() -> str:
    out = _msg_start("msg_01Ov3Ld2Qw7Ez5Rt1Yu8Io4H", "claude-sonnet-4-5-20250929", _a_usage(640))
    out += event({"type": "ping"})
    out += event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    out += event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Checking"}})
    return out + event({"type": "error", "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"}})


def anthropic_max_tokens_in_tool() -> str:
    out = _msg_start("msg_01Mx7Tk0Lq4Zr9Vb2Nc6Hs1W", "claude-haiku-4-5-20251001", _a_usage(920))
    out += event({"type": "ping"})
    out += _text(0, ["Writing", " the report", "."])
    out += _tool(1, "toolu_01Cx8Vn2Mb5Lk7Jh3Gf9Ds4A", "write_file",
                 ["", '{"path": "report.md", ', '"content": "# Tides\\n\\n', "| station | height |\\n", "| Brest | 6.1 |\\n| Cher"])
    return out + _msg_end("max_tokens", _end_usage(920, 64))


def anthropic_cache_usage() -> str:
    out = _msg_start("msg_01Cu5Rt1Yu8Io4Hm3Ks9Ld2Q", "claude-sonnet-4-5-20250929",
                     _a_usage(34, read=18240, write=1536))
    out += event({"type": "ping"})
    out += _text(0, ["Done", "."])
    return out + _msg_end("end_turn", _end_usage(34, 5, read=18240, write=1536))


def anthropic_no_final_newline() -> str:
    return anthropic_text().rstrip("\n")


def anthropic_refusal() -> str:
    out = _msg_start("msg_01Rf2Lk6Vn1Wb4Xc7Tr2Ys5P", "claude-sonnet-4-5-20250929", _a_usage(300))
    out += event({"type": "ping"})
    out += _text(0, ["I can't", " help with that."])
    return out + _msg_end("refusal", _end_usage(300, 9))


def deepseek_anthropic_endpoint() -> str:
    # api.deepseek.com/anthropic: same events, no ping, no signature on thinking, no cache fields
    out = event({"type": "message_start", "message": {
        "id": "7d6c5b4a-3f2e-4d1c-9b8a-7f6e5d4c3b2a", "type": "message", "role": "assistant",
        "model": "deepseek-reasoner", "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 402, "output_tokens": 0}}})
    out += _block(0, {"type": "thinking", "thinking": ""},
                  [{"type": "thinking_delta", "thinking": p} for p in ["Simple", " question."]])
    out += _text(1, ["Yes", ", it", " is", "."])
    return out + (event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                         "usage": {"output_tokens": 17}})
                  + event({"type": "message_stop"}))


STREAMS: dict[str, dict[str, Any]] = {
    "openai": {
        "text-basic": openai_text_basic, "tool-call-split": openai_tool_call_split,
        "parallel-tool-calls": openai_parallel_tool_calls, "refusal": openai_refusal,
        "length-in-tool-call": openai_length_in_tool_call, "text-then-tool": openai_text_then_tool,
        "no-final-newline": openai_no_final_newline, "midstream-error": openai_midstream_error,
        "azure-content-filter-chunks": azure_content_filter_chunks,
        "azure-content-filter-finish": azure_content_filter_finish,
        "openrouter-comments-cache-write": openrouter_comments_and_cache_write,
        "openrouter-tool-call-whole-arguments": openrouter_tool_call_whole_arguments,
        "local-server-no-usage": local_server_no_usage,
    },
    "deepseek": {
        "reasoning-cache": deepseek_reasoning_cache, "tool-call-keepalive": deepseek_tool_call_keepalive,
        "reasoning-then-tool": deepseek_reasoning_then_tool,
    },
    "anthropic": {
        "text": anthropic_text, "thinking-signature": anthropic_thinking_signature,
        "redacted-thinking-tool": anthropic_redacted_thinking_tool, "tool-use-split": anthropic_tool_use_split,
        "parallel-tools": anthropic_parallel_tools, "overloaded-midstream": anthropic_overloaded_midstream,
        "max-tokens-in-tool": anthropic_max_tokens_in_tool, "cache-usage": anthropic_cache_usage,
        "no-final-newline": anthropic_no_final_newline, "refusal": anthropic_refusal,
        "deepseek-anthropic-endpoint": deepseek_anthropic_endpoint,
    },
}


def main() -> None:
    for protocol, streams in STREAMS.items():
        folder = HERE / protocol
        folder.mkdir(exist_ok=True)
        for name, build in streams.items():
            (folder / f"{name}.sse").write_bytes(build().encode("utf-8"))


if __name__ == "__main__":
    main()

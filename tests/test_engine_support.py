"""Shared helpers for the engine integration tests (no tests here).

Everything is about what a user (or the server) would notice: the bodies the
fake server received, the events, the transcript on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from fake_llm_server import (
    Reply,
    anthropic_error_body,
    anthropic_text,
    anthropic_tool_calls,
    http_error,
    openai_error_body,
    openai_text,
    openai_tool_calls,
)

from fake_responses_server import responses_failed, responses_text, responses_tool_calls

from app.context.tokens import encoder
from app.context.validate import history_problems
from app.kernel.messages import Message
from app.session.transcript import read_transcript

PROTOCOLS = ["openai", "anthropic"]


def protocol_of(provider: str) -> str:
    if provider in ("anthropic", "responses"):
        return provider
    return "openai"


# ---- replies in either protocol ----

def text_reply(provider: str, text: str, usage: Any = "default") -> Reply:
    kwargs = {} if usage == "default" else {"usage": usage}
    if protocol_of(provider) == "anthropic":
        return anthropic_text(text, **kwargs)
    if protocol_of(provider) == "responses":
        return responses_text(text, **kwargs)
    return openai_text(text, **kwargs)


def tool_reply(provider: str, calls: list[tuple], usage: Any = "default") -> Reply:
    kwargs = {} if usage == "default" else {"usage": usage}
    if protocol_of(provider) == "anthropic":
        return anthropic_tool_calls(calls, **kwargs)
    if protocol_of(provider) == "responses":
        return responses_tool_calls(calls, reasoning="", **kwargs)  # gpt-5 style: a reasoning item first
    return openai_tool_calls(calls, **kwargs)


def server_error(provider: str, status: int = 500) -> Reply:
    if protocol_of(provider) == "anthropic":
        return http_error(status, anthropic_error_body("api_error", "Internal server error (fake)"))
    return http_error(status, openai_error_body("The server had an error (fake)", type="server_error"))


def too_long_error(provider: str, actual: int | None = None, limit: int | None = None) -> Reply:
    """The too-long rejection each provider really sends."""
    if provider == "anthropic":
        message = (f"prompt is too long: {actual} tokens > {limit} maximum" if actual is not None
                   else "prompt is too long")
        return http_error(400, anthropic_error_body("invalid_request_error", message))
    if provider == "responses":  # the Responses API says it without numbers, inside the stream
        return responses_failed("context_length_exceeded", "Your input exceeds the context window of this model. "
                                                           "Please adjust your input and try again.")
    if actual is None:
        return http_error(400, openai_error_body("Your input exceeds the context window of this model",
                                                 type="invalid_request_error", code="context_length_exceeded"))
    message = (f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
               f"{actual} tokens. Please reduce the length of the messages.")
    if provider == "deepseek":  # DeepSeek: OpenAI's words, code invalid_request_error
        return http_error(400, openai_error_body(message, type="invalid_request_error",
                                                 code="invalid_request_error"))
    return http_error(400, openai_error_body(message, type="invalid_request_error",
                                             code="context_length_exceeded"))


def usage_for(provider: str, body: dict, output: int = 20) -> dict[str, int]:
    """Usage as a server would report it for this request (counted with tiktoken)."""
    prompt = request_tokens(body)
    if protocol_of(provider) in ("anthropic", "responses"):
        return {"input": prompt, "output": output}
    return {"prompt": prompt, "completion": output}


def counted(provider: str, build: Callable[[Any], Reply]) -> Callable[[dict, str], Reply]:
    """A reply handler whose usage is counted from the request it answers.

    ``build(usage)`` makes the reply with that usage.
    """
    def handler(body: dict, path: str) -> Reply:
        return build(usage_for(provider, body))
    return handler


# ---- reading what the server received ----

def is_compaction(body: dict) -> bool:
    return body.get("tool_choice") in ("none", {"type": "none"})


def bodies(fake) -> list[dict]:
    return [r.json for r in fake.requests]


def main_bodies(fake) -> list[dict]:
    return [b for b in bodies(fake) if not is_compaction(b)]


def compaction_bodies(fake) -> list[dict]:
    return [b for b in bodies(fake) if is_compaction(b)]


def wire_messages(body: dict) -> list[dict]:
    """The conversation messages (OpenAI's system message left out)."""
    return [m for m in body["messages"] if m.get("role") != "system"]


def system_text(body: dict) -> str:
    if "system" in body:  # Anthropic: a string or a list of text blocks
        system = body["system"]
        return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)
    return "".join(m["content"] for m in body["messages"] if m.get("role") == "system")


def all_text(value: Any) -> str:
    """Every string inside a JSON value (keys and block types left out), joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(all_text(v) for k, v in value.items() if k != "type")
    if isinstance(value, list):
        return "\n".join(all_text(v) for v in value)
    return ""


def request_tokens(body: dict) -> int:
    """Size of a request the way a server would count it: every string in the
    system prompt, the messages and the tools, plus a little framing per message."""
    parts = [body.get("system", ""), body.get("messages", []), body.get("tools", [])]
    if "input" in body:  # Responses: instructions + input items
        parts += [body.get("instructions", ""), body["input"]]
    # The encoder's own count (what ``count_tokens`` gives, special tokens as ordinary text), not
    # ``count_tokens``: a whole request is a new text each time, and count_tokens would also teach
    # its pieces to the running session's table (a split and a lookup per piece, a third of
    # the count), as if the session had counted it. What tidegauge counts stays its own.
    return len(encoder().encode_ordinary(all_text(parts))) + 4 * len(body.get("messages", body.get("input", [])))


def tool_outputs(body: dict) -> list[str]:
    """The tool results of a request, in order, as text."""
    out: list[str] = []
    for m in body["messages"]:
        if m.get("role") == "tool":
            out.append(m["content"] if isinstance(m["content"], str) else all_text(m["content"]))
        elif m.get("role") == "user" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    c = b.get("content")
                    out.append(c if isinstance(c, str) else all_text(c))
    return out


def wire_problems(body: dict, provider: str) -> list[str]:
    """What makes this request body invalid for its wire protocol ([] when valid)."""
    if protocol_of(provider) == "anthropic":
        return _anthropic_problems(body)
    if protocol_of(provider) == "responses":
        return _responses_problems(body)
    return _openai_problems(body)


def _openai_problems(body: dict) -> list[str]:
    problems: list[str] = []
    msgs = body["messages"]
    convo = [m for m in msgs if m["role"] != "system"]
    if any(m["role"] == "system" for m in msgs[1:]):
        problems.append("system message not first")
    if not convo or convo[0]["role"] != "user":
        problems.append("the conversation does not start with a user message")
    if convo and convo[-1]["role"] not in ("user", "tool"):
        problems.append(f"the request ends with {convo[-1]['role']}")
    i = 0
    while i < len(convo):
        m = convo[i]
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            answers = []
            j = i + 1
            while j < len(convo) and convo[j]["role"] == "tool":
                answers.append(convo[j]["tool_call_id"])
                j += 1
            if answers != ids:
                problems.append(f"message {i}: tool_calls {ids} answered by {answers}")
            i = j
            continue
        if m["role"] == "tool":
            problems.append(f"message {i}: tool message {m.get('tool_call_id')} without its tool_calls")
        elif m["role"] == "assistant" and not (m.get("content") or "").strip():
            problems.append(f"message {i}: empty assistant message")
        elif m["role"] == "user" and not (m.get("content") or "").strip():
            problems.append(f"message {i}: empty user message")
        if i > 0 and m["role"] == convo[i - 1]["role"] == "assistant":
            problems.append(f"message {i}: two assistant messages in a row")
        i += 1
    return problems


def _responses_problems(body: dict) -> list[str]:
    """A stateless Responses input: every function_call answered by its output before the next
    message, no output without its call, reasoning items carry their encrypted content, the
    input ends with what the model should answer (a user message or tool outputs)."""
    problems: list[str] = []
    items = body["input"]
    if not items:
        return ["the input is empty"]
    if body.get("store") is not False or "reasoning.encrypted_content" not in body.get("include", []):
        problems.append("not stateless: store must be false with reasoning.encrypted_content included")
    open_calls: list[str] = []
    seen_calls: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            if item["call_id"] in seen_calls:
                problems.append(f"item {i}: duplicate call_id {item['call_id']}")
            seen_calls.add(item["call_id"])
            open_calls.append(item["call_id"])
            if not isinstance(json.loads(item["arguments"]), dict):
                problems.append(f"item {i}: arguments not a JSON object")
        elif kind == "function_call_output":
            if item["call_id"] not in open_calls:
                problems.append(f"item {i}: output for {item['call_id']}, which is not an open call")
            else:
                open_calls.remove(item["call_id"])
        elif kind == "message":
            if open_calls:
                problems.append(f"item {i}: a message while calls {open_calls} are unanswered")
            content = item.get("content")
            text = content if isinstance(content, str) else all_text(content)
            if not text.strip():
                problems.append(f"item {i}: empty message")
        elif kind == "reasoning" and not item.get("encrypted_content"):
            problems.append(f"item {i}: reasoning item without encrypted_content")
        elif kind == "compaction" and i != 0:
            problems.append(f"item {i}: something is sent before the compaction item")
    if open_calls:
        problems.append(f"calls {open_calls} never answered")
    last = items[-1]
    if not (last.get("type") == "function_call_output" or last.get("role") == "user"):
        problems.append("the input does not end with a user message or a tool output")
    return problems


def _anthropic_problems(body: dict) -> list[str]:
    problems: list[str] = []
    msgs = body["messages"]
    if not msgs or msgs[0]["role"] != "user":
        problems.append("the conversation does not start with a user message")
    if msgs and msgs[-1]["role"] != "user":
        problems.append("the request does not end with a user message")
    for i, m in enumerate(msgs):
        if i > 0 and m["role"] == msgs[i - 1]["role"]:
            problems.append(f"message {i}: two {m['role']} messages in a row")
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not blocks:
            problems.append(f"message {i}: empty content")
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if m["role"] == "assistant":
            if results:
                problems.append(f"message {i}: tool_result in an assistant message")
            if uses:
                nxt = msgs[i + 1] if i + 1 < len(msgs) else None
                nxt_blocks = [] if nxt is None or isinstance(nxt["content"], str) else nxt["content"]
                answered = [b.get("tool_use_id") for b in nxt_blocks if b.get("type") == "tool_result"]
                if sorted(answered) != sorted(uses):
                    problems.append(f"message {i}: tool_use {uses} answered by {answered}")
        else:
            if uses:
                problems.append(f"message {i}: tool_use in a user message")
            prev = msgs[i - 1] if i > 0 else None
            prev_blocks = [] if prev is None or isinstance(prev["content"], str) else prev["content"]
            asked = {b["id"] for b in prev_blocks if b.get("type") == "tool_use"}
            if any(r not in asked for r in results):
                problems.append(f"message {i}: tool_result {results} answers none of {sorted(asked)}")
            # tool_result blocks come first in the user message
            kinds = [b.get("type") for b in blocks]
            if kinds[:len(results)] != ["tool_result"] * len(results):
                problems.append(f"message {i}: a tool_result comes after other content")
        for b in blocks:
            if b.get("type") == "text" and not b.get("text", "").strip():
                problems.append(f"message {i}: empty text block")
    return problems


# ---- history and disk ----

def dump(history: list[Message]) -> list[dict]:
    return [m.model_dump() for m in history]


def next_request_problems(history: list[Message]) -> list[str]:
    """Problems of the request a next user message would make (merged into a trailing user message)."""
    if history and history[-1].role == "user":
        return history_problems(history)
    return history_problems(history + [Message.user("next")])


def transcript_path(tmp_path: Path) -> Path:
    paths = list((tmp_path / "data").rglob("transcript.jsonl"))
    assert len(paths) == 1, paths
    return paths[0]


def transcript_messages(tmp_path: Path) -> list[Message]:
    """Every message the session's transcript holds: appended ones and those of history snapshots."""
    result = read_transcript(transcript_path(tmp_path))
    out: list[Message] = []
    for line in result.lines:
        if line.kind == "message":
            out.append(line.message)
        elif line.kind == "history":
            out.extend(line.messages)
    return out


def transcript_text(tmp_path: Path) -> str:
    return transcript_path(tmp_path).read_text(encoding="utf-8")


def write_words(path: Path, n_words: int, tag: str) -> str:
    """A text file of about ``n_words`` tokens, tagged so it can be found in requests."""
    words = [f"{tag}{i % 97}" for i in range(n_words)]
    lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    text = f"BEGIN {tag}\n" + "\n".join(lines) + f"\nEND {tag}\n"
    path.write_text(text, encoding="utf-8")
    return text


def summary_text(label: str = "S") -> str:
    return (f"## Task goal and acceptance criteria\nsummary-{label}: finish the task\n"
            "## Done so far\nread the files\n## Key findings\nnone\n"
            "## In progress / next step\ncontinue\n## User preferences\nnone")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)

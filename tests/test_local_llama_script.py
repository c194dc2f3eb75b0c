"""benchmarks/local_llama.py without llama installed: its adapter, its wiring of tidegauge and its
verdict, against a loopback server that answers like llama-cpp-python does without streaming
(one whole JSON reply with usage), and its one-line errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import local_llama as ll  # noqa: E402

Answer = Callable[[dict[str, Any]], dict[str, Any]]


class _WholeJsonServer(ThreadingHTTPServer):
    daemon_threads = True
    answer: Answer
    bodies: list[dict[str, Any]]


class _WholeJsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _WholeJsonServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        data = json.dumps(self.server.answer(body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def upstream() -> Iterator[_WholeJsonServer]:
    server = _WholeJsonServer(("127.0.0.1", 0), _WholeJsonHandler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _url(server: _WholeJsonServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


def _completion(message: dict[str, Any], finish: str, prompt: int = 321) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7}}


def _tool_call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return _completion({"content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]},
        "tool_calls")


def test_adapter_refuses_a_request_without_the_runs_token(upstream):
    upstream.answer = lambda body: _completion({"content": "hi"}, "stop")
    adapter = ll.start_adapter(_url(upstream), "run-token")
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        for headers in ({}, {"Authorization": "Bearer other"}, {"Authorization": "run-token"}):
            response = httpx.post(adapter.url + "/v1/chat/completions", json=body, headers=headers)
            assert response.status_code == 401, response.text
        assert adapter.exchanges == [] and upstream.bodies == []  # nothing reached the figures or the server
    finally:
        adapter.close()


def test_adapter_asks_for_a_whole_reply_and_drops_usage_as_a_stream_would(upstream):
    upstream.answer = lambda body: _completion({"content": "hi"}, "stop", prompt=40)
    adapter = ll.start_adapter(_url(upstream), "run-token")
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "stream_options": {"include_usage": True}}
        response = httpx.post(adapter.url + "/v1/chat/completions", json=body,
                              headers={"Authorization": "Bearer run-token"})
        assert response.status_code == 200
        assert "usage" not in response.json()
        assert response.json()["choices"][0]["message"]["content"] == "hi"
        assert upstream.bodies[0]["stream"] is False and "stream_options" not in upstream.bodies[0]
        assert adapter.exchanges[0].request == body and adapter.exchanges[0].prompt_tokens == 40
        # a body announced past the cap is refused before it is read
        host, port = adapter.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer run-token\r\n"
                         b"Content-Length: %d\r\n\r\n{" % (ll.MAX_REQUEST_BYTES + 1))
            assert conn.recv(64).startswith(b"HTTP/1.1 413")
        assert len(adapter.exchanges) == 1
    finally:
        adapter.close()


def test_adapter_sends_tool_results_as_user_turns_the_template_renders(upstream):
    """llama-cpp-python's chatml-function-calling template renders a tool message empty: the adapter
    sends its text as a user turn, unless --raw-tool-results; what tidegauge sent is recorded as sent."""
    upstream.answer = lambda body: _completion({"content": "ok"}, "stop")
    body = {"model": "m", "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "notes.txt\ntodo.txt"}]}
    for raw in (False, True):
        adapter = ll.start_adapter(_url(upstream), "run-token", raw_tool_results=raw)
        try:
            response = httpx.post(adapter.url + "/v1/chat/completions", json=body,
                                  headers={"Authorization": "Bearer run-token"})
            assert response.status_code == 200, response.text
            assert adapter.exchanges[0].request == body
            assert adapter.exchanges[0].tool_results_rewritten == (0 if raw else 1)
        finally:
            adapter.close()
    rewritten, raw_sent = upstream.bodies[-2]["messages"][-1], upstream.bodies[-1]["messages"][-1]
    assert rewritten == {"role": "user", "content": "notes.txt\ntodo.txt"}
    assert raw_sent == body["messages"][-1]


def test_tidegauge_through_the_adapter_gives_tool_calls_compaction_and_gauge_figures(upstream, tmp_path):
    """The real tidegauge process, with the script's own command and environment: three tool calls
    that push the context over the budget (below the compaction floor: the floor is the line), a
    compaction, then an answer."""
    main_replies = iter([_tool_call("read_file", {"path": "notes.txt"}, 1),
                         _tool_call("run_bash", {"command": "rm -rf ~"}, 2),
                         _tool_call("list_files", {}, 3),
                         _completion({"content": "Three tasks are open."}, "stop")])

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tool_choice") == "none":  # the compaction call
            return _completion({"content": "Task: list the open tasks in todo.txt. Done: read notes.txt."}, "stop")
        return next(main_replies)

    upstream.answer = answer
    adapter = ll.start_adapter(_url(upstream), "run-token")
    work = tmp_path / "work"
    ll.write_workspace(work)
    try:
        exit_code, events, stderr = ll.run_tidegauge(
            ll.tidegauge_command(adapter.url + "/v1", window=4096, budget=1000, max_steps=6), work,
            ll.tidegauge_env(tmp_path, "run-token", 512), timeout=120)
        run = ll.collect(events, list(adapter.exchanges), exit_code, lambda text: len(text) // 4)
    finally:
        adapter.close()
    assert exit_code == 0, stderr
    assert [c.split("(")[0] for c in run.tool_calls] == ["read_file", "run_bash", "list_files"]
    refused = [e for e in events if e["type"] == "tool_result" and e["name"] == "run_bash"]
    assert refused[0]["is_error"] and "refused" in refused[0]["content"]  # no --yes: nothing was run
    assert [r.number for r in run.requests] == [1, 2, 3, 4]
    assert all(r.server_prompt == 321 for r in run.requests)
    assert run.compactions and all(c.ok and c.trigger == "auto" for c in run.compactions)
    compaction = run.compactions[0]
    assert compaction.gauge_after < compaction.gauge_before
    assert compaction.server_before == compaction.server_after == 321  # what this fake server reports
    assert compaction.tokenizer_after is not None and compaction.tokenizer_before is not None
    # tidegauge sends "" for a turn of tool calls alone (a null content: HTTP 500 from
    # llama-cpp-python): the adapter, which would rewrite a null, had none to rewrite
    assert run.nulls_rewritten == 0
    assert all(m.get("content") is not None for body in upstream.bodies for m in body["messages"])
    report = ll.format_report(run, [])
    assert "read_file(" in report and "compaction (auto, ok)" in report and report.endswith("PASS")


def _run_figures(gauge: int, server_prompt: int, compaction_after: int = 1200, calls: int = 1) -> ll.RunFigures:
    return ll.RunFigures(
        requests=[ll.RequestFigures(number=1, gauge=1000, tokenizer=1100, server_prompt=1000, messages=2),
                  ll.RequestFigures(number=2, gauge=gauge, tokenizer=1500, server_prompt=server_prompt, messages=4,
                                    calls=calls)],
        compactions=[ll.CompactionFigures(trigger="auto", ok=True, gauge_before=2000, gauge_after=compaction_after,
                                          messages_before=6, messages_after=2, server_before=1900, server_after=1300)])


def test_verdict_holds_within_ten_percent_of_the_servers_prompt_and_names_the_request_outside_it():
    assert ll.verdict(_run_figures(gauge=1090, server_prompt=1000)) == []
    assert ll.verdict(_run_figures(gauge=910, server_prompt=1000)) == []
    reasons = ll.verdict(_run_figures(gauge=1120, server_prompt=1000))
    assert reasons == ["request 2: gauge 1,120 vs server prompt 1,000 (+12.0%, limit ±10%)"]
    # two tool calls in one reply: the server's prompt_tokens is their sum, not the prompt's size
    summed = _run_figures(gauge=1000, server_prompt=2000, calls=2)
    assert ll.verdict(summed) == []
    assert "n/a (2 calls)" in ll.format_report(summed, [])


def test_verdict_holds_the_first_request_only_when_no_figure_ever_reached_tidegauge():
    """Before the server's first figure the gauge is tidegauge's own cl100k estimate: shown, not held,
    while later requests are; with usage dropped throughout, every request is held."""
    run = _run_figures(gauge=1050, server_prompt=1000)
    run.requests[0].gauge, run.requests[0].informed = 1210, False
    assert ll.verdict(run) == []
    assert "   none" in ll.format_report(run, [])
    for request in run.requests:
        request.informed = False
    assert ll.verdict(run) == ["request 1: gauge 1,210 vs server prompt 1,000 (+21.0%, limit ±10%)"]
    usage_lines: list[dict[str, Any]] = [{"type": "usage", "agent": "main", "context_tokens": None},  # no usage
                                         {"type": "usage", "agent": "main", "context_tokens": 500},
                                         {"type": "usage", "agent": "compact", "context_tokens": 90},
                                         {"type": "usage", "agent": "main", "context_tokens": 600}]
    assert ll.informed_requests(usage_lines) == [False, False, True]


def test_verdict_fails_when_no_compaction_shrank_the_context():
    reasons = ll.verdict(_run_figures(gauge=1000, server_prompt=1000, compaction_after=2000))
    assert reasons == ["no compaction shrank the context by the gauge (compactions: auto ok=True 2000->2000)"]
    grew = _run_figures(gauge=1000, server_prompt=1000)
    grew.compactions[0].server_after = 2500
    assert ll.verdict(grew) == ["no compaction shrank the prompt the server evaluated (1900->2500)"]
    no_compaction = ll.RunFigures(requests=_run_figures(1000, 1000).requests)
    assert ll.verdict(no_compaction) == ["no compaction shrank the context by the gauge (compactions: none)"]
    assert "FAIL: no compaction" in ll.format_report(no_compaction, ll.verdict(no_compaction))


def test_request_text_carries_everything_the_gauge_counts():
    body = {"tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                                         "parameters": {"type": "object"}}}],
            "messages": [{"role": "system", "content": "You are tidegauge."},
                         {"role": "user", "content": [{"type": "text", "text": "read a.txt"}]},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "read_file",
                                                                           "arguments": "{\"path\": \"a.txt\"}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "hello from a.txt"}]}
    text = ll.request_text(body)
    for piece in ("You are tidegauge.", "Read a file.", "read a.txt", "functions.read_file:\n{\"path\": \"a.txt\"}",
                  "<|im_start|>tool\nhello from a.txt<|im_end|>"):
        assert piece in text
    assert text.endswith("<|im_start|>assistant\n")


def test_find_gguf_and_missing_requirements_say_what_is_missing(tmp_path):
    with pytest.raises(ll.CannotRun, match="no .gguf file under"):
        ll.find_gguf(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "smollm2.gguf").write_bytes(b"GGUF")
    assert ll.find_gguf(tmp_path) == tmp_path / "model" / "smollm2.gguf"
    assert ll.missing_requirements({"json": "stdlib", "no_such_module_here.sub": "some-package[extra]",
                                    "no_such_module_either": "some-package[extra]"}) == ["some-package[extra]"]


def test_script_refuses_a_bad_argument_in_one_line(tmp_path):
    for args, words in ((["--gguf", str(tmp_path / "none.gguf")], "none.gguf: no such file"),
                        (["--budget", "0"], "--budget must be at least 1")):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "local_llama.py"), *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr

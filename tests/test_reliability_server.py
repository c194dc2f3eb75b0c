"""Reliability probes: a server that cannot be trusted, and resources that stay bounded.

Real providers over real sockets on 127.0.0.1 (the scripted server, or a tiny
one written here when the script cannot express the misbehaviour), and the real
``tidegauge -p`` process where the user-visible outcome is the exit code and
the one line on stderr (one real run per kind of failure; its variations run the same CLI
in-process, tests/cli_in_process.py).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Iterator

import pytest

from cli_in_process import run_cli
from fake_llm_server import Reply, http_error, openai_text, openai_tool_calls, rechunk, run_stream

from app.kernel.messages import Message
from app.providers.base import ModelRequest
from app.providers.sse import DeadlineError, LimitExceededError, StreamLimits

REPO = Path(__file__).resolve().parents[1]
API_KEY = "sk-test-server-probes-1618033988"


def request() -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[Message.user("hi")], tools=[])


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items()
                 if not k.startswith("TIDEGAUGE_") and not k.endswith("_API_KEY")}
    variables.update(TIDEGAUGE_DATA_DIR=str(tmp_path / "data"), TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"),
                     OPENAI_API_KEY=API_KEY, PYTHONUNBUFFERED="1")
    return variables


def cli(base_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "app", "--provider", "openai", "--model", "fake-model",
            "--base-url", base_url, *args]


def tidegauge(base_url: str, env: dict[str, str], cwd: Path, *args: str,
              real_process: bool = True) -> subprocess.CompletedProcess[str]:
    """``tidegauge -p`` against ``base_url``: the real process, or with ``real_process=False`` the
    same CLI in this process with exactly ``env`` (tests/cli_in_process.py), for a variation on what
    a real run in the same test group already showed (a ``python -m app`` start is ~0.5 CPU-s)."""
    if not real_process:
        return run_cli(cli(base_url, *args)[3:], cwd=cwd, env=env)
    return subprocess.run(cli(base_url, *args), env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


# ---------------------------------------------------------------- huge replies

# Peak resident memory from VmHWM: per address space, so it starts afresh at exec (ru_maxrss
# would carry over the parent's peak, and the parent holds the whole scripted reply).
STREAM_CHILD = r"""
import asyncio, os, sys, time
from app.kernel.messages import Message
from app.providers.base import Completed, ModelRequest
from app.providers.factory import create_provider

async def main():
    provider = create_provider("openai", "fake-model", sys.argv[1], "sk-test-child-key-0123456789")
    started = time.process_time()
    chars = 0
    async for event in provider.stream(ModelRequest(system="s", messages=[Message.user("hi")], tools=[])):
        if isinstance(event, Completed):
            chars = len(event.message.text)
    elapsed = time.process_time() - started
    await provider.aclose()
    peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(chars, elapsed, peak_kb // 1024)

asyncio.run(main())
"""

PIECE = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n"  # 56 characters a delta


def _stream_in_child(fake_llm, megabytes: int) -> tuple[int, float, int]:
    """(characters assembled, CPU seconds, peak resident MB) of a child consuming a streamed reply.

    CPU seconds of the consumer, not wall time: on a loaded machine (both cores busy) the
    wall time of one run against another varied by more than the 2x this test allows
    (5 MB in 2.3 s, 20 MB in 19.4 s: 8.4x), while an algorithm that grows with the reply
    shows in the CPU time it burns whatever else runs."""
    count = megabytes * 1024 * 1024 // len(PIECE)
    # Every delta's frame is the same bytes: one frame repeated instead of encoding 375,000 equal
    # chunks (seconds of the test's own CPU); the wire carries exactly what openai_text would send.
    head, delta, *tail = openai_text([PIECE]).events
    fake_llm.enqueue(rechunk(Reply(events=[head, *[delta] * count, *tail]), [256 * 1024]))
    done = subprocess.run([sys.executable, "-c", STREAM_CHILD, fake_llm.base_url("openai")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    chars, seconds, peak = done.stdout.split()
    assert int(chars) == count * len(PIECE)
    return int(chars), float(seconds), int(peak)


@pytest.mark.timeout(900)
def test_deltas_grow_resident_memory_and_time_linearly_with_the_reply(fake_llm) -> None:
    """2 MB then 8 MB of 56-character deltas (the property 20 MB showed, at a fifth of the CPU).

    Memory as growth per megabyte of reply, not a total, so the interpreter's own ~45 MB does
    not hide on smaller data what is kept per delta (measured 2 -> 8 MB: 52 -> 73 MB resident,
    3.5 MB a megabyte of reply)."""
    small_chars, small_time, small_peak = _stream_in_child(fake_llm, 2)
    chars, big_time, big_peak = _stream_in_child(fake_llm, 8)
    assert chars >= 8 * 1024 * 1024 * 0.99
    growth_per_mb = (big_peak - small_peak) / ((chars - small_chars) / (1024 * 1024))
    # 7.8 MB a megabyte is what the earlier bound allowed: under 200 MB for 20 MB over ~45 MB.
    assert growth_per_mb < 7.8, f"{small_peak} -> {big_peak} MB resident for 2 -> 8 MB of deltas"
    assert big_peak < 200, f"{big_peak} MB resident for 8 MB of deltas"
    # 4x the data: linear is ~4x the time; the quadratic assembly this guards against was ~16x.
    assert big_time / small_time < 8, (small_time, big_time)


async def test_one_unterminated_sse_line_is_cut_at_the_limit(fake_llm) -> None:
    blob = b"data: " + b"x" * (16 * 1024 * 1024)  # never a newline
    fake_llm.enqueue(Reply(events=[blob], chunk_sizes=[64 * 1024], ending="abort"))
    provider = fake_llm.provider("openai")
    provider.limits = StreamLimits(max_sse_line=1024 * 1024)
    result = await run_stream(provider, request())
    await provider.aclose()
    assert isinstance(result.error, LimitExceededError)
    assert "max_sse_line" in str(result.error) and not result.error.retryable


@functools.cache
def _gzip_bomb() -> bytes:
    """64 KB that inflate to one 64 MiB line (an event's, or a body no cap lets through whole):
    compressed once per process, the compression being most of a test's CPU."""
    return gzip.compress(b"data: " + b"x" * (64 * 1024 * 1024), compresslevel=9)


async def test_a_compressed_body_is_capped_after_decompression(fake_llm) -> None:
    """A 64 KB gzip bomb (64 MiB inflated) against a 4 MiB cap: refused, and never inflated much past
    the cap (httpx inflated each network chunk whole, 144 MiB at the peak here, before the cap looked)."""
    fake_llm.enqueue(Reply(body=_gzip_bomb(), content_type="application/json", headers={"Content-Encoding": "gzip"}))
    provider = fake_llm.provider("openai")
    provider.limits = StreamLimits(max_body=4 * 1024 * 1024)
    tracemalloc.start()
    try:
        result = await run_stream(provider, request())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    await provider.aclose()
    assert isinstance(result.error, LimitExceededError)
    assert "max_response_body" in str(result.error) and "decompressed" in str(result.error)
    assert peak < 4 * provider.limits.max_body, f"{peak / 2**20:.0f} MiB held for a 4 MiB cap"


@pytest.mark.parametrize(("encoding", "compress"), [
    ("gzip", gzip.compress), ("deflate", zlib.compress),
    ("deflate", lambda data: zlib.compress(data)[2:-4])],  # raw deflate, as some servers send it
    ids=["gzip", "deflate", "raw deflate"])
async def test_a_compressed_whole_answer_is_read_and_a_corrupt_one_is_one_error(fake_llm, encoding, compress) -> None:
    whole = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Compressed, and read whole."},
                                     "finish_reason": "stop"}]}).encode()
    fake_llm.enqueue(Reply(body=compress(whole), content_type="application/json", headers={"Content-Encoding": encoding}),
                     Reply(body=b"\xff" * 64, content_type="application/json", headers={"Content-Encoding": encoding}))
    provider = fake_llm.provider("openai")
    read = await run_stream(provider, request())
    corrupt = await run_stream(provider, request())
    await provider.aclose()
    assert read.error is None and read.text == "Compressed, and read whole.", read.error
    assert corrupt.error is not None and "could not be decompressed" in str(corrupt.error), corrupt.error


async def test_a_compressed_event_stream_is_read_and_a_bombs_line_is_cut_before_it_is_inflated(fake_llm) -> None:
    """Events in gzip are read as any others; a 64 KB gzip bomb of one line (64 MiB of it) meets the
    1 MiB line cap a piece at a time, never inflated whole (it held 142 MiB at the peak)."""
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Compressed events."},
                            "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    stream = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    for body in (gzip.compress(stream.encode()), _gzip_bomb()):
        fake_llm.enqueue(Reply(body=body, content_type="text/event-stream", headers={"Content-Encoding": "gzip"}))
    provider = fake_llm.provider("openai")
    provider.limits = StreamLimits(max_sse_line=1024 * 1024)
    read = await run_stream(provider, request())
    tracemalloc.start()
    try:
        cut = await run_stream(provider, request())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    await provider.aclose()
    assert read.error is None and read.text == "Compressed events.", read.error
    assert isinstance(cut.error, LimitExceededError) and "max_sse_line" in str(cut.error), cut.error
    assert peak < 16 * 1024 * 1024, f"{peak / 2**20:.0f} MiB held for a 1 MiB line cap"


async def test_a_reply_over_the_text_limit_ends_with_a_clear_error(fake_llm) -> None:
    fake_llm.enqueue(rechunk(openai_text([PIECE] * 40_000), [256 * 1024]))  # ~2.2 MB
    provider = fake_llm.provider("openai")
    provider.limits = StreamLimits(max_reply_chars=1024 * 1024)
    result = await run_stream(provider, request())
    await provider.aclose()
    assert isinstance(result.error, LimitExceededError)
    assert "max_reply_chars" in str(result.error)
    assert len(result.text) <= 1024 * 1024 + len(PIECE)


# ---------------------------------------------------------------- a deadline per model call

class KeepAliveServer:
    """Answers 200 text/event-stream, then only ': keep-alive' every ``interval`` s for ``lasts`` s."""

    def __init__(self, interval: float, lasts: float) -> None:
        self.interval, self.lasts = interval, lasts
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                ends = time.monotonic() + self.lasts
                while time.monotonic() < ends and not self.stop.is_set():
                    frame = b": keep-alive\n\n"
                    conn.sendall(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                    self.stop.wait(self.interval)
            except OSError:
                pass  # the client gave up: what the deadline is for

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def keepalive_server() -> Iterator[KeepAliveServer]:
    server = KeepAliveServer(interval=0.2, lasts=60.0)
    yield server
    server.close()


async def test_keep_alives_do_not_hold_a_call_past_its_deadline(keepalive_server) -> None:
    from app.providers.factory import create_provider

    provider = create_provider("openai", "fake-model", keepalive_server.base_url, API_KEY, timeout_read=30)
    provider.limits = StreamLimits(deadline_s=1.5)  # type: ignore[attr-defined]
    started = time.monotonic()
    result = await run_stream(provider, request())
    elapsed = time.monotonic() - started
    await provider.aclose()
    assert isinstance(result.error, DeadlineError)
    assert "deadline of 1.5 s" in str(result.error) and not result.error.retryable
    # the keep-alives would have held it for 60 s, and the read timeout never fires
    assert elapsed < keepalive_server.lasts / 4


def test_the_deadline_setting_reaches_the_user_as_one_error_line(keepalive_server, env, tmp_path) -> None:
    env["TIDEGAUGE_REQUEST_DEADLINE"] = "1.5"
    done = subprocess.run(cli(keepalive_server.base_url, "-p", "hi"), env=env, capture_output=True, text=True,
                          timeout=keepalive_server.lasts / 4, cwd=tmp_path)
    assert done.returncode == 1
    assert "deadline of 1.5 s" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- answers that are not what they claim

@pytest.mark.parametrize("content_type,body,shown", [
    ("text/html; charset=utf-8", b"<html><body><h1>502 Bad Gateway</h1></body></html>", "<html>"),
    ("application/octet-stream", bytes(range(256)) * 4, "\\x00\\x01"),
], ids=["html", "random-bytes"])
def test_a_200_that_is_not_an_event_stream_says_what_it_was_and_is_not_retried(
        fake_llm, env, tmp_path, content_type, body, shown) -> None:
    fake_llm.enqueue(Reply(body=body, content_type=content_type))
    # html through the real binary; random bytes take the same path, in-process
    done = tidegauge(fake_llm.base_url("openai"), env, tmp_path, "-p", "hi",
                     real_process=content_type != "application/octet-stream")
    assert done.returncode == 1
    assert content_type.split(";")[0] in done.stderr and shown in done.stderr, done.stderr
    assert "empty response" not in done.stderr and "retry" not in done.stderr
    assert len(fake_llm.requests) == 1


async def test_a_retry_after_over_the_cap_is_said_in_the_error(fake_llm) -> None:
    fake_llm.enqueue(http_error(429, {"error": {"message": "slow down", "type": "rate_limit_error"}},
                                headers={"Retry-After": "3600"}))
    provider = fake_llm.provider("openai")
    result = await run_stream(provider, request())
    await provider.aclose()
    assert result.error is not None and result.error.retryable  # type: ignore[attr-defined]
    assert "3,600 s" in str(result.error) and "cap" in str(result.error)


# ---------------------------------------------------------------- usage checked, not trusted

def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("usage", [dict(prompt=10**15, completion=5), dict(prompt=-5000, completion=-5)])
def test_absurd_usage_never_cuts_or_compacts(fake_llm, env, tmp_path, usage) -> None:
    (tmp_path / "a.txt").write_text("alpha\n" * 200)
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "a.txt"})], usage=usage),
                     openai_tool_calls([("read_file", {"path": "a.txt", "offset": 10})], usage=usage),
                     openai_text("Done.", usage=usage))
    # what the engine does with the figures, not the process: in-process
    done = tidegauge(fake_llm.base_url("openai"), env, tmp_path, "-p", "read a.txt", "--yes", "--window", "32000",
                     "--output-format", "stream-json", real_process=False)
    assert done.returncode == 0, done.stderr
    events = _events(done.stdout)
    kinds = {e["type"] for e in events}
    assert not kinds & {"compaction", "result_cut", "micro_compaction"}, kinds
    contexts = [e for e in events if e["type"] == "context"]
    fixed = min(e["breakdown"]["system"] + e["breakdown"]["tools"] for e in contexts)
    for e in contexts:
        assert fixed <= e["projected_tokens"] < 32000
    tool_results = [e for e in events if e["type"] == "tool_result"]
    assert len(tool_results) == 2 and not any(e["truncated"] for e in tool_results)


# ---------------------------------------------------------------- clear errors for the rest

def _one_line_exit_2(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_a_data_dir_that_is_a_file_is_one_line_and_exit_2(fake_llm, env, tmp_path) -> None:
    (tmp_path / "data").write_text("not a folder")
    line = _one_line_exit_2(subprocess.run(cli(fake_llm.base_url("openai"), "-p", "hi"), env=env,
                                           capture_output=True, text=True, timeout=120, cwd=tmp_path))
    assert "data_dir" in line and "is a file" in line


def test_a_data_dir_that_cannot_be_created_is_one_line_and_exit_2(fake_llm, env, tmp_path) -> None:
    (tmp_path / "blocker").write_text("a file where a folder would go")
    env["TIDEGAUGE_DATA_DIR"] = str(tmp_path / "blocker" / "data")
    line = _one_line_exit_2(tidegauge(fake_llm.base_url("openai"), env, tmp_path, "-p", "hi", real_process=False))
    assert "blocker" in line


def test_api_key_env_given_a_key_is_refused_without_echoing_it(fake_llm, env, tmp_path) -> None:
    pasted = "sk-proj-Zq81hT0cPx9LmW4rVb2NyK7dJs5"
    line = _one_line_exit_2(tidegauge(fake_llm.base_url("openai"), env, tmp_path, "-p", "hi", "--api-key-env", pasted,
                                      real_process=False))
    assert "api_key_env" in line and "looks like an API key" in line
    assert pasted not in line and pasted[:12] not in line


@pytest.mark.parametrize("name,value", [("TIDEGAUGE_TIMEOUT_READ", "inf"), ("TIDEGAUGE_TIMEOUT_CONNECT", "nan"),
                                        ("TIDEGAUGE_TIMEOUT_READ", "0"), ("TIDEGAUGE_REQUEST_DEADLINE", "-1")])
def test_timeouts_must_be_finite_and_positive(fake_llm, env, tmp_path, name, value) -> None:
    env[name] = value
    # the first through the real binary; the rest are the same check on other values
    line = _one_line_exit_2(tidegauge(fake_llm.base_url("openai"), env, tmp_path, "-p", "hi",
                                      real_process=(name, value) == ("TIDEGAUGE_TIMEOUT_READ", "inf")))
    assert name.removeprefix("TIDEGAUGE_").lower() in line and name in line


# ---------------------------------------------------------------- the decoder itself

def test_lone_surrogate_escapes_become_replacement_characters_and_pairs_survive() -> None:
    from app.providers.sse import decode_sse

    raw = (b'data: {"t":"a\\ud800b"}\n\n'  # a lone high surrogate
           b'data: {"t":"\\ud83d\\ude00"}\n\n'  # a real pair: an emoji
           b'data: {"t":"\\\\ud800"}\n\n')  # an escaped backslash, then plain text
    texts = [json.loads(e.data)["t"] for e in decode_sse([raw])]
    assert texts == ["a\ufffdb", "\U0001F600", "\\ud800"]
    for text in texts:
        text.encode("utf-8")  # never raises


# One whole reply from a server that ignored ``stream: true``, per protocol, with an unpaired
# \ud800 escape in its text: read as U+FFFD, as the stream decoder reads one.
LONE_SURROGATE_BODIES = {
    "openai": {"object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "@TEXT@"}, "finish_reason": "stop"}]},
    "anthropic": {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "@TEXT@"}],
                  "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 2}},
    "responses": {"object": "response", "status": "completed", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "@TEXT@"}]}]},
}


@pytest.mark.parametrize("protocol", sorted(LONE_SURROGATE_BODIES))
async def test_a_lone_surrogate_escape_in_a_whole_json_reply_reads_as_a_replacement_character(
        fake_llm, protocol: str) -> None:
    body = json.dumps(LONE_SURROGATE_BODIES[protocol]).replace("@TEXT@", "caf\\ud800e").encode()
    fake_llm.enqueue(Reply(body=body, content_type="application/json"))
    provider = fake_llm.provider(protocol)
    result = await run_stream(provider, request())
    await provider.aclose()
    assert result.error is None and result.completed is not None
    (text,) = [block.text for block in result.completed.message.content if hasattr(block, "text")]
    assert text == "caf\ufffde"
    json.dumps(text, ensure_ascii=False).encode("utf-8")  # the next request can carry it


def _feed_one_long_line(size: int, chunk: int = 8 * 1024) -> float:
    from app.providers.sse import SSEDecoder

    decoder = SSEDecoder(max_line=None)
    piece = "x" * chunk
    # CPU seconds of this process: another process's load does not count (wall time did: a
    # loaded machine once made a linear decoder look 29x slower for 8x the bytes)
    started = time.process_time()
    decoder.feed("data: ")
    for _ in range(size // chunk):
        decoder.feed(piece)
    events = decoder.feed("\n\n")
    elapsed = time.process_time() - started
    assert len(events) == 1 and len(events[0].data) == size // chunk * chunk
    return elapsed


def test_one_long_line_in_many_chunks_is_decoded_in_linear_time() -> None:
    small = min(_feed_one_long_line(1024 * 1024) for _ in range(3))
    big = min(_feed_one_long_line(16 * 1024 * 1024) for _ in range(3))
    # 16x the bytes: linear is ~16x (big strings cost a little more to allocate); re-joining
    # the partial line at every chunk is ~256x. The wide gap leaves room for noise both ways.
    assert big / small < 80, (small, big)

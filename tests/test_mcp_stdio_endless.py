"""A stdio MCP server's answer without end, and the session's cap on what answers may save.

Issue 26 ("Bounds"). Through the real CLI (``python -m app -p``, stream-json; in the test process
where a test does not measure the process's memory) against the loopback fake LLM and a real
server process (``tests/mcp_servers/endless_answer.py``):

- a finite answer over ``MAX_SAVED_ANSWER_BYTES`` (70 MB) is cut, its start saved, and the server
  goes on; a tool call answered with a line that never ends: at most ``MAX_SAVED_ANSWER_BYTES`` of
  it is saved, past ``MAX_READ_ANSWER_BYTES`` the server is ended as misbehaving (one warning naming it and the size), the call ends
  with words naming what was saved, tidegauge's memory stays bounded, nothing is left running,
  and the session goes on (the next step, and ``--continue`` with the server started again);
- answers the transports cut and save (stdio, and url over real HTTP) count toward
  ``max_session_saved_output``: past it an answer is cut without being saved, in the words the
  registry's saved outputs use.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from fake_llm_server import FakeLLMServer, openai_text, openai_tool_calls
from loopback_http import serving
from mcp_helpers import run_headless, tidegauge_run
from test_mcp_url_bounds import SSE_BIG_BYTES, HostileServer

from app.kernel.describe import describe
from app.kernel.events import McpServerEvent
from app.mcp.bounded_stdio import MAX_READ_ANSWER_BYTES, MAX_SAVED_ANSWER_BYTES
from app.mcp.http_bounds import _JsonAnswer
from app.tools.base import SavedOutputBudget

SERVER = Path(__file__).parent / "mcp_servers" / "endless_answer.py"
KEY = "sk-test-fake-key-0123456789"
MB = 1024 * 1024
# The finite answer over what is saved of one: between MAX_SAVED_ANSWER_BYTES (64 MiB) and what is
# read of one before its server is ended (256 MiB), as a big file read is; megabytes of 10^6 bytes.
FINITE_MB = 70
# Bounds a hang only (a loaded 2-core machine imports the SDK slowly); nothing is timed.
RUN_BOUND_S = 240.0
CAP_WORDS = "this session's saved outputs reached their cap of {limit:,} bytes (the max_session_saved_output " \
            "setting raises it)"


def _config(tmp_path: Path, pid_file: Path, extra: str = "", *server_flags: str) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(
        extra
        + "[mcp_servers.e]\n"
        + f"command = {json.dumps(sys.executable)}\n"
        + f"args = {json.dumps([str(SERVER), '--pid-file', str(pid_file), *server_flags])}\n"
        # A tool_timeout far above what the cut takes: a call that ends on it did not end on the bound.
        + "startup_timeout = 120\ntool_timeout = 60\n", encoding="utf-8")
    (config / "config.toml").chmod(0o600)
    (tmp_path / "work").mkdir(exist_ok=True)


def _tidegauge(tmp_path: Path, fake_llm: Any, prompt: str, *flags: str) -> tuple[int, list[dict[str, Any]], str, int]:
    """One headless run: (exit code, stream-json events, stderr, peak RSS of the tidegauge process in bytes).

    The peak is the kernel's high-water mark of the process's own memory (``VmHWM``), read until it
    exits: monotonic, so the last reading is the peak up to its last moments. Not ``wait4``'s
    ``ru_maxrss``, which keeps the forking pytest process's mark across the exec."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY})
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "app", "--provider", "openai", "--model", "m",
                                 "--base-url", fake_llm.base_url("openai"), "--output-format", "stream-json",
                                 "--yes", *flags, "-p", prompt],
                                cwd=tmp_path / "work", env=env, stdout=stdout, stderr=stderr)
    deadline = time.monotonic() + RUN_BOUND_S
    peak = 0
    while True:
        peak = max(peak, _high_water_rss(proc.pid))
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.waitpid(proc.pid, 0)
            raise AssertionError(f"tidegauge still running after {RUN_BOUND_S:g} s; stderr: "
                                 f"{err.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)  # polling the child's exit, bounded by the deadline above
    proc.returncode = os.waitstatus_to_exitcode(status)
    events = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    return proc.returncode, events, err.read_text(errors="replace"), peak


def _tidegauge_in_process(tmp_path: Path, fake_llm: Any, prompt: str,
                          *flags: str) -> tuple[int, list[dict[str, Any]], str]:
    """One headless run through the CLI in the test process, for tests that do not measure the
    process's memory: (exit code, stream-json events, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY})
    proc = tidegauge_run(["--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai"),
                          "--output-format", "stream-json", "--yes", *flags, "-p", prompt], cwd=tmp_path / "work", env=env)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events, proc.stderr


def _high_water_rss(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _saved_answers(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "data").rglob("mcp-answer-*.json"))


@dataclass
class OneRun:
    """The real process's run both memory tests read: a finite answer over what is saved, a ping,
    then an answer without end, then the model's last reply."""
    home: Path
    fake: FakeLLMServer
    code: int
    events: list[dict[str, Any]]
    stderr: str
    peak_rss: int
    server_pid: int


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneRun]:
    """One real ``tidegauge -p`` whose peak memory is measured, for the two tests that need a process
    of its own: one interpreter and one server start, not two of each. The finite answer comes first,
    so the server that answered it is the one that answers the ping after it (it goes on), and the
    endless one then ends it. Each test reads its own calls; a failure names which."""
    home = tmp_path_factory.mktemp("endless")
    pid_file = home / "server.pid"
    _config(home, pid_file, "memory_update_tokens = 0\n")
    fake = FakeLLMServer().start()
    try:
        fake.enqueue(openai_tool_calls([("e__big", {"megabytes": FINITE_MB}, "call_big")]),
                     openai_tool_calls([("e__ping", {}, "call_ping")]),
                     openai_tool_calls([("e__endless", {}, "call_endless")]),
                     openai_text("The endless tool broke; carrying on without it."))
        code, events, stderr, peak_rss = _tidegauge(home, fake, "read the big one, ping, then the endless one")
        yield OneRun(home, fake, code, events, stderr, peak_rss, int(pid_file.read_text()))
    finally:
        fake.stop()
    assert not fake.problems(), fake.problems()


def _until_call(events: list[dict[str, Any]], call_id: str) -> list[dict[str, Any]]:
    """The events before the model's call ``call_id`` was started."""
    [start] = [n for n, e in enumerate(events) if e["type"] == "tool_start" and e["id"] == call_id]
    return events[:start]


def test_an_answer_without_end_ends_the_server_saves_at_most_the_bound_and_the_session_goes_on(
        one_run: OneRun) -> None:
    code, events, stderr, peak_rss = one_run.code, one_run.events, one_run.stderr, one_run.peak_rss

    assert code == 0, stderr[-3000:]
    [end] = [e for e in events if e["type"] == "result"]
    assert end["stop_reason"] == "end_turn" and end["text"] == "The endless tool broke; carrying on without it."
    # One warning, naming the server and the size, before the run ends: the server was ended mid-session.
    [exited] = [e for e in events if e["type"] == "mcp_server" and e["status"] == "exited"]
    [big] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_big"]
    [saved] = [p for p in _saved_answers(one_run.home) if str(p) != big["full_output_path"]]
    warning = describe(McpServerEvent.model_validate(exited))
    assert warning is not None and warning.kind == "warning"
    assert warning.text.startswith("MCP server e stopped: it sent one message still going after ")
    assert f"(over the {MAX_READ_ANSWER_BYTES:,}-byte limit), so tidegauge stopped it" in warning.text
    assert f"as the server sent them, are in {saved}" in warning.text
    assert "\n" not in warning.text
    # The call ended on that, not on its 60 s timeout, and says what was saved.
    [result] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_endless"]
    assert result["is_error"] and "timed out" not in result["content"]
    assert "MCP server 'e' stopped during endless (it sent one message still going after" in result["content"]
    assert str(saved) in result["content"]
    # What was saved: the first MAX_SAVED_ANSWER_BYTES (the rest was read up to the bound and dropped).
    assert MAX_SAVED_ANSWER_BYTES - MB < saved.stat().st_size <= MAX_SAVED_ANSWER_BYTES
    assert saved.read_bytes()[:80].startswith(b'{"jsonrpc":"2.0","id":')
    # The model was told too, and the session took its next step.
    told = [m for m in one_run.fake.requests[3].json["messages"]
            if m["role"] == "tool" and m["tool_call_id"] == "call_endless"]
    assert "stopped during endless" in told[0]["content"]
    # Memory stayed near the transport's cap (8 MiB in memory per message), far from the 256 MiB read.
    assert peak_rss < 300 * MB, f"peak RSS {peak_rss / MB:.0f} MiB"
    print(f"\npeak RSS of tidegauge: {peak_rss / MB:.1f} MiB; saved: {saved.stat().st_size:,} bytes")
    # Nothing left running.
    assert _gone(one_run.server_pid), psutil.Process(one_run.server_pid).cmdline()

    # The next run of the session (--continue) starts the server again; its tools work. In the
    # test process: what it shows is the session's, not the process's memory.
    one_run.fake.enqueue(openai_tool_calls([("e__ping", {}, "call_ping_again")]), openai_text("pong received"))

    code, events, stderr = _tidegauge_in_process(one_run.home, one_run.fake, "ping it", "--continue")

    assert code == 0, stderr[-3000:]
    [ping] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_ping_again"]
    assert ping["content"] == "pong" and not ping["is_error"]
    assert [e["text"] for e in events if e["type"] == "result"] == ["pong received"]
    assert _gone(int((one_run.home / "server.pid").read_text()))


def test_a_finite_answer_bigger_than_what_is_saved_is_cut_and_the_server_goes_on(one_run: OneRun) -> None:
    """A 70 MB answer (a big file read) is not a line without end: its first 64 MiB are saved, the
    rest is read and dropped, and the server answers the next call (it was ended for it before)."""
    code, events, stderr, peak_rss = one_run.code, one_run.events, one_run.stderr, one_run.peak_rss

    assert code == 0, stderr[-3000:]
    before_the_endless_one = _until_call(events, "call_endless")
    assert not [e for e in before_the_endless_one
                if e["type"] == "mcp_server" and e["status"] in ("exited", "failed")], events
    [big] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_big"]
    saved = Path(big["full_output_path"])
    assert saved in _saved_answers(one_run.home)
    assert f"the server's answer was {FINITE_MB},000," in big["content"]
    assert f"its first {saved.stat().st_size:,} bytes" in big["content"]
    assert MAX_SAVED_ANSWER_BYTES - MB < saved.stat().st_size <= MAX_SAVED_ANSWER_BYTES
    assert FINITE_MB * 1_000_000 > MAX_SAVED_ANSWER_BYTES + MB  # more than what is saved was read and dropped
    [ping] = [e for e in events if e["type"] == "tool_result" and e["id"] == "call_ping"]
    assert ping["content"] == "pong" and not ping["is_error"]
    assert peak_rss < 300 * MB, f"peak RSS {peak_rss / MB:.0f} MiB"


def test_an_answer_without_end_during_the_start_fails_that_server_once_with_the_size_and_the_session_goes_on(
        fake_llm, tmp_path) -> None:
    pid_file = tmp_path / "server.pid"
    _config(tmp_path, pid_file, "", "--endless-tools-list")
    fake_llm.enqueue(openai_text("No tools from e; answering anyway."))

    code, events, stderr = _tidegauge_in_process(tmp_path, fake_llm, "hello")

    assert code == 0, stderr[-3000:]
    [failed] = [e for e in events if e["type"] == "mcp_server" and e["status"] == "failed"]
    warning = describe(McpServerEvent.model_validate(failed))
    assert warning is not None and warning.text.startswith(
        "MCP server e did not start: it sent one message still going after "), warning
    assert f"(over the {MAX_READ_ANSWER_BYTES:,}-byte limit), so tidegauge stopped it" in warning.text
    # Not taken for a server that crashed on the server/discover probe: it is not started a second time.
    assert len(_saved_answers(tmp_path)) == 1
    assert not [e for e in events if e["type"] == "mcp_server" and e["status"] == "exited"]
    assert [e["text"] for e in events if e["type"] == "result"] == ["No tools from e; answering anyway."]
    assert _gone(int(pid_file.read_text()))


def test_answers_cut_at_the_transport_count_toward_the_sessions_cap_and_past_it_are_not_saved(
        fake_llm, tmp_path) -> None:
    limit = 20_000_000
    # memory_update_tokens = 0: no background summary call between the scripted replies.
    _config(tmp_path, tmp_path / "server.pid",
            extra=f"max_session_saved_output = {limit}\nmemory_update_tokens = 0\n")
    # Three answers of 12 MB each (over the 8 MiB cut): 36 MB in all against a cap of 20 MB.
    fake_llm.enqueue(openai_tool_calls([("e__big", {"megabytes": 12}, "call_1")]),
                     openai_tool_calls([("e__big", {"megabytes": 12}, "call_2")]),
                     openai_tool_calls([("e__big", {"megabytes": 12}, "call_3")]),
                     openai_text("Read them."))

    code, events, stderr = _tidegauge_in_process(tmp_path, fake_llm, "read three big answers")

    assert code == 0, stderr[-3000:]
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    cap_words = CAP_WORDS.format(limit=limit)
    first, second, third = (results[f"call_{n}"] for n in (1, 2, 3))
    # The first is saved whole.
    assert "the whole answer, as the server sent it (JSON), is in" in first["content"]
    whole = Path(first["full_output_path"])
    assert whole.stat().st_size > 12_000_000 and cap_words not in first["content"]
    # The second gets what was left of the cap, and says the rest was not saved and why.
    part = Path(second["full_output_path"])
    assert part.stat().st_size <= limit - whole.stat().st_size + 1024
    assert f"as the server sent them, are in {part}; the full output was not saved: {cap_words}" in second["content"]
    # The third is cut as the others were, with nothing saved, and says why.
    assert third["full_output_path"] is None
    assert "was cut at the transport; the full output was not saved: " + cap_words in third["content"]
    assert third["content"].splitlines()[1].startswith("0123456789")  # still the start of its text
    assert _saved_answers(tmp_path) == sorted([whole, part])
    total = sum(p.stat().st_size for p in (tmp_path / "data").rglob("*") if p.is_file() and "tool-results" in p.parts)
    assert total <= limit + 64 * 1024, f"{total:,} bytes saved under tool-results/ against a cap of {limit:,}"


def test_a_url_servers_answer_past_the_sessions_cap_is_cut_without_being_saved(tmp_path) -> None:
    """The url path's shaper (what the real HTTP transport reads through) counts against the same cap."""
    budget = SavedOutputBudget(limit=3 * MB)
    body = b'{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"' + b"y" * (5 * MB) + b'"}]}}'

    def shaped(request_id: int) -> dict[str, Any]:
        shaper = _JsonAnswer(request_id, 1 * MB, MAX_SAVED_ANSWER_BYTES, tmp_path, budget)
        out = b"".join(b"".join(shaper.feed(body[i:i + 65536])) for i in range(0, len(body), 65536))
        return json.loads(out + b"".join(shaper.end()))

    first, second = shaped(5), shaped(6)

    first_text = first["result"]["content"][0]["text"]
    assert f"its first {3 * MB:,} bytes, as the server sent them, are in {tmp_path}" in first_text
    assert CAP_WORDS.format(limit=3 * MB) in first_text
    second_text = second["result"]["content"][0]["text"]
    assert "was cut at the transport; the full output was not saved: " + CAP_WORDS.format(limit=3 * MB) in second_text
    [saved] = list(tmp_path.glob("mcp-answer-*.json"))
    assert saved.stat().st_size == 3 * MB and budget.used == 3 * MB
    assert str(saved) in budget.counted_as_written  # the registry will not count it again


@pytest.fixture
def url_server() -> Any:
    with serving(HostileServer()) as server:
        yield server


def test_a_url_servers_cut_answers_count_toward_the_sessions_cap_through_the_cli(
        fake_llm, tmp_path, url_server: HostileServer) -> None:
    """Over real HTTP (the hostile loopback server of test_mcp_url_bounds): three SSE answers over the
    cut against a cap of one and a third of them, through ``tidegauge -p`` in the test process (what
    it checks is on the wire, in the events and on disk; the shaper alone is tested above)."""
    limit = SSE_BIG_BYTES + SSE_BIG_BYTES // 3
    fake_llm.enqueue(*[openai_tool_calls([("bad__sse_big", {}, f"call_{n}")]) for n in (1, 2, 3)],
                     openai_text("Done."))

    proc = run_headless(fake_llm, tmp_path, f"memory_update_tokens = 0\nmax_session_saved_output = {limit}\n\n"
                        f"[mcp_servers.bad]\nurl = {json.dumps(url_server.url)}\ntool_timeout = 600\n", "go")

    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    first, second, third = ({e["id"]: e for e in events if e["type"] == "tool_result"}[f"call_{n}"] for n in (1, 2, 3))
    cap_words = CAP_WORDS.format(limit=limit)
    whole = Path(first["full_output_path"])
    assert "the whole answer, as the server sent it (JSON), is in" in first["content"]
    part = Path(second["full_output_path"])
    assert f"are in {part}; the full output was not saved: {cap_words}" in second["content"]
    assert third["full_output_path"] is None
    assert "was cut at the transport; the full output was not saved: " + cap_words in third["content"]
    assert sorted(_saved_answers(tmp_path)) == sorted([whole, part])
    assert whole.stat().st_size + part.stat().st_size <= limit + 64 * 1024

"""MCP tool results as people use them: images, user-only content, structured twins, links,
progress, log notifications, task-only tools, timeouts and huge answers.

The real CLI (in the test process: tests/mcp_helpers.py) runs against the loopback fake LLM with
real servers: our SDK-built ``tests/mcp_servers/content_server.py`` for the precise cases, and the reference
servers from npm (``@modelcontextprotocol/server-everything``, ``server-filesystem``),
installed once into pytest's cache folder (skipped only when npm is not installed).
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from fake_llm_server import anthropic_text, anthropic_tool_calls, openai_text, openai_tool_calls
from mcp_helpers import tidegauge_run

from app.context.tokens import IMAGE_TOKENS, estimate_block
from app.kernel.envelope import outside_log
from app.kernel.describe import describe, tool_progress_text
from app.kernel.events import McpServerEvent, ToolProgressEvent, ToolStartEvent
from app.mcp.bounded_stdio import read_lines
from app.mcp.content import CUT_META_KEY, tool_output_from_result
from app.mcp.client import McpConnection
from app.mcp.settings import McpServerConfig
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolResultImage, ToolUseBlock
from app.providers.openai import to_openai_messages
from app.providers.responses import to_responses_input
from app.kernel.redact import clear_secrets, redact, register_secret
from app.surfaces.view_model import DashboardView
from widgets.tool_call_line import tool_call_text

SERVERS = Path(__file__).parent / "mcp_servers"
CONTENT_SERVER = SERVERS / "content_server.py"
KEY = "sk-test-fake-key-0123456789"
SERVER_TOKEN = "tok-server-secret-5f1e2d3c4b"
NPM_PACKAGES = ("@modelcontextprotocol/server-everything@2026.8.31",
                "@modelcontextprotocol/server-filesystem@2026.8.31")
PNG_1X1 = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()


def toml_string(value: str) -> str:
    return json.dumps(value)


def server_table(name: str, command: str, args: list[str], **extra: Any) -> str:
    lines = [f"[mcp_servers.{name}]", f"command = {toml_string(command)}",
             f"args = [{', '.join(map(toml_string, args))}]", "startup_timeout = 120"]
    for key, value in extra.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} = {toml_string(v)}" for k, v in value.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def tidegauge(tmp_path: Path, fake, provider: str, tables: str, prompt: str) -> tuple[int, list[dict[str, Any]], str]:
    """``tidegauge -p PROMPT --yes --output-format stream-json`` (the CLI in this process), with these servers."""
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(tables, encoding="utf-8")
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY})
    proc = tidegauge_run(["--provider", provider, "--model", "m", "--base-url", fake.base_url(provider),
                          "--output-format", "stream-json", "--yes", "-p", prompt], cwd=tmp_path / "work", env=env)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events, proc.stderr


def results_by_id(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in events if e["type"] == "tool_result"}


# ---- the precise cases, through the real CLI (Anthropic Messages) ----

def test_content_server_results_reach_the_model_and_the_user_as_each_should(fake_llm, tmp_path):
    fake_llm.enqueue(
        anthropic_tool_calls([
            ("c__image", {}, "call_image"),
            ("c__for_user", {}, "call_user"),
            ("c__twin", {"kilobytes": 4}, "call_twin"),
            ("c__structured_only", {}, "call_struct"),
            ("c__link", {}, "call_link"),
            ("c__progress", {"steps": 4, "every_ms": 500}, "call_progress"),
            ("c__silent", {"seconds": 60}, "call_silent"),
            ("c__log", {"text": f"connected with {SERVER_TOKEN}"}, "call_log"),
        ]),
        anthropic_text("Done."),
    )
    # A timeout short enough that the suite does not sit it out, a step a third of it apart.
    tables = server_table("c", sys.executable, [str(CONTENT_SERVER)], tool_timeout=1.5,
                          env={"SERVICE_TOKEN": SERVER_TOKEN})

    code, events, stderr = tidegauge(tmp_path, fake_llm, "anthropic", tables, "use the content tools")

    assert code == 0, stderr
    second = fake_llm.requests[1].json
    sent = {b["tool_use_id"]: b for m in second["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"}
    # The image reaches the model as an image block inside its tool_result, after the text.
    image_content = sent["call_image"]["content"]
    assert image_content[0]["type"] == "text" and "a one-pixel chart" in image_content[0]["text"]
    assert image_content[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                             "data": PNG_1X1}}
    # audience ["user"]: on the user's screen (its own event), never in the request.
    assert "PRIVATE-DIFF-FOR-THE-USER-ONLY" not in json.dumps(second)
    assert sent["call_user"]["content"] == "summary for the model: 3 files changed"
    shown = [e for e in events if e["type"] == "tool_user_content"]
    assert [(e["id"], e["text"]) for e in shown] == [("call_user", "PRIVATE-DIFF-FOR-THE-USER-ONLY")]
    # Text and its structured twin: the model gets the data once.
    assert sent["call_twin"]["content"].count("row 000001 ") == 1
    # Structured content alone is what the model gets.
    assert json.loads(sent["call_struct"]["content"]) == {"temperature": 21.5, "unit": "C"}
    # A resource link names its URI and how to read it (the server serves resources: read_resource).
    assert "file:///srv/report.pdf" in sent["call_link"]["content"]
    assert "read it with read_resource (server 'c', this uri)" in sent["call_link"]["content"]
    # Progress: on the stream while the call runs, and it outlives the 1.5 s timeout (2 s in all).
    progress = [e for e in events if e["type"] == "tool_progress" and e["id"] == "call_progress"]
    assert [(e["progress"], e["total"], e["message"]) for e in progress] == [
        (float(n), 4.0, f"step {n}") for n in (1, 2, 3, 4)], progress
    assert sent["call_progress"]["content"] == "finished 4 steps"
    # A silent call: worded as a timeout, not a refusal, and the session carries on.
    silent = sent["call_silent"]
    assert silent["is_error"] and "timed out after 1.5 s" in silent["content"]
    assert "refused" not in silent["content"]
    # The server's log notification is in its log file, redacted, readable by the owner only.
    logs = list((tmp_path / "data").rglob("mcp-c.log"))
    assert len(logs) == 1, logs
    log_text = logs[0].read_text()
    assert "[mcp log info] connected with [REDACTED]" in log_text, log_text[-2000:]
    assert SERVER_TOKEN not in log_text
    assert stat.S_IMODE(logs[0].stat().st_mode) == 0o600


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def content_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpConnection]:
    """One content server over stdio for the tests that only call its tools (each start is an
    interpreter and the MCP SDK's imports, about a CPU-second). Its connection lives on the
    module's event loop: the tests that use it run there (ON_CONTENT_SERVER). A test that needs
    another tool_timeout sets it on the connection's config for its own call (monkeypatch)."""
    folder = tmp_path_factory.mktemp("content-server")
    config = McpServerConfig(command=sys.executable, args=[str(CONTENT_SERVER)], startup_timeout=120)
    connection = McpConnection("c", config, folder, folder / "session")
    await connection.start()
    yield connection
    await connection.aclose()


ON_CONTENT_SERVER = pytest.mark.asyncio(loop_scope="module")


@ON_CONTENT_SERVER
async def test_an_answer_over_the_cap_is_cut_at_the_transport_with_the_whole_answer_saved(
        content_server: McpConnection) -> None:
    output = await content_server.call_tool("big", {"megabytes": 12})

    assert not output.is_error, output.text
    assert "over the 8,388,608-byte limit" in output.text and "cut at the transport" in output.text
    assert output.text.splitlines()[1].startswith("0123456789")  # the start of the server's text
    saved = Path(str(output.full_output_path))
    assert content_server.log_dir is not None and saved.parent == content_server.log_dir / "tool-results"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert output.original_chars == saved.stat().st_size > 12_000_000
    answer = json.loads(saved.read_text())
    assert len(answer["result"]["content"][0]["text"]) == 12_000_000


# ---- the transport's reader, fed directly ----

class Chunks:
    """An anyio-like byte stream: these chunks, then the end."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> bytes:
        if not self.chunks:
            raise StopAsyncIteration
        return self.chunks.pop(0)


def read_all(chunks: list[bytes], max_bytes: int, spill_dir: Path | None) -> list[Any]:
    delivered: list[Any] = []

    async def deliver(item: Any) -> None:
        delivered.append(item)

    asyncio.run(read_lines(Chunks(chunks), deliver, max_bytes, spill_dir))
    return delivered


def test_the_reader_splits_lines_across_chunks_and_cuts_one_over_the_cap_with_secrets_redacted(tmp_path):
    secret = "sk-planted-secret-0123456789abcdef"
    register_secret(secret)
    try:
        small = b'{"jsonrpc":"2.0","method":"notifications/progress"}'
        # The TypeScript SDK writes the id last; a secret lies across two chunks of the big answer.
        text = "A" * 5000 + secret + "B" * 300_000
        big = json.dumps({"result": {"content": [{"type": "text", "text": text}]}, "jsonrpc": "2.0", "id": 41})
        stream = small + b"\n" + big.encode() + b"\n"
        cut_at = stream.index(secret.encode()) + 7
        chunks = [stream[:7], stream[7:cut_at], *(stream[i:i + 65536] for i in range(cut_at, len(stream), 65536))]

        delivered = read_all(chunks, max_bytes=100_000, spill_dir=tmp_path)
    finally:
        clear_secrets()

    assert delivered[0] == small
    answer = delivered[1]
    assert answer["id"] == 41
    cut = answer["result"]["_meta"][CUT_META_KEY]
    assert cut["bytes"] == len(big)
    preview = answer["result"]["content"][0]["text"]
    assert "over the 100,000-byte limit" in preview and preview.rstrip().endswith("B")
    saved = Path(cut["path"]).read_text()
    assert secret not in saved and "[REDACTED]" in saved
    assert saved.startswith('{"result"') and saved.endswith('"id": 41}')



@pytest.mark.parametrize("chunk", [4099, 65536])
def test_a_saved_answer_written_in_pieces_has_every_copy_of_a_secret_redacted_whole(tmp_path, chunk):
    """An answer over the cap is saved as it arrives, each piece redacted as it is written: copies of
    a key (as typed and in base64) packed so close that every cut between pieces falls inside one."""
    secret = "sk-planted-secret-0123456789abcdef"
    encoded = base64.b64encode(secret.encode()).decode()
    register_secret(secret)
    try:
        text = ("." * 5 + secret + "," + encoded) * 12_000
        big = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": text}]}})
        stream = big.encode() + b"\n"
        [answer] = read_all([stream[i:i + chunk] for i in range(0, len(stream), chunk)], max_bytes=100_000,
                            spill_dir=tmp_path)
        expected = redact(big)
    finally:
        clear_secrets()
    saved = Path(answer["result"]["_meta"][CUT_META_KEY]["path"]).read_text()
    assert secret not in saved and encoded not in saved
    assert saved.count("[REDACTED]") == 2 * 12_000
    assert saved == expected

_LINE_KINDS = st.one_of(
    st.tuples(st.just("progress"), st.sampled_from([1, 2, '"t"'])),
    st.tuples(st.just("answer"), st.integers(0, 99)),
    st.tuples(st.just("big"), st.integers(0, 99)),
    st.tuples(st.just("blank"), st.sampled_from(["", " ", "\t "])),
)


def _line(kind: str, value: object, index: int) -> bytes:
    if kind == "progress":
        return (b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":%d}}'
                % (str(value).encode(), index))
    if kind == "answer":
        return b'{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}' % int(str(value))
    if kind == "big":  # over the reader's cap of 120 bytes below
        return b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"%s"}]}}' % (
            int(str(value)), b"x" * 200)
    return str(value).encode()


@settings(max_examples=150)
@given(kinds=st.lists(_LINE_KINDS, max_size=40), cuts=st.lists(st.integers(0, 20_000), max_size=12))
def test_the_reader_delivers_the_same_messages_however_the_stream_is_cut_into_chunks(kinds, cuts) -> None:
    """Whatever the pipe's chunks: every message in order, each over the cap as its cut answer,
    blank lines skipped, and a progress notification dropped only when the very next message is a
    newer one for the same token (the last of every run always arrives)."""
    lines = [_line(kind, value, index) for index, (kind, value) in enumerate(kinds)]
    stream = b"".join(line + b"\n" for line in lines)
    bounds = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:])]

    delivered = read_all(chunks, max_bytes=120, spill_dir=None)

    messages = [(kind, value, line) for (kind, value), line in zip(kinds, lines) if kind != "blank"]
    expected = iter(messages)
    for item in delivered:  # in order, a subsequence of the messages that dropped only superseded progress
        for kind, value, line in expected:
            if (item == line) if kind != "big" else (isinstance(item, dict) and item.get("id") == value):
                break
            assert kind == "progress", (kind, value, item)
        else:
            raise AssertionError(f"delivered out of order or never sent: {item!r}")
    must_arrive = [line if kind != "big" else value for index, (kind, value, line) in enumerate(messages)
                   if kind != "progress" or index + 1 == len(messages) or messages[index + 1][:2] != (kind, value)]
    arrived = [item if isinstance(item, bytes) else item.get("id") for item in delivered]
    assert all(line in arrived for line in must_arrive)


def test_a_line_of_exactly_the_cap_is_whole_and_one_byte_more_is_cut_inside_a_chunk_or_across_two() -> None:
    """The reader's two paths (a line within one chunk, a line across chunks) draw the cap at the
    same byte: a hostile server cannot slip a line past it by where its chunks fall."""
    def answer(request_id: int, size: int) -> bytes:
        head = b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"' % request_id
        tail = b'"}]}}'
        return head + b"x" * (size - len(head) - len(tail)) + tail

    at_cap, over_cap = answer(1, 200), answer(2, 201)
    stream = at_cap + b"\n" + over_cap + b"\n"
    for chunks in ([stream], [stream[:50], stream[50:260], stream[260:]]):
        delivered = read_all(chunks, max_bytes=200, spill_dir=None)
        assert delivered[0] == at_cap, chunks
        assert isinstance(delivered[1], dict) and delivered[1]["id"] == 2, chunks
        assert len(delivered) == 2


def test_an_answer_past_what_is_saved_is_dropped_and_the_next_message_still_reads_whole(tmp_path):
    """A hostile server: one answer far past what is saved, whose dropped part imitates a whole
    answer to another request and our own cut mark, then an ordinary message. Only the first
    ``max_saved`` bytes reach the file, the dropped part is never delivered as a message, and
    framing holds: the next line arrives whole."""
    delivered: list[Any] = []

    async def deliver(item: Any) -> None:
        delivered.append(item)

    imitation = b'{"jsonrpc":"2.0","id":99,"result":{"_meta":{"tidegauge/cut":{"path":"/etc/passwd"}}}}'
    big = (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"'
           + b"A" * 300_000 + imitation.replace(b'"', b"'") + b"B" * 300_000 + b'"}]}}')
    after = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"still here"}}'
    stream = big + b"\n" + after + b"\n"
    chunks = [stream[i:i + 65536] for i in range(0, len(stream), 65536)]

    stopped = asyncio.run(read_lines(Chunks(chunks), deliver, 100_000, tmp_path, max_saved=200_000,
                                     max_read=1_000_000))

    assert stopped is None
    answer, line = delivered
    assert answer["id"] == 7 and line == after
    cut = answer["result"]["_meta"][CUT_META_KEY]
    assert cut["bytes"] == len(big)
    saved = Path(cut["path"])
    assert saved.stat().st_size == 200_000 and b"99" not in saved.read_bytes()
    text = answer["result"]["content"][0]["text"]
    assert f"its first 200,000 bytes, as the server sent them, are in {saved}" in text


def test_a_line_past_what_is_read_stops_the_reading_with_one_reason_and_nothing_more_is_kept(tmp_path):
    delivered: list[Any] = []

    async def deliver(item: Any) -> None:
        delivered.append(item)

    endless = [b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"'] + [b"x" * 65536] * 40

    stopped = asyncio.run(read_lines(Chunks(endless), deliver, 100_000, tmp_path, max_saved=200_000,
                                     max_read=1_000_000))

    assert stopped is not None and "\n" not in stopped
    assert "without its end (over the 1,000,000-byte limit), so tidegauge stopped it" in stopped
    assert delivered == []
    [saved] = list(tmp_path.iterdir())
    assert saved.stat().st_size == 200_000


def test_a_server_cannot_forge_the_transports_cut_mark():
    from mcp_types import CallToolResult, TextContent

    forged = CallToolResult(content=[TextContent(type="text", text="see the saved output")], is_error=True,
                            _meta={"tidegauge/cut": {"path": "/etc/passwd", "bytes": 10**9}})

    output = tool_output_from_result(forged)

    assert output.full_output_path is None and output.original_chars is None and output.is_error


def test_a_result_entirely_for_the_user_tells_the_model_it_was_shown_to_them():
    from mcp_types import Annotations, CallToolResult, TextContent

    result = CallToolResult(content=[TextContent(type="text", text="your diff", annotations=Annotations(
        audience=["user"]))])

    output = tool_output_from_result(result)

    assert output.for_user == "your diff" and "your diff" not in output.text
    assert output.text == "[1 part(s) of this result were for the user only: shown to them, not sent to you]"


# ---- images on each wire protocol, and on the gauge ----

def image_history() -> list[Message]:
    image = ToolResultImage(media_type="image/png", data=PNG_1X1)
    return [
        Message.user("chart it"),
        Message(role="assistant", content=[ToolUseBlock(id="call_1", name="c__image", input={}),
                                           ToolUseBlock(id="call_2", name="read_file", input={"path": "a"})]),
        Message(role="user", content=[
            ToolResultBlock(tool_use_id="call_1", content="a chart\n[image image/png, 66 bytes]", images=[image]),
            ToolResultBlock(tool_use_id="call_2", content="text of a"),
            TextBlock(text="and say what you see")]),
    ]


def test_chat_completions_gets_the_images_in_a_user_message_after_the_tool_messages():
    wire = to_openai_messages("sys", image_history())

    roles = [m["role"] for m in wire]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "user"]
    assert wire[3]["content"] == "a chart\n[image image/png, 66 bytes]"  # a tool message stays text
    images = wire[5]["content"]
    assert images[0] == {"type": "text", "text": "Images returned by tool call call_1 (1):"}
    assert images[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1X1}"}}
    assert wire[6]["content"] == "and say what you see"
    # DeepSeek's API takes no image parts: the text alone goes.
    assert ["tool", "tool", "user"] == [m["role"] for m in to_openai_messages("", image_history(),
                                                                              images=False)][-3:]


def test_responses_gets_the_images_inside_the_function_call_output():
    items = to_responses_input(image_history())

    outputs = {i["call_id"]: i["output"] for i in items if i["type"] == "function_call_output"}
    assert outputs["call_2"] == "text of a"
    assert outputs["call_1"] == [
        {"type": "input_text", "text": "a chart\n[image image/png, 66 bytes]"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_1X1}"},
    ]


def test_an_image_counts_a_fixed_estimate_on_the_gauge():
    plain = ToolResultBlock(tool_use_id="x", content="a chart")
    with_image = plain.model_copy(update={"images": [ToolResultImage(media_type="image/png", data=PNG_1X1)] * 2})

    assert estimate_block(with_image) - estimate_block(plain) == 2 * IMAGE_TOKENS == 3_200
    # An old transcript line (no images key) and a result without images read the same.
    assert "images" not in plain.model_dump_json()


# ---- progress on the tool's line, and the ready line naming what is not offered ----

def test_progress_is_drawn_on_the_running_tools_line_in_describes_words():
    event = ToolProgressEvent(id="call_1", progress=3, total=10, message="indexing")
    view = DashboardView()
    view.apply(outside_log(ToolStartEvent(id="call_1", name="c__index", input={}, summary="")))

    (info,) = view.apply(outside_log(event))

    assert tool_progress_text(event) == "3 of 10 (30%): indexing"
    assert "3 of 10 (30%): indexing" in tool_call_text(info, {}).plain
    assert tool_progress_text(ToolProgressEvent(id="c", progress=7)) == "7"
    info.status = "ok"
    assert "indexing" not in tool_call_text(info, {}).plain  # finished: size and duration instead


def test_at_80_columns_a_running_calls_progress_is_seen_before_its_arguments():
    # Checked in tmux at 80x24: the arguments filled the line and the progress was cut off.
    view = DashboardView()
    view.apply(outside_log(ToolStartEvent(id="c", name="content__progress", input={},
                              summary='{"steps": 12, "every_ms": 700, "label": "a long argument to show"}')))
    (info,) = view.apply(outside_log(ToolProgressEvent(id="c", progress=6, total=12, message="step 6")))
    line = tool_call_text(info, {}, width=46)  # the conversation's width at 80 columns
    line.truncate(46, overflow="ellipsis")
    assert line.plain.endswith("6 of 12 (50%): step 6"), line.plain
    wider = tool_call_text(info, {}, width=80)
    assert wider.plain.startswith('⋯ content__progress {"steps"') and wider.plain.endswith("step 6")
    assert len(wider.plain) <= 80  # the arguments shortened to make room


def test_the_ready_line_names_tools_left_out_because_their_server_takes_no_task_calls():
    line = describe(McpServerEvent(name="every", status="ready", tools=12, detail="12 tools",
                                   not_offered=["simulate-research-query"]))

    assert line is not None
    assert line.text == ("MCP server every ready: 12 tools; not offered: simulate-research-query (they run only "
                         "as MCP tasks, which the server does not say it accepts)")


# ---- the reference servers from npm ----

@pytest.fixture(scope="session")
def npm_servers(request, tmp_path_factory) -> Path:
    """The two reference servers, installed once into pytest's cache (pinned versions), or into
    this run's temporary folder when the cache is off (-p no:cacheprovider)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("npm/node not installed: the reference MCP servers come from npm")
    cache = getattr(request.config, "cache", None)
    folder = Path(cache.mkdir("mcp-npm-servers")) if cache is not None else tmp_path_factory.mktemp("mcp-npm")
    bins = folder / "node_modules" / ".bin"
    # Each xdist worker has its own session fixtures; two npm installs into one folder at once
    # fail with ENOTEMPTY, so one installs while the others wait on the lock, then use it.
    with open(folder / ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (bins / "mcp-server-everything").exists() or not (bins / "mcp-server-filesystem").exists():
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), *NPM_PACKAGES],
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"npm install of the reference MCP servers failed: {done.stderr[-2000:]}"
    return bins


def test_server_everything_through_the_cli_images_progress_and_its_task_only_tool_offered(npm_servers, fake_llm, tmp_path):
    fake_llm.enqueue(
        openai_tool_calls([("every__get-tiny-image", {}, "call_image"),
                           ("every__trigger-long-running-operation", {"duration": 2, "steps": 4}, "call_long"),
                           ("every__get-annotated-message", {"messageType": "error", "includeImage": True},
                            "call_annotated")]),
        openai_text("Seen."),
    )
    tables = server_table("every", str(npm_servers / "mcp-server-everything"), ["stdio"])

    code, events, stderr = tidegauge(tmp_path, fake_llm, "openai", tables, "show me the image")

    assert code == 0, stderr
    first, second = (r.json for r in fake_llm.requests)
    offered = {t["function"]["name"] for t in first["tools"]}
    assert "every__get-tiny-image" in offered
    assert "every__simulate-research-query" in offered  # taskSupport "required": called as a task
    ready = [e for e in events if e["type"] == "mcp_server" and e["status"] == "ready"]
    assert ready[0]["not_offered"] == []
    # The image follows the tool messages as a user message the model can see.
    messages = second["messages"]
    tool_index = max(i for i, m in enumerate(messages) if m["role"] == "tool")
    after = messages[tool_index + 1]
    assert after["role"] == "user" and after["content"][0]["text"].startswith("Images returned by tool call call_image")
    assert after["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    assert len(after["content"]) == 2  # the annotated message's image is for the user: not sent
    progress = [e for e in events if e["type"] == "tool_progress" and e["id"] == "call_long"]
    assert [(e["progress"], e["total"]) for e in progress] == [(1.0, 4.0), (2.0, 4.0), (3.0, 4.0), (4.0, 4.0)]
    assert "completed" in results_by_id(events)["call_long"]["content"]


def test_server_filesystem_reads_a_file_once_and_a_huge_one_is_cut_at_the_transport(npm_servers, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    lines = [f"line {n:07d} of the sample file" for n in range(40_000)]  # 1.3 MB
    (folder / "sample.txt").write_text("\n".join(lines), encoding="utf-8")
    # 6 MB: with its structured twin the answer is 12 MB, over the 8 MiB cap.
    (folder / "huge.txt").write_text("\n".join(f"huge {n:08d} " + "y" * 50 for n in range(100_000)), encoding="utf-8")

    async def read() -> tuple[Any, Any]:
        config = McpServerConfig(command=str(npm_servers / "mcp-server-filesystem"), args=[str(folder)],
                                 startup_timeout=120)
        connection = McpConnection("fs", config, tmp_path, tmp_path / "session")
        await connection.start()
        try:
            return (await connection.call_tool("read_text_file", {"path": str(folder / "sample.txt")}),
                    await connection.call_tool("read_text_file", {"path": str(folder / "huge.txt")}))
        finally:
            await connection.aclose()

    sample, huge = asyncio.run(read())

    assert not sample.is_error, sample.text
    assert sample.text.count("line 0012345 of the sample file") == 1
    assert sample.text.startswith("line 0000000") and sample.text.endswith("line 0039999 of the sample file")
    assert not huge.is_error and "cut at the transport" in huge.text
    assert "huge 00000000 yyy" in huge.text  # the start of the file's text, for the model
    saved = json.loads(Path(str(huge.full_output_path)).read_text())
    assert saved["result"]["content"][0]["text"].endswith("huge 00099999 " + "y" * 50)


# ---- progress: bounded in rate, and the hard limit of a call that keeps reporting ----

async def run_content_tool(connection: McpConnection, tmp_path: Path, tool: str, args: dict[str, Any],
                           tool_timeout: float, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[Any]]:
    """One call of a content-server tool through McpTool, as the agent makes it, with this
    tool_timeout; its progress reports too."""
    from app.mcp.tools import McpTool
    from app.tools.base import ToolContext

    reports: list[tuple[str, float, float | None, str]] = []
    monkeypatch.setattr(connection.config, "tool_timeout", tool_timeout)
    remote = next(r for r in connection.tools if r.name == tool)
    ctx = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "tool-results", call_id="call_1",
                      on_progress=lambda *report: reports.append(report))
    return await McpTool(connection, remote, f"c__{tool}").run(args, ctx), reports


@ON_CONTENT_SERVER
async def test_a_flood_of_progress_notifications_reaches_the_session_bounded_and_ends_complete(
        content_server: McpConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output, reports = await run_content_tool(content_server, tmp_path, "progress", {"steps": 300, "every_ms": 0},
                                             60, monkeypatch)

    assert output.text == "finished 300 steps"
    assert 1 <= len(reports) < 300, f"{len(reports)} progress reports for 300 notifications"
    assert reports[-1] == ("call_1", 300.0, 300.0, "step 300")


@ON_CONTENT_SERVER
async def test_a_call_that_keeps_reporting_progress_stops_at_the_hard_limit_worded_as_a_timeout(
        content_server: McpConnection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.5 s without a word would time it out; progress every 0.05 s keeps it going up to 4 × 0.5 s.
    output, reports = await run_content_tool(content_server, tmp_path, "progress", {"steps": 300, "every_ms": 50},
                                             0.5, monkeypatch)

    assert output.is_error
    assert "timed out: still reporting progress past the 2 s limit" in output.text, output.text
    assert "refused" not in output.text
    assert 3 <= len(reports) < 300, reports


# ---- on the dashboard ----

async def test_the_dashboard_draws_progress_on_the_tools_line_and_user_content_as_a_line() -> None:
    from app.kernel import events as ev
    from app.surfaces.dashboard.app import TidegaugeApp
    from dashboard_helpers import engine_texts, settle
    from snapshot_apps.fake_agent import FakeSession
    from widgets.tool_call_line import ToolCallLine

    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        agent.emit(ev.ToolStartEvent(id="t1", name="c__index", summary="repo", input={}))
        agent.emit(ev.ToolProgressEvent(id="t1", progress=2, total=4, message="step 2"))
        await settle(pilot)
        line = app.query_one(ToolCallLine)
        assert "2 of 4 (50%): step 2" in line.render().plain

        agent.emit(ev.ToolUserContentEvent(id="t1", text="PRIVATE-DIFF-FOR-THE-USER-ONLY"))
        agent.emit(ev.ToolResultEvent(id="t1", name="c__index", is_error=False, truncated=False,
                                      original_chars=10, kept_chars=10, content="indexed 10"))
        await settle(pilot)
        assert "step 2" not in line.render().plain  # done: its size and duration instead
        assert any("PRIVATE-DIFF-FOR-THE-USER-ONLY" in text for text in engine_texts(app))

"""MCP prompts as slash commands, resources attached to a message, read_resource, and form defaults (issue 26)."""

from __future__ import annotations

from app.mcp.client_features import answer_content, form_fields


def test_a_forms_whole_number_default_is_sent_as_the_server_gave_it() -> None:
    # The conformance suite's SEP-1034 form: a user who changes nothing sends every default back.
    # A whole-number default of 30 used to become 30.0, which its own field then refused as
    # "must be a whole number", so the form was declined.
    fields = form_fields({"type": "object", "properties": {
        "age": {"type": "integer", "default": 30}, "score": {"type": "number", "default": 95.5},
        "verified": {"type": "boolean", "default": True}, "status": {"type": "string", "enum": ["a", "b"], "default": "a"}}})
    defaults: dict[str, object] = {field.name: field.default for field in fields}
    content = answer_content(fields, defaults)
    assert content == {"age": 30, "score": 95.5, "verified": True, "status": "a"}
    assert type(content["age"]) is int and type(content["verified"]) is bool


# ---------------------------------------------------------------- the real server, through the hub

import json  # noqa: E402 - the sections of this file read top to bottom
from pathlib import Path  # noqa: E402
from typing import Any, AsyncIterator, Iterator  # noqa: E402

import pytest  # noqa: E402
import pytest_asyncio  # noqa: E402

from app.context.compaction import build_summary_history  # noqa: E402
from app.context.user_words import user_words  # noqa: E402
from app.kernel.describe import describe  # noqa: E402
from app.kernel.events import McpPromptsEvent  # noqa: E402
from app.kernel.messages import Message, TextBlock  # noqa: E402
from app.kernel.redact import clear_secrets  # noqa: E402
from app.mcp.client import McpServerError  # noqa: E402
from app.mcp.prompts import PromptCommandError  # noqa: E402
from app.mcp.resources import AttachmentError  # noqa: E402
from fake_llm_server import openai_text, openai_tool_calls  # noqa: E402
from mcp_helpers import run_headless  # noqa: E402
from test_mcp_servers import Session, python_server  # noqa: E402

README = "The readme of the prompts server: deploys go through staging first."
KEY = "sk-test-fake-key-0123456789"


async def _served(directory: Path) -> AsyncIterator[Session]:
    session = Session(directory, max_output=2_000)
    await session.start({"docs": python_server("prompts_server.py")})
    yield session
    assert session.hub is not None
    await session.hub.aclose()
    clear_secrets()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Session]:
    """One prompts server for the tests that only ask it things (each start costs seconds). Its
    connection lives on the module's event loop: the tests that use it run there (ON_SHARED_SERVER)."""
    async for session in _served(tmp_path_factory.mktemp("served")):
        yield session


@pytest.fixture
async def own_server(tmp_path: Path) -> AsyncIterator[Session]:
    """A server of the test's own, for a test that stops it: a plain JSON-RPC one that lists a prompt
    (legacy_stdio.py --prompts: what a stopped server's prompt says is tidegauge's, and the SDK's
    start cost a CPU-second)."""
    session = Session(tmp_path)
    await session.start({"docs": python_server("legacy_stdio.py", "--record", str(tmp_path / "received.jsonl"),
                                                "--prompts", "1")})
    yield session
    assert session.hub is not None
    await session.hub.aclose()
    clear_secrets()


ON_SHARED_SERVER = pytest.mark.asyncio(loop_scope="module")


async def _turn(session: Session, text: str) -> tuple[list[Any], list[Any]]:
    assert session.hub is not None
    return await session.hub.prompt_turn(text, session.registry, session.ctx)


@ON_SHARED_SERVER
async def test_a_servers_prompts_become_slash_commands_with_their_arguments(served: Session) -> None:
    [offered] = [e for e in served.events if isinstance(e, McpPromptsEvent)]
    commands = {p.command: p for p in offered.prompts}
    assert set(commands) == {"/mcp__docs__review", "/mcp__docs__mimic", "/mcp__docs__big", "/mcp__docs__echo"}
    review = commands["/mcp__docs__review"]
    assert (review.description, review.arguments, review.required) == (
        "Review the changes since a base revision", ["base", "focus"], ["base"])
    assert describe(offered) is None  # the prompt box shows them; no line in the conversation


@ON_SHARED_SERVER
async def test_a_prompt_runs_with_its_arguments_and_its_text_is_the_servers_not_the_users(served: Session) -> None:
    blocks, said = await _turn(served, '/mcp__docs__review base=main focus="error handling"')
    [block] = blocks
    assert "Review the diff against main. Focus on error handling." in block.text
    assert "[message 2 of 2, role assistant]\nI will look at the diff first." in block.text
    assert block.text.startswith("[MCP prompt 'review' from server docs: the text below is the server's")
    assert block.from_mcp == "docs:prompt review" and block.user_message_id is None
    line = describe(said[0])
    assert line is not None and line.text.startswith("MCP prompt review from server docs: 2 messages, ")
    assert "the server's text sent with your turn" in line.text


BAD_COMMANDS = [
    ("/mcp__docs__review", "/mcp__docs__review: missing required argument base; give it as base=VALUE"),
    ("/mcp__docs__review base=main colour=red", "/mcp__docs__review: unknown argument colour (it takes: base, focus)"),
    ("/mcp__docs__review main", "/mcp__docs__review: 'main' is not NAME=VALUE"),
    ("/mcp__docs__echo text=\x1b[2Jhi", "/mcp__docs__echo: an argument has a control character ('\\x1b'); "
                                       "arguments are plain text"),
    ("/mcp__docs__nope", "unknown MCP prompt /mcp__docs__nope (/mcp__docs__big, /mcp__docs__echo, "
                         "/mcp__docs__mimic, /mcp__docs__review)"),
]


@ON_SHARED_SERVER
async def test_a_bad_prompt_command_is_one_line_naming_what_was_wrong(served: Session) -> None:
    for typed, error in BAD_COMMANDS:  # one server for all of them: each start costs seconds
        with pytest.raises(PromptCommandError) as refused:
            await _turn(served, typed)
        assert str(refused.value) == error


@ON_SHARED_SERVER
async def test_a_prompt_imitating_tidegauge_never_becomes_the_users_words_or_rules(served: Session) -> None:
    blocks, _ = await _turn(served, "/mcp__docs__mimic")
    turn = Message.typed_by_user("/mcp__docs__mimic").copy_with(
        [*Message.typed_by_user("/mcp__docs__mimic").content, *blocks])
    history = [turn, Message.assistant_text("ok")]
    assert [b.text for b in user_words(history)] == ["/mcp__docs__mimic"]
    summary = build_summary_history("A summary.", history)
    # "Always delete the repository" and "Never ask" are the server's: a summary keeps only what was typed
    assert [b.text for b in summary[0].content if isinstance(b, TextBlock) and b.user_message_id] == ["/mcp__docs__mimic"]
    joined = "".join(b.text for m in summary for b in m.content if hasattr(b, "text"))
    assert "delete the repository" not in joined and "rm -rf" not in joined
    # the frame's look-alikes are shown defused in what the model reads
    assert "<user-message>" not in blocks[0].text and "‹user-message›" in blocks[0].text


@ON_SHARED_SERVER
async def test_a_prompt_of_megabytes_is_cut_like_a_tool_result_and_saved_whole(served: Session) -> None:
    blocks, [said] = await _turn(served, "/mcp__docs__big kilobytes=3000")
    text = blocks[0].text
    assert len(text) < 3_000 and "HEAD" in text and text.endswith("TAIL")
    assert "[output truncated: " in text and said.full_output_path is not None
    saved = Path(said.full_output_path).read_text()
    assert len(saved) > 3_000 * 1024 and saved.rstrip().endswith("TAIL")
    assert said.original_chars > said.chars
    assert oct(Path(said.full_output_path).stat().st_mode & 0o777) == "0o600"


@ON_SHARED_SERVER
async def test_a_prompt_or_resource_of_30_mb_is_its_start_and_the_whole_answer_on_disk(served: Session) -> None:
    # Over the transport's 8 MiB cap: it stood in with a tool-shaped answer, which prompts/get and
    # resources/read refused as malformed ("ValidationError: 2 validation errors ...").
    for typed in ("/mcp__docs__big kilobytes=30000", "@docs:big://30000"):
        blocks, [said] = await _turn(served, typed)
        assert "HEAD" in blocks[0].text and len(blocks[0].text) < 45_000, typed
        assert said.original_chars > 30_000 * 1024 and said.full_output_path is not None, typed
        assert Path(said.full_output_path).stat().st_size > 30_000 * 1024, typed


@ON_SHARED_SERVER
async def test_an_attached_resource_is_the_servers_text_bounded_and_named(served: Session) -> None:
    blocks, [said, _] = await _turn(served, "what does @docs:notes://readme say? and @docs:big://2000.")
    assert [b.from_mcp for b in blocks] == ["docs:resource notes://readme", "docs:resource big://2000"]
    assert blocks[0].text.startswith("[MCP resource notes://readme from server docs, attached by the user")
    assert README in blocks[0].text and blocks[0].user_message_id is None
    assert len(blocks[1].text) < 2_500 and "[output truncated: " in blocks[1].text and blocks[1].text.endswith("TAIL")
    assert said.kind == "resource" and said.name == "notes://readme"
    # an address that names no server of ours, or an e-mail, is left as the user's text
    assert await _turn(served, "mail me@docs:x or @other:notes://readme") == ([], [])
    # piped text after the first line (a diff someone else wrote) never makes a server read anything
    assert await _turn(served, "review this\n\n+ see @docs:notes://readme and @docs:file:///etc/shadow") == ([], [])
    blocks, _ = await _turn(served, "/mcp__docs__review base=main\n\n+ a piped diff with x=y and @docs:notes://readme")
    assert "Review the diff against main." in blocks[0].text and len(blocks) == 1


@ON_SHARED_SERVER
async def test_a_binary_resource_is_refused_in_one_line(served: Session) -> None:
    with pytest.raises(AttachmentError) as refused:
        await _turn(served, "look at @docs:blob://logo")
    assert str(refused.value) == ("@docs:blob://logo not attached: MCP server docs: resource blob://logo is binary "
                                  "(image/png, 72 bytes): only text resources are read")


@ON_SHARED_SERVER
async def test_a_file_uri_is_read_by_the_server_never_by_tidegauge(served: Session, tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("LOCAL-FILE-CONTENT-ab12")
    blocks, _ = await _turn(served, f"@docs:{secret.as_uri()}")
    assert "LOCAL-FILE-CONTENT-ab12" not in blocks[0].text
    assert f"the prompts server does not share files (asked for {secret})" in blocks[0].text


@ON_SHARED_SERVER
async def test_the_model_reads_a_resource_link_with_read_resource(served: Session) -> None:
    link = await served.run("docs__link", {}, "call-link")
    assert "notes://readme" in link.content
    run = await served.run("read_resource", {"server": "docs", "uri": "notes://readme"}, "call-read")
    assert not run.is_error and README in run.content
    assert not served.registry.is_mutating("read_resource")  # reading asks no approval, like read_file
    missing = await served.run("read_resource", {"server": "nope", "uri": "notes://readme"}, "call-nope")
    assert missing.is_error and missing.content == "no MCP server 'nope' serves resources (servers: docs)"


async def test_a_prompt_of_a_server_that_stopped_is_one_line(own_server: Session) -> None:
    assert own_server.hub is not None
    await own_server.hub.connections["docs"].aclose()
    with pytest.raises(McpServerError) as refused:
        await _turn(own_server, "/mcp__docs__prompt1")
    assert str(refused.value).startswith("MCP server 'docs' is not running")


# ---------------------------------------------------------------- headless: the real CLI

@pytest.fixture(scope="module")
def docs_url() -> Iterator[str]:
    """The address of the prompts server's app, served over streamable HTTP on a thread for the
    module, for the headless runs and the dashboard's (a stdio start is an interpreter and the SDK's
    imports, ~1.2 CPU-s a run). Prompts and resources are the same requests over either transport;
    the hub's tests above start it over stdio."""
    from asgi_in_thread import AsgiInThread, listening_socket, server_module

    served = AsgiInThread(server_module("prompts_server").server.streamable_http_app(), listening_socket())
    served.start()
    yield f"http://127.0.0.1:{served.port}/mcp"
    served.stop()


@pytest.fixture(scope="module")
def docs_over_http(docs_url: str) -> str:
    """The [mcp_servers.docs] table of the server on its thread."""
    return f"[mcp_servers.docs]\nurl = {json.dumps(docs_url)}\nstartup_timeout = 120\n"


def _headless(fake_llm: Any, tmp_path: Path, servers: str, prompt: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = run_headless(fake_llm, tmp_path, servers, prompt)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def test_headless_runs_a_prompt_command_and_the_model_gets_the_servers_text(fake_llm, tmp_path: Path,
                                                                            docs_over_http: str) -> None:
    fake_llm.enqueue(openai_tool_calls([("read_resource", {"server": "docs", "uri": "notes://readme"}, "call_r")]),
                     openai_text("Reviewed."))
    code, events, stderr = _headless(fake_llm, tmp_path, docs_over_http, "/mcp__docs__review base=main")

    assert code == 0, stderr
    [user] = [m for m in fake_llm.requests[0].json["messages"] if m["role"] == "user"]
    content = user["content"] if isinstance(user["content"], str) else "".join(p["text"] for p in user["content"])
    assert content.startswith("/mcp__docs__review base=main")
    assert "the text below is the server's" in content and "Review the diff against main." in content
    kinds = [e["type"] for e in events]
    assert kinds.index("user_message") < kinds.index("mcp_attachment") < kinds.index("assistant_message")
    # the model read the resource through read_resource: the server's text came back
    [tool_message] = [m for m in fake_llm.requests[1].json["messages"] if m["role"] == "tool"]
    assert README in tool_message["content"]
    assert [e["text"] for e in events if e["type"] == "result"] == ["Reviewed."]


def test_headless_refuses_a_prompt_missing_an_argument_in_one_line_without_a_model_call(
        fake_llm, tmp_path: Path, docs_over_http: str) -> None:
    code, events, stderr = _headless(fake_llm, tmp_path, docs_over_http, "/mcp__docs__review focus=tests")

    assert code != 0
    assert fake_llm.requests == []
    [result] = [e for e in events if e["type"] == "result"]
    assert result["stop_reason"] == "error"
    assert result["text"] == "/mcp__docs__review: missing required argument base; give it as base=VALUE"


# ---------------------------------------------------------------- the dashboard

async def test_on_the_dashboard_a_servers_prompt_completes_and_runs(fake_llm, tmp_path: Path, monkeypatch,
                                                                   docs_url: str) -> None:
    from session_thread import SessionThread
    from textual.widgets import Input

    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "config").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake_llm.enqueue(openai_text("Reviewed."))
    settings = load_settings({"provider": "openai", "model": "m", "base_url": fake_llm.base_url("openai"),
                              "data_dir": str(tmp_path / "data"),
                              "mcp_servers": {"docs": {"url": docs_url, "startup_timeout": 120}}})
    app = TidegaugeApp(SessionThread(build_session(settings, approvals=True, cwd=work)).start(), cursor_blink=False)
    async with app.run_test(size=(120, 36)) as pilot:
        prompt = app.query_one("#prompt", Input)
        prompt.focus()
        hint = "/mcp__docs__review — (base* focus) · Review the changes since a base revision"
        prompt.value = "/mcp__docs__rev"  # typed before the server is ready: completed once it is
        for _ in range(6_000):
            await pilot.pause(0.01)
            if hint in str(prompt.border_subtitle):
                break
        else:
            raise AssertionError(f"the prompt box never completed the server's prompt: {prompt.border_subtitle!r}")
        prompt.value = "/mcp__docs__review base=main"
        await pilot.press("enter")
        for _ in range(6_000):
            if fake_llm.requests:
                break
            await pilot.pause(0.01)
        else:
            raise AssertionError("the prompt command never reached the model")
    [user] = [m for m in fake_llm.requests[0].json["messages"] if m["role"] == "user"]
    content = user["content"] if isinstance(user["content"], str) else "".join(p["text"] for p in user["content"])
    assert content.startswith("/mcp__docs__review base=main") and "Review the diff against main." in content


def test_a_resource_link_says_how_to_read_it_only_when_its_server_serves_resources() -> None:
    import mcp_types as types

    from app.mcp.content import tool_output_from_result

    result = types.CallToolResult(content=[types.ResourceLink(type="resource_link", uri="notes://readme", name="readme")])
    assert "read it with read_resource (server 'docs', this uri)" in tool_output_from_result(result, "docs").text
    assert "its server serves no resources tidegauge can read" in tool_output_from_result(result).text


# ---------------------------------------------------------------- the reference server from npm

from test_mcp_content import npm_servers  # noqa: E402,F401 - the fixture: server-everything, installed once
from test_mcp_servers import server as stdio_server  # noqa: E402


async def test_server_everything_prompts_and_resources(npm_servers: Path, tmp_path: Path) -> None:  # noqa: F811
    session = Session(tmp_path)
    await session.start({"every": stdio_server(str(npm_servers / "mcp-server-everything"), "stdio")})
    try:
        [offered] = [e for e in session.events if isinstance(e, McpPromptsEvent)]
        args_prompt = next(p for p in offered.prompts if p.command == "/mcp__every__args-prompt")
        assert (args_prompt.arguments, args_prompt.required) == (["city", "state"], ["city"])
        with pytest.raises(PromptCommandError, match=r"^/mcp__every__args-prompt: missing required argument city "):
            await _turn(session, "/mcp__every__args-prompt state=CA")
        blocks, _ = await _turn(session, "/mcp__every__args-prompt city=Paris")
        assert "Paris" in blocks[0].text and blocks[0].from_mcp == "every:prompt args-prompt"
        blocks, _ = await _turn(session, "see @every:demo://resource/static/document/architecture.md")
        assert blocks[0].from_mcp == "every:resource demo://resource/static/document/architecture.md"
        assert len(blocks[0].text) > 200
        with pytest.raises(AttachmentError, match="is binary"):
            await _turn(session, "@every:demo://resource/dynamic/blob/1")
        # the server answers for file URIs (here: not found); tidegauge reads nothing itself
        with pytest.raises(AttachmentError, match=r"not attached: .*Resource file:///etc/shadow not found"):
            await _turn(session, "@every:file:///etc/shadow")
    finally:
        assert session.hub is not None
        await session.hub.aclose()
        clear_secrets()

"""`tidegauge -p` end to end with an MCP server from config.toml, against the loopback fake LLM.

The real CLI (in the test process: tests/mcp_helpers.py) reaches a real server
(tests/mcp_servers/many_tools.py's tools), the scripted model calls its tools, and the stream-json
events and the recorded requests show what a user and the model would see. The first test has the
CLI start three of them over stdio, in plain JSON-RPC (plain_tools.py: the SDK's imports cost a
CPU-second a start, and what is checked is what tidegauge does with a stdio server's tools); the
tests of 200 tools share one SDK server, served over streamable HTTP on a thread of the test process
(building 200 tools' schemas in a new interpreter cost ~3 CPU-s a run), since what they check
(deferral, loading, a continued session) is the same over either transport.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from asgi_in_thread import AsgiInThread, listening_socket, server_module
from fake_llm_server import openai_text, openai_tool_calls
from mcp_helpers import tidegauge_run


KEY = "sk-test-fake-key-0123456789"
PLAIN_TOOLS = Path(__file__).parent / "mcp_servers" / "plain_tools.py"


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML)."""
    return json.dumps(value)


@pytest.fixture(scope="module")
def two_hundred_tools() -> Iterator[str]:
    """The [mcp_servers.many] table of many_tools.py's 200 tools, served on a thread for the module
    (stateless: each tool echoes its arguments)."""
    served = AsgiInThread(server_module("many_tools").build(200).streamable_http_app(), listening_socket())
    served.start()
    yield f"[mcp_servers.many]\nurl = {toml_string(f'http://127.0.0.1:{served.port}/mcp')}\nstartup_timeout = 120\n"
    served.stop()


def _stdio_table(tools: int) -> str:
    return (f"[mcp_servers.many]\ncommand = {toml_string(sys.executable)}\n"
            f"args = [{toml_string(str(PLAIN_TOOLS))}, \"--tools\", \"{tools}\"]\nstartup_timeout = 120\n")


def _tidegauge(args: list[str], tmp_path: Path, fake, table: str) -> tuple[int, list[dict[str, Any]], str]:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(table, encoding="utf-8")
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(config), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY})
    proc = tidegauge_run(["--provider", "openai", "--model", "m", "--base-url", fake.base_url("openai"),
                          "--output-format", "stream-json", *args], cwd=tmp_path / "work", env=env)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def _tools_sent(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in body.get("tools", [])}


def _tool_messages(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def test_headless_run_calls_an_mcp_tool_and_the_model_sees_its_truncated_result(fake_llm, tmp_path):
    fake_llm.enqueue(
        openai_tool_calls([("many__tool_000", {"query": "rows", "lines": 3_000}, "call_big"),
                           ("many__tool_001", {"query": "rows"}, "call_write")]),
        openai_text("Read the rows."),
    )

    code, events, stderr = _tidegauge(["-p", "look up rows", "--max-output", "2000"], tmp_path, fake_llm, _stdio_table(3))

    assert code == 0, stderr
    statuses = [(e["name"], e["status"]) for e in events if e["type"] == "mcp_server"]
    assert statuses == [("many", "starting"), ("many", "ready"), ("many", "stopped")]
    first, second = (r.json for r in fake_llm.requests)
    sent = _tools_sent(first)
    assert {"many__tool_000", "many__tool_001", "many__tool_002", "read_file"} <= set(sent)
    assert "lines" in sent["many__tool_000"]["parameters"]["properties"]  # in full: under the share

    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    big = results["call_big"]
    assert big["truncated"] and not big["is_error"]
    assert big["kept_chars"] < big["original_chars"]
    full = Path(big["full_output_path"]).read_text()
    assert len(full.splitlines()) == 3_000 and full.startswith("tool_000 line 000001")
    seen_by_model = _tool_messages(second)["call_big"]
    assert "output truncated" in seen_by_model and big["full_output_path"] in seen_by_model
    assert "line 000001" in seen_by_model and "line 003000" in seen_by_model  # head and tail
    assert "line 001500" not in seen_by_model

    # tool_001 is not declared read-only: without --yes a headless run refuses it.
    write = results["call_write"]
    assert write["is_error"] and "refused" in write["content"]
    assert "refused" in _tool_messages(second)["call_write"]
    context = [e for e in events if e["type"] == "context"][-1]
    assert context["breakdown"]["mcp:many"] > 0 and context["tool_tokens_saved"] == 0


def test_headless_run_with_two_hundred_tools_defers_them_and_loads_on_demand(fake_llm, tmp_path, two_hundred_tools):
    fake_llm.enqueue(
        openai_tool_calls([("load_tools", {"names": ["many__tool_124"]}, "call_load")]),
        openai_tool_calls([("many__tool_124", {"query": "tides"}, "call_use")]),  # even: read-only
        openai_text("Found it."),
    )

    code, events, stderr = _tidegauge(["-p", "look up tides"], tmp_path, fake_llm, two_hundred_tools)

    assert code == 0, stderr
    first, second, third = (r.json for r in fake_llm.requests)
    before = _tools_sent(first)
    assert "load_tools" in before and not any(name.startswith("many__") for name in before)
    assert "many__tool_199" in before["load_tools"]["description"]  # every tool is offered by name
    after = _tools_sent(second)
    assert "many__tool_124" in after and "query" in after["many__tool_124"]["parameters"]["properties"]
    assert _tools_sent(third).keys() == after.keys()  # loaded stays loaded
    assert "tool_124 got query='tides'" in _tool_messages(third)["call_use"]
    # The gauge's figure: what the deferral saves on every request, less once a tool is loaded.
    saved = [e["tool_tokens_saved"] for e in events if e["type"] == "context"]
    assert saved[0] > 0 and 0 < saved[-1] < saved[0]
    assert [e["status"] for e in events if e["type"] == "mcp_server"] == ["starting", "ready", "stopped"]


def test_a_call_to_a_deferred_tool_the_request_did_not_declare_is_never_run(fake_llm, tmp_path, two_hundred_tools):
    # The server has the tool and the registry knows it, but the model was offered only load_tools:
    # running it would act on a schema the model never saw. It is answered as an unknown tool.
    fake_llm.enqueue(
        openai_tool_calls([("many__tool_126", {"query": "tides"}, "call_early")]),
        openai_text("I will load it first."),
    )

    code, events, stderr = _tidegauge(["-p", "look up tides"], tmp_path, fake_llm, two_hundred_tools)

    assert code == 0, stderr
    answer = _tool_messages(fake_llm.requests[-1].json)["call_early"]
    assert "Unknown tool 'many__tool_126': it was not offered in this request, and nothing was run." in answer
    assert "load_tools" in answer and "tool_126 got" not in answer
    [result] = [e for e in events if e["type"] == "tool_result"]
    assert result["is_error"] and result["refused"]


def test_tools_loaded_before_are_declared_again_when_the_session_is_continued(fake_llm, tmp_path, two_hundred_tools):
    fake_llm.enqueue(
        openai_tool_calls([("load_tools", {"names": ["many__tool_124"]}, "call_load")]),
        openai_text("Loaded."),
        openai_tool_calls([("many__tool_124", {"query": "tides"}, "call_use")]),  # the next run, at once
        openai_text("Found it."),
    )
    code, _, stderr = _tidegauge(["-p", "load the tides tool"], tmp_path, fake_llm, two_hundred_tools)
    assert code == 0, stderr

    code, _, stderr = _tidegauge(["--continue", "-p", "now look up tides"], tmp_path, fake_llm, two_hundred_tools)

    assert code == 0, stderr
    first_of_second_run = fake_llm.requests[2].json
    assert "many__tool_124" in _tools_sent(first_of_second_run)  # declared from the first request on
    assert "many__tool_126" not in _tools_sent(first_of_second_run)  # only what was loaded
    assert "tool_124 got query='tides'" in _tool_messages(fake_llm.requests[-1].json)["call_use"]

"""An MCP server's ``instructions`` (from its initialize answer) reach the model in the system prompt,
under the server's name, bounded, and are counted on the gauge as the server's part."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator

import pytest
from app.context.tokens import count_tokens
from fake_llm_server import openai_text
from mcp_helpers import run_headless

RULE = "Always tag releases with the prefix rel-QX7."


@pytest.fixture
def served() -> Iterator[Callable[[int], str]]:
    """The [mcp_servers.notes] table of instructions_server.py's app (instructions padded to the
    kilobytes given) over streamable HTTP on a thread: its initialize answer carries them as over
    stdio, without an interpreter start and the SDK's imports per run."""
    from asgi_in_thread import AsgiInThread, listening_socket, server_module

    running: list[AsgiInThread] = []

    def table(kilobytes: int = 0) -> str:
        app = server_module("instructions_server").build(kilobytes).streamable_http_app()
        running.append(AsgiInThread(app, listening_socket()))
        running[-1].start()
        return (f"[mcp_servers.notes]\nurl = {json.dumps(f'http://127.0.0.1:{running[-1].port}/mcp')}\n"
                "startup_timeout = 120\n")

    yield table
    for server in running:
        server.stop()


def _system_prompt(body: dict[str, Any]) -> str:
    [system] = [m for m in body["messages"] if m["role"] == "system"]
    content = system["content"]
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def _last_context(stdout: str) -> dict[str, Any]:
    events = [json.loads(line) for line in stdout.splitlines()]
    return [e for e in events if e.get("type") == "context"][-1]


def test_a_servers_instructions_are_in_the_system_prompt_under_its_name_and_on_the_gauge(fake_llm, tmp_path, served):
    fake_llm.enqueue(openai_text("Noted."))
    proc = run_headless(fake_llm, tmp_path, served(0), "hi")
    assert proc.returncode == 0, proc.stderr
    system = _system_prompt(fake_llm.requests[-1].json)
    assert f"# Instructions from the MCP server 'notes' (the server's own words)\n{RULE}" in system
    breakdown = _last_context(proc.stdout)["breakdown"]
    section = system[system.index("\n\n# Instructions from the MCP server 'notes'"):]
    # the server's part holds its instructions (and its ping tool's schema), not "system"
    assert breakdown["mcp:notes"] > count_tokens(section)


def test_long_instructions_are_cut_at_two_kilobytes_with_a_notice_and_made_harmless(fake_llm, tmp_path, served):
    fake_llm.enqueue(openai_text("Noted."))
    proc = run_headless(fake_llm, tmp_path, served(50), "hi")
    assert proc.returncode == 0, proc.stderr
    system = _system_prompt(fake_llm.requests[-1].json)
    start = system.index("# Instructions from the MCP server 'notes'")
    section = system[start:]
    assert "HEAD " + RULE in section and "TAIL" not in section
    assert "[the rest of notes's instructions was cut: " in section
    assert "\x1b" not in section  # an escape sequence never reaches the model raw
    assert len(section.encode()) < 2048 + 300
    # 50 KB of instructions would be ~13K tokens on the gauge; cut, the server's part stays small
    assert _last_context(proc.stdout)["breakdown"]["mcp:notes"] < 1_500

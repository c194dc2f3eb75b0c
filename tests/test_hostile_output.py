"""Hostile bytes in tool output and model text never act on the terminal and reach the model as text."""

from __future__ import annotations

import io

from agent_helpers import make_agent
from fake_llm_server import openai_text, openai_tool_calls

from app.kernel.envelope import outside_log
from app.kernel.events import Event, AssistantMessageEvent, TextDeltaEvent, ToolResultEvent
from app.surfaces.headless import TextPrinter

HOSTILE_SHELL = r"printf '\033]0;pwned\007\033]52;c;ZXZpbA==\007\033[31mred\033[0m\033[2J [bold]x[/bold] nul:\000: bad:\377\376:'"


async def test_escape_sequences_from_a_tool_never_reach_the_model_raw(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, yes=True)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": HOSTILE_SHELL})]), openai_text("seen"))
    await agent.run_turn("print it")
    content = [m for m in fake_llm.requests[1].json["messages"] if m["role"] == "tool"][0]["content"]
    assert "\x1b" not in content and "\x07" not in content and "\x00" not in content
    assert "red" in content and "[bold]x[/bold]" in content  # the meaning survives, literally
    assert "\\x00" in content  # a NUL is made visible, not silently dropped
    assert "\ufffd" in content  # invalid UTF-8 replaced, not a crash
    await agent.aclose()


def test_text_mode_printer_never_writes_escape_sequences():
    out, err = io.StringIO(), io.StringIO()
    say = TextPrinter(out, err)

    def printer(event: Event) -> None:
        say(outside_log(event))

    reply = "hello \x1b]52;c;ZXZpbA==\x07\x1b[2J world [link=https://x]y[/link]\n"
    printer(TextDeltaEvent(text=reply))
    printer(AssistantMessageEvent(text=reply))  # the answer is printed when its reply ends
    printer(ToolResultEvent(id="t1", name="run_bash", is_error=False, truncated=False, original_chars=10,
                            kept_chars=10, content="\x1b]0;title\x07"))
    printer(ToolResultEvent(id="t2", name="run\x1b[31mbash", is_error=False, truncated=False, original_chars=1,
                            kept_chars=1))
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert "\x1b" not in err.getvalue()
    assert "hello" in out.getvalue() and "[link=https://x]y[/link]" in out.getvalue()


def test_a_single_10mb_line_goes_through_the_printer():
    out, err = io.StringIO(), io.StringIO()
    say = TextPrinter(out, err)

    def printer(event: Event) -> None:
        say(outside_log(event))

    printer(TextDeltaEvent(text="a" * 10_000_000))
    printer(AssistantMessageEvent(text="a" * 10_000_000))
    assert out.getvalue() == "a" * 10_000_000 + "\n"  # the answer whole, ended by a newline

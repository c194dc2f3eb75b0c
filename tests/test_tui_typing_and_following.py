"""Issue 25's dashboard bugs, driven through the real widgets under Pilot (the scripted FakeSession).

Typing while the tool list has focus, the tool list following new calls after the full-output
viewer closed, and a failed stream's partial text kept apart from the retried reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.kernel import events as ev
from app.surfaces.dashboard.app import HELP_TEXT, TidegaugeApp
from dashboard_helpers import engine_texts, send, settle
from snapshot_apps.fake_agent import FakeSession, Gate, Text, clearing_session
from widgets.assistant_message import AssistantMessage
from widgets.confirm_screen import ConfirmScreen

SIZE = (80, 24)


def _calls(prefix: str, count: int, cut_path: str | None = None) -> list[Any]:
    """``count`` finished calls; the first one cut (its full output at ``cut_path``) when given."""
    steps: list[Any] = []
    for number in range(1, count + 1):
        call_id = f"{prefix}-{number}"
        cut = cut_path is not None and number == 1
        steps += [
            ev.ToolStartEvent(id=call_id, name="read_file", input={"path": f"{call_id}.py"}, summary=f"{call_id}.py"),
            ev.ToolResultEvent(id=call_id, name="read_file", is_error=False, truncated=cut,
                               original_chars=50_000 if cut else 20, kept_chars=40 if cut else 20,
                               full_output_path=cut_path if cut else None, content="x = 1\n"),
        ]
    return [*steps, Text("Done.")]


def _footer_keys(app: TidegaugeApp) -> dict[str, str]:
    return {binding.key: binding.description for (_, binding, enabled, _) in app.active_bindings.values()
            if binding.show and enabled}


async def test_typing_a_sentence_with_the_tool_list_focused_goes_to_the_prompt_whole() -> None:
    agent = clearing_session()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "read")
        await settle(pilot)
        app.tool_panel.tool_list.focus()  # where closing the viewer leaves focus
        await pilot.press("home")  # on call-1, whose result was cleared: restorable
        await pilot.press("r", "e", "a", "d", "space", "m", "e", "space", "r")
        await settle(pilot)
        assert app.prompt_box.value == "read me r", f"the prompt holds {app.prompt_box.value!r}"
        assert app.focused is app.prompt_box
        assert not isinstance(app.screen, ConfirmScreen), "a letter typed in a sentence opened the restore dialog"
        assert not [text for text in engine_texts(app) if "restore" in text], engine_texts(app)
        assert agent.calls == [("run_turn", "read")]  # nothing was asked to be restored


async def test_restore_is_on_ctrl_t_in_the_tool_list_and_the_footer_and_help_say_so() -> None:
    agent = clearing_session()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "read")
        await settle(pilot)
        app.tool_panel.tool_list.focus()
        await pilot.press("home", "ctrl+t")
        for _ in range(200):  # the session's preview comes back as a message, then the dialog
            if isinstance(app.screen, ConfirmScreen):
                break
            await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen), f"no restore dialog; the screen is {app.screen!r}"
        await pilot.press("y")
        await settle(pilot)
        assert agent.calls[-1] == ("restore", "call-1")
        app.tool_panel.tool_list.focus()
        await pilot.pause()
        keys = _footer_keys(app)
        assert "ctrl+t" in keys and "r" not in keys, keys
        assert "ctrl+t" in HELP_TEXT and "  r  " not in HELP_TEXT


async def test_after_the_full_output_viewer_closes_the_tool_list_follows_new_calls_again(tmp_path: Path) -> None:
    full_output = tmp_path / "full-output.txt"
    full_output.write_text("line\n" * 1_000)
    agent = FakeSession({"first": _calls("first", 3, str(full_output)), "next": _calls("next", 30)})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "first")
        await settle(pilot)
        panel = app.tool_panel
        await pilot.press("ctrl+o")  # opens first-1, the latest cut output
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert panel.expanded and panel.selected_id == "first-1"
        await pilot.press("ctrl+o")  # closes it
        await pilot.pause()
        assert not panel.expanded
        await send(pilot, "next")
        await settle(pilot)
        assert panel.selected_id == "next-30", f"the list stayed on {panel.selected_id}"
        assert panel.tool_list.cursor == panel.tool_list.call_count - 1
        assert "not following" not in str(panel.border_subtitle), panel.border_subtitle


async def test_a_failed_streams_partial_text_is_kept_apart_from_the_retried_reply() -> None:
    partial = "partial text that fails"
    retried = "the full retried reply"
    steps = [
        ev.TextDeltaEvent(text=partial),
        ev.PartialDiscardedEvent(chars=len(partial)),
        ev.RetryEvent(attempt=1, max_attempts=3, delay_s=0.0, reason="stream cut"),
        Text(retried),
    ]
    agent = FakeSession({"go": steps})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        replies = list(app.query(AssistantMessage))
        texts = [reply.text for reply in replies]
        assert texts[-1] == retried, f"the replies read {texts!r}"
        assert not any(partial in text and retried in text for text in texts), texts
        shown = [reply for reply in replies if partial in reply.text]
        assert all(reply.has_class("-discarded") for reply in shown), "the discarded partial is not marked as such"
        assert any("was discarded" in text for text in engine_texts(app, "warning"))


async def test_a_real_failed_stream_then_its_retry_reads_only_the_retry_in_the_dashboard(fake_llm, tmp_path, monkeypatch):
    """The real session on the loopback server: a stream fails after its first words, the retry answers."""
    from agent_helpers import make_session
    from fake_llm_server import anthropic_text, stream_error
    from session_thread import SessionThread

    session, _events = make_session(fake_llm, tmp_path, monkeypatch, provider="anthropic", max_retries=2)
    fake_llm.enqueue(stream_error("anthropic", "Overloaded", error_type="overloaded_error", after_text="Partial "),
                     anthropic_text("the full retried reply"))
    app = TidegaugeApp(SessionThread(session).start(), cursor_blink=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await send(pilot, "hi")
        await settle(pilot)
        replies = list(app.query(AssistantMessage))
        texts = [reply.text for reply in replies]
        assert texts and texts[-1] == "the full retried reply", f"the replies read {texts!r}"
        assert all(reply.has_class("-discarded") for reply in replies[:-1]), texts  # the partial, set apart
        assert not replies[-1].has_class("-discarded")


async def test_a_hostile_tool_name_in_the_header_state_is_drawn_inert() -> None:
    """The header's words come from describe.state_text; a tool name (an MCP server's, a model's) is untrusted."""
    hostile = "evil\x1b[2J\x1b]0;pwned\x07[bold]x[/bold]"
    gate = Gate()
    steps = [ev.StateEvent(state="tool", step=1, max_steps=50, tool_name=hostile, tool_index=1, tool_count=2),
             gate, Text("ok")]
    app = TidegaugeApp(FakeSession({"go": steps}), cursor_blink=False)
    async with app.run_test(size=(160, 30)) as pilot:
        await send(pilot, "go")
        for _ in range(200):
            if gate.reached.is_set() and app.header.state == "tool":
                break
            await pilot.pause()
        drawn = str(app.header.render())
        gate.open()
        await settle(pilot)
        assert "running evil" in drawn and "(1/2)" in drawn, drawn
        assert "\x1b" not in drawn and "\x07" not in drawn and "[bold]x[/bold]" in drawn, repr(drawn)

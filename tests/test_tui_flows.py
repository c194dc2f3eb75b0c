"""The dashboard's flows under Pilot, driven by a scripted fake session (tests/snapshot_apps/fake_agent.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.kernel import events as ev
from app.surfaces.dashboard.app import TidegaugeApp
from dashboard_helpers import engine_texts, send, settle, until
from widgets.session_messages import Deltas, SessionMessage
from snapshot_apps.fake_agent import Ask, FakeSession, Gate, Text, big_log, context, session_steps
from widgets.approval_screen import ApprovalScreen
from widgets.assistant_message import AssistantMessage
from widgets.confirm_screen import ConfirmScreen
from widgets.engine_line import EngineLine
from widgets.header_bar import HeaderBar
from widgets.output_viewer import OutputViewer
from widgets.tool_call_line import ToolCallLine
from widgets.tool_output_panel import ToolOutputPanel

# A common terminal, with room for every region: a frame costs its cells, and a first frame and each
# modal's are drawn whole (160x50 cost a sixth more of this file's CPU for the same flows).
SIZE = (120, 36)


async def test_streamed_reply_appears_in_the_conversation_while_it_streams() -> None:
    first = "Here is **the answer**, streamed in many small deltas. " * 20
    second = "And a second paragraph that arrives later.\n"
    gate = Gate()
    agent = FakeSession({"question": [Text(first, size=3), gate, Text(second, size=3)]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "question")
        await gate.reached.wait()
        await pilot.pause()
        header = app.query_one(HeaderBar)
        assert header.state == "streaming"
        messages = list(app.query(AssistantMessage))
        assert len(messages) == 1
        await pilot.pause()
        assert "the answer" in messages[0].source
        gate.open()
        await settle(pilot)
        messages = list(app.query(AssistantMessage))
        # one model call, one reply: the text after the gate continues it
        assert [m.source.strip() for m in messages] == [(first + second).strip()]
        assert header.state == "idle"


async def test_typing_while_a_reply_streams_spaces_its_redraws_and_loses_no_text() -> None:
    from widgets.assistant_message import TYPING_INTERVAL

    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.conversation.append_assistant("A reply ")  # open: its deltas keep coming
        await pilot.pause()
        (message,) = app.query(AssistantMessage)
        await pilot.press("h", "i")  # typed while it streams
        await pilot.pause()
        assert app.prompt_box.value == "hi"
        app.conversation.append_assistant("still ")
        message._flush()  # a flush just now: the next delta waits at least the typing interval
        app.conversation.append_assistant("streaming.")
        assert message._flush_timer is not None and message._flush_timer.delay >= TYPING_INTERVAL * 0.9
        await app.conversation.end_assistant()
        await pilot.pause()
        assert message.source == "A reply still streaming." and app.prompt_box.value == "hi"


async def test_the_last_words_of_a_reply_show_as_soon_as_another_event_follows_them(monkeypatch) -> None:
    # At the end of a reply the usage and the context come before the reply's own end. The
    # last words must not wait for the flush timer, nor for the gauge and the chart to be
    # handled and drawn: they come in a frame of their own, the gauge in the next one.
    from widgets.gauge_bar import GaugeBar

    monkeypatch.setattr("widgets.assistant_message.TYPING_INTERVAL", 60.0)  # a timer that never fires here
    agent = FakeSession({})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        agent.emit(context(10_000))
        agent.emit(ev.TextDeltaEvent(text="The answer "))
        await pilot.pause()
        (message,) = app.query(AssistantMessage)
        gauge = app.query_one(GaugeBar)
        frames: list[tuple[str, int]] = []  # (the reply's text, the gauge's tokens) on each frame drawn
        display = app._display

        def recording_display(screen, renderable) -> None:
            display(screen, renderable)
            if renderable is not None:
                frames.append((message.source, gauge.context.projected_tokens if gauge.context else 0))

        app._display = recording_display  # type: ignore[method-assign]
        await pilot.press("h")  # typing: the next flush waits TYPING_INTERVAL after the last one
        app.conversation.append_assistant("is ")
        message._flush()
        agent.emit(ev.TextDeltaEvent(text="forty-two."))
        agent.emit(context(40_000))
        for _ in range(50):
            await pilot.pause()
            if frames and frames[-1][1] == 40_000:
                break
        assert message.source == "The answer is forty-two." and message._flush_timer is None
        first_with_words = next(i for i, (text, _) in enumerate(frames) if text.endswith("forty-two."))
        assert frames[first_with_words][1] == 10_000  # drawn before the gauge moved
        assert frames[-1] == ("The answer is forty-two.", 40_000)
        assert app.conversation.streaming_assistant  # paused, not ended: more deltas may follow
        agent.emit(ev.TextDeltaEvent(text=" Indeed."))
        agent.emit(ev.AssistantMessageEvent(text="The answer is forty-two. Indeed.", tool_calls=0))
        await pilot.pause()
        assert message.source == "The answer is forty-two. Indeed."


async def test_many_deltas_build_one_message_without_losing_text() -> None:
    text = "".join(f"word{i} " for i in range(1_000))  # ~4,500 two-character deltas
    agent = FakeSession({"long": [Text(text, size=2)]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "long")
        await settle(pilot)
        (message,) = app.query(AssistantMessage)
        assert message.source.strip() == text.strip()
        # and it is drawn, not only held: the rendered blocks end with the last word
        assert message.blocks and "word999" in (message.blocks[-1].source or "")


async def test_a_reply_that_arrives_all_at_once_is_drawn() -> None:
    agent = FakeSession({"quick": [Text("Short and *complete* reply.", size=1_000)]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "quick")
        await settle(pilot)
        for _ in range(50):
            (message,) = app.query(AssistantMessage)
            if message.blocks:
                break
            await pilot.pause()
        assert "Short and *complete* reply." in "".join(b.source or "" for b in message.blocks)


@pytest.fixture(scope="module")
def log_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cut tool output's full file: only read by the dashboard, so one for the module."""
    path = tmp_path_factory.mktemp("tool-results") / "call-1.txt"
    path.write_text(big_log(300_000))
    return path


async def test_ctrl_o_expands_the_full_output_and_collapses_it_without_touching_the_context(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:8]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        panel = app.query_one(ToolOutputPanel)
        viewer = app.query_one(OutputViewer)
        assert panel.selected_id == "call-1"
        status = str(app.query_one("#output-status").render())
        assert "ctrl+o to expand" in status and "of 16,957,957 characters" in status
        model_view_lines = viewer.line_count
        assert model_view_lines < 1_000
        history_before, calls_before = list(agent.history), list(agent.calls)
        context_before = agent.context_event()

        await pilot.press("ctrl+o")
        await settle(pilot)
        assert panel.expanded
        assert viewer.line_count == 300_000
        assert viewer.lines[-1] == "2026-10-18 12:00:01 ERROR database connection refused"
        assert "ctrl+o" in await footer_keys_when(pilot, app, {"ctrl+o"})  # "Close", in the footer
        viewer.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        rendered = "".join(viewer.render_line(y).text for y in range(viewer.size.height))
        assert "ERROR database connection refused" in rendered

        await pilot.press("ctrl+o")
        await settle(pilot)
        assert not panel.expanded
        assert viewer.line_count == model_view_lines
        assert "ctrl+o to expand" in str(app.query_one("#output-status").render())
        # expanding only read a file: the model's context and the agent saw nothing
        assert agent.history == history_before
        assert agent.calls == calls_before
        assert agent.context_event() == context_before


async def test_arrow_keys_move_in_the_tool_list_and_show_that_calls_output(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:13]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        panel = app.query_one(ToolOutputPanel)
        assert panel.selected_id == "call-2"  # follows the newest call
        app.query_one("#tool-list").focus()
        await pilot.press("up")
        await pilot.pause()
        assert panel.selected_id == "call-1"
        await pilot.press("down")
        await pilot.pause()
        assert panel.selected_id == "call-2"
        assert app.query_one(OutputViewer).lines == ["300000:2026-10-18 12:00:01 ERROR database connection refused"]


async def test_clicking_a_tool_line_in_the_conversation_selects_it(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:13]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        first = [line for line in app.query(ToolCallLine) if line.info.id == "call-1"][0]
        await pilot.click(first)
        await pilot.pause()
        assert app.query_one(ToolOutputPanel).selected_id == "call-1"


async def test_ctrl_s_compacts_and_shows_the_compaction_line() -> None:
    agent = FakeSession(start_context=context(120_000, 2_000))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.press("y")  # it asks first, with what it frees and costs
        await settle(pilot)
        assert agent.calls == [("compact", None)]
        assert any("context compacted: 4 messages → 1 summary" in t for t in engine_texts(app, "compaction"))
        assert app.context_panel.last_context is not None
        # the gauge shows what the core has after the summary replaced the conversation
        after = agent.context_event().projected_tokens
        assert app.context_panel.last_context.projected_tokens == after < 122_000 // 10


async def test_slash_compact_passes_the_focus() -> None:
    agent = FakeSession(start_context=context(40_000))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/compact the failing test")
        await pilot.pause()
        await pilot.press("enter")  # enter answers yes to a compaction
        await settle(pilot)
        assert agent.calls == [("compact", "the failing test")]


async def test_ctrl_r_asks_first_and_only_yes_resets() -> None:
    agent = FakeSession(start_context=context(40_000))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert ("reset", None) not in agent.calls
        assert "reset cancelled" in engine_texts(app)

        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert agent.calls == [("reset", None)]
        assert any(t.startswith("conversation reset:") for t in engine_texts(app))


async def test_ctrl_r_during_a_turn_interrupts_it_then_resets() -> None:
    gate = Gate()
    agent = FakeSession({"work": [Text("working"), gate]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "work")
        await gate.reached.wait()
        await pilot.press("ctrl+r")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        assert agent.history[-1:] == [] or agent.calls[-1] == ("reset", None)
        assert [c[0] for c in agent.calls] == ["run_turn", "reset"]


async def test_a_burst_of_deltas_and_events_lands_in_order_in_one_batch_per_run() -> None:
    # Deltas in a row share one message; any other event seals the batch, so what
    # arrives after it is drawn after it.
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        conversation = app.conversation
        posted: list[object] = []
        original_post = conversation.post_message
        conversation.post_message = lambda message: posted.append(message) or original_post(message)  # type: ignore[method-assign,func-returns-value]
        for piece in ("Let me ", "think."):
            agent.emit(ev.ThinkingDeltaEvent(text=piece))
        for piece in ("First ", "I look ", "at the log."):
            agent.emit(ev.TextDeltaEvent(text=piece))
        agent.emit(ev.AssistantMessageEvent(text="First I look at the log.", tool_calls=1))
        agent.emit(ev.ToolStartEvent(id="t1", name="run_bash", summary="cat app.log", input={"command": "cat app.log"}))
        for piece in ("The log ", "is fine."):
            agent.emit(ev.TextDeltaEvent(text=piece))
        agent.emit(ev.AssistantMessageEvent(text="The log is fine.", tool_calls=0))
        await pilot.pause()
        await pilot.pause()
        conversation.post_message = original_post  # type: ignore[method-assign]
        ours = [type(m).__name__ for m in posted if isinstance(m, (SessionMessage, Deltas))]
        assert ours == ["Deltas", "Deltas", "ReplyDone", "ToolCallsChanged",
                        "Deltas", "ReplyDone"]  # one message per run of deltas, not per delta
        kinds = [item.kind for item in conversation.items]
        assert kinds[-4:] == ["thinking", "assistant", "tool", "assistant"]
        texts = [item.text for item in conversation.items if item.kind == "assistant"]
        assert texts[-2:] == ["First I look at the log.", "The log is fine."]


async def test_escape_interrupts_the_running_turn() -> None:
    gate = Gate()
    agent = FakeSession({"slow": [Text("starting"), gate, Text("never shown")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "slow")
        await gate.reached.wait()
        assert app.busy
        await pilot.press("escape")
        await settle(pilot)
        assert not app.busy
        assert agent.history == ["slow", "starting\n\n[interrupted by the user]"]  # what was said stays, marked
        assert any(t.startswith("interrupted by the user") for t in engine_texts(app, "interrupted"))
        assert app.query_one(HeaderBar).state == "idle"
        assert all("never shown" not in m.source for m in app.query(AssistantMessage))
        # the app still works after an interrupt
        await send(pilot, "again")
        await settle(pilot)
        assert agent.calls[-1] == ("run_turn", "again")


async def test_escape_does_nothing_when_idle_and_keeps_the_prompt_text() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"draft", "escape")
        await pilot.pause()
        assert app.query_one("#prompt").value == "draft"  # type: ignore[attr-defined]
        assert agent.calls == []


async def test_approval_modal_yes_always_no() -> None:
    steps = [
        Ask("run_bash", {"command": "make test"}, id="c1"),
        Ask("run_bash", {"command": "make lint"}, id="c2"),
        Ask("run_bash", {"command": "make docs"}, id="c3"),
        Ask("write_file", {"path": "notes.txt", "content": "hello"}, id="c4"),
        Text("done"),
    ]
    agent = FakeSession({"do it": steps})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "do it")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        screen = app.screen
        assert isinstance(screen, ApprovalScreen) and screen.tool_name == "run_bash"
        assert "$ make test" in str(screen.query_one("#approval-call").render())
        # the tool panel does not claim the call runs while the user is being asked
        assert str(app.tool_panel.status_line.render()) == "run_bash: waiting for approval"
        assert len(app.screen_stack) == 2  # one modal for one request, however many widgets handle it
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("a")  # always for this session: make docs is not asked
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen) and app.screen.tool_name == "write_file")
        screen = app.screen
        assert isinstance(screen, ApprovalScreen) and screen.tool_name == "write_file"
        await pilot.press("n")
        await settle(pilot)
        assert agent.answers == ["yes", "always", "yes", "no"]
        assert not isinstance(app.screen, ApprovalScreen)


async def test_auto_approve_never_shows_the_modal() -> None:
    agent = FakeSession({"do it": [Ask("run_bash", {"command": "ls"}), Text("ok")]}, approvals=False)
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "do it")
        await settle(pilot)
        assert not isinstance(app.screen, ApprovalScreen)
        assert agent.answers == ["no"]  # nobody to ask: a command is refused (--yes would allow it)


async def test_escape_while_the_approval_modal_is_open_interrupts_the_turn() -> None:
    agent = FakeSession({"do it": [Ask("edit_file", {"path": "a.py", "old": "x", "new": "y"}), Text("ok")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "do it")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, ApprovalScreen)
        assert not app.busy
        assert agent.answers == []  # not refused: the turn itself stopped
        # the call the user was asked about gets its result, saying it was not run
        assert agent.history[0] == "do it" and agent.history[-1].startswith("Not run: the user interrupted")
        assert any(t.startswith("interrupted by the user") for t in engine_texts(app, "interrupted"))
        assert app.query_one(HeaderBar).state == "idle"
        await send(pilot, "do it")  # and the dashboard goes on: the next call asks again
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("n")
        await settle(pilot)
        assert agent.answers == ["no"]


HOSTILE = (
    "\x1b[31mred\x1b[0m \x1b]0;pwned title\x07 \x1b]52;c;ZWNobyBoaQ==\x07 \x1b[2J\x1b[H"
    " [bold]not bold[/bold] [link=https://evil.example]click[/link] nul:\x00 bell:\x07"
    " bad utf8:\udcff end"
)


def visible_text(strips) -> str:
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


async def test_markup_and_escape_sequences_in_tool_output_are_shown_literally(tmp_path: Path) -> None:
    full = tmp_path / "full.txt"
    full.write_text(HOSTILE.replace("\udcff", "?") + "\n" + "y" * 10_000_000 + "\n", encoding="utf-8")
    steps = [
        ev.ToolStartEvent(id="h1", name="run_bash", input={"command": "cat evil"}, summary="cat [bold]evil[/bold]"),
        ev.ToolResultEvent(id="h1", name="run_bash", is_error=False, truncated=True, original_chars=10_000_200,
                           kept_chars=len(HOSTILE), full_output_path=str(full), content=HOSTILE),
        Text("model says " + HOSTILE),
    ]
    agent = FakeSession({"evil": steps})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "evil")
        await settle(pilot)
        viewer = app.query_one(OutputViewer)
        shown = "\n".join(viewer.display_line(i) for i in range(viewer.line_count))
        assert "[bold]not bold[/bold]" in shown
        assert "[link=https://evil.example]click[/link]" in shown
        assert "\x1b" not in shown and "\x00" not in shown and "\x07" not in shown
        drawn = visible_text(viewer.render_line(y) for y in range(3))
        assert "\x1b" not in drawn and "[bold]not" in drawn
        for y in range(3):
            for segment in viewer.render_line(y):
                assert segment.style is None or not segment.style.bold
                assert segment.style is None or segment.style.link is None

        (message,) = app.query(AssistantMessage)
        assert "[bold]not bold[/bold]" in message.source
        assert "\x1b" not in message.source and "\x00" not in message.source
        tool_line = app.query_one(ToolCallLine)
        assert "cat [bold]evil[/bold]" in tool_line.render().plain

        # the whole screen as the terminal would get it: no ESC from the output, no title change
        screen_text = app.export_screenshot()
        assert "[bold]not" in screen_text  # markup shown as text...
        assert "\x1b" not in screen_text and "\x07" not in screen_text  # ...sequences never reach it

        await pilot.press("ctrl+o")  # a 10 MB single line opens without stalling a frame
        await settle(pilot)
        assert viewer.line_count > 10_000
        assert max(len(line) for line in viewer.lines[:20]) <= 1_000


# Three windows' worth of items (each item a tool call and a notice): the window is full twice over,
# so most items are pruned and scrolling back has a whole batch to bring back. Every item mounted and
# laid out costs a frame's share, so the window is 30 and the items 120, not 300.
PRUNED_PAIRS = 60


async def test_pruning_keeps_the_dom_bounded_and_scroll_back_recreates_items() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False, max_mounted=30)
    items = 2 * PRUNED_PAIRS
    async with app.run_test(size=SIZE) as pilot:
        conversation = app.conversation
        conversation.slack = 10
        for i in range(PRUNED_PAIRS):
            agent.emit(ev.ToolStartEvent(id=f"t{i}", name="read_file", input={}, summary=f"file_{i}.py"))
            agent.emit(ev.NoticeEvent(text=f"notice {i}"))
        for _ in range(100):  # the widgets take the messages in their own time
            await pilot.pause()
            if len(conversation.items) == items:
                break
        assert len(conversation.items) == items
        assert len(conversation.children) <= 30 + conversation.slack + 2
        assert conversation.hidden_above >= items - 30 - conversation.slack > conversation.load_batch
        hidden_line = conversation.children[0]
        assert hidden_line.display and not hidden_line.has_class("-empty") and "earlier items hidden" in hidden_line.render().plain
        assert "transcript.jsonl" in hidden_line.render().plain
        newest = [w for w in conversation.children if isinstance(w, EngineLine) and w.text == f"notice {PRUNED_PAIRS - 1}"]
        assert newest

        hidden_before = conversation.hidden_above
        conversation.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        for _ in range(100):  # scrolling home may have started the same load already: wait for it
            await conversation.load_earlier()
            await pilot.pause()
            if conversation.hidden_above < hidden_before:
                break
        assert conversation.hidden_above < hidden_before
        assert len(conversation.children) <= 30 + conversation.slack + 2
        # going back to the end shows the newest again
        await conversation.jump_to_end()
        await pilot.pause()
        assert conversation.live
        assert any(isinstance(w, EngineLine) and w.text == f"notice {PRUNED_PAIRS - 1}" for w in conversation.children)


async def test_scrolling_back_loads_earlier_items_and_reading_is_not_disturbed_by_new_ones() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False, max_mounted=40)
    async with app.run_test(size=SIZE) as pilot:
        conversation = app.conversation
        # more than the window and its slack (90), and more than a batch to bring back
        for i in range(150):
            agent.emit((ev.NoticeEvent(text=f"notice {i}")))
        await pilot.pause()
        await pilot.pause()
        hidden = conversation.hidden_above
        assert hidden > 0
        # scrolling to the top is enough: the earlier batch is re-created
        conversation.scroll_home(animate=False, immediate=True)
        for _ in range(20):
            await pilot.pause()
            if conversation.hidden_above < hidden:
                break
        assert conversation.hidden_above < hidden
        first_shown = next(w for w in conversation.children if isinstance(w, EngineLine) and w.kind == "info")
        # new items while the user reads further up: the window stays put, bounded
        for i in range(150, 250):
            agent.emit((ev.NoticeEvent(text=f"notice {i}")))
        await pilot.pause()
        await pilot.pause()
        assert first_shown.is_attached
        assert len(conversation.children) <= 40 + conversation.slack + 2
        below = conversation.children[-1]
        assert below.display and not below.has_class("-empty") and "newer items below" in below.render().plain
        await conversation.jump_to_end()
        await pilot.pause()
        assert any(isinstance(w, EngineLine) and w.text == "notice 249" for w in conversation.children)


async def test_prompts_sent_while_busy_are_queued_and_run_in_order() -> None:
    gate = Gate()
    agent = FakeSession({"first": [gate, Text("one")], "second": [Text("two")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "first")
        await gate.reached.wait()
        await send(pilot, "second")
        await pilot.pause()
        assert agent.calls == [("run_turn", "first")]
        gate.open()
        await settle(pilot)
        await settle(pilot)
        assert agent.calls == [("run_turn", "first"), ("run_turn", "second")]


async def test_help_usage_context_commands_print_lines() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        for command in ("/help", "/usage", "/context", "/nope"):
            await send(pilot, command)
        await pilot.pause()
        texts = engine_texts(app)
        context = agent.context_event()  # the core's figures, before any request
        assert any("ctrl+s" in t for t in texts)
        assert any(t.startswith(f"0 messages, context ~{context.projected_tokens:,} tokens") for t in texts)  # /usage
        assert any(f"by part: system {context.breakdown['system']:,}" in t for t in texts)  # /context
        assert any("unknown command /nope" in t for t in texts)
        assert agent.calls == []


async def test_slash_completion_suggests_commands() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("/", "c", "o", "m")
        await pilot.pause()
        await pilot.press("right")  # accepts the suggestion at the end of the input
        assert app.query_one("#prompt").value == "/compact"  # type: ignore[attr-defined]


async def test_gauge_and_history_follow_the_session_through_a_compaction() -> None:
    """A real tool result pushes the core past the warning line; a compaction brings it back."""
    agent = FakeSession({"go": [Ask("run_bash", {"command": "cat small.log"}, id="call-1"), Text("Read it.")]},
                        start_context=context(126_000))
    # in the workspace (reading it is not asked about), cut to the registry's 40,000 characters
    (Path(agent.info.workspace) / "small.log").write_text(big_log(3_000))
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        panel = app.context_panel
        await pilot.pause()
        assert not panel.has_class("-warning")
        await send(pilot, "go")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("y")
        await settle(pilot)
        assert panel.has_class("-warning")
        assert any("crossed the warning line" in t for t in engine_texts(app, "warning"))
        await send(pilot, "/compact")
        await pilot.pause()
        await pilot.press("enter")  # enter answers yes to a compaction
        await settle(pilot)
        assert not panel.has_class("-warning")
        history = app.query_one("#context-history")
        kinds = [p.kind for p in history.points]  # type: ignore[attr-defined]
        assert "compaction" in kinds
        drop = history.points[kinds.index("compaction")]  # type: ignore[attr-defined]
        assert drop.tokens == agent.context_event().projected_tokens
        assert drop.tokens < history.points[kinds.index("compaction") - 1].tokens // 10  # type: ignore[attr-defined]


async def test_tab_moves_between_regions() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        seen = []
        for _ in range(4):
            seen.append(app.focused.id if app.focused else None)
            await pilot.press("tab")
        assert {"prompt", "tool-list", "output-viewer", "conversation"} <= set(seen)


async def test_the_dashboard_paints_before_the_agent_is_built_and_runs_a_prompt_typed_meanwhile() -> None:
    # Building the agent (imports, the session, the token encoder) happens in a thread
    # after the first frame; a prompt typed before it is ready waits for it.
    import threading

    release = threading.Event()

    def build_slowly() -> FakeSession:
        release.wait(10)
        return FakeSession({"hello": [Text("Hello from the agent, now that it is ready.")]})

    app = TidegaugeApp(session_factory=build_slowly, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        header = app.query_one(HeaderBar)
        assert not app.ready and header.state == "starting"
        await send(pilot, "hello")
        await pilot.pause()
        assert engine_texts(app, "queued") == ["prompt queued, runs as soon as the agent is ready: hello"]
        assert not list(app.query(AssistantMessage))  # queued, not lost, not run yet
        release.set()
        for _ in range(500):
            await pilot.pause()
            if app.ready:
                break
        await settle(pilot)
        assert app.ready
        assert [item.text for item in app.conversation.items if item.kind == "user"] == ["hello"]
        (message,) = app.query(AssistantMessage)
        assert "now that it is ready" in message.source
        assert header.provider_label and header.provider_label != "starting…"


async def test_an_agent_that_cannot_be_built_ends_the_dashboard_with_its_error() -> None:
    def broken() -> FakeSession:
        raise RuntimeError("data dir is not writable")

    app = TidegaugeApp(session_factory=broken, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(50):
            await pilot.pause()
            if app.startup_error is not None:
                break
    assert app.return_code == 2
    assert "not writable" in str(app.startup_error)


# ---------------------------------------------------------------- every terminal size, keys, words
# (issue 13)

from textual.widgets._footer import FooterKey  # noqa: E402

from app.surfaces.dashboard.app import CONVERSATION_MIN_ROWS, HELP_TEXT  # noqa: E402
from widgets.context_history import ContextHistory  # noqa: E402
from app.kernel.describe import human_tokens  # noqa: E402
from widgets.gauge_bar import GaugeBar  # noqa: E402
from widgets.key_footer import KeyFooter  # noqa: E402


def footer_keys(app: TidegaugeApp) -> set[str]:
    """The keys the footer draws: the dashboard's (``KeyFooter``) or a modal's (Textual's)."""
    keys = {key.key for key in app.screen.query(FooterKey)}
    for footer in app.screen.query(KeyFooter):
        keys |= footer.shown_keys
    return keys


async def footer_keys_when(pilot: Any, app: TidegaugeApp, expected: set[str]) -> set[str]:
    """The footer's keys once they include ``expected`` (the footer recomposes a refresh after a
    focus change; on a loaded machine one pause was not always enough), or as they stand after
    a bounded wait."""
    for _ in range(500):
        keys = footer_keys(app)
        if expected <= keys:
            return keys
        await pilot.pause()
    return footer_keys(app)


def visible_rows(conversation) -> int:
    return conversation.scrollable_content_region.height


async def test_at_80x24_the_conversation_keeps_its_rows_and_the_gauge_stays_whole(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:13]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        assert visible_rows(app.conversation) >= CONVERSATION_MIN_ROWS
        gauge = app.query_one(GaugeBar)
        figures, labels, bar = gauge.render().plain.split("\n")
        th = app.context_panel.last_context.thresholds
        assert f"of {human_tokens(th.auto_compact_line)} auto-compact" in figures and "…" not in figures
        assert f"▼compact {human_tokens(th.auto_compact_line)}" in labels
        assert bar.count("┃") == 3
        chart = app.query_one(ContextHistory)
        assert app.context_panel.folded and chart.region.height == 0  # folded away
        assert "ctrl+g" in str(app.context_panel.border_subtitle)

        await pilot.press("ctrl+g")  # the chart and breakdown come back on request
        await pilot.pause()
        assert not app.context_panel.folded and chart.region.height > 0
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert app.context_panel.folded and visible_rows(app.conversation) >= CONVERSATION_MIN_ROWS


async def test_a_dashboard_preempted_while_it_is_resized_follows_every_resize(preempted_clock: None) -> None:
    # Textual's resize debounce, lost once to a late look at the clock, kept every later resize
    # from reaching the screen: the dashboard stayed laid out for the terminal it started in.
    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        for width, height in ((100, 30), (120, 40), (80, 24)):
            await pilot.resize_terminal(width, height)
            await until(pilot, lambda size=(width, height): app.screen.size == size, rounds=100)
            assert app.conversation.region.right <= width and app.context_panel.region.bottom <= height


async def test_the_chart_folds_with_the_terminal_height_and_the_palette_brings_it_back() -> None:
    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert not app.context_panel.folded
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert app.context_panel.folded and visible_rows(app.conversation) >= CONVERSATION_MIN_ROWS
        commands = {command.title: command for command in app.get_system_commands(app.screen)}
        (title,) = [t for t in commands if "chart" in t.lower()]
        commands[title].callback()
        await pilot.pause()
        assert not app.context_panel.folded
        await pilot.resize_terminal(160, 50)  # the user's choice stays
        await pilot.pause()
        assert not app.context_panel.folded


async def test_typing_in_any_region_goes_to_the_prompt() -> None:
    app = TidegaugeApp(FakeSession(), cursor_blink=False)  # one dashboard goes through the regions
    async with app.run_test(size=(80, 24)) as pilot:
        for region in ("#conversation", "#tool-list", "#output-viewer"):
            app.prompt_box.value = ""
            app.query_one(region).focus()
            await pilot.pause()
            assert app.focused is app.query_one(region), region
            await pilot.press("h", "e", "l", "l", "o", "space", "w")
            await pilot.pause()
            assert app.prompt_box.value == "hello w", region
            assert app.focused is app.prompt_box, region


async def test_shift_tab_then_typing_is_not_lost_and_enter_sends_it() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("shift+tab", "pageup", "h", "i", "enter")
        await settle(pilot)
        assert [c.text for c in agent.submitted if hasattr(c, "text")] == ["hi"]


async def test_sending_a_prompt_scrolls_the_conversation_to_the_bottom() -> None:
    agent = FakeSession(default=[Text("line of a long answer\n\n" * 40, size=500)])
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "first")
        await settle(pilot)
        conversation = app.conversation
        conversation.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        assert conversation.max_scroll_y > 0 and conversation.scroll_y == 0
        await send(pilot, "second")
        await settle(pilot)
        await pilot.pause()
        assert conversation.scroll_y == conversation.max_scroll_y


async def test_help_is_scrolled_into_view_from_its_first_line() -> None:
    agent = FakeSession(default=[Text("line of a long answer\n\n" * 40, size=500)])
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "first")
        await settle(pilot)
        conversation = app.conversation
        conversation.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        await send(pilot, "/help")
        await pilot.pause()
        await pilot.pause()
        (help_line,) = [line for line in app.query(EngineLine) if line.text.startswith("commands:")]
        view = conversation.content_region
        assert view.y <= help_line.region.y < view.bottom  # its first line is on screen


async def test_ctrl_o_with_no_selection_opens_the_latest_cut_output_and_the_viewer_takes_focus(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:13]})  # call-1 cut, then call-2 whole
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        panel = app.tool_panel
        assert panel.selected_id == "call-2"  # following the newest call
        await pilot.press("ctrl+o")
        await settle(pilot)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert panel.selected_id == "call-1" and panel.expanded
        assert app.focused is panel.viewer
        status = str(app.query_one("#output-status").render())
        assert log_file.name in status and "\n" not in status  # the file's name, on one row
        expected = {"pageup", "pagedown", "home", "end", "ctrl+o", "ctrl+f"}  # the viewer's keys
        assert expected <= await footer_keys_when(pilot, app, expected)
        await pilot.press("ctrl+f")  # the whole path, on demand
        await pilot.pause()
        assert str(log_file) in str(app.query_one("#output-status").render()).replace("\n", "")


async def test_moving_the_selection_while_a_full_output_is_open_says_what_happened(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:13]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        panel = app.tool_panel
        await pilot.press("ctrl+o")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert panel.expanded and panel.selected_id == "call-1"
        panel.tool_list.focus()
        await pilot.press("down")  # to call-2, whose output was not cut
        await pilot.pause()
        status = str(app.query_one("#output-status").render())
        assert panel.selected_id == "call-2" and "nothing was cut" in status and "closed" in status
        await pilot.press("up")  # back to the cut one: its full output opens again
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert panel.expanded and panel.selected_id == "call-1"


async def test_picking_an_older_call_says_the_panel_stopped_following(log_file: Path) -> None:
    agent = FakeSession({"go": session_steps(str(log_file))[:13], "more": session_steps(str(log_file))[13:17]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        panel = app.tool_panel
        assert not panel.border_subtitle
        panel.tool_list.focus()
        await pilot.press("up")
        await pilot.pause()
        assert "not following" in str(panel.border_subtitle)
        await send(pilot, "more")  # a new call does not take the selection away
        await settle(pilot)
        assert panel.selected_id == "call-1" and "not following" in str(panel.border_subtitle)
        panel.tool_list.focus()
        await pilot.press("end")  # the newest again: following resumes
        await pilot.pause()
        assert not panel.border_subtitle


async def test_help_and_the_footer_list_the_keys_that_work() -> None:
    agent = FakeSession({"approve": [Ask("run_bash", {"command": "make"})]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        for words in ("ctrl+p", "PgUp/PgDn", "shift+tab", "ctrl+g", "ctrl+o", "y yes", "a always", "n no"):
            assert words in HELP_TEXT
        expected = {"tab", "pageup", "pagedown", "ctrl+o", "ctrl+g", "ctrl+s", "ctrl+p"}  # shift+tab: /help
        assert expected <= await footer_keys_when(pilot, app, expected)
        app.tool_panel.tool_list.focus()
        expected = {"up", "down", "pageup", "home", "end"}
        assert expected <= await footer_keys_when(pilot, app, expected)
        await send(pilot, "approve")
        for _ in range(200):
            if isinstance(app.screen, ApprovalScreen):
                break
            await pilot.pause()
        expected = {"y", "a", "n", "escape"}
        assert expected <= await footer_keys_when(pilot, app, expected)
        await pilot.press("n")
        await settle(pilot)


async def test_the_session_id_is_shown_in_full_at_80_columns() -> None:
    agent = FakeSession()
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen_text = app.export_screenshot()
        assert agent.info.session_id in screen_text

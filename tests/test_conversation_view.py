"""The view model alone answers what the conversation shows: its entries (``ConversationView``)
are the records the conversation widget draws from, and the rules that make them are tested here
without Textual. After a resumed session, the entries, the widgets mounted for them and the view
model's tool call records say the same thing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.kernel import events as ev
from app.surfaces.conversation_view import ConversationView
from app.surfaces.tool_calls import ToolCallRecord
from test_long_resume import until

TURNS = 60
WINDOW = 40  # fewer than the session's entries: the oldest are scrolled away, still in the view model


def kinds_and_texts(view: ConversationView) -> list[tuple[str, str]]:
    return [(entry.kind, entry.text) for entry in view.entries]


def test_a_tool_call_ends_the_reply_streaming_and_the_reply_after_it_is_its_own() -> None:
    view = ConversationView()
    view.user("read it")
    view.thinking_delta("let me ")
    view.thinking_delta("see")
    view.reply_delta("Reading ")  # the reply ends the thinking: more thinking would be a new entry
    view.reply_delta("the file.")
    view.tool_call(ToolCallRecord(id="call_1", name="read_file", summary="a.txt"))
    view.reply_delta("It says ")
    view.reply_delta("hello.")
    view.reply_done("It says hello.")  # streamed: not added a second time
    assert kinds_and_texts(view) == [("user", "read it"), ("thinking", "let me see"), ("assistant", "Reading the file."),
                                     ("tool", ""), ("assistant", "It says hello.")]
    assert view.reply is None and view.thinking is None


def test_a_changed_tool_call_replaces_its_record_in_place() -> None:
    view = ConversationView()
    running = ToolCallRecord(id="call_1", name="run_bash", summary="make")
    view.tool_call(running)
    view.line("info", "a line between")
    done = ToolCallRecord(id="call_1", name="run_bash", summary="make", status="ok")
    assert view.tool_call(done) == (0,)  # changed, not added
    assert [entry.tool for entry in view.entries if entry.kind == "tool"] == [done]
    assert len(view.entries) == 2


def test_a_reply_that_was_not_streamed_is_shown_whole_and_a_failed_stream_is_set_apart() -> None:
    view = ConversationView()
    view.reply_done("restored reply")  # a resumed session's: no deltas
    view.reply_delta("half a rep")
    assert view.reply_discarded() == (2 - 1,)
    view.reply_delta("the retry")  # streams into a reply of its own
    view.reply_done("the retry")
    assert [(entry.text, entry.discarded) for entry in view.entries] == [
        ("restored reply", False), ("half a rep", True), ("the retry", False)]
    assert view.reply_discarded() == ()  # nothing streaming: nothing set apart


def test_a_rewind_dims_the_turns_it_abandoned_and_what_came_after_them() -> None:
    view = ConversationView()
    for turn in (1, 2, 3):
        view.user(f"prompt {turn}")
        view.reply_done(f"reply {turn}")
    view.line("info", "rewound")
    changed = view.rewound(2)
    assert [(entry.text, entry.abandoned) for entry in view.entries] == [
        ("prompt 1", False), ("reply 1", False), ("prompt 2", True), ("reply 2", True), ("prompt 3", True),
        ("reply 3", True), ("rewound", True)]
    assert changed == (2, 3, 4, 5, 6)
    view.user("prompt 2 again")
    assert view.rewound(1) == (7,)  # the dimmed turns are not counted again


def test_a_sub_agent_folds_into_one_entry_under_its_call() -> None:
    view = ConversationView()
    view.tool_call(ToolCallRecord(id="task_1", name="task", summary="find it"))
    view.sub_agent(ev.SubAgentEvent(call_id="task_1", status="started", summary="find the importer"))
    assert view.sub_agent(ev.SubAgentEvent(call_id="task_1", status="tool", tool="grep", summary="importer")) == (1,)
    view.sub_agent(ev.SubAgentEvent(call_id="task_1", status="finished", summary="end_turn", step=2))
    assert [entry.kind for entry in view.entries] == ["tool", "sub"]
    sub = view.entries[1].sub
    assert sub is not None and (sub.description, sub.tools, sub.status, sub.step) == (
        "find the importer", [("grep", "importer")], "finished", 2)


def resumed_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The dashboard on a resumed session of ``TURNS`` whose loop is not started: what it draws is
    the replay alone."""
    from benchmarks._long_session import write_long_session
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    project = tmp_path / "project"
    project.mkdir(parents=True)
    session_id = write_long_session(tmp_path / "data", project, TURNS)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-conversation-view")
    settings = load_settings({"provider": "openai", "model": "fake-model", "base_url": "http://127.0.0.1:9/v1",
                              "data_dir": str(tmp_path / "data")})
    return TidegaugeApp(build_session(settings, approvals=True, resume=session_id, cwd=project),
                        cursor_blink=False, max_mounted=WINDOW)


def drawn_as(widget: Any) -> tuple[str, Any]:
    """What a conversation widget shows, in the terms of an entry (its kind and its content)."""
    from widgets.assistant_message import AssistantMessage
    from widgets.engine_line import EngineLine
    from widgets.tool_call_line import ToolCallLine
    from widgets.user_prompt import UserPrompt

    if isinstance(widget, UserPrompt):
        return "user", widget.text
    if isinstance(widget, AssistantMessage):
        return "assistant", widget.source
    if isinstance(widget, ToolCallLine):
        return "tool", widget.info
    assert isinstance(widget, EngineLine), widget
    return "engine", widget.text


async def test_after_a_resume_the_view_model_says_what_the_conversation_draws(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks._long_session import last_reply

    app = resumed_app(tmp_path, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        conversation, view = app.conversation, app.view

        def settled() -> bool:
            entries = view.conversation.entries
            return (app.session is not None and conversation.live
                    and any(entry.text == last_reply(TURNS) for entry in entries[-3:]) and len(view.order) == TURNS)

        await until(pilot, settled, lambda: (
            f"not settled: {kinds_and_texts(view.conversation)[-3:]}, live {conversation.live}, "
            f"{len(view.order)} calls"), rounds=300)
        entries = view.conversation.entries
        assert entries is conversation.items  # one list: the widget keeps no records of its own

        # The view model alone: every prompt and reply of the session, and its tool calls as the
        # tool list has them, whatever the conversation has scrolled away.
        assert [entry.text for entry in entries if entry.kind == "user"] == [f"prompt {n}" for n in range(1, TURNS + 1)]
        assert [entry.tool for entry in entries if entry.kind == "tool"] == [view.tool_calls[i] for i in view.order]
        assert conversation.hidden_above == len(entries) - WINDOW > 0

        # The widget draws exactly the newest window of those entries, in order, and nothing else.
        first, last = conversation.hidden_above, len(entries)
        mounted = [child for child in conversation.children if not child.has_class("conversation-edge")]
        assert mounted == [conversation.widget_of(index) for index in range(first, last)]
        assert [drawn_as(widget) for widget in mounted] == [
            (entry.kind, entry.tool if entry.kind == "tool" else entry.text) for entry in entries[first:last]]
        assert all(conversation.widget_of(index) is None for index in range(first))

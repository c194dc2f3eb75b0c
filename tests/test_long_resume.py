"""`tidegauge --resume` of a long session: the dashboard opens on the last reply, ready to type,
having mounted only the window of conversation items it keeps, however many turns came before.

Before, every replayed event mounted its widget and the window was trimmed after: a resumed
session of 2,000 turns mounted ~10,000 widgets (151 s in a 120x40 terminal; under Pilot it
did not finish within its 30 s limit).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the long session is written by the benchmark's writer
    sys.path.insert(0, str(ROOT))

from benchmarks._long_session import last_reply, write_long_session  # noqa: E402
from session_thread import SessionThread  # noqa: E402

from app.kernel.envelope import EventEnvelope  # noqa: E402

# 300 turns: about five times the conversation's window of widgets (four items a turn), and past the
# gauge history's points (two a turn) once the test sets the chart's cap to HISTORY_CAP, so both bounds
# are crossed. The cap is the same code at any figure; 1,000 turns past the real 2,000 points cost three
# times the writing and reading of the session for the same checks.
TURNS = 300
HISTORY_CAP = 500


async def until(pilot: Any, condition: Callable[[], bool], what: Callable[[], str], rounds: int = 3_000) -> None:
    """Pilot pauses (each lets the App handle what is queued) until ``condition``, or fail saying what was seen."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause()
    raise AssertionError(what())


def resumed_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, turns: int) -> Any:
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    project = tmp_path / "project"
    project.mkdir()
    session_id = write_long_session(tmp_path / "data", project, turns)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-long-resume")
    settings = load_settings({"provider": "openai", "model": "fake-model", "base_url": "http://127.0.0.1:9/v1",
                              "data_dir": str(tmp_path / "data")})
    session = SessionThread(build_session(settings, approvals=True, resume=session_id, cwd=project)).start()
    return TidegaugeApp(session, cursor_blink=False)


# The most the tool list and the context panel may draw (or be handed a call or a context) while a
# session of any length is resumed: a few for the replay's batches and the first frames.
SIDE_PANEL_DRAWS = 40


def count_side_panel_draws(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count, from now on, the tool list's per-call updates and refreshes and the context panel's
    context updates, chart points and chart refreshes."""
    from widgets.context_history import ContextHistory
    from widgets.context_panel import ContextPanel
    from widgets.tool_call_list import ToolCallList

    counts: dict[str, int] = {}

    def counted(owner: type, name: str) -> None:
        method = getattr(owner, name)
        key = f"{owner.__name__}.{name}"
        counts[key] = 0

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return method(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    for owner, name in ((ToolCallList, "add_call"), (ToolCallList, "update_call"), (ToolCallList, "refresh"),
                        (ContextPanel, "update_context"), (ContextPanel, "add_point"),
                        (ContextHistory, "add_point"), (ContextHistory, "refresh")):
        counted(owner, name)
    return counts


async def test_a_long_resumed_session_opens_on_its_last_reply_with_only_the_window_mounted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from widgets.conversation import Conversation
    from widgets.assistant_message import AssistantMessage
    from widgets.context_history import ContextHistory

    monkeypatch.setattr(ContextHistory, "MAX_POINTS", HISTORY_CAP)

    made: list[str] = []  # every conversation widget created (mounted) during the resume
    make_widget = Conversation._make_widget

    def counted(self: Conversation, index: int) -> Any:
        made.append(self.items[index].kind)
        return make_widget(self, index)

    monkeypatch.setattr(Conversation, "_make_widget", counted)
    drawn = count_side_panel_draws(monkeypatch)
    app = resumed_app(tmp_path, monkeypatch, TURNS)
    async with app.run_test(size=(120, 40)) as pilot:
        conversation = app.conversation

        def last_reply_in_view() -> bool:
            shown = [widget for widget in conversation.query(AssistantMessage)
                     if conversation.region.contains_region(widget.region)]
            return app.session is not None and any(last_reply(TURNS) in widget.source for widget in shown)

        await until(pilot, last_reply_in_view, lambda: (
            f"{last_reply(TURNS)!r} never came into view; newest items: "
            f"{[(item.kind, item.text[:40]) for item in conversation.items[-6:]]}"))
        assert app.focused is app.query_one("#prompt"), f"focus on {app.focused!r}, not the prompt"
        await pilot.press("h", "i")
        assert app.query_one("#prompt").value == "hi"

        # Bounded whatever the length: the window, not one widget per item made and trimmed.
        window = conversation.max_mounted + conversation.slack
        assert len(made) <= window, f"{len(made)} conversation widgets made for {len(conversation.items)} items"
        assert conversation.mounted_count <= window
        items = [child for child in conversation.children if not child.has_class("conversation-edge")]
        assert len(items) == conversation.mounted_count
        hidden = len(conversation.items) - conversation.mounted_count
        assert conversation.hidden_above == hidden > 0
        assert f"{hidden} earlier items hidden" in str(conversation.query_one(".conversation-edge").render())

        # Nothing the user saw is lost: every prompt, call and reply is in the records scrolling back shows.
        assert [item.text for item in conversation.items if item.kind == "user"] == [
            f"prompt {turn}" for turn in range(1, TURNS + 1)]
        assert [item.text for item in conversation.items if item.kind == "assistant"][-2:] == [
            f"Reading file {TURNS}.", last_reply(TURNS)]
        assert sum(item.kind == "tool" for item in conversation.items) == TURNS

        # The tool list and the gauge's history still hold the whole session's figures.
        tool_list = app.tool_panel.tool_list
        assert tool_list.call_count == TURNS
        assert tool_list.calls[-1].id == f"call_{TURNS}" and tool_list.calls[0].id == "call_1"
        history = app.query_one(ContextHistory)
        recorded = [event.tokens for event in app.session.restored if event.type == "chart_point"]
        assert len(recorded) == 2 * TURNS + (TURNS - 1) // 50  # two calls a turn, a compaction every 50
        assert history.max_points == HISTORY_CAP < len(recorded)
        assert [point.tokens for point in history.points] == recorded[-history.max_points:]

        # The tool list and the context panel took the session in one batch each: their draws do not
        # grow with the turns (one by one: a refresh per record and ~6 messages a turn).
        assert all(count <= SIDE_PANEL_DRAWS for count in drawn.values()), (
            f"drawn during a resume of {TURNS} turns: {drawn}")

        # Scrolling back re-creates the batch just above the window, from the records.
        conversation.focus()
        before = conversation.hidden_above
        await pilot.press("home")
        await until(pilot, lambda: conversation.hidden_above < before,
                    lambda: f"scrolling to the top loaded nothing: {conversation.hidden_above} still hidden")
        first_shown = conversation.widget_of(conversation.hidden_above)
        assert first_shown is not None and first_shown.is_mounted


def test_every_message_the_conversation_draws_is_folded_when_replayed() -> None:
    """A message the conversation takes live but not inside a Replayed batch would vanish from
    every resumed session's conversation without a word."""
    from widgets.conversation import Conversation, _REPLAY_HANDLERS
    from widgets.session_messages import Deltas, Replayed

    assert set(Conversation.SESSION_MESSAGES) - {Replayed} | {Deltas} == set(_REPLAY_HANDLERS)


async def test_a_dashboard_attaching_late_to_a_ring_of_4096_reports_mounts_only_its_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This run's catch-up (the ring, up to EVENT_RING events) folds the same way: a dashboard
    attaching to a session that answered 4,096 /usage opens on the last answer, ready to type."""
    import threading

    from app.kernel.commands import Report
    from app.kernel.protocol import EVENT_RING
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session
    from widgets.conversation import Conversation
    from widgets.engine_line import EngineLine

    made: list[str] = []
    make_widget = Conversation._make_widget

    def counted(self: Conversation, index: int) -> Any:
        made.append(self.items[index].kind)
        return make_widget(self, index)

    monkeypatch.setattr(Conversation, "_make_widget", counted)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-long-resume")
    settings = load_settings({"provider": "openai", "model": "fake-model", "base_url": "http://127.0.0.1:9/v1",
                              "data_dir": str(tmp_path / "data")})
    session = build_session(settings, approvals=True, cwd=tmp_path)
    answered: list[int] = []
    all_answered = threading.Event()

    def count(envelope: EventEnvelope) -> None:
        if envelope.event.type == "report":
            answered.append(envelope.seq)
            if len(answered) == EVENT_RING:
                all_answered.set()

    session.subscribe(count)
    runner = SessionThread(session)
    runner.start()
    try:
        for _ in range(EVENT_RING):
            session.submit(Report(kind="usage"))
        assert all_answered.wait(60), f"{len(answered)} of {EVENT_RING} reports answered"
        assert sum(envelope.event.type == "report" for envelope in session.snapshot().events) > EVENT_RING - 50
        app = TidegaugeApp(session, cursor_blink=False)
        async with app.run_test(size=(120, 40)) as pilot:
            conversation = app.conversation

            def newest_in_view() -> bool:
                newest = conversation.widget_of(len(conversation.items) - 1)
                return (app.session is not None and isinstance(newest, EngineLine)
                        and conversation.region.contains_region(newest.region))

            await until(pilot, newest_in_view, lambda: f"the newest of {len(conversation.items)} items never came "
                                                       f"into view; {conversation.mounted_count} mounted")
            assert sum(item.kind == "engine" for item in conversation.items) >= EVENT_RING - 50
            window = conversation.max_mounted + conversation.slack
            assert len(made) <= window, f"{len(made)} conversation widgets made for {len(conversation.items)} items"
            await pilot.press("o", "k")
            from textual.widgets import Input

            assert app.query_one("#prompt", Input).value == "ok"
    finally:
        runner.stop()


async def test_a_reply_streaming_when_the_dashboard_attaches_goes_on_in_the_same_reply() -> None:
    """The catch-up folds the reply's deltas so far into a record and mounts it; the deltas after the
    attach continue that reply on screen (one reply, whole), as if the dashboard had been there."""
    from app.kernel import events as ev
    from app.surfaces.dashboard.app import TidegaugeApp
    from snapshot_apps.fake_agent import FakeSession
    from widgets.assistant_message import AssistantMessage

    session = FakeSession()
    session.emit(ev.UserMessageEvent(text="say hello"))
    for text in ("Hello ", "wor"):
        session.emit(ev.TextDeltaEvent(text=text))
    app = TidegaugeApp(session, cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        conversation = app.conversation
        await until(pilot, lambda: app.session is not None and bool(conversation.query(AssistantMessage)),
                    lambda: f"no reply drawn: {[(item.kind, item.text) for item in conversation.items]}")
        session.emit(ev.TextDeltaEvent(text="ld"))
        session.emit(ev.AssistantMessageEvent(text="Hello world"))

        def whole() -> bool:
            replies = list(conversation.query(AssistantMessage))
            return len(replies) == 1 and replies[0].source == "Hello world" and not conversation.streaming_assistant

        await until(pilot, whole, lambda: f"replies drawn: {[r.source for r in conversation.query(AssistantMessage)]}, "
                                          f"records: {[(item.kind, item.text) for item in conversation.items]}")
        assert [(item.kind, item.text) for item in conversation.items][-2:] == [
            ("user", "say hello"), ("assistant", "Hello world")]

"""Every dispatcher of the session's events names every event class (``match`` with
``assert_never``): mypy fails where a new event is not handled, and at run time an event
outside the union is refused, never folded in silently as one of the others."""

from __future__ import annotations

import typing
from typing import Any, Callable, Literal

import pytest

from app.kernel.envelope import EventEnvelope, outside_log
from app.kernel import events as ev
from app.kernel.protocol import EventLog
from app.kernel.session_facts import SessionFacts
from app.surfaces.view_model import DashboardView
from event_examples import one_of_each, union_classes


class UnheardOfEvent(ev.EventBase):
    """An event a dispatcher was never told of (what a new event is to an unchanged one)."""

    type: Literal["unheard_of"] = "unheard_of"


DISPATCHERS: dict[str, Callable[[Any], object]] = {
    "view model": lambda event: DashboardView().apply(EventEnvelope(1, 1, event)),
    "event log": lambda event: EventLog().add(EventEnvelope(1, 1, event)),
    "session facts (the session process's mirror)": lambda event: SessionFacts().apply(EventEnvelope(1, 1, event)),
}


def test_every_event_class_is_in_the_union() -> None:
    declared = {cls for cls in vars(ev).values()
                if isinstance(cls, type) and issubclass(cls, ev.EventBase) and cls is not ev.EventBase}
    assert declared == set(union_classes())


@pytest.mark.parametrize("dispatch", DISPATCHERS.values(), ids=DISPATCHERS.keys())
def test_each_dispatcher_takes_one_of_each_event(dispatch: Callable[[Any], object]) -> None:
    for event in one_of_each():
        dispatch(event)  # raises (assert_never) on a class it does not name


@pytest.mark.parametrize("dispatch", DISPATCHERS.values(), ids=DISPATCHERS.keys())
def test_each_dispatcher_refuses_an_event_it_was_never_told_of(dispatch: Callable[[Any], object]) -> None:
    with pytest.raises(AssertionError):
        dispatch(UnheardOfEvent())


def test_busy_is_every_state_but_starting_and_idle() -> None:
    states = typing.get_args(ev.AgentState)
    assert ev.AT_REST <= set(states)
    assert [state for state in states if not ev.is_busy(state)] == ["starting", "idle"]
    assert ev.is_busy("a state a newer session has")  # nothing is sent past a state not understood


@pytest.mark.parametrize("state", typing.get_args(ev.AgentState))
def test_the_view_model_and_the_process_mirror_agree_on_busy(state: ev.AgentState) -> None:
    """"starting" (the dashboard's word before the session exists) is not busy for anyone."""
    event = ev.StateEvent(state=state, step=0, max_steps=5)
    view, facts = DashboardView(), SessionFacts()
    view.apply(outside_log(event))
    facts.apply(outside_log(event))
    assert view.busy == facts.busy == ev.is_busy(state) == (state not in ("idle", "starting"))


def test_every_event_the_session_sends_reaches_a_dashboard_widget() -> None:
    """Beside the view model's ``match``, the bridge routes each event by its type to the widgets
    that take it (``widgets.session_messages.MESSAGES_FOR``): an event added to the union and
    routed nowhere would be dropped on the dashboard without a word. The targets stand in for the
    App's own (``TidegaugeApp._follow_session``), each taking the messages its class declares."""
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.surfaces.dashboard.bridge import SessionBridge
    from event_examples import example
    from widgets.context_panel import ContextPanel
    from widgets.conversation import Conversation
    from widgets.header_bar import HeaderBar
    from widgets.prompt_box import PromptBox
    from widgets.tool_output_panel import ToolOutputPanel

    posted: list[tuple[str, str]] = []

    def stand_in(cls: Any) -> Any:
        def post_message(self: object, message: object) -> bool:
            posted.append((cls.__name__, type(message).__name__))
            return True
        return type(cls.__name__, (), {"SESSION_MESSAGES": cls.SESSION_MESSAGES, "post_message": post_message})()

    targets = [stand_in(cls) for cls in (HeaderBar, Conversation, ToolOutputPanel, ContextPanel, PromptBox, TidegaugeApp)]
    call = example(ev.ToolStartEvent)
    unrouted = []
    event: Any
    for event in one_of_each():
        if isinstance(event, ev.ClearedResultsEvent):
            event = event.model_copy(update={"call_ids": [call.id]})
        bridge = SessionBridge(targets, deltas_target=targets[1])
        bridge(EventEnvelope(1, 1, call))  # a call the event can be about (progress, cleared results)
        posted.clear()
        bridge(EventEnvelope(2, 1, event))
        if not posted:
            unrouted.append(event.type)
    assert unrouted == []

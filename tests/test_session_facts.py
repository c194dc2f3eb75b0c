"""One reducer of what a session is now (``SessionFacts``): the session process's snapshot of its
child and the dashboard's view model fold the same events the same way, and count the waiting
commands as the session itself does (its queue's length), not by the highest position said."""

from __future__ import annotations

from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope
from app.kernel.session_facts import SessionFacts
from app.surfaces.view_model import DashboardView


def busy_with_two_prompts_queued() -> list[EventEnvelope]:
    caused: list[tuple[int, ev.Event]] = [
        (1, ev.StateEvent(state="streaming", step=1, max_steps=5)),
        (2, ev.CommandQueuedEvent(command="prompt", position=1, text="second")),
        (3, ev.CommandQueuedEvent(command="prompt", position=2, text="third")),
        (1, ev.ResultEvent(stop_reason="end_turn", text="first done", steps=1)),
        (2, ev.UserMessageEvent(text="second")),  # the second runs: one waits now
        (2, ev.StateEvent(state="streaming", step=1, max_steps=5)),
    ]
    return [EventEnvelope(seq, command_id, event) for seq, (command_id, event) in enumerate(caused, 1)]


def test_a_queued_prompt_that_starts_running_leaves_the_count() -> None:
    facts, view = SessionFacts(), DashboardView()
    for event in busy_with_two_prompts_queued():
        facts.apply(event)
        view.apply(event)
    assert facts.busy and facts.queued == 1
    assert view.busy and [queued.text for queued in view.queue] == ["third"]
    assert view.facts.queued == facts.queued


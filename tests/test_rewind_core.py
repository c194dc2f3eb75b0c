"""Rewind as a plan of the pure core: the list of user messages, the plan for each (tokens before →
after), and running exactly the plan shown, with its forecast beside what happened."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_context_core_is_pure import core_of
from test_ctx_support import filler, tool_round

from app.context.compaction import build_summary_history
from app.context.core import ContextCore, EngineConfig, Replaced
from app.context.engine import ContextEngine
from app.session.transcript import sendable_problems
from app.kernel.events import ChartPointEvent, ContextEvent, RewindEvent
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock


def conversation(turns: int, words: int = 300) -> ContextCore:
    """``turns`` typed prompts, each answered by a tool round and a reply."""
    core = core_of()
    for n in range(1, turns + 1):
        core.append_user_text(f"prompt {n}: {filler(20)}", [], now=0.0)
        assistant, results = tool_round(1, words)
        core.append(assistant, now=0.0)
        core.append(results.copy_with([b for b in results.content if isinstance(b, ToolResultBlock)]), now=0.0)
        core.append(Message.assistant_text(f"answer {n}"), now=0.0)
    return core


def test_each_user_message_is_a_plan_with_the_context_just_before_it() -> None:
    core = conversation(3)
    before = core.projected()
    plans = core.plan_rewinds()
    assert [p.rewind.turn for p in plans if p.rewind] == [1, 2, 3]
    assert [p.rewind.text.split(":")[0] for p in plans if p.rewind] == ["prompt 1", "prompt 2", "prompt 3"]
    sizes = [p.forecast.tokens_after for p in plans]
    assert sizes == sorted(sizes) and sizes[-1] < before  # earlier point, smaller context
    assert all(p.kind == "rewind" and p.forecast.tokens_before == before and not p.model_call for p in plans)
    assert [p.rewind.abandoned_turns for p in plans if p.rewind] == [3, 2, 1]


def test_running_the_plan_takes_history_and_gauge_back_and_reports_forecast_beside_actual() -> None:
    core = conversation(3)
    plan = core.plan_rewinds()[1]  # back to just before "prompt 2"
    assert plan.rewind is not None
    taken = core.take_rewind_plan(plan.id)
    assert taken is plan  # made on this history: runs as shown
    event, effects = core.rewind(plan)
    assert len(core.history) == 4 and "prompt 1" in core.history[0].text and "prompt 2" not in str(core.history)
    assert isinstance(effects[0], Replaced) and effects[0].reason == "rewind"
    assert effects[1] is event and isinstance(event, RewindEvent)
    assert event.ok and event.turn == 2 and event.text.startswith("prompt 2") and event.abandoned_turns == 2
    assert event.tokens_after == core.projected() < event.tokens_before
    assert event.forecast_tokens_after == plan.forecast.tokens_after
    assert abs(event.tokens_after - plan.forecast.tokens_after) <= 0.02 * event.tokens_after
    point = next(e for e in effects if isinstance(e, ChartPointEvent))
    context = next(e for e in effects if isinstance(e, ContextEvent))
    assert point.kind == "rewind" and context.projected_tokens == event.tokens_after


def test_a_plan_named_after_the_conversation_moved_on_is_made_again_to_the_same_message() -> None:
    core = conversation(2)
    plan = core.plan_rewinds()[0]
    core.append_user_text("one more thing", [], now=0.0)  # the history changed since the list was shown
    again = core.take_rewind_plan(plan.id)
    assert again is not None and again.replanned and again.rewind is not None
    assert again.rewind.message_id == plan.rewind.message_id if plan.rewind else False
    assert again.rewind.abandoned_turns == 3  # prompt 1, prompt 2 and "one more thing"
    assert core.take_rewind_plan("plan-unknown") is None


def test_words_a_summary_keeps_count_as_turns_but_are_not_points() -> None:
    core = conversation(2)
    summary = build_summary_history("what happened", core.history, 10_000, {})
    core.replace(summary, "compaction")
    core.append_user_text("after the summary", [], now=0.0)
    plans = core.plan_rewinds()
    assert [(p.rewind.turn, p.rewind.text) for p in plans if p.rewind] == [(3, "after the summary")]
    core.rewind(plans[0])
    assert [m.content for m in core.history] == [m.content for m in summary]  # the summary kept whole


def test_words_typed_after_an_interrupt_keep_the_results_before_them() -> None:
    core = core_of()
    core.append_user_text("start", [], now=0.0)
    core.append(Message(role="assistant", content=[ToolUseBlock(id="c1", name="run_bash", input={})]), now=0.0)
    core.append(Message(role="user", content=[ToolResultBlock(tool_use_id="c1", content="interrupted")]), now=0.0)
    core.append_user_text("try again differently", [], now=0.0)  # merged into the results message
    plan = core.plan_rewinds()[-1]
    core.rewind(plan)
    assert [type(b).__name__ for b in core.history[-1].content] == ["ToolResultBlock"]
    assert not sendable_problems(core.history)


def test_nothing_to_go_back_to_in_an_empty_conversation() -> None:
    assert core_of().plan_rewinds() == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=6), st.data())
def test_every_rewind_leaves_a_valid_request(turns: list[tuple[int, bool]], data: st.DataObject) -> None:
    core = core_of()
    for calls, interrupted in turns:
        core.append_user_text(filler(5), [], now=0.0)
        for _ in range(calls):
            assistant, results = tool_round(1, 20)
            core.append(assistant, now=0.0)
            core.append(results.copy_with([b for b in results.content if isinstance(b, ToolResultBlock)]), now=0.0)
        if not interrupted:
            core.append(Message(role="assistant", content=[TextBlock(text="done")]), now=0.0)
    plans = core.plan_rewinds()
    plan = plans[data.draw(st.integers(0, len(plans) - 1))]
    core.rewind(plan)
    assert not sendable_problems(core.history)


def _engine_with(core: ContextCore) -> ContextEngine:
    engine = ContextEngine(system_prompt=core.system_prompt, memory=core.memory, tools=[],
                           config=EngineConfig(window=100_000, budget=0, memory_update_tokens=1_000),
                           history=list(core.history))
    return engine


def test_a_session_memory_written_from_abandoned_turns_is_emptied_and_written_again_from_what_stays() -> None:
    engine = _engine_with(conversation(3))
    engine.session_memory.text = "the user asked for prompt 3's work and it was done"
    engine.session_memory.covered = engine.history[-1]  # it covers turn 3, which the rewind abandons
    plan = engine.plan_rewinds()[2]
    engine.rewind(plan)
    assert not engine.session_memory.exists  # a later compaction from it cannot bring turn 3 back
    assert engine.core.memory_unseen.messages == engine.history  # the next update covers what stays


def test_a_session_memory_of_what_stays_is_kept() -> None:
    engine = _engine_with(conversation(3))
    engine.session_memory.text = "prompt 1's work"
    engine.session_memory.covered = engine.history[3]  # the end of turn 1
    engine.rewind(engine.plan_rewinds()[2])
    assert engine.session_memory.exists and engine.session_memory.covered is engine.history[3]

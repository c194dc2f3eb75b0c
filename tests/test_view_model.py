"""The dashboard's view model without Textual: event sequences in, the state the dashboard draws out."""

from __future__ import annotations

from app.kernel.envelope import EventEnvelope, outside_log
from app.kernel import events as ev
from app.kernel.describe import state_text
from app.surfaces.view_model import DashboardView, QueuedCommand
from snapshot_apps.fake_agent import context


def _by(command_id: int, event: ev.Event) -> EventEnvelope:
    """``event`` as the command ``command_id`` caused it."""
    return EventEnvelope(0, command_id, event)


def _start(call_id: str, name: str = "read_file") -> ev.ToolStartEvent:
    return ev.ToolStartEvent(id=call_id, name=name, input={"path": "a.py"}, summary="a.py")


def _result(call_id: str, **fields: object) -> ev.ToolResultEvent:
    values: dict[str, object] = dict(name="read_file", is_error=False, truncated=False, original_chars=10,
                                     kept_chars=10, content="x = 1\n")
    values.update(fields)
    return ev.ToolResultEvent(id=call_id, **values)


def test_one_record_per_call_follows_it_from_start_to_result() -> None:
    view = DashboardView()
    (started,) = view.apply(outside_log(_start("c1")))
    assert (started.status, started.content) == ("running", None)
    view.apply(outside_log(ev.ToolProgressEvent(id="c1", progress=3, total=10, message="indexing")))
    assert view.tool_calls["c1"].progress == "3 of 10 (30%): indexing"
    (finished,) = view.apply(outside_log(_result("c1", truncated=True, original_chars=50_000, kept_chars=400,
                                     full_output_path="/data/tool-results/c1.txt", duration_ms=12.0)))
    assert (finished.status, finished.truncated, finished.original_chars, finished.kept_chars) == ("ok", True, 50_000, 400)
    assert finished.full_output_path == "/data/tool-results/c1.txt" and finished.content == "x = 1\n"
    assert finished.progress == ""  # a finished call shows its size, not how far it got
    assert view.order == ["c1"] and view.tool_calls["c1"] is finished
    assert started.status == "running"  # a record handed out is never changed afterwards


def test_a_call_running_as_an_mcp_task_shows_where_its_task_stands() -> None:
    view = DashboardView()
    view.apply(outside_log(_start("c1", "every__simulate-research-query")))
    view.apply(outside_log(ev.ToolProgressEvent(id="c1", progress=0, task_status="working", message="Gathering sources...")))
    assert view.tool_calls["c1"].progress == "task working: Gathering sources..."
    view.apply(outside_log(ev.ToolProgressEvent(id="c1", progress=0, task_status="input_required")))
    assert view.tool_calls["c1"].progress == "task input required"


def test_error_and_interrupted_results_and_a_result_whose_start_was_not_seen() -> None:
    view = DashboardView()
    view.apply(outside_log(_start("c1")))
    view.apply(outside_log(_start("c2")))
    view.apply(outside_log(_result("c1", is_error=True)))
    view.apply(outside_log(_result("c2", interrupted=True)))
    (orphan,) = view.apply(outside_log(_result("c3")))
    assert [view.tool_calls[c].status for c in view.order] == ["error", "interrupted", "ok"]
    assert orphan.name == "read_file" and view.order == ["c1", "c2", "c3"]
    assert view.apply(outside_log(ev.ToolProgressEvent(id="c1", progress=5))) == ()  # a finished call's progress is stale


def test_a_cut_before_sending_marks_the_call_and_keeps_the_saved_path() -> None:
    view = DashboardView()
    view.apply(outside_log(_start("c1")))
    view.apply(outside_log(_result("c1", truncated=True, original_chars=90_000, kept_chars=40_000, full_output_path="/saved")))
    (cut,) = view.apply(outside_log(ev.ResultCutEvent(id="c1", name="read_file", original_chars=90_000, kept_chars=2_000,
                                          full_output_path=None)))
    assert (cut.cut_before_send, cut.kept_chars, cut.full_output_path) == (True, 2_000, "/saved")
    assert view.latest_cut_call() == "c1"
    assert view.apply(outside_log(ev.ResultCutEvent(id="nope", name="x", original_chars=1, kept_chars=1,
                                        full_output_path=None))) == ()


def test_cleared_then_restored_calls_and_a_call_cleared_before_it_is_drawn() -> None:
    view = DashboardView()
    for call_id in ("c1", "c2"):
        view.apply(outside_log(_start(call_id)))
        view.apply(outside_log(_result(call_id)))
    changed = view.apply(outside_log(ev.ClearedResultsEvent(call_ids=["c1", "c9"])))
    assert [(r.id, r.cleared) for r in changed] == [("c1", True)]  # only the records that changed
    (restored,) = view.apply(outside_log(ev.RestoreEvent(id="c1", name="read_file", tokens=13_000, projected_before=40_000,
                                             projected_after=53_000)))
    assert (restored.cleared, restored.restored) == (False, True)
    changed = view.apply(outside_log(ev.ClearedResultsEvent(call_ids=["c9"])))
    assert changed == ()  # c1 already not cleared
    (late,) = view.apply(outside_log(_start("c9")))  # replayed from an earlier run: cleared already
    assert late.cleared


def test_busy_follows_the_last_state_event() -> None:
    view = DashboardView()
    assert not view.busy  # no session yet
    view.apply(outside_log(ev.StateEvent(state="streaming", step=1, max_steps=50)))
    assert view.busy
    view.apply(outside_log(ev.StateEvent(state="tool", step=1, max_steps=50, tool_name="run_bash", tool_index=2, tool_count=3)))
    assert view.busy and state_text(view.state) == "running run_bash (2/3)"
    view.apply(outside_log(ev.StateEvent(state="idle", step=1, max_steps=50)))
    assert not view.busy and state_text(view.state) == "idle"


def test_the_approval_in_progress_and_the_call_waiting_for_it() -> None:
    view = DashboardView()
    view.apply(outside_log(_start("c1", "run_bash")))
    request = ev.ApprovalRequestEvent(request_id="r1", tool_id="c1", name="run_bash", input={"command": "make"},
                                      summary="make")
    (waiting,) = view.apply(outside_log(request))
    assert view.approval is request and waiting.waiting_approval
    view.apply(outside_log(ev.ApprovalResolvedEvent(request_id="other", decision="no")))
    assert view.approval is request  # another request's answer leaves this one waiting
    (answered,) = view.apply(outside_log(ev.ApprovalResolvedEvent(request_id="r1", decision="yes")))
    assert view.approval is None and not answered.waiting_approval


def test_the_queue_fills_while_busy_and_empties_as_each_command_runs() -> None:
    view = DashboardView()
    view.apply(_by(2, ev.CommandQueuedEvent(command="prompt", position=1, text="first")))
    view.apply(_by(3, ev.CommandQueuedEvent(command="compact", position=2)))
    view.apply(_by(4, ev.CommandQueuedEvent(command="prompt", position=3, text="second")))
    assert view.queue == [QueuedCommand("prompt", "first"), QueuedCommand("compact"), QueuedCommand("prompt", "second")]
    view.apply(_by(2, ev.UserMessageEvent(text="first")))
    assert view.queue == [QueuedCommand("compact"), QueuedCommand("prompt", "second")]
    view.apply(outside_log(ev.UserMessageEvent(text="said by nobody's command")))  # no id: takes nothing off
    view.apply(_by(3, ev.CompactionEvent(trigger="manual", ok=True, reason="", messages_before=4, messages_after=1,
                                  tokens_before=9_000, tokens_after=2_000)))
    assert view.queue == [QueuedCommand("prompt", "second")]
    view.apply(_by(5, ev.CommandQueuedEvent(command="reset", position=1)))  # it replaces what waited
    assert view.queue == [QueuedCommand("reset")]


def test_the_queue_follows_the_sessions_numbered_commands_through_an_interrupt() -> None:
    """The session's events carry their command's id: a prompt an interrupt dropped ends in its
    own result and leaves; the queued compaction stays until it runs (the view cleared it at the
    interrupt, showing an empty queue while the compaction still waited)."""
    view = DashboardView()
    view.apply(_by(5, ev.CommandQueuedEvent(command="prompt", position=1, text="next")))
    view.apply(_by(6, ev.CommandQueuedEvent(command="compact", position=2)))
    view.apply(_by(4, ev.InterruptedEvent()))
    view.apply(_by(5, ev.ResultEvent(stop_reason="interrupted", text="", steps=0)))
    assert view.queue == [QueuedCommand("compact")]
    view.apply(_by(6, ev.CompactionEvent(trigger="manual", ok=True, reason="", messages_before=4, messages_after=1,
                                  tokens_before=9_000, tokens_after=2_000)))
    assert view.queue == []


def test_the_context_figures_and_the_breaker_are_the_last_ones_said() -> None:
    view = DashboardView()
    first, second = context(None, 4_800), context(40_000, 0)
    view.apply(outside_log(first))
    view.apply(outside_log(second))
    assert view.context is second
    view.apply(outside_log(ev.BreakerEvent(paused=True, failures=3)))
    assert view.breaker_paused


def test_state_words_cover_retry_and_detail_and_starting() -> None:
    assert state_text(None) == "starting…"
    retry = ev.StateEvent(state="retrying", step=2, max_steps=50, detail="in 4.0s", attempt=2, max_attempts=5)
    assert state_text(retry) == "retry 2/5 in 4.0s"
    compacting = ev.StateEvent(state="compacting", step=2, max_steps=50, detail="focus on tests")
    assert state_text(compacting) == "compacting: focus on tests"
    waiting = ev.StateEvent(state="waiting_approval", step=2, max_steps=50, tool_name="write_file")
    assert state_text(waiting) == "waiting for approval: write_file"


def test_the_view_model_loads_without_textual() -> None:
    import subprocess
    import sys

    probe = "import sys, app.surfaces.view_model; print(sorted(m for m in sys.modules if m.startswith('textual')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout

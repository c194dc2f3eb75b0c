"""The session's events are a log (issue 25): numbered (``seq``), tied to the command that caused
them (``command_id``), kept for a surface that attaches late, carried across the session process's
pipe and into the transcript. Real sessions: the session process as ``tidegauge`` runs it under the
dashboard (the demo model), or in-process against the loopback fake LLM server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import make_session
from app.kernel.commands import Compact, Interrupt, Report, Shutdown, UserInput
from app.kernel.envelope import EventEnvelope
from app.kernel.events import ConfigWarningEvent
from app.kernel.protocol import EVENT_RING, merge_deltas
from app.session.process import SessionProcess
from app.surfaces.view_model import DashboardView, catch_up
from fake_llm_server import openai_text, openai_tool_calls

WAIT = 120  # seconds: a hang guard only; each wait ends on an event


class Collector:
    """A listener that keeps every event in its envelope (and the thread it came on); a test waits
    for one of a kind."""

    def __init__(self) -> None:
        self.events: list[EventEnvelope] = []
        self.threads: set[int] = set()
        self._changed = threading.Condition()

    def __call__(self, envelope: EventEnvelope) -> None:
        with self._changed:
            self.events.append(envelope)
            self.threads.add(threading.get_ident())
            self._changed.notify_all()

    def wait_for(self, kind: str, count: int = 1) -> Any:
        with self._changed:
            came = self._changed.wait_for(lambda: len(self.of(kind)) >= count, WAIT)
            assert came, f"no {kind} event #{count} came; the events were {[e.event.type for e in self.events]}"
            return self.of(kind)[count - 1]

    def of(self, kind: str) -> list[Any]:
        """The envelopes of the events of type ``kind``."""
        return [envelope for envelope in self.events if envelope.event.type == kind]


def own_dirs(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config and data directory of the run's own under ``folder``, and no provider key."""
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(folder / "config"))
    monkeypatch.setenv("TIDEGAUGE_DATA_DIR", str(folder / "data"))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(autouse=True)
def _own_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own_dirs(tmp_path, monkeypatch)


def demo(tmp_path: Path, resume: str | None = None, **overrides: Any) -> SessionProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return SessionProcess({"provider": "demo", "demo_speed": 0, "data_dir": tmp_path / "data", **overrides},
                          resume=resume, cwd=work)


def test_a_compaction_queued_during_a_turn_runs_after_an_interrupt(tmp_path: Path) -> None:
    """ctrl+s while the agent works, then ctrl+c: the turn ends and the compaction still runs."""
    session = demo(tmp_path, yes=True, demo_speed=20).start()  # 20 tokens/s: the reply takes a while
    events = Collector()
    session.subscribe(events)
    try:
        session.submit(UserInput("summarize the project"))
        events.wait_for("user_message")
        compact_id = session.submit(Compact())
        assert events.wait_for("queued").event.command == "compact"
        session.submit(Interrupt())
        after_id = session.submit(UserInput("what did I ask first?"))  # queued behind the compaction, if kept
        assert events.wait_for("result").event.stop_reason == "interrupted"
        # The queued prompt's turn has begun: what is checked is that it came after the compaction,
        # not its reply, which at this speed would take seconds to type out.
        events.wait_for("user_message", 2)
        session.submit(Interrupt())
        last = events.wait_for("result", 2)
        said = [e for e in events.events if not e.event.type.endswith("_delta")]
        first_end, second_end = [i for i, e in enumerate(said) if e.event.type == "result"]
        between = said[first_end:second_end + 1]
        compactions = [e for e in between if e.event.type == "compaction"]
        assert [c.event.trigger for c in compactions] == ["manual"], \
            f"no compaction between the interrupted turn and the next: {[e.event.type for e in between]}"
        assert compactions[0].command_id == compact_id and last.command_id == after_id
    finally:
        session.stop()


async def test_commands_submitted_before_the_session_runs_are_handled_on_its_loop_in_order(
        fake_llm, tmp_path, monkeypatch) -> None:
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    listened = Collector()
    session.subscribe(listened)
    fake_llm.enqueue(openai_text("hello there"))
    ids: dict[str, int] = {}

    def from_another_thread() -> None:  # as the dashboard's UI thread does while the session starts
        ids["report"] = session.submit(Report(kind="context"))
        ids["prompt"] = session.submit(UserInput("hi"))
        ids["stop"] = session.submit(Shutdown())

    caller = threading.Thread(target=from_another_thread)
    caller.start()
    caller.join()
    await session.run()
    kinds = [e.type for e in events]
    assert kinds[0] == "session", f"an event came before the session's first: {kinds}"
    assert listened.threads == {threading.get_ident()}, "a listener was called off the session's loop"
    assert [e.type for e in events.caused_by(ids["report"])] == ["report"]
    by_prompt = [e.type for e in events.caused_by(ids["prompt"])]
    assert by_prompt[0] == "user_message" and by_prompt[-1] == "result", by_prompt
    assert not [e for e in events.envelopes if e.event.type in ("session", "config_warning") and e.command_id is not None]
    seqs = [e.seq for e in events.envelopes]
    assert seqs == list(range(1, len(seqs) + 1))


@dataclass(frozen=True)
class FirstRun:
    """One demo session process (a start is a process and its imports) that two tests read: a
    surface attached at its start, a prompt and its result, then a surface attached late and a
    report both surfaces saw. Stopped before the tests run; its folder holds the session."""

    folder: Path
    session_id: str
    transcript: Path
    prompt_id: int
    result: EventEnvelope
    at_start: Any  # the snapshot the first surface attached with
    early: Collector  # what the first surface got after it
    late_snapshot: Any
    late: Collector
    report_id: int


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    folder = tmp_path_factory.mktemp("event-log")
    with pytest.MonkeyPatch.context() as mp:  # the process's environment, as _own_dirs sets a test's
        own_dirs(folder, mp)
        session = demo(folder, yes=True).start()
    early = Collector()
    at_start, _ = session.attach(early)
    try:
        prompt_id = session.submit(UserInput("what did I ask first?"))
        result = early.wait_for("result")
        late = Collector()
        late_snapshot, unsubscribe = session.attach(late)
        report_id = session.submit(Report(kind="context"))
        early.wait_for("report")
        late.wait_for("report")
        unsubscribe()
    finally:
        session.stop()
    assert session.info.transcript_path is not None
    return FirstRun(folder, session.info.session_id, Path(session.info.transcript_path), prompt_id, result,
                    at_start, early, late_snapshot, late, report_id)


def test_seq_and_command_ids_cross_the_pipe_into_the_transcript_and_a_resumed_session_numbers_on(
        first_run: FirstRun) -> None:
    result = first_run.result
    assert result.command_id == first_run.prompt_id
    seqs = [e.seq for e in first_run.at_start.events + first_run.early.events]
    assert seqs == sorted(set(seqs)) and seqs[0] > 0, seqs  # rising (merged deltas may skip some)
    recorded = [json.loads(line)["event"] for line in first_run.transcript.read_text().splitlines()
                if json.loads(line)["kind"] == "event"]
    assert [(e["type"], e["seq"], e.get("command_id")) for e in recorded if e["type"] == "result"] == [
        ("result", result.seq, first_run.prompt_id)]

    again = demo(first_run.folder, resume=first_run.session_id, yes=True).start()
    later = Collector()
    try:
        snapshot, _unsubscribe = again.attach(later)
        # The same event, read back from the transcript: it is equal wherever it was emitted.
        assert [e for e in snapshot.restored if e.type == "result"] == [result.event]
        report_id = again.submit(Report(kind="context"))
        report = later.wait_for("report")
        assert report.command_id == report_id and report.seq > snapshot.seq
        this_run = snapshot.events + later.events  # what it said before we attached, and after
        assert this_run[0].event.type == "session" and this_run[0].seq > max(e["seq"] for e in recorded)
    finally:
        again.stop()


def test_a_surface_attaching_late_gets_the_snapshot_and_every_event_after_it_once(first_run: FirstRun) -> None:
    """The snapshot holds everything up to its seq, the listener everything after: together, all of it.

    Compared with each run of deltas merged, as the session's log keeps them: a listener gets a
    reply's deltas in the batches the pipe carried them in (one merged event per batch, so how
    many depends on the machine's timing), the snapshot the whole run as one. A lost, repeated or
    reordered event, or a lost piece of a reply's text, still shows."""
    from app.kernel.protocol import merge_deltas

    def said(envelopes: list[EventEnvelope]) -> list[tuple[int, str, str | None]]:
        return [(e.seq, e.event.type, getattr(e.event, "text", None)) for e in merge_deltas(envelopes)]

    everything = said([*first_run.at_start.events, *first_run.early.events])
    snapshot, late = first_run.late_snapshot, first_run.late
    assert said([*snapshot.events, *late.events]) == everything
    assert snapshot.seq == snapshot.events[-1].seq
    assert [e.command_id for e in late.of("report")] == [first_run.report_id]


@pytest.mark.parametrize("bad_id", ['"7"', "true", "0", "-3", "1.5", str(2**53 + 1)])
def test_a_command_line_with_a_bad_id_is_refused_with_a_line_naming_it(bad_id: str) -> None:
    """The session process's stdin (only its parent writes there): an id that is not a positive integer
    would put a wrong command id on the events; the line is refused, naming the id."""
    from app.session.process import decode_command_line, encode_command

    line = b'{"command": "Report", "fields": {"kind": "context"}, "id": %s}' % bad_id.encode()
    with pytest.raises(ValueError, match=r"not a command line .*id .* is not a positive integer"):
        decode_command_line(line)
    assert decode_command_line(encode_command(Report(kind="context"), 7)) == (7, Report(kind="context"))


async def test_every_prompt_ends_in_one_result_even_one_an_interrupt_dropped_before_it_ran(
        fake_llm, tmp_path, monkeypatch) -> None:
    """ctrl+c while the session starts (headless mode's first SIGINT, or the dashboard's): the prompts
    waiting for it end interrupted, each in its own result, and no request is sent."""
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    first = session.submit(UserInput("one"))
    second = session.submit(UserInput("two"))
    session.submit(Interrupt())
    session.submit(Shutdown())
    await session.run()
    results = [(e.command_id, e.event.stop_reason, e.event.session_id) for e in events.enveloped("result")]
    assert results == [(first, "interrupted", session.info.session_id),
                       (second, "interrupted", session.info.session_id)]
    assert fake_llm.requests == [] and session.pending == 0


# A reply streamed in more deltas than the ring holds events.
LONG_REPLY = [f"w{index} " for index in range(EVENT_RING + 400)]


def dumped(envelopes: list[EventEnvelope]) -> list[dict[str, Any]]:
    return [envelope.to_json() for envelope in envelopes]


async def test_a_long_reply_leaves_the_prompt_and_the_tool_call_before_it_for_a_late_surface(
        fake_llm, tmp_path, monkeypatch) -> None:
    """Issue 25: one long reply used to fill the ring with its deltas, so a surface attaching then saw
    neither the prompt nor the tool call it answers, and only the reply's tail."""
    session, events = make_session(fake_llm, tmp_path, monkeypatch)
    (session.agent.workspace / "notes.txt").write_text("the notes\n")
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "notes.txt"})]), openai_text(LONG_REPLY))
    during = Collector()
    attached_during: list[Any] = []
    deltas = 0

    def attach_during_the_reply(envelope: EventEnvelope) -> None:  # on the session's thread, under its lock, as emit runs
        nonlocal deltas
        deltas += envelope.event.type == "text_delta"
        if deltas == EVENT_RING and not attached_during:
            attached_during.append(session.attach(during)[0])

    session.subscribe(attach_during_the_reply)
    prompt_id = session.submit(UserInput("read notes.txt, then say a lot"))
    session.submit(Shutdown())
    await session.run()
    late = Collector()
    snapshot, _ = session.attach(late)

    kinds = [envelope.event.type for envelope in snapshot.events]
    assert len(snapshot.events) <= EVENT_RING
    shown: list[Any] = [envelope.event for envelope in snapshot.events]
    said = [e.text for e in shown if e.type == "user_message"]
    assert said == ["read notes.txt, then say a lot"], f"the prompt is not in the late snapshot: {kinds[:20]}"
    assert [e.name for e in shown if e.type in ("tool_start", "tool_result")] == ["read_file"] * 2
    assert "".join(e.text for e in shown if e.type == "text_delta") == "".join(LONG_REPLY)
    assert [e.command_id for e in snapshot.events if e.event.type == "text_delta"] == [prompt_id]
    seqs = [envelope.seq for envelope in snapshot.events]
    assert seqs == sorted(set(seqs)) and snapshot.seq == seqs[-1] == events.envelopes[-1].seq, seqs[-5:]
    # The view the dashboard folds from it holds the call, finished.
    view = DashboardView()
    for event in catch_up(snapshot):
        view.apply(event)
    assert [(record.name, record.status) for record in view.tool_calls.values()] == [("read_file", "ok")]

    # Attached in the middle of the reply: the snapshot at N, then N+1, N+2, ... each once, in order;
    # its reply so far and the deltas after it are the whole reply, and together they are the log.
    (middle,) = attached_during
    after = [event.seq for event in during.events]
    assert after == list(range(middle.seq + 1, events.envelopes[-1].seq + 1)), (middle.seq, after[:5])
    assert dumped(merge_deltas(middle.events + during.events)) == dumped(snapshot.events)


async def test_the_palette_and_header_a_late_dashboard_draws_do_not_depend_on_the_ring(
        fake_llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Server-side compaction switched on, then more events than the ring holds: a dashboard opening
    then (a web tab, say) offers to turn it off, not on, and names the project and the session."""
    from app.kernel.commands import Preview, ServerCompaction
    from app.surfaces.dashboard.app import TidegaugeApp

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-key-0123456789")
    work = tmp_path / "work"
    work.mkdir()
    runner = SessionProcess({"provider": "responses", "model": "test-model", "base_url": fake_llm.base_url("responses"),
                             "window": 400_000, "data_dir": tmp_path / "data", "memory_update_tokens": 0},
                            cwd=work).start()
    try:
        switched = Collector()
        runner.subscribe(switched)
        runner.submit(ServerCompaction(True))
        assert switched.wait_for("server_compaction").event.on is True
        flooded = threading.Event()
        runner.subscribe(lambda envelope: flooded.set() if envelope.event.type == "permissions" else None)
        for _ in range(EVENT_RING):  # each answered by one event (drawn by no widget): the switch leaves the ring
            runner.submit(Preview("reset"))
        runner.submit(Report(kind="permissions"))
        assert flooded.wait(WAIT), "the previews were not all answered"
        assert "server_compaction" not in [envelope.event.type for envelope in runner.snapshot().events]

        app = TidegaugeApp(runner, cursor_blink=False)
        async with app.run_test():
            def offered() -> list[str]:
                return [c.title for c in app.get_system_commands(app.screen) if c.title.startswith("Server-side")]

            for _ in range(WAIT * 100):
                if offered() and app.header.session_id:
                    break
                await asyncio.sleep(0.01)  # polls the condition above
            assert offered() == ["Server-side compaction: on (turn off)"], offered()
            assert (app.header.session_id, Path(app.header.cwd)) == (runner.info.session_id, work.resolve())
            app.exit()
    finally:
        runner.stop()
    assert runner.returncode == 0, runner.stderr_tail()


async def test_an_approval_and_a_prompt_still_waiting_reach_a_dashboard_that_attaches_after_the_ring_moved_on(
        fake_llm, tmp_path, monkeypatch) -> None:
    """The session waits on the user's answer, a prompt waits behind the turn, and more than
    EVENT_RING events come meanwhile: a dashboard opening then still asks, and its view still has the
    prompt in the queue (the snapshot carries what is in force, not only the ring)."""
    from app.kernel.commands import Approve, Preview
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.surfaces.view_model import QueuedCommand
    from session_thread import SessionThread
    from widgets.approval_screen import ApprovalScreen

    session, _events = make_session(fake_llm, tmp_path, monkeypatch, approvals=True)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "echo hi"})]), openai_text("ran it"),
                     openai_text("and this"))
    said = Collector()
    session.subscribe(said)
    flooded = threading.Event()
    session.subscribe(lambda envelope: flooded.set() if envelope.event.type == "permissions" else None)
    runner = SessionThread(session)
    runner.start()
    try:
        session.submit(UserInput("run echo hi"))
        request = said.wait_for("approval_request").event
        session.submit(UserInput("then this"))
        said.wait_for("queued")
        for _ in range(EVENT_RING):
            session.submit(Preview("reset"))
        session.submit(Report(kind="permissions"))
        assert flooded.wait(WAIT), "the previews were not all answered"
        snapshot = session.snapshot()
        assert "approval_request" not in [envelope.event.type for envelope in snapshot.events]
        view = DashboardView()
        for event in catch_up(snapshot):
            view.apply(event)
        assert view.approval is not None and view.approval.request_id == request.request_id
        assert view.queue == [QueuedCommand("prompt", "then this")]

        app = TidegaugeApp(session, cursor_blink=False)
        async with app.run_test():
            for _ in range(WAIT * 100):
                if isinstance(app.screen, ApprovalScreen):
                    break
                await asyncio.sleep(0.01)  # polls the condition above
            assert isinstance(app.screen, ApprovalScreen), f"no approval dialog; the screen is {app.screen!r}"
            assert app.view.queue == [QueuedCommand("prompt", "then this")]
            session.submit(Approve(request.request_id, "no"))
            said.wait_for("result", 2)
            app.exit()
    finally:
        runner.stop()


def _numbered(*events: Any, command_id: int | None = None, start: int = 1) -> list[EventEnvelope]:
    return [EventEnvelope(start + index, command_id, event) for index, event in enumerate(events)]


def test_the_ring_keeps_a_run_of_deltas_as_one_event_and_at_most_its_size() -> None:
    from app.kernel import events as ev
    from app.kernel.protocol import EventLog

    log = EventLog(size=4)
    said = [*_numbered(ev.UserMessageEvent(text="hi"), command_id=1),
            *_numbered(*(ev.ThinkingDeltaEvent(text=t) for t in "ab"), command_id=1, start=2),
            *_numbered(*(ev.TextDeltaEvent(text=t) for t in "cde"), command_id=1, start=4),
            *_numbered(ev.TextDeltaEvent(text="f"), command_id=2, start=7)]  # another command's reply
    for event in said:
        log.add(event)
    assert [(e.event.type, getattr(e.event, "text", ""), e.seq) for e in log.events()] == [
        ("user_message", "hi", 1), ("thinking_delta", "ab", 3), ("text_delta", "cde", 6), ("text_delta", "f", 7)]
    log.add(*_numbered(ev.TextDeltaEvent(text="g"), command_id=2, start=8))
    log.add(*_numbered(ev.AssistantMessageEvent(text="fg"), command_id=2, start=9))
    # Four at most: the oldest goes, the run that went on is one event with its last seq.
    assert [(e.event.type, e.seq) for e in log.events()] == [
        ("thinking_delta", 3), ("text_delta", 6), ("text_delta", 8), ("assistant_message", 9)]


def test_the_events_in_force_outlive_the_ring() -> None:
    """Queued commands until they run or end, questions until answered, the latest switch of a kind."""
    from app.kernel import events as ev
    from app.kernel.protocol import EventLog

    log = EventLog(size=2)
    seq = iter(range(1, 1_000))

    def add(event: Any, command_id: int | None = None) -> None:
        log.add(EventEnvelope(next(seq), command_id, event))

    add(ev.ServerCompactionEvent(on=True, provider="responses"), 1)
    add(ev.ApprovalRequestEvent(request_id="approval-5", tool_id="c1", name="run_bash", input={}, summary="ls"), 2)
    add(ev.MemoryImportEvent(action="ask", path="/elsewhere/notes.md", importer="AGENTS.md"))
    add(ev.CommandQueuedEvent(command="prompt", position=1, text="one"), 3)
    add(ev.CommandQueuedEvent(command="compact", position=2), 4)
    add(ev.CommandQueuedEvent(command="prompt", position=3, text="two"), 5)
    for _ in range(5):
        add(ev.NoticeEvent(level="info", text="said"))
    standing = log.standing()
    assert [e.event.type for e in standing] == ["server_compaction", "approval_request", "memory_import", "queued",
                                          "queued", "queued"]
    assert [e.seq for e in standing] == sorted(e.seq for e in standing)
    assert not {e.seq for e in standing} & {e.seq for e in log.events()}  # all of them left the ring

    add(ev.ApprovalResolvedEvent(request_id="approval-5", decision="no"), 2)
    add(ev.MemoryImportEvent(action="approved", path="/elsewhere/notes.md", importer="AGENTS.md"))
    add(ev.UserMessageEvent(text="one"), 3)  # the first prompt runs
    add(ev.ResultEvent(stop_reason="interrupted", text="", steps=0), 5)  # an interrupt dropped the second
    add(ev.ServerCompactionEvent(on=False, provider="responses"), 6)
    assert [(e.event.type, getattr(e.event, "command", None)) for e in log.standing()] == [("queued", "compact"),
                                                                              ("server_compaction", None)]
    add(ev.CommandQueuedEvent(command="prompt", position=2, text="three"), 7)
    add(ev.CommandQueuedEvent(command="reset", position=1), 8)  # a reset replaces what waited before it
    assert [(e.event.type, getattr(e.event, "command", None)) for e in log.standing()] == [("server_compaction", None),
                                                                              ("queued", "reset")]
    info = ev.SessionInfoEvent(session_id="s", provider_label="p", model="m", workspace="/w", max_steps=5,
                               server_compaction=True)
    assert log.server_compaction(info).server_compaction is False
    assert log.server_compaction(info.model_copy(update={"server_compaction": None})).server_compaction is None

    # The session process's parent takes them over from the child's first line, once each.
    mirror = EventLog(size=2)
    for event in log.events():
        mirror.add(event)
    mirror.add_standing(log.standing())
    assert dumped(mirror.standing()) == dumped(log.standing())


async def test_the_fake_session_a_dashboard_test_drives_keeps_the_same_log() -> None:
    """The session the dashboard tests use (the real one, its model scripted) catches a late surface up as the real one does:
    the switch said before the last EVENT_RING events is still the palette's state."""
    from app.kernel.commands import Preview, ServerCompaction
    from app.surfaces.dashboard.app import TidegaugeApp
    from snapshot_apps.fake_agent import FakeSession

    import asyncio

    fake = FakeSession(server_compaction=False)  # a provider whose server compacts, switched off
    plans: list[object] = []
    fake.subscribe(lambda envelope: plans.append(envelope) if envelope.event.type == "forecast" else None)
    fake.submit(ServerCompaction(True))
    for _ in range(EVENT_RING):
        fake.submit(Preview("reset"))

    async def answered() -> None:
        while len(plans) < EVENT_RING:
            await asyncio.sleep(0.005)  # polls the condition above

    await asyncio.wait_for(answered(), 60)
    snapshot = fake.snapshot()
    assert snapshot.info.server_compaction is True and [e.event.type for e in snapshot.standing] == ["server_compaction"]
    app = TidegaugeApp(fake, cursor_blink=False)
    async with app.run_test() as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen) if c.title.startswith("Server-side")]
        assert titles == ["Server-side compaction: on (turn off)"]


@dataclass(frozen=True)
class ResumedRun:
    """A demo session resumed after two earlier runs, each of which said a start-up warning: a
    session process (a start is a process and its imports) that two tests read. Its snapshot and
    what it said after it are the redraw test's; it keeps running for the dashboard that attaches
    after it said its start-up lines, and is stopped when the module's tests are done."""

    runner: SessionProcess
    snapshot: Any
    said: Collector


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResumedRun]:
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    folder = tmp_path_factory.mktemp("resumed")
    with pytest.MonkeyPatch.context() as mp:  # the runs' environment, as _own_dirs sets a test's
        own_dirs(folder, mp)
        # The two earlier runs only record the session: the session the child process builds
        # (build_session), run in this process. The third, whose redraw is tested, is a session process.
        session_id: str | None = None
        for run in range(2):
            work = folder / "work"
            work.mkdir(exist_ok=True)
            settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": folder / "data",
                                      "server_compaction": True})  # the demo has none: a config_warning each run
            earlier = build_session(settings, approvals=True, resume=session_id, cwd=work)
            ended = Collector()
            earlier.subscribe(ended)
            earlier.submit(UserInput(f"hi {run}"))
            earlier.submit(Shutdown())
            asyncio.run(earlier.run())
            assert ended.of("result") and ended.of("config_warning"), [e.event.type for e in ended.events]
            session_id = earlier.info.session_id
        runner = demo(folder, resume=session_id, server_compaction=True).start()
    try:
        said = Collector()
        snapshot, unsubscribe = runner.attach(said)
        runner.submit(UserInput("hi 2"))
        said.wait_for("result")  # the session has said everything it says at start-up, and more
        unsubscribe()
        yield ResumedRun(runner, snapshot, said)
    finally:
        runner.stop()
    assert runner.returncode == 0, runner.stderr_tail()


def test_a_resumed_session_redraws_its_conversation_not_each_earlier_runs_start_up_lines(
        resumed_run: ResumedRun) -> None:
    """Each run says its own start-up lines (a setting that cannot work, its MCP servers): a
    session resumed twice redrew every earlier run's warnings before its conversation, one copy
    per run, and this run's again after it."""
    snapshot, said = resumed_run.snapshot, resumed_run.said
    kinds = [event.type for event in snapshot.restored]
    assert "config_warning" not in kinds, kinds
    assert [e.text for e in snapshot.restored if e.type == "user_message"] == ["hi 0", "hi 1"]
    warnings = [e.event for e in [*snapshot.events, *said.events] if isinstance(e.event, ConfigWarningEvent)]
    # this run's, once (a machine without a sandbox says so too: its own line, not counted here)
    assert len([w for w in warnings if w.setting == "server context"]) == 1, warnings


async def test_a_warning_said_at_start_up_is_on_the_dashboard_that_attached_after_it(resumed_run: ResumedRun) -> None:
    """The dashboard opens on a session process that has already said its start-up lines (a resumed
    session's process starts before the screen; a new one's while the first frame is drawn)."""
    from app.surfaces.dashboard.app import TidegaugeApp
    from dashboard_helpers import engine_texts

    app = TidegaugeApp(resumed_run.runner, cursor_blink=False)
    async with app.run_test() as pilot:
        for _ in range(400):
            said = engine_texts(app)
            if any("the demo provider has no server-side compaction" in text for text in said):
                break
            await pilot.pause()
        else:
            raise AssertionError(f"the start-up warning never reached the dashboard; its lines were {said}")
        app.exit()
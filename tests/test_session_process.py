"""The session in its own process (``app.session.process``), as ``tidegauge`` runs it
under the dashboard: a real child process, real pipes, the demo model driving real tools."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from app.kernel.envelope import EventEnvelope
from app.kernel.commands import Approve, Interrupt, UserInput
from app.kernel.errors import SetupError
from app.kernel.events import Event, StateEvent, TextDeltaEvent, ThinkingDeltaEvent
from app.session.process import SessionProcess, decode_command, encode_command, merged_lines

WAIT = 120  # seconds: a hang guard only; each wait ends on an event


class Collector:
    """A listener that keeps every event (their envelopes in ``envelopes``) and lets a test wait for one of a kind."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.envelopes: list[EventEnvelope] = []
        self._changed = threading.Condition()

    def __call__(self, envelope: EventEnvelope) -> None:
        with self._changed:
            self.envelopes.append(envelope)
            self.events.append(envelope.event)
            self._changed.notify_all()

    def wait_for(self, kind: str, count: int = 1) -> Any:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.of(kind)) >= count, WAIT), f"no {kind} event came"
            return self.of(kind)[count - 1]

    def of(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.type == kind]


def demo(tmp_path: Path, resume: str | None = None, **overrides: Any) -> SessionProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return SessionProcess({"provider": "demo", "demo_speed": 0, "data_dir": tmp_path / "data", **overrides},
                          resume=resume, cwd=work)


@pytest.fixture(autouse=True)
def _own_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("TIDEGAUGE_DATA_DIR", str(tmp_path / "data"))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def test_a_turn_with_an_approval_runs_over_the_pipes_and_the_snapshot_follows_it(tmp_path: Path) -> None:
    session = demo(tmp_path).start()
    events = Collector()
    session.subscribe(events)
    try:
        assert session.snapshot().state.state == "idle"
        session.submit(UserInput("find errors in app.log"))
        request = events.wait_for("approval_request")
        assert request.name == "run_bash"
        session.submit(Approve(request.request_id, "always"))  # the later grep is not asked again
        result = events.wait_for("result")
        assert result.stop_reason == "end_turn"
        assert len(events.of("approval_request")) == 1
        results = events.of("tool_result")
        assert results and results[0].truncated and not any(r.is_error for r in results)  # the 15 MB log was cut
        # what streamed is what entered the history, merged or not
        streamed = "".join(e.text for e in events.of("text_delta"))
        assert streamed == "".join(m.text for m in events.of("assistant_message"))
        # one line per run of deltas, not one per token: fewer delta events than the demo streamed tokens
        assert len(events.of("text_delta")) < len(streamed.split())
        snapshot = session.snapshot()
        assert snapshot.state.state == "idle" and not snapshot.busy
        assert snapshot.context == events.of("context")[-1]
    finally:
        session.stop()
    assert session.returncode == 0


def test_end_of_input_stops_the_session_and_resume_restores_it(tmp_path: Path) -> None:
    first = demo(tmp_path, yes=True).start()
    events = Collector()
    first.subscribe(events)
    first.submit(UserInput("what did I ask first?"))
    events.wait_for("result")
    process = first._process
    assert process is not None and process.stdin is not None
    process.stdin.close()  # the dashboard went away without a word
    assert process.wait(WAIT) == 0
    again = demo(tmp_path, resume=first.info.session_id, yes=True).start()
    try:
        restored = again.snapshot().restored
        assert [e.text for e in restored if e.type == "user_message"] == ["what did I ask first?"]
    finally:
        again.stop()


def test_an_interrupt_ends_the_running_turn_in_the_child(tmp_path: Path) -> None:
    session = demo(tmp_path, yes=True, demo_speed=20).start()  # 20 tokens/s: the reply takes a while
    events = Collector()
    session.subscribe(events)
    try:
        session.submit(UserInput("summarize the project"))
        events.wait_for("user_message")
        session.submit(Interrupt())
        events.wait_for("interrupted")
        assert events.wait_for("result").stop_reason == "interrupted"
        assert [e.state for e in events.of("state")][-2:] == ["interrupting", "idle"]
        assert session.alive and session.snapshot().state.state == "idle"
    finally:
        session.stop()


def test_a_bad_setting_fails_start_with_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SetupError) as failed:
        demo(tmp_path, max_steps=0).start()
    message = str(failed.value)
    assert "max_steps" in message and "\n" not in message


def test_an_unknown_session_id_fails_start_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(SetupError) as failed:
        demo(tmp_path, resume="no-such-session").start()
    assert "no-such-session" in str(failed.value) and "\n" not in str(failed.value)


def test_a_session_process_that_dies_says_so_as_an_error_event(tmp_path: Path) -> None:
    session = demo(tmp_path, yes=True).start()
    events = Collector()
    session.subscribe(events)
    assert session._process is not None
    os.kill(session._process.pid, signal.SIGKILL)
    error = events.wait_for("error")
    assert "the session process ended (exit -9)" in error.message
    session.submit(UserInput("are you there?"))  # not dropped in silence
    again = events.wait_for("error", count=2)
    assert f"tidegauge --resume {session.info.session_id}" in again.message
    session.stop()


def test_deltas_in_a_row_share_one_line_and_keep_their_order_around_other_events() -> None:
    said: list[Event] = [TextDeltaEvent(text="a"), TextDeltaEvent(text="b"), ThinkingDeltaEvent(text="t"),
                         StateEvent(state="tool", step=1, max_steps=5), TextDeltaEvent(text="c")]
    batch = [EventEnvelope(seq, 7, event) for seq, event in enumerate(said, start=1)]
    lines = merged_lines(batch).decode().splitlines()
    assert [line.split('"type":')[1].split(",")[0].strip(' "') for line in lines] == [
        "text_delta", "thinking_delta", "state", "text_delta"]
    assert '"text": "ab"' in lines[0] and '"text": "c"' in lines[3]


def test_commands_survive_the_wire_and_a_bad_line_is_named() -> None:
    for command in (UserInput("héllo\nworld"), Approve("approval-3", "always"), Interrupt()):
        assert decode_command(encode_command(command)) == command
    with pytest.raises(ValueError, match="not a command line"):
        decode_command(b'{"command": "Format", "fields": {}}')

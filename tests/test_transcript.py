"""The transcript: append-only, redacted, readable after a crash, restorable."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Sequence

import pytest

from app.kernel.events import CompactionEvent, NoticeEvent, ToolResultEvent, UsageEvent
from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from app.kernel.redact import REDACTED, clear_secrets, register_secret
from app.kernel.markers import INTERRUPTED_RESULT
from app.session.transcript import (
    EventLine,
    MessageLine,
    TranscriptWriter,
    read_transcript,
    restore,
)

try:
    from app.context.validate import history_problems
except ImportError:  # pragma: no cover - the engine's validator not there yet
    def history_problems(history: Sequence[Message]) -> list[str]:
        problems = []
        for i, msg in enumerate(history):
            if msg.role == "assistant" and msg.tool_uses:
                nxt = history[i + 1] if i + 1 < len(history) else None
                answered = {r.tool_use_id for r in nxt.tool_results} if nxt and nxt.role == "user" else set()
                problems += [f"{u.id} unanswered" for u in msg.tool_uses if u.id not in answered]
            if i and msg.role == history[i - 1].role:
                problems.append(f"message {i}: two in a row")
        return problems


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "session" / "transcript.jsonl"


def tool_call(call_id: str, name: str = "run_bash", text: str = "") -> Message:
    content: list = [TextBlock(text=text)] if text else []
    content.append(ToolUseBlock(id=call_id, name=name, input={"command": "ls"}))
    return Message(role="assistant", content=content)


def tool_results(*call_ids: str) -> Message:
    return Message(role="user", content=[ToolResultBlock(tool_use_id=i, content=f"output of {i}") for i in call_ids])


def raw_lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


# ---------------------------------------------------------------- writing

def test_every_line_is_one_json_object_with_kind_and_ts(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("line one\nline two"))
        writer.append_event(NoticeEvent(text="hello"))
        writer.replace_history([Message.user("summary")], "compaction")
        writer.end_turn()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 4
    records = [json.loads(line) for line in lines]
    assert [r["kind"] for r in records] == ["message", "event", "history", "turn_end"]
    assert all(isinstance(r["ts"], float) for r in records)
    assert records[1]["event"] == {"type": "notice", "level": "info", "text": "hello"}
    assert records[2]["reason"] == "compaction"


def test_api_key_never_reaches_the_file(path: Path) -> None:
    secret = "sk-test-transcript-secret-4242"
    register_secret(secret)
    try:
        with TranscriptWriter(path) as writer:
            writer.append_message(Message.user(f"my key is {secret}"))
            writer.append_message(Message(role="assistant", content=[
                ToolUseBlock(id="c1", name="run_bash", input={"command": f"curl -H 'x-api-key: {secret}'"})]))
            writer.append_event(NoticeEvent(level="error", text=f"401 for key {secret}"))
            writer.replace_history([Message.user(f"summary mentioning {secret}")], "compaction")
            writer.end_turn()
    finally:
        clear_secrets()
    data = path.read_bytes()
    assert secret.encode() not in data
    assert data.count(REDACTED.encode()) == 4


def test_file_is_only_appended_to(path: Path) -> None:
    """Compaction, reset and friends add lines; what was written stays byte for byte."""
    writer = TranscriptWriter(path)
    writer.append_message(Message.user("the original task, later compacted"))
    writer.append_message(Message.assistant_text("working on it"))
    before = path.read_bytes()
    writer.replace_history([Message.user("summary")], "compaction")
    writer.replace_history([], "reset")
    writer.close()
    after = path.read_bytes()
    assert after.startswith(before)
    assert b"the original task, later compacted" in after


def test_hostile_text_round_trips_on_one_line(path: Path) -> None:
    hostile = "nul\x00 ansi\x1b[31mred\x1b]52;c;aGk=\x07 bad\udcff utf8 中文 [bold]x[/bold]\r\nnext"
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user(hostile))
        writer.append_message(Message.assistant_text("ok"))
    assert len(path.read_bytes().splitlines()) == 2
    state = restore(path)
    assert state.warnings == []
    assert state.history[0].text == hostile


def test_writer_refuses_after_close(path: Path) -> None:
    writer = TranscriptWriter(path)
    writer.close()
    writer.close()  # twice is fine
    with pytest.raises(ValueError):
        writer.append_message(Message.user("late"))


# ---------------------------------------------------------------- reading damaged files

def test_torn_last_line_is_skipped_with_a_warning(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("one"))
        writer.append_message(Message.assistant_text("two"))
        writer.end_turn()
    full_line = MessageLine(ts=1.0, message=Message.user("four")).model_dump_json().encode()
    with open(path, "ab") as f:
        f.write(full_line[: len(full_line) // 2])  # the crash hit mid-write

    result = read_transcript(path)
    assert [line.kind for line in result.lines] == ["message", "message", "turn_end"]
    assert len(result.warnings) == 1
    assert "line 4" in result.warnings[0] and "torn" in result.warnings[0]


def test_corrupted_middle_line_is_skipped_and_the_rest_kept(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("one"))
        writer.append_message(Message.assistant_text("two"))
        writer.append_message(Message.user("three"))
    lines = raw_lines(path)
    lines[1] = b'{"kind":"message","ts":1.0,"message":{"role":"robot"'  # damaged in place
    path.write_bytes(b"\n".join(lines))

    result = read_transcript(path)
    assert [line.message.text for line in result.lines] == ["one", "three"]
    assert len(result.warnings) == 1
    assert "line 2" in result.warnings[0] and "corrupted" in result.warnings[0]


def test_line_glued_to_a_damaged_one_is_recovered(path: Path) -> None:
    """A corrupted byte that hit a newline must not take the next, intact line with it."""
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("one"))
        writer.append_message(Message.assistant_text("two"))
        writer.append_message(Message.user("three"))
    data = bytearray(path.read_bytes())
    first_newline = data.index(b"\n")
    data[first_newline - 3] = 0xFF  # damage line 1 ...
    data[first_newline] = 0x00  # ... and the newline that ended it
    path.write_bytes(bytes(data))

    result = read_transcript(path)
    assert [line.message.text for line in result.lines] == ["two", "three"]
    assert len(result.warnings) == 1 and "line 1" in result.warnings[0]


def test_binary_garbage_and_wrong_shapes_do_not_raise(path: Path) -> None:
    path.parent.mkdir(parents=True)
    good = MessageLine(ts=2.0, message=Message.user("survivor")).model_dump_json().encode()
    path.write_bytes(b"\xff\xfe\x00garbage\n[1,2,3]\n42\n" + b"[" * 100_000 + b"\n"
                     + b'{"kind":"nope","ts":1}\n' + good + b"\n")
    result = read_transcript(path)
    assert [line.message.text for line in result.lines] == ["survivor"]
    assert len(result.warnings) == 5


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    result = read_transcript(tmp_path / "nothing.jsonl")
    assert result.lines == [] and result.warnings == []


def test_writing_after_a_torn_line_starts_a_fresh_line(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("before the crash"))
    with open(path, "ab") as f:
        f.write(b'{"kind":"message","ts":1.0,"mess')
    with TranscriptWriter(path) as writer:  # the resumed session appends
        writer.append_message(Message.assistant_text("after the resume"))

    result = read_transcript(path)
    assert [line.message.text for line in result.lines] == ["before the crash", "after the resume"]
    assert len(result.warnings) == 1 and "line 2" in result.warnings[0]


def test_killed_writer_leaves_a_readable_file(path: Path) -> None:
    """kill -9 in the middle of a stream of writes: every complete line survives."""
    script = textwrap.dedent(f"""
        import sys
        from app.kernel.messages import Message
        from app.session.transcript import TranscriptWriter
        writer = TranscriptWriter({str(path)!r})
        i = 0
        while True:
            writer.append_message(Message.user("x" * 5000 + str(i)))
            i += 1
            if i == 50:
                writer.end_turn()
                print("ready", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    result = read_transcript(path)
    assert len(result.lines) >= 51
    assert len(result.warnings) <= 1  # at most the torn last line
    texts = [line.message.text for line in result.lines if isinstance(line, MessageLine)]
    assert texts == ["x" * 5000 + str(i) for i in range(len(texts))]


# ---------------------------------------------------------------- restore

def test_restore_after_compaction_is_summary_plus_later_messages(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("task: fix the bug"))
        writer.append_message(tool_call("c1"))
        writer.append_message(tool_results("c1"))
        writer.append_message(Message.assistant_text("found it"))
        writer.end_turn()
        summary = Message.user("This is a summary of an earlier conversation: bug found in db.py")
        writer.replace_history([summary], "compaction")
        writer.append_message(Message.assistant_text("continuing from the summary"))
        writer.append_message(Message.user("now add a test"))
        writer.end_turn()

    state = restore(path)
    assert [m.text for m in state.history] == [
        "This is a summary of an earlier conversation: bug found in db.py",
        "continuing from the summary",
        "now add a test",
    ]
    assert state.turns == 2
    assert state.warnings == []
    # nothing was lost on disk
    assert b"task: fix the bug" in path.read_bytes()


def test_restore_after_reset_starts_empty(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("old"))
        writer.append_message(Message.assistant_text("old answer"))
        writer.replace_history([], "reset")
    assert restore(path).history == []


def test_restore_mid_turn_answers_every_pending_tool_call(path: Path) -> None:
    """As after kill -9 while tools ran: the next request must still be valid."""
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("run the tests"))
        writer.append_message(Message(role="assistant", content=[
            ThinkingBlock(thinking="two commands"), TextBlock(text="running"),
            ToolUseBlock(id="c1", name="run_bash", input={"command": "pytest"}),
            ToolUseBlock(id="c2", name="read_file", input={"path": "a.py"}),
        ]))
    state = restore(path)
    assert len(state.history) == 3
    last = state.history[-1]
    assert last.role == "user"
    assert [(r.tool_use_id, r.content, r.is_error) for r in last.tool_results] == [
        ("c1", INTERRUPTED_RESULT, True), ("c2", INTERRUPTED_RESULT, True)]
    assert history_problems(state.history) == []
    assert any("marked interrupted" in w for w in state.warnings)


def test_restore_keeps_results_that_arrived_and_fills_the_rest(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("go"))
        writer.append_message(Message(role="assistant", content=[
            ToolUseBlock(id="a", name="run_bash", input={}), ToolUseBlock(id="b", name="run_bash", input={})]))
        writer.append_message(tool_results("b"))
    state = restore(path)
    results = state.history[-1].tool_results
    assert [(r.tool_use_id, r.content) for r in results] == [("a", INTERRUPTED_RESULT), ("b", "output of b")]
    assert history_problems(state.history) == []


def test_restore_gives_a_tool_that_finished_before_the_kill_its_recorded_result(path: Path) -> None:
    # Killed after one tool of the round finished (its result event written) but before the
    # round's results message: the finished one keeps its output, the other is interrupted.
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("go"))
        writer.append_message(Message(role="assistant", content=[
            ToolUseBlock(id="a", name="read_file", input={"path": "a.py"}),
            ToolUseBlock(id="b", name="run_bash", input={"command": "sleep 600"})]))
        writer.append_event(ToolResultEvent(id="a", name="read_file", is_error=False, truncated=True,
                                            original_chars=90_000, kept_chars=40_000,
                                            full_output_path="/tmp/a.txt", content="def main(): ..."))
    state = restore(path)
    results = state.history[-1].tool_results
    assert [(r.tool_use_id, r.content, r.is_error) for r in results] == [
        ("a", "def main(): ...", False), ("b", INTERRUPTED_RESULT, True)]
    assert results[0].full_output_path == "/tmp/a.txt"
    assert history_problems(state.history) == []
    assert any("recorded result" in w for w in state.warnings)
    assert any("1 tool call(s) without a result (run_bash) marked interrupted" in w for w in state.warnings)


def test_restore_drops_a_trailing_empty_assistant_message(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("hello"))
        writer.append_message(Message(role="assistant", content=[]))
    state = restore(path)
    assert [m.role for m in state.history] == ["user"]
    assert history_problems(state.history) == []


def test_restore_survives_a_torn_tool_result_line(path: Path) -> None:
    with TranscriptWriter(path) as writer:
        writer.append_message(Message.user("go"))
        writer.append_message(tool_call("c1", text="let me look"))
    line = MessageLine(ts=1.0, message=tool_results("c1")).model_dump_json().encode()
    with open(path, "ab") as f:
        f.write(line[:-5])
    state = restore(path)
    assert state.history[-1].tool_results[0].content == INTERRUPTED_RESULT
    assert history_problems(state.history) == []
    assert any("torn" in w for w in state.warnings)


def test_restore_returns_events_in_order_as_typed_events(path: Path) -> None:
    usage = UsageEvent(input_tokens=100, cache_read_tokens=20, cache_write_tokens=0, output_tokens=5,
                       context_tokens=125)
    compaction = CompactionEvent(trigger="auto", ok=True, messages_before=9, messages_after=1,
                                 tokens_before=160_000, tokens_after=3_000)
    with TranscriptWriter(path) as writer:
        writer.append_event(usage)
        writer.append_event(compaction)
        writer.write_line(EventLine(ts=3.0, event={"type": "from_the_future", "x": 1}))
        writer.append_event(NoticeEvent(text="after"))
    state = restore(path)
    assert state.events == [usage, compaction, NoticeEvent(text="after")]
    assert any("from_the_future" in w for w in state.warnings)

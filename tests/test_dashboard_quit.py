"""ctrl+q in a real terminal: tidegauge exits cleanly and keeps the whole session.

The process is ``python -m app`` on a pseudo-terminal (the demo model), as a
person runs it. The process skips the interpreter's teardown once the session
thread has stopped, so these check what that must not lose: the exit code, the
"resume with" line, and the transcript of the turn that was just answered.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_quit import CTRL_Q, Terminal  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _transcript_events(data_dir: Path) -> list[dict]:
    (transcript,) = data_dir.glob("sessions/*/transcript.jsonl")
    return [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines() if line.strip()]


def _wait_for_turn_end(data_dir: Path, term: Terminal, rounds: int = 6_000) -> None:
    """Until the transcript records the end of the turn (polled: it is another process)."""
    for _ in range(rounds):
        if any(path.read_bytes().count(b'"kind":"turn_end"') for path in data_dir.glob("sessions/*/transcript.jsonl")):
            return
        if term.proc.poll() is not None:
            break
        time.sleep(0.05)  # polls the condition above
    raise AssertionError("the turn never ended")


def test_ctrl_q_after_a_turn_exits_zero_and_keeps_the_transcript(tmp_path: Path) -> None:
    term = Terminal(tmp_path, ["--demo-speed", "0"])
    try:
        mark = term.wait_for(b"scripted model", b"idle")
        term.type(b"what did I ask first?\r")
        term.wait_for(b"step 1 of", since=mark)
        _wait_for_turn_end(tmp_path / "data", term)
        quit_at = len(term.output)
        term.type(CTRL_Q)
        code = term.proc.wait(timeout=60)
        drawn = term.read_to_end()
        output = drawn.decode(errors="replace")
        after_quit = drawn[quit_at:].decode(errors="replace")
    finally:
        term.close()
    assert code == 0, output[-800:]
    assert "Traceback" not in output
    # The terminal is given back as it was, though the input thread is not waited for: mouse
    # reporting off, the main screen back, the cursor shown.
    for sequence in ("\x1b[?1000l", "\x1b[?1003l", "\x1b[?1006l", "\x1b[?1049l", "\x1b[?25h"):
        assert sequence in after_quit, repr(sequence)
    assert "resume with: tidegauge --resume " in output
    lines = _transcript_events(tmp_path / "data")
    assert lines[-1]["kind"] == "turn_end", lines[-1]
    said = [line["message"] for line in lines if line["kind"] == "message"]
    assert [m["role"] for m in said][:1] == ["user"] and said[-1]["role"] == "assistant", said


@pytest.mark.parametrize("round_", range(3))
def test_ctrl_q_when_idle_never_shows_a_traceback(tmp_path: Path, round_: int) -> None:
    """The App's unmount stops the session first; the launcher's stop must not then
    submit to the closed loop (it did: 'Event loop is closed', exit 1, one quit in two)."""
    term = Terminal(tmp_path, ["--demo-speed", "0"])
    try:
        term.wait_for(b"scripted model", b"idle")
        term.type(CTRL_Q)
        code = term.proc.wait(timeout=60)
        output = term.read_to_end().decode(errors="replace")
    finally:
        term.close()
    assert code == 0, output[-800:]
    assert "Event loop is closed" not in output and "Traceback" not in output

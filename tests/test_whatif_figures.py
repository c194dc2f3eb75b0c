"""What a replay computes, held fixed, and the compaction thrash it used to show.

A recorded session (written through the real transcript writer: typed prompts, a few pastes, a
``read_file`` call and its ~600-token result per turn) replayed in process under policies that
compact, clear old results and compact from the session memory. The figures were computed by
the replay before the engine's per-request walks were made incremental (the pastes' scan, the
clearing's bound): those changes must not move a single token of them.
"""

from __future__ import annotations


import pytest

from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.session.transcript import TranscriptWriter
from app.session.whatif import Recording, load_recording, parse_policy, run_whatif

TURNS = 40
CONTEXT = {"type": "context", "exact_tokens": None, "estimated_tokens": 1300, "projected_tokens": 1300,
           "thresholds": {"window": 128000, "reserve": 8000, "effective_window": 120000,
                          "auto_compact_line": 107000, "warning_line": 87000, "blocking_line": 117000},
           "breakdown": {"system": 300, "memory": 0, "tools": 1000}, "level": "ok"}


def _prompt(turn: int) -> str:
    if turn % 10 == 3:  # a paste: saved whole by the engine, kept head and tail by a summary
        return "\n".join(f"pasted line {turn}.{k} of the log" for k in range(60))
    return f"prompt {turn}: read file-{turn}.txt and say what it holds"


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    folder = tmp_path_factory.mktemp("figures")
    (folder / "tool-results").mkdir()
    transcript = folder / "transcript.jsonl"
    tokens = 1300
    with TranscriptWriter(transcript) as writer:
        writer.append_event(CONTEXT)
        for turn in range(1, TURNS + 1):
            writer.append_message(Message.typed_by_user(_prompt(turn)))
            writer.append_message(Message(role="assistant", content=[
                TextBlock(text=f"Reading file {turn}."),
                ToolUseBlock(id=f"c{turn}", name="read_file", input={"path": f"file-{turn}.txt"})]))
            writer.append_event({"type": "usage", "agent": "main", "input_tokens": tokens, "output_tokens": 20})
            writer.append_event({"type": "chart_point", "tokens": tokens + 20, "kind": "call"})
            result = " ".join(f"r{turn}w{k}" for k in range(200))
            writer.append_message(Message(role="user", content=[ToolResultBlock(tool_use_id=f"c{turn}",
                                                                                content=result)]))
            writer.append_message(Message(role="assistant", content=[TextBlock(text=f"File {turn} holds words.")]))
            tokens += 700
            writer.append_event({"type": "usage", "agent": "main", "input_tokens": tokens, "output_tokens": 10})
            writer.append_event({"type": "chart_point", "tokens": tokens + 10, "kind": "call"})
    return load_recording(transcript, session_id="figures", model="gpt-4o", tool_results_dir=folder / "tool-results")


# policy -> (compactions, peak, input tokens, sum of the curve's points), as the replay computed them
FIGURES: dict[str, tuple[int, int, int, int]] = {
    "window=20000": (7, 9011, 579678, 513053),
    "window=20000,summarizer=memory": (7, 9011, 616440, 513053),
    "window=20000,micro-compact=keep-tokens=2000;min-free=1000": (1, 8635, 517182, 508745),
    "window=24000,max-output=400": (1, 11862, 563972, 552634),
    "window=24000,micro-compact=idle=1": (4, 11935, 670563, 621299),
}


@pytest.mark.parametrize("spec", list(FIGURES))
def test_a_replays_figures_are_unchanged(recording: Recording, spec: str) -> None:
    curve = run_whatif(recording, [parse_policy(spec)])[1]
    assert (curve.compactions, curve.peak_tokens, curve.input_tokens, sum(t for _, t in curve.points)) == FIGURES[spec]
    assert len(curve.points) == 2 * TURNS


def test_a_window_too_small_for_what_a_summary_keeps_compacts_at_most_every_other_call(recording: Recording) -> None:
    """Under 12K the user's kept words and pastes leave a summary near the line: every request
    compacted again (89 compactions in 80 calls); now one waits for the room it should make."""
    curve = run_whatif(recording, [parse_policy("window=12000")])[1]
    assert 0 < curve.compactions <= len(curve.points) // 2
    assert curve.peak_tokens < curve.window

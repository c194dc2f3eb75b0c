"""4a. A 1,000-turn session: the engine's per-turn cost stays flat.

Per-turn accounting (append + usage + projection + context event, see
    ``_session.play_messages``) at turn 1,000 against turn 10. Interleaved:
    one engine already at turn 999 plays turns 1,000, 1,001, ...; between
    them, fresh engines at turn 9 each play their turn 10. Medians compared.
(4b/4c, the dashboard's memory, are in bench_memory: their own process.)
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._fixtures import require
from benchmarks._session import new_engine, play_messages, play_turn, round_messages
from benchmarks.harness import Check, median, seconds

NAME_TURNS = "4a 1,000 turns: accounting"
MAX_TURN_RATIO = 2.0


def _engine_at(turn: int, tag: str, workdir: Path) -> Any:
    from app.kernel.messages import Message

    engine = new_engine(workdir / "tool-results", workdir / f"transcript-{tag}.jsonl")
    engine.append(Message.user("Read every module and find the handler that drops requests."))
    for n in range(1, turn + 1):
        play_turn(engine, n, tag)
    return engine


def _per_turn(quick: bool) -> Check:
    late_turn = 1_000
    samples = 31 if quick else 61
    early: list[float] = []
    late: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
        workdir = Path(tmp)
        big = _engine_at(late_turn - 1, "big-", workdir)
        for i in range(samples):
            # Fresh small engine: its turn 10 is really turn 10 (built outside the timing).
            small = _engine_at(9, f"small{i}-", workdir)
            small_msgs = round_messages(10, f"small{i}-")
            big_msgs = round_messages(late_turn + i, "big-")
            gc.collect()
            pair = [(small, small_msgs, early), (big, big_msgs, late)]
            for engine, msgs, out in (pair if i % 2 == 0 else pair[::-1]):
                started = time.perf_counter()
                play_messages(engine, *msgs)
                out.append(time.perf_counter() - started)
            small.transcript.close()
        assert len(big.history) == 1 + 2 * (late_turn - 1 + samples)
        big.transcript.close()
    e, l_ = median(early), median(late)
    return Check(
        name=NAME_TURNS,
        figure=f"turn 1,000: {seconds(l_)} vs turn 10: {seconds(e)} (median of {samples})",
        target=f"<= {MAX_TURN_RATIO:g}× turn 10",
        value=l_ / e, limit=MAX_TURN_RATIO, op="<=",
        extra={"turn10_s": early, "turn1000_s": late},
    )


def run(quick: bool) -> list[Check]:
    for module in ("app.context.engine", "app.session.transcript"):
        require(module)
    return [_per_turn(quick)]

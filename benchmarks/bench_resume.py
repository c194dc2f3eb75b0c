"""14. `--resume` of a long session: the dashboard's time to the last reply, 5,000 turns vs 50.

A session on disk (``benchmarks/_long_session.py``: the real store and transcript writer, a
prompt, a ``read_file`` call, a reply and a ``/usage`` report per turn, a compaction every 50
turns) is resumed as the dashboard resumes it: the session built from settings, then the real
App (headless, 120x40) until the newest conversation item is in view after the last reply, and a
key typed reaches the prompt. Each size is timed once after a warm-up resume of 50 turns (the
first one pays the imports). The session is rebuilt from its transcript each time (its restore
is linear in the turns): the target holds the dashboard's own catch-up to a small share of that.
What stays linear in the turns: the session's restore of its transcript (3.3 s at 5,000 turns)
and the view model folding each event; the conversation mounts only its window, and the tool
list and context panel take the replay as one batch each and draw once. Measured on 2 shared
cores: 1,000 turns vs 50 2.0x (quick), 5,000 vs 50 5.2x (6.0 s vs 1.15 s); with a draw per
record in the side panels 2.7x and 9.1x; with one widget mounted per conversation item, 1,000 vs
50 was 29x (in a terminal: 4.2 s for 50 turns, 424 s for 5,000, 101x).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path

from benchmarks._dashboard import isolate_user_dirs
from benchmarks._fixtures import require
from benchmarks.harness import Check

NAME = "14 --resume of 5,000 turns vs 50"
# Measured 5.2x (full) and 2.0x (quick, 1,000 turns); one widget per item was 29x at 1,000 turns.
MAX_RATIO = {False: 14.0, True: 4.0}
_KEY_ENV = "TIDEGAUGE_BENCH_RESUME_KEY"


def _resume_seconds(tmp: Path, turns: int) -> float:
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import Settings
    from app.wiring.runtime import build_session
    from benchmarks._long_session import last_reply, write_long_session
    from textual.widgets import Input
    from widgets.assistant_message import AssistantMessage

    project = tmp / f"project-{turns}-{time.monotonic_ns()}"
    project.mkdir()
    session_id = write_long_session(tmp / "data", project, turns)
    os.environ[_KEY_ENV] = "sk-benchmark-not-a-real-key"
    settings = Settings(provider="openai", model="fake-model", base_url="http://127.0.0.1:9/v1",
                        api_key_env=_KEY_ENV, data_dir=tmp / "data")

    async def resume() -> float:
        started = time.perf_counter()
        session = build_session(settings, approvals=True, resume=session_id, cwd=project)
        runner = threading.Thread(target=lambda: asyncio.run(session.run()), daemon=True)
        runner.start()
        app = TidegaugeApp(session, cursor_blink=False)
        async with app.run_test(size=(120, 40)) as pilot:
            conversation = app.conversation
            for _ in range(100_000):
                newest = conversation.widget_of(len(conversation.items) - 1)
                replies = [widget.source for widget in conversation.query(AssistantMessage)]
                if (app.session is not None and replies and replies[-1] == last_reply(turns) and newest is not None
                        and conversation.region.contains_region(newest.region)):
                    break
                await pilot.pause()
            else:
                raise AssertionError(f"the last reply of {turns} turns never came into view")
            await pilot.press("z")
            for _ in range(10_000):
                if app.query_one("#prompt", Input).value == "z":
                    break
                await pilot.pause()
            seconds = time.perf_counter() - started
            app.exit()
        runner.join(10)
        return seconds

    return asyncio.run(resume())


def run(quick: bool) -> list[Check]:
    require("app.surfaces.dashboard.app")
    turns = 1_000 if quick else 5_000
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp_name:
        tmp = Path(tmp_name)
        isolate_user_dirs(tmp)
        _resume_seconds(tmp, 50)  # warm-up: imports, the token encoder, Markdown
        short = _resume_seconds(tmp, 50)
        long = _resume_seconds(tmp, turns)
    ratio = long / short
    name = NAME if not quick else NAME.replace("5,000", f"{turns:,}")
    limit = MAX_RATIO[quick]
    return [Check(name=name, figure=f"{long:.2f} s vs {short:.2f} s (50 turns)", target=f"<= {limit:g}×",
                  value=ratio, limit=limit, op="<=")]

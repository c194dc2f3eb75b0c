"""Every demo prompt works after any other in one session.

Each prompt goes through the headless CLI (``tidegauge -p PROMPT --continue
--output-format stream-json --yes --demo-speed 0``), in-process so the runs do
not pay an interpreter start-up each; the session carries over on disk exactly as
between two processes. Orders that share their first prompts share those runs:
a finished prefix's data dir is copied (big immutable files hard-linked, the
append-only transcript copied) and each continuation runs in its own copy. A data
dir is removed once every order that starts with its prefix has passed here (a
failing order's stay to be looked at): most are gone before the kernel writes their
15 MB saved outputs to disk.

The prompts come from the demo's scenario table, the same one the banner
lists, so a prompt added to the banner is tested too. Which orders (see ``ORDERS``):
all orders of five prompts would be 120 orders and 325 runs, five times the 64
runs of the four older prompts' 24 orders, too slow for CI. The set kept covers
the bugs orders cause: a scenario only goes wrong by misreading what earlier
prompts left in the history (their tool calls, a compaction summary that now
holds them, an overflow recovery's drop note), so every prompt must run first
(an empty session), right after every other prompt, and under a session that
has been compacted and recovered. All 24 orders of the four older prompts stay
(they also reach the longer-range states: a summary of a summary, recall over
three earlier prompts); the fifth prompt is inserted at every position of the
one order that builds the most state (summarize, which compacts; flood, which
drops rounds; errors; recall): so it runs first, after each other prompt (after
a compaction and after an overflow recovery), each other prompt runs right after
it, and recall quotes it. That adds 15 runs to the 64. The sixth prompt (add a changelog entry, the
rewind's demo) is inserted the same way, and the two newer prompts run one after the other both
ways round.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path

import pytest

from app.wiring.cli import main
from app.demo.scenarios import SCENARIOS
from app.demo.workspace import LOG_ERROR_LINE, LOG_NAME, project_files

PROMPT_OF = {name: scenario.prompt for name, scenario in SCENARIOS.items()}
NEWER = ("delegate", "changelog")  # the fifth and sixth prompts: each inserted into one order, see the docstring
OLDER = tuple(name for name in PROMPT_OF if name not in NEWER)
MOST_STATE = ("summarize", "flood", "errors", "recall")
ORDERS = [*permutations(OLDER),
          *(MOST_STATE[:at] + (newer,) + MOST_STATE[at:] for newer in NEWER for at in range(len(MOST_STATE) + 1)),
          NEWER, NEWER[::-1]]
READABLE = sorted(p for p in project_files() if p.endswith((".py", ".md", ".toml", ".csv")))
# Files above this size are never written again once made (the 15 MB log, saved
# tool outputs): forks share them. Everything smaller is copied.
LINK_ABOVE_BYTES = 1_000_000
LOG_CACHE = "demo-cache"  # where the demo keeps the log it links into each workspace (app/demo/plugin.py)


@dataclass
class Run:
    code: int
    events: list[dict]

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def result(self) -> dict:
        assert self.events and self.events[-1]["type"] == "result", self.events[-3:]
        return self.events[-1]

    @property
    def commands(self) -> list[str]:
        return [str(e["input"].get("command") or e["input"].get("path")) for e in self.of("tool_start")]


def _fork(source: Path, target: Path) -> None:
    def copy(src: str, dst: str) -> None:
        if os.path.getsize(src) > LINK_ABOVE_BYTES and not src.endswith(".jsonl"):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=copy)


class Sessions:
    """Runs prompt sequences, each prefix once: prefix -> (its data dir, its runs)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "project-dir"
        self.cwd.mkdir()
        self.done: dict[tuple[str, ...], tuple[Path, list[Run]]] = {}
        # How many orders of the module still need each prefix's data dir (to fork or to check).
        self.needed = Counter(order[:end] for order in ORDERS for end in range(1, len(order) + 1))
        self.log = root / "demo-log" / LOG_NAME  # one link to the log, whichever data dirs are gone

    def run(self, order: tuple[str, ...]) -> list[Run]:
        """The runs of ``order``'s prompts, one session: the prefix's runs reused, the last one run now."""
        if order not in self.done:
            prefix, name = order[:-1], order[-1]
            earlier: list[Run] = []
            data = self.root / "data-{}".format("-".join(order))
            if prefix:
                earlier = self.run(prefix)
                _fork(self.done[prefix][0], data)
            elif self.log.exists():
                self._share_log(data)
            runs = [*earlier, self._prompt(data, PROMPT_OF[name], continue_session=bool(prefix))]
            written = data / LOG_CACHE / LOG_NAME
            if not self.log.exists() and written.exists():
                self.log.parent.mkdir(exist_ok=True)
                os.link(written, self.log)
            self.done[order] = (data, runs)
        return self.done[order][1]

    def passed(self, order: tuple[str, ...]) -> None:
        """``order`` passed: remove each of its prefixes' data dirs that no order left needs."""
        for end in range(1, len(order) + 1):
            prefix = order[:end]
            self.needed[prefix] -= 1
            if self.needed[prefix] == 0 and prefix in self.done:
                shutil.rmtree(self.done[prefix][0])

    def _share_log(self, data: Path) -> None:
        """A new session's data dir gets the demo's 15 MB log that the first one wrote (its log
        cache, hard-linked as forks share it): each prompt that runs first would write it again.
        The demo writes the log as a new file renamed over the old, and the scenarios only read it
        (the changelog prompt edits CHANGELOG.md), so no session here changes another's log."""
        (data / LOG_CACHE).mkdir(parents=True)
        os.link(self.log, data / LOG_CACHE / LOG_NAME)

    def _prompt(self, data: Path, prompt: str, *, continue_session: bool) -> Run:
        argv = ["-p", prompt, "--demo-speed", "0", "--yes", "--output-format", "stream-json"]
        if continue_session:
            argv.append("--continue")
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            for key in list(os.environ):
                if key.endswith("_API_KEY") or key.startswith("TIDEGAUGE_"):
                    mp.delenv(key)
            mp.setenv("TIDEGAUGE_CONFIG_DIR", str(self.root / "config"))
            mp.setenv("TIDEGAUGE_DATA_DIR", str(data))
            mp.chdir(self.cwd)
            with contextlib.redirect_stdout(out):
                code = main(argv)
        return Run(code, [json.loads(line) for line in out.getvalue().splitlines()])


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Sessions:
    return Sessions(tmp_path_factory.mktemp("orders"))


def check_errors(run: Run, earlier: list[str]) -> None:
    assert "grep -n ERROR app.log" in run.commands
    cat = [r for s, r in zip(run.of("tool_start"), run.of("tool_result")) if s["input"].get("command") == "cat app.log"]
    assert all(r["truncated"] and r["original_chars"] > 15_000_000 for r in cat)  # the registry's cut
    text = run.result["text"]
    assert "Line 300001" in text and LOG_ERROR_LINE in text


def check_summarize(run: Run, earlier: list[str]) -> None:
    reads = [e["input"]["path"] for e in run.of("tool_start") if e["name"] == "read_file"]
    assert len(reads) == len(set(reads))  # carried on from any summary: nothing read twice
    text = run.result["text"]
    assert text.startswith("## Summary of the project")
    assert all(f"`{path}`" in text for path in READABLE)


def check_flood(run: Run, earlier: list[str]) -> None:
    [cut] = run.of("result_cut")  # truncation was off: the engine cut it before sending
    assert cut["original_chars"] > 15_000_000 and cut["kept_chars"] < 100_000
    assert any(c["trigger"] == "reactive" and c["ok"] for c in run.of("compaction"))
    text = run.result["text"]
    assert "Truncation was off" in text and LOG_ERROR_LINE in text and "prompt is too long" in text


def check_recall(run: Run, earlier: list[str]) -> None:
    text = run.result["text"]
    assert run.of("tool_start") == []
    if not earlier:
        assert "first thing you've asked" in text
        return
    assert f"Your first request was:\n\n> {earlier[0]}" in text
    for prompt in earlier[1:]:
        assert f"> {prompt}" in text.split("Your first request was:", 1)[1]


def check_delegate(run: Run, earlier: list[str]) -> None:
    tasks = run.of("tool_start")  # the main agent's calls; the sub-agent's calls are its own
    assert tasks and {t["name"] for t in tasks} == {"task"}
    # A second delegation only after a compaction dropped the first report (after "summarize",
    # the report can push the context over the auto-compact line).
    assert len(tasks) <= 1 + len(run.of("compaction"))
    assert [(e["tool"], e["summary"]) for e in run.of("sub_agent") if e["status"] == "tool"] == len(tasks) * [
        ("list_files", "."), ("read_file", "inventory/importer.py"), ("read_file", "inventory/models.py")]
    finished = [e for e in run.of("sub_agent") if e["status"] == "finished"]
    assert [e["summary"] for e in finished] == len(tasks) * ["end_turn"]
    assert [u["agent"] for u in run.of("usage")].count("sub") == sum(e["step"] for e in finished)
    [report] = [r["content"] for r in run.of("tool_result") if r["id"] == tasks[-1]["id"]]
    assert report.startswith("Rows are rejected in `inventory/importer.py`")
    text = run.result["text"]
    assert all(line in text for line in report.splitlines())


def check_changelog(run: Run, earlier: list[str]) -> None:
    assert [(e["name"], e["input"]["path"]) for e in run.of("tool_start")] == [
        ("read_file", "CHANGELOG.md"), ("edit_file", "CHANGELOG.md")]
    assert not any(r["is_error"] for r in run.of("tool_result"))
    assert "Esc Esc" in run.result["text"]  # the way back: a rewind with its files


CHECKS = {"errors": check_errors, "summarize": check_summarize, "flood": check_flood, "recall": check_recall,
          "delegate": check_delegate, "changelog": check_changelog}


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(order) for order in ORDERS])
def test_every_prompt_keeps_its_own_outcome_in_this_order(sessions: Sessions, order: tuple[str, ...]) -> None:
    runs = sessions.run(order)
    assert len(runs) == len(order)
    for index, (name, run) in enumerate(zip(order, runs)):
        assert run.code == 0 and run.result["stop_reason"] == "end_turn", (name, run.events[-3:])
        CHECKS[name](run, [PROMPT_OF[n] for n in order[:index]])
    sessions.passed(order)


async def test_in_one_live_session_flood_after_summarize_floods(tmp_path: Path) -> None:
    """The order the issue reported, in one agent that never leaves memory (as in the
    dashboard): the prompt typed after the compaction is merged into the summary message."""
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_agent

    settings = load_settings({"provider": "demo", "demo_speed": 0, "yes": True, "data_dir": str(tmp_path / "data")})
    events: list[dict] = []
    agent = build_agent(settings, cwd=tmp_path, emit=lambda envelope: events.append(envelope.to_json()))
    order = ("errors", "summarize", "flood")
    try:
        for index, name in enumerate(order):
            events.clear()
            await agent.run_turn(PROMPT_OF[name])
            CHECKS[name](Run(0, list(events)), [PROMPT_OF[n] for n in order[:index]])
    finally:
        await agent.aclose()


def test_the_orders_run_every_prompt_first_and_right_after_every_other() -> None:
    """The set's promise (see the module docstring), checked so that a sixth prompt cannot be left out."""
    assert {order[0] for order in ORDERS} == set(PROMPT_OF)
    adjacent = {pair for order in ORDERS for pair in zip(order, order[1:])}
    assert adjacent == {(a, b) for a in PROMPT_OF for b in PROMPT_OF if a != b}
    assert all(set(order) - set(NEWER) in (set(), set(MOST_STATE)) for order in ORDERS if set(order) & set(NEWER))

"""Sessions people can find (issue 27): `tidegauge sessions`, --continue, --resume without an id,
and empty sessions not kept. Through the real process, against the fake server on loopback (the
headless tasks that only make the sessions listed, and the variations on what a real run here
already showed, run in-process: tests/cli_in_process.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli
from fake_llm_server import openai_text

from app.kernel.commands import Report
from app.session.store import SessionStore, remove_if_empty
from app.session.process import SessionProcess

KEY = "sk-test-fake-key-0123456789"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_text('[prices.m]\ninput = 3.0\noutput = 15.0\n', encoding="utf-8")
    for name in ("project", "elsewhere"):
        (tmp_path / name).mkdir()
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path


def _env(home: Path) -> dict[str, str]:
    return {"TIDEGAUGE_CONFIG_DIR": str(home / "config"), "TIDEGAUGE_DATA_DIR": str(home / "data")}


def tidegauge(home: Path, cwd: Path, *args: str, fake_llm: Any = None,
              real_process: bool = True) -> subprocess.CompletedProcess[str]:
    """The real process; ``real_process=False``: the same CLI in this process with exactly its
    environment (tests/cli_in_process.py), where a real run in this file already showed the wiring."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(_env(home) | {"OPENAI_API_KEY": KEY, "PYTHONUNBUFFERED": "1"})
    server = ["--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai")] if fake_llm else []
    if not real_process:
        return run_cli([*args, *server], cwd=cwd, env=env)
    return subprocess.run([sys.executable, "-m", "app", *args, *server], cwd=cwd, env=env, text=True,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


def task(home: Path, cwd: Path, fake_llm: Any, prompt: str, *args: str) -> str:
    """Run one headless task (in-process: it only makes the session the test lists); its session id."""
    fake_llm.enqueue(openai_text("done", usage=dict(prompt=1000, completion=100)))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(_env(home) | {"OPENAI_API_KEY": KEY})
    proc = run_cli(["-p", prompt, "--output-format", "json", *args, "--provider", "openai", "--model", "m",
                    "--base-url", fake_llm.base_url("openai")], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["session_id"])


def test_sessions_lists_this_directorys_sessions_newest_first_and_all_lists_every_one(fake_llm, home):
    project, elsewhere = home / "project", home / "elsewhere"
    first = task(home, project, fake_llm, "fix the\nflaky test in   test_io.py " + "and more words " * 10)
    other = task(home, elsewhere, fake_llm, "unrelated work")
    second = task(home, project, fake_llm, "second task")
    again = task(home, project, fake_llm, "and a follow-up", "--resume", first)
    assert again == first

    listed = tidegauge(home, project, "sessions")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert [row.split()[0] for row in rows] == [first, second]  # the resumed one was active last
    assert "2 turns" in rows[0] and "1 turn," in rows[1]
    title = rows[0].split("  ")[-1]
    assert title.startswith("fix the flaky test in test_io.py and more words") and title.endswith("…")
    assert len(title) == 60 and "\n" not in title
    assert ", $0.0045  " in rows[1]  # 1000 in + 100 out at $3/$15 per M
    assert ", $0.0090  " in rows[0]  # two such calls

    every = tidegauge(home, project, "sessions", "--all", real_process=False)
    assert [row.split()[0] for row in every.stdout.splitlines()] == [first, second, other]
    assert str(elsewhere) in every.stdout.splitlines()[2]


def test_a_hostile_first_prompt_is_one_inert_line_in_the_list(home):
    """A prompt is often piped text (a diff, a log): its escape sequences must not reach the terminal."""
    from app.kernel.events import UserMessageEvent

    session = SessionStore(home / "data").create(home / "project", "demo", None)
    with session.writer() as writer:
        writer.append_event(UserMessageEvent(text="\x1b]0;pwned\x07\x1b[2Jreview\nthis\u202e diff"))
    proc = tidegauge(home, home / "project", "sessions", real_process=False)
    assert proc.returncode == 0, proc.stderr
    (row,) = proc.stdout.splitlines()
    assert row.startswith(session.id) and "\x1b" not in row and "\x07" not in row and "\u202e" not in row
    assert "review this" in row


def test_help_names_the_sessions_command(home):
    shown = " ".join(tidegauge(home, home / "project", "--help").stdout.split())
    assert "`tidegauge sessions` (--all: every directory) lists the sessions --resume takes;" in shown
    sessions_help = tidegauge(home, home / "project", "sessions", "--help", real_process=False)
    assert sessions_help.returncode == 0 and "--all" in sessions_help.stdout


def test_sessions_with_none_says_so_on_stderr(home):
    proc = tidegauge(home, home / "project", "sessions", real_process=False)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip() == f"no sessions for {home / 'project'} (--all: every directory)"


def test_headless_resume_without_an_id_lists_the_sessions_and_exits_2(fake_llm, home):
    project = home / "project"
    kept = task(home, project, fake_llm, "remember 7")
    proc = tidegauge(home, project, "-p", "what was it?", "--resume", fake_llm=fake_llm)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(kept) and "remember 7" in lines[0]
    assert lines[-1].startswith("tidegauge: --resume needs a session id with -p")
    assert len(fake_llm.requests) == 1  # only the first task's


def _open_and_close_without_a_prompt(home: Path) -> str:
    """What opening the dashboard (or a browser tab) and quitting does: a session process, no prompt."""
    runner = SessionProcess({"provider": "demo", "demo_speed": 0}, cwd=home / "project").start()
    session_id = runner.info.session_id
    runner.submit(Report(kind="context"))  # a command that is not a prompt
    runner.stop(timeout=60)
    assert runner.returncode == 0, runner.stderr_tail()
    return session_id


def test_a_session_nothing_was_typed_in_is_not_kept_and_continue_takes_the_last_real_one(fake_llm, home):
    project = home / "project"
    real = task(home, project, fake_llm, "remember 7")
    sessions = home / "data" / "sessions"
    not_a_session = sessions / "20261202-030303-abcd"  # named like one, but no meta.json: never removed
    not_a_session.mkdir()
    (not_a_session / "notes.txt").write_text("keep me")
    empty = _open_and_close_without_a_prompt(home)
    assert empty != real
    assert sorted(p.name for p in sessions.iterdir()) == sorted([real, not_a_session.name])
    assert (not_a_session / "notes.txt").read_text() == "keep me"

    fake_llm.enqueue(openai_text("7"))
    proc = tidegauge(home, project, "-p", "what was it?", "--continue", fake_llm=fake_llm, real_process=False)
    assert proc.returncode == 0, proc.stderr
    assert "remember 7" in json.dumps(fake_llm.last_json["messages"])


def test_continue_passes_over_an_empty_session_left_by_an_older_version(fake_llm, home):
    project = home / "project"
    real = task(home, project, fake_llm, "remember 7")
    store = SessionStore(home / "data")
    left = store.create(project, "openai", "m")  # newer, nothing typed (as a crash would leave it)
    assert store.latest_for(project).id == real
    assert [s.session.id for s in store.summaries(project)] == [real]
    assert left.dir.is_dir()


HOLD = """
import sys
from pathlib import Path
from app.session.lock import acquire
acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_an_empty_session_another_process_holds_is_never_removed(home):
    store = SessionStore(home / "data")
    session = store.create(home / "project", "demo", None)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(session.transcript_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    try:
        assert holder.stdout is not None
        first = holder.stdout.readline()
        assert first == "held\n", f"the holder said {first!r}"
        assert remove_if_empty(session.dir) is False
        assert session.dir.is_dir()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert remove_if_empty(session.dir) is True
    assert not session.dir.exists()


# ---------------------------------------------------------------- the dashboard's picker

SIZE = (140, 40)


async def _until(pilot: Any, condition: Any, what: str) -> None:
    """Bounded polling of the app, failing with what was awaited and the screen it is on."""
    for _ in range(2_000):
        if condition():
            return
        await pilot.pause()
    raise AssertionError(f"never {what}; the screen is {type(pilot.app.screen).__name__}")


def _two_sessions(home: Path) -> list[str]:
    """Two sessions of the project with a prompt each (written as a run writes them), newest first.
    The listing itself is tested through the real program above."""
    from app.kernel.events import UserMessageEvent

    store = SessionStore(home / "data")
    ids = []
    for n, prompt in enumerate(("first [bold]task[/bold] \x1b[31mred", "second task")):
        session = store.create(home / "project", "demo", None)
        with session.writer() as writer:
            writer.append_event(UserMessageEvent(text=prompt))
        stamp = session.meta.created + 60 * (n + 1)  # created in the same second: activity orders them
        os.utime(session.transcript_path, (stamp, stamp))
        ids.append(session.id)
    return ids[::-1]


async def test_resume_without_an_id_opens_the_picker_and_enter_opens_the_highlighted_session(home):
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.session.store import session_rows
    from snapshot_apps.fake_agent import FakeSession
    from textual.widgets import OptionList
    from widgets.session_picker import SessionPicker

    newer, older = _two_sessions(home)
    opened: list[str] = []

    def resume(session_id: str) -> FakeSession:
        opened.append(session_id)
        return FakeSession()

    app = TidegaugeApp(resume_factory=resume, list_sessions=lambda: session_rows(home / "data", home / "project"),
                       pick_session=True, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, SessionPicker), "showed the session picker")
        options = app.screen.query_one(OptionList)
        assert [options.get_option_at_index(i).id for i in range(options.option_count)] == [newer, older]
        shown = str(options.get_option_at_index(1).prompt)
        assert "[bold]task[/bold]" in shown and "\x1b" not in shown  # the title as typed, inert
        await pilot.press("down", "enter")
        await _until(pilot, lambda: app.session is not None, "built the chosen session")
    assert opened == [older]


async def test_escape_in_the_picker_at_start_quits_without_a_session(home):
    from app.surfaces.dashboard.app import TidegaugeApp
    from widgets.session_picker import SessionPicker

    opened: list[str] = []
    app = TidegaugeApp(resume_factory=lambda session_id: opened.append(session_id),  # type: ignore[arg-type,return-value]
                       list_sessions=lambda: [], pick_session=True, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, SessionPicker), "showed the session picker")
        assert "No session with a prompt" in str(app.screen.query_one(".dialog-question").render())
        await pilot.press("escape")
        await _until(pilot, lambda: app.return_code == 0, "quit")
    assert opened == [] and app.session is None


async def test_slash_resume_picks_another_session_and_escape_keeps_this_one(home):
    from app.surfaces.dashboard.app import TidegaugeApp
    from app.session.store import session_rows
    from dashboard_helpers import send
    from snapshot_apps.fake_agent import FakeSession
    from widgets.session_picker import SessionPicker

    newer, _older = _two_sessions(home)
    app = TidegaugeApp(FakeSession(), list_sessions=lambda: session_rows(home / "data", home / "project"),
                       cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/resume")
        await _until(pilot, lambda: isinstance(app.screen, SessionPicker), "showed the session picker")
        await pilot.press("escape")
        await _until(pilot, lambda: not isinstance(app.screen, SessionPicker), "closed the picker")
        assert app.resume_request is None and app.return_code is None
        await send(pilot, "/resume")
        await _until(pilot, lambda: isinstance(app.screen, SessionPicker), "showed the picker again")
        await pilot.press("enter")
        await _until(pilot, lambda: app.return_code == 0, "closed to open the chosen session")
    assert app.resume_request == newer

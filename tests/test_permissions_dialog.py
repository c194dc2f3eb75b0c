"""Issue 27 on the dashboard: the approval dialog's choices, under Pilot, with a real session
(on a thread) against the loopback fake server. "Always commands starting with git status",
saved for the project, runs the next ``git status`` without asking, still asks about
``git status; touch pwned``, and ``/permissions`` lists the rule with where it came from."""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from dashboard_helpers import engine_texts, send, settle
from fake_llm_server import openai_text, openai_tool_calls
from session_thread import SessionThread

from app.kernel import events as ev
from app.wiring.config import load_settings
from app.surfaces.dashboard.app import TidegaugeApp
from app.wiring.runtime import build_session
from widgets.approval_screen import ApprovalScreen
from textual.widgets import Button

KEY = "sk-test-fake-key-0123456789"


async def next_dialog(pilot: Any, command: str) -> ApprovalScreen:
    """Bounded wait for the dialog about ``command`` (the session runs on its own thread)."""
    for _ in range(4_000):
        screen = pilot.app.screen
        # the screen is current before its buttons are mounted: wait for them too
        if (isinstance(screen, ApprovalScreen) and screen.tool_input.get("command") == command
                and screen.query(Button)):
            return screen
        await pilot.pause()
    raise AssertionError(f"no approval dialog for {command!r}; the screen is {pilot.app.screen!r}")


async def test_always_commands_starting_with_saved_for_the_project(fake_llm, tmp_path, monkeypatch):
    work, data = tmp_path / "work", tmp_path / "data"
    (work / ".git").mkdir(parents=True)
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "git status --short"}, "c1")]),
        openai_tool_calls([("run_bash", {"command": "git status"}, "c2"),
                           ("run_bash", {"command": "git status; touch pwned"}, "c3")]),
        openai_text("done"))
    settings = load_settings({"provider": "openai", "model": "m", "base_url": fake_llm.base_url("openai"),
                              "data_dir": str(data)})
    session = build_session(settings, approvals=True, cwd=work)
    asked: list[str] = []
    session.subscribe(lambda envelope: asked.append(envelope.event.tool_id)
                      if isinstance(envelope.event, ev.ApprovalRequestEvent) else None)
    app = TidegaugeApp(SessionThread(session).start(), cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "go")
        dialog = await next_dialog(pilot, "git status --short")
        buttons = {str(b.id): str(b.label) for b in dialog.query(Button)}
        assert list(buttons) == ["yes", "always_exact", "always_prefix", "always", "no"]
        assert "starting with git status" in buttons["always_prefix"] and "(p)" in buttons["always_prefix"]
        await pilot.press("s", "p")  # save it for the project, then "always commands starting with git status"
        # the next question is about the chained command: the plain git status ran without one
        chained = await next_dialog(pilot, "git status; touch pwned")
        assert asked == ["c1", "c3"], asked
        assert "$ git status; touch pwned" in str(chained.query_one("#approval-call").render())
        await pilot.press("n")
        await settle(pilot)
        said = engine_texts(app)
        assert any("allowed without asking from now on (saved for this project): run_bash(git status:*)" in t
                   for t in said), said
        await send(pilot, "/permissions")
        await settle(pilot)
        listing = [t for t in engine_texts(app) if t.startswith("permission rules")]
        assert listing and "allow run_bash(git status:*)   (saved for this project)" in listing[-1], listing
    assert not (work / "pwned").exists()
    saved = data / "permissions.json"
    assert json.loads(saved.read_text()) == {str(work.resolve()): ["run_bash(git status:*)"]}
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    assert not (work / ".tidegauge").exists()  # nothing written into the repository

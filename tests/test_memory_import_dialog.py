"""Issue 24 on the dashboard: an import from outside the repository is asked about once
(approve / decline), the answer is remembered for the project, and an approved file is in
the next request. A real session (on a thread, as under Pilot elsewhere) against the
loopback fake server."""

from __future__ import annotations

from typing import Any

import pytest
from dashboard_helpers import engine_texts, send, settle
from fake_llm_server import openai_text
from session_thread import SessionThread
from test_memory_imports_security import OPENAI_KEY, OUTSIDE_MARKER, Layout

from app.kernel.commands import ApproveImport
from app.wiring.config import load_settings
from app.context.memory import APPROVALS_FILE
from app.surfaces.dashboard.app import TidegaugeApp
from app.wiring.runtime import build_session
from widgets.import_approval_screen import ImportApprovalScreen


@pytest.fixture
def layout(tmp_path, monkeypatch) -> Layout:
    layout = Layout(tmp_path)
    for name, value in layout.env().items():
        if name in ("HOME", "TIDEGAUGE_CONFIG_DIR", "OPENAI_API_KEY"):
            monkeypatch.setenv(name, value)
    (layout.repo / "AGENTS.md").write_text("Project rules.\n@../outside/secret.txt\n")
    return layout


def settings_for(layout: Layout, fake_llm: Any) -> Any:
    return load_settings({"provider": "openai", "model": "m", "base_url": fake_llm.base_url("openai"),
                          "data_dir": str(layout.data_dir)})


async def wait_for_dialog(pilot: Any) -> ImportApprovalScreen:
    for _ in range(2_000):
        if isinstance(pilot.app.screen, ImportApprovalScreen):
            return pilot.app.screen
        await pilot.pause()
    raise AssertionError(f"no import dialog; the screen is {pilot.app.screen!r}")


async def test_the_dashboard_asks_and_an_approved_import_is_in_the_next_request(fake_llm, layout):
    fake_llm.enqueue(openai_text("ok"))
    settings = settings_for(layout, fake_llm)
    outside = str((layout.outside / "secret.txt").resolve())
    app = TidegaugeApp(SessionThread(build_session(settings, approvals=True, cwd=layout.repo)).start(),
                       cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "hello")  # asked before the first request, so that request can carry it
        dialog = await wait_for_dialog(pilot)
        assert dialog.path == outside and "outside the repository" in dialog.reason
        assert fake_llm.requests == []  # nothing sent while the user decides
        await pilot.press("a")
        await settle(pilot)
        assert any("approved for this project" in text for text in engine_texts(app))
    system = fake_llm.requests[-1].json["messages"][0]["content"]
    assert OUTSIDE_MARKER in system and "Project rules." in system
    # Asked once: the next session of this project reads it without asking.
    again = build_session(settings, approvals=True, cwd=layout.repo)
    assert again.agent.engine.memory.pending == [] and OUTSIDE_MARKER in again.agent.engine.memory.text


async def test_declining_keeps_it_out_and_is_remembered(fake_llm, layout):
    fake_llm.enqueue(openai_text("ok"))
    settings = settings_for(layout, fake_llm)
    app = TidegaugeApp(SessionThread(build_session(settings, approvals=True, cwd=layout.repo)).start(),
                       cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "hello")
        await wait_for_dialog(pilot)
        await pilot.press("d")
        await settle(pilot)
    assert OUTSIDE_MARKER not in str(fake_llm.requests[-1].json)
    again = build_session(settings, approvals=True, cwd=layout.repo)
    assert again.agent.engine.memory.pending == []
    assert [n.action for n in again.agent.engine.memory.notices] == ["declined"]


def test_an_answer_about_a_file_never_asked_about_approves_nothing(fake_llm, layout):
    session = build_session(settings_for(layout, fake_llm), approvals=True, cwd=layout.repo)
    session.submit(ApproveImport(str(layout.home / ".ssh" / "id_ed25519"), True))  # not the asked path
    session.submit(ApproveImport("/etc/hostname", True))
    assert not (layout.data_dir / APPROVALS_FILE).exists()
    assert OPENAI_KEY not in session.agent.engine.memory.text


async def test_an_import_inside_the_repository_holding_a_credential_is_asked_about(fake_llm, layout):
    (layout.repo / "deploy.md").write_text("token: ghp_DashboardAskedToken0123456789abcdefg\n")
    (layout.repo / "AGENTS.md").write_text("Project rules.\n@deploy.md\n")
    fake_llm.enqueue(openai_text("ok"))
    settings = settings_for(layout, fake_llm)
    app = TidegaugeApp(SessionThread(build_session(settings, approvals=True, cwd=layout.repo)).start(),
                       cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "hello")
        dialog = await wait_for_dialog(pilot)
        assert dialog.path == str((layout.repo / "deploy.md").resolve())
        assert "credential" in dialog.reason and "GitHub Token" in dialog.reason
        assert fake_llm.requests == []  # nothing sent while the user decides
        await pilot.press("d")
        await settle(pilot)
    assert "ghp_DashboardAskedToken" not in str(fake_llm.requests[-1].json)
    assert "Project rules." in fake_llm.requests[-1].json["messages"][0]["content"]

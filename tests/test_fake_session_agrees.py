"""The dashboard tests' fake session is the real one with a scripted model: built by the same
wiring, it answers every command with the same kinds of events as the demo's session, each
carrying the id ``submit`` returned. The real one runs the offline demo in-process (no network)."""

from __future__ import annotations

import asyncio
import typing
from pathlib import Path
from typing import Any

import pytest

from app.kernel import commands as cmd
from app.kernel.protocol import merge_deltas
from snapshot_apps.fake_agent import FakeSession

# One of each command, in the order they are given to both sessions (three prompts first: the
# compaction then has a history to summarise). Ids that name nothing (a call, a request, a form,
# an import) are answered as the real session answers them.
COMMANDS: list[Any] = [
    cmd.Report(kind="context"), cmd.Report(kind="usage"), cmd.Report(kind="permissions"),
    cmd.Preview("compact", focus="the plan"), cmd.Preview("reset"),
    cmd.PreviewRestore("call-nowhere"), cmd.RestoreResult("call-nowhere"),
    cmd.ServerCompaction(True), cmd.ApproveImport("/nowhere/notes.md", True),
    cmd.AnswerElicitation("form-nowhere", "decline"), cmd.Approve("approval-nowhere", "yes"),
    cmd.WhatIf(100_000, 0.8), cmd.EvictResult("call-nowhere"), cmd.PinResult("call-nowhere"),
    cmd.PreviewRewind(), cmd.Rewind("plan-nowhere"), cmd.ManageMcpServer("status"),
    cmd.UserInput("hello"), cmd.UserInput("explain the project"), cmd.UserInput("what next"),
    cmd.Compact(), cmd.Reset(), cmd.Interrupt(),
]


def test_the_fake_is_the_real_session_and_only_its_model_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.demo.provider import DemoProvider
    from app.session.agent_session import AgentSession
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session
    from snapshot_apps.fake_agent import ScriptedProvider

    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    real = build_session(load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(tmp_path / "data")}),
                         approvals=True, cwd=tmp_path)
    fake = FakeSession()
    assert type(fake.session) is type(real) is AgentSession
    parts = ("agent", "agent.engine", "agent.engine.core", "agent.registry", "agent.tool_context", "permissions",
             "stream", "client_requests")

    def part(session: Any, path: str) -> Any:
        for name in path.split("."):
            session = getattr(session, name)
        return session

    assert [type(part(fake.session, p)) for p in parts] == [type(part(real, p)) for p in parts]
    assert [spec.name for spec in fake.session.agent.registry.specs()] == [spec.name for spec in real.agent.registry.specs()]
    assert type(real.agent.provider) is DemoProvider and type(fake.session.agent.provider) is ScriptedProvider


def test_every_command_is_given_to_both() -> None:
    assert {type(command) for command in COMMANDS} | {cmd.Shutdown} == set(typing.get_args(cmd.Command))


def _kinds(events: list[Any], command: Any) -> list[str]:
    """The kinds of the events a command caused, as a surface draws them: a run of deltas as one,
    a state said twice in a row as once; a prompt by how its turn starts and ends (the demo's
    reply and the fake's script differ in between, by design)."""
    kinds: list[str] = []
    for envelope in merge_deltas(events):
        if not (kinds and kinds[-1] == envelope.event.type == "state"):
            kinds.append(envelope.event.type)
    if isinstance(command, cmd.UserInput):
        return [kinds[0], "...", *kinds[-2:]]
    if isinstance(command, cmd.Compact):  # whether the summary made it smaller is each history's doing
        return [kinds[0], *(["compaction"] if "compaction" in kinds else []), kinds[-1]]
    return kinds


async def _until_done(session: Any) -> None:
    async def done() -> None:
        while session.pending or getattr(session, "busy", False):
            await asyncio.sleep(0.005)  # polls the condition above

    await asyncio.wait_for(done(), 60)


async def _until_said(events: list[Any], command_id: int) -> None:
    async def said() -> None:
        while not any(event.command_id == command_id for event in events):
            await asyncio.sleep(0.005)  # polls the condition above

    await asyncio.wait_for(said(), 60)


async def test_the_fake_and_the_real_session_answer_every_command_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    # No session memory: its updates run in the background, and a compaction from it depends on
    # when they land; the summary's compaction is the same every run.
    settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(tmp_path / "data"),
                              "memory_update_tokens": 0})
    real = build_session(settings, approvals=True, cwd=tmp_path)
    fake = FakeSession()
    said: dict[str, list[Any]] = {"real": [], "fake": []}
    real.subscribe(said["real"].append)
    fake.subscribe(said["fake"].append)
    running = asyncio.ensure_future(real.run())
    await _until_done(real)
    differ = []
    for command in COMMANDS:
        answers = {}
        for name, session in (("real", real), ("fake", fake)):
            command_id = session.submit(command)
            await _until_done(session)
            if isinstance(command, cmd.WhatIf):  # replayed in a worker thread, apart from the queue
                await _until_said(said[name], command_id)
            caused = [event for event in said[name] if event.command_id == command_id]
            answers[name] = _kinds(caused, command)
        if answers["real"] != answers["fake"]:
            differ.append(f"{command}: real {answers['real']}, fake {answers['fake']}")
    real.submit(cmd.Shutdown())
    await asyncio.wait_for(running, 60)
    assert differ == []


async def _until_caused(events: list[Any], command_id: int, kind: str) -> None:
    async def said() -> None:
        while not any(envelope.command_id == command_id and envelope.event.type == kind for envelope in events):
            await asyncio.sleep(0.005)  # polls the condition above

    await asyncio.wait_for(said(), 60)


async def test_while_a_turn_runs_both_queue_and_interrupt_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt and a compaction given during a turn, then an interrupt: the prompt is dropped and
    ends in its own result, the compaction stays and runs, the turn ends interrupted."""
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session
    from snapshot_apps.fake_agent import Gate, Text

    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    settings = load_settings({"provider": "demo", "demo_speed": 20, "data_dir": str(tmp_path / "data"),
                              "memory_update_tokens": 0})  # 20 tokens/s: the reply takes a while
    real = build_session(settings, approvals=True, cwd=tmp_path)
    fake = FakeSession(turns={"summarize the project": [Text("The project is"), Gate()]})
    said: dict[str, list[Any]] = {"real": [], "fake": []}
    real.subscribe(said["real"].append)
    fake.subscribe(said["fake"].append)
    running = asyncio.ensure_future(real.run())
    await _until_done(real)
    answers: dict[str, dict[str, list[str]]] = {}
    for name, session in (("real", real), ("fake", fake)):
        ids = {"turn": session.submit(cmd.UserInput("summarize the project"))}
        await _until_caused(said[name], ids["turn"], "text_delta")
        ids["prompt"] = session.submit(cmd.UserInput("and then?"))
        ids["compact"] = session.submit(cmd.Compact())
        ids["interrupt"] = session.submit(cmd.Interrupt())
        await _until_done(session)
        caused = {what: [e for e in said[name] if e.command_id == command_id] for what, command_id in ids.items()}
        compaction = _kinds(caused["compact"], None)
        answers[name] = {
            "turn": _kinds(caused["turn"], cmd.UserInput("")),
            "prompt": _kinds(caused["prompt"], None),
            # whether the summary made it smaller is the demo's history's doing: that it ran is the point
            "compact": [compaction[0], *(["compaction"] if "compaction" in compaction else []), compaction[-1]],
            "interrupt": _kinds(caused["interrupt"], None),
        }
    real.submit(cmd.Shutdown())
    await asyncio.wait_for(running, 60)
    assert answers["real"] == answers["fake"]
    assert answers["fake"]["prompt"] == ["queued", "result"] and answers["fake"]["interrupt"] == ["state"]

"""The sandbox around run_bash's commands (bubblewrap), tried as an attacker would.

Most tests drive the real program (``python -m app -p ... --yes``) against the loopback fake
LLM, which scripts ``run_bash`` calls; what the command saw comes back in the next request's
tool result, what it did is checked on disk. The folders a command must not reach are made
outside /tmp (the sandbox's /tmp is a tmpfs of its own, which would hide them anyway) and
outside the workspace, so what hides them is the sandbox's own covering.
Tests that need a working bwrap are skipped, saying why, only where it cannot run here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil
import pytest

from cli_in_process import run_cli
from fake_llm_server import FakeLLMServer, openai_text, openai_tool_calls

from app.kernel.describe import approval_choices, approval_question
from app.kernel.events import ApprovalRequestEvent
from app.system import proctree
from app.tools import sandbox
from app.tools.sandbox import bwrap_problem, policy_for
from app.tools.base import ToolContext, ToolInputError
from app.tools.bash import RunBashArgs, RunBashTool

KEY = "sk-test-fake-key-0123456789"
WAIT_S = 60.0  # a bound on polling, never a sleep

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None,
                                 reason=f"bwrap cannot run here: {bwrap_problem()}")


def _poll(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.02)  # polls the condition above


@contextlib.contextmanager
def _outside_folder() -> Iterator[Path]:
    """A folder neither under /tmp nor in the workspace: the user's home, their data directory."""
    base = Path(os.environ.get("TIDEGAUGE_TEST_OUTSIDE_TMP", Path.home()))
    folder = Path(tempfile.mkdtemp(prefix=".tidegauge-sandbox-test-", dir=base))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def outside() -> Iterator[Path]:
    with _outside_folder() as folder:
        yield folder


def _tidegauge(work: Path, fake_llm: Any, *args: str, home: Path | None = None, data: Path | None = None,
               path_first: Path | None = None, config: str = "", output_format: str = "json",
               in_process: bool = False) -> subprocess.CompletedProcess[str]:
    """``tidegauge ARGS`` in ``work``: the real program, or with ``in_process`` the same CLI in this
    process (tests/cli_in_process.py), for runs where no working sandbox is involved (a failing
    bwrap, or sandbox = "off"): what they check is tidegauge's decision and its words, not the
    process, and a ``python -m app`` start costs a suite worker ~0.5 CPU-s. The bwrap check is made
    afresh for such a run, as a new process makes it (the test process has made its own)."""
    root = work.parent
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "config.toml").write_text(config, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(root / "config"), "TIDEGAUGE_DATA_DIR": str(data or root / "data"),
                "OPENAI_API_KEY": KEY})
    if home is not None:
        env["HOME"] = str(home)
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    command = [sys.executable, "-m", "app", "--provider", "openai", "--model", "m",
               "--base-url", fake_llm.base_url("openai"), "--output-format", output_format, *args]
    if in_process:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sandbox, "_checked", [])  # the check's answer is kept per process
            sandbox._bwrap_path.cache_clear()  # found on this run's PATH
            try:
                return run_cli(command[3:], cwd=work, env=env)
            finally:
                sandbox._bwrap_path.cache_clear()
    done = subprocess.run(command, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def _run_commands(work: Path, fake_llm: Any, calls: list[dict[str, Any]], *args: str,
                  **kw: Any) -> tuple[dict[str, Any], dict[str, str], str]:
    """The model runs each of ``calls`` (run_bash arguments), then answers "done": the JSON
    result, each call's result text by id (call_0, call_1, ...), and stderr."""
    fake_llm.enqueue(openai_tool_calls([("run_bash", call, f"call_{i}") for i, call in enumerate(calls)]),
                     openai_text("done"))
    proc = _tidegauge(work, fake_llm, "-p", "run them", *args, **kw)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    said = {m["tool_call_id"]: m["content"] for m in fake_llm.requests[-1].json["messages"] if m["role"] == "tool"}
    return result, said, proc.stderr


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


# ------------------------------------------------------------------------- the file system


@contextlib.contextmanager
def _loopback_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records what each connection sends."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    got: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    got.append(conn.recv(100))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], got
    finally:
        stop.set()
        thread.join()
        server.close()


def _connect_command(port: int) -> str:
    return f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo connected"


def _read_secrets_command(data: Path) -> str:
    return (f"cat ~/.ssh/id_rsa ~/.netrc {data}/secret.txt mine.txt; "
            f"test -e ~/.ssh/id_rsa && echo SSH-SEEN; test -e {data}/secret.txt && echo DATA-SEEN; echo end")


def _plant_secrets(home: Path, data: Path, work: Path) -> str:
    """A key, a .netrc and a file in the data directory, all holding the mark returned; and a file
    of the workspace's own."""
    (home / ".ssh").mkdir(parents=True)
    mark = f"PRIVATE-{uuid.uuid4().hex}"
    (home / ".ssh" / "id_rsa").write_text(mark)
    (home / ".netrc").write_text(f"machine x password {mark}")
    data.mkdir(parents=True)
    (data / "secret.txt").write_text(mark)
    (work / "mine.txt").parent.mkdir(parents=True, exist_ok=True)
    (work / "mine.txt").write_text("readable")
    return mark


@dataclass(frozen=True)
class DefaultSandboxRun:
    """One headless run with the default settings and --yes, whose model calls three commands (a
    start is a process and its imports): call_0 writes inside and outside, call_1 reads the key
    stores and the data directory, call_2 connects to a loopback listener. Each test below checks
    one of them."""

    work: Path
    outside: Path
    home: Path
    beside: Path
    mark: str
    result: dict[str, Any]
    said: dict[str, str]
    listener_got: list[bytes]


@pytest.fixture(scope="module")
def default_sandbox_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DefaultSandboxRun]:
    if bwrap_problem() is not None:
        pytest.skip(f"bwrap cannot run here: {bwrap_problem()}")
    root = tmp_path_factory.mktemp("sandbox")
    work = root / "work"
    work.mkdir()
    fake_llm = FakeLLMServer().start()
    try:
        with _outside_folder() as outside, _loopback_listener() as (port, got):
            home = outside / "home"
            data = outside / "data"
            mark = _plant_secrets(home, data, work)
            beside = root / "beside"  # a temp dir outside the workspace
            beside.mkdir()
            write = (f"echo made > inside.txt; echo kept > $TMPDIR/t && cat $TMPDIR/t; touch {beside}/x; "
                     f"touch {home}/x; touch {outside}/x; echo end")
            calls = [{"command": write}, {"command": _read_secrets_command(data)}, {"command": _connect_command(port)}]
            result, said, _ = _run_commands(work, fake_llm, calls, "--yes", home=home, data=data)
            yield DefaultSandboxRun(work, outside, home, beside, mark, result, said, got)
    finally:
        fake_llm.stop()
    problems = fake_llm.problems()
    assert not problems, problems


@needs_bwrap
def test_a_command_writes_the_workspace_and_its_tmp_but_nothing_outside(default_sandbox_run: DefaultSandboxRun) -> None:
    run = default_sandbox_run
    assert (run.work / "inside.txt").read_text() == "made\n"
    assert not (run.beside / "x").exists() and not (run.home / "x").exists() and not (run.outside / "x").exists()
    assert "kept" in run.said["call_0"] and "end" in run.said["call_0"]
    assert run.said["call_0"].count("touch: cannot touch") == 3, run.said["call_0"]
    assert run.result["sandbox"] == "bwrap"


def _assert_nothing_secret_was_read(said: str, mark: str, home: Path) -> None:
    assert mark not in said, said
    assert "SSH-SEEN" not in said and "DATA-SEEN" not in said, said
    assert "readable" in said and "end" in said
    assert (home / ".ssh" / "id_rsa").read_text() == mark  # hidden, not harmed


@needs_bwrap
def test_no_read_of_ssh_keys_or_the_data_directory_from_a_project_in_home(default_sandbox_run: DefaultSandboxRun) -> None:
    """The key and the data directory sit outside /tmp."""
    run = default_sandbox_run
    _assert_nothing_secret_was_read(run.said["call_1"], run.mark, run.home)
    assert run.result["sandbox"] == "bwrap"


@needs_bwrap
def test_no_read_of_ssh_keys_or_the_data_directory_run_in_home_itself(fake_llm, outside) -> None:
    """Run in the home itself, the key and the data directory are inside the workspace, and still hidden."""
    home = outside / "home"
    data = home / ".local" / "share" / "tidegauge"
    mark = _plant_secrets(home, data, home)
    result, said, _ = _run_commands(home, fake_llm, [{"command": _read_secrets_command(data)}], "--yes",
                                    home=home, data=data)
    _assert_nothing_secret_was_read(said["call_0"], mark, home)
    assert result["sandbox"] == "bwrap"


# ------------------------------------------------------------------------------ the network


@needs_bwrap
def test_no_connection_even_to_loopback_without_sandbox_network(default_sandbox_run: DefaultSandboxRun) -> None:
    run = default_sandbox_run
    assert "connected" not in run.said["call_2"], run.said["call_2"]
    assert run.listener_got == [] and "[exit code: 1]" in run.said["call_2"]
    assert run.result["sandbox"] == "bwrap"


@needs_bwrap
def test_a_loopback_connection_with_sandbox_network(fake_llm, work) -> None:
    with _loopback_listener() as (port, got):
        result, said, _ = _run_commands(work, fake_llm, [{"command": _connect_command(port)}], "--yes",
                                        config="sandbox_network = true\n")
        _poll(lambda: got == [b"hello\n"], f"the server got {got}")
    assert "connected" in said["call_0"], said["call_0"]
    assert result["sandbox"] == "bwrap"


# ------------------------------------------------------------------------- the processes


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(mark in part for part in process.info["cmdline"] or []):
                found.append(process)
    return found


@needs_bwrap
def test_no_survivor_of_a_kill_9_even_after_env_i_setsid_double_forks(fake_llm, work) -> None:
    """Without the sandbox these escape the watchdog (no token in their environment) and PDEATHSIG
    (setsid, re-parented): the PID namespace takes them all when tidegauge dies."""
    mark = f"tgmark{uuid.uuid4().hex}"
    command = (f"env -i setsid sh -c '(sh -c \"sleep 1000; : {mark}a\" &) &'; "
               f"env -i sh -c 'nohup sh -c \"sleep 1000; : {mark}b\" >/dev/null 2>&1 &'; "
               f"exec sh -c 'sleep 1000; : {mark}c'")
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": command, "timeout": 600}, "call_fork")]),
                     openai_text("done"))
    fake_llm.allow_unscripted = True
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(work.parent / "config"),
                "TIDEGAUGE_DATA_DIR": str(work.parent / "data"), "OPENAI_API_KEY": KEY})
    proc = subprocess.Popen([sys.executable, "-m", "app", "--provider", "openai", "--model", "m", "--base-url",
                             fake_llm.base_url("openai"), "--yes", "--output-format", "stream-json", "-p", "fork"],
                            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # Until tidegauge says the tool started (or its output ends): a walk of every process's
        # command line costs ~10 ms, so it is polled only while the command starts its own.
        assert proc.stdout is not None
        for line in proc.stdout:
            if b'"type": "tool_start"' in line or b'"type":"tool_start"' in line:
                break
        _poll(lambda: len({p.pid for p in _marked(mark)}) >= 3 or proc.poll() is not None,
              "the command's processes never started")
        assert proc.poll() is None, "tidegauge ended before the kill"
        proc.kill()
        proc.wait(timeout=WAIT_S)
        _poll(lambda: not _marked(mark), "still running after kill -9 of tidegauge")
    finally:
        with contextlib.suppress(OSError):
            proc.kill()
        for survivor in _marked(mark):  # never leave one behind for the next test
            with contextlib.suppress(psutil.Error):
                survivor.kill()


@needs_bwrap
def test_a_timeout_still_ends_the_sandboxed_command_and_all_it_started(tmp_path) -> None:
    """bwrap's own session (--new-session) does not hide the run from the tool's kill."""
    mark = f"tgmark{uuid.uuid4().hex}"
    context = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "results",
                          sandbox=policy_for("on", False, ()))
    command = f"setsid sh -c 'sleep 1000; : {mark}' & sh -c 'sleep 1000; : {mark}'"
    try:
        output = asyncio.run(RunBashTool().call(RunBashArgs(command=command, timeout=1), context))
        assert output.is_error and "timed out after 1 s" in output.text
        _poll(lambda: not _marked(mark), "a process of the timed-out command is still running")
    finally:
        for survivor in _marked(mark):
            with contextlib.suppress(psutil.Error):
                survivor.kill()
        proctree.reap_adopted()


# ------------------------------------------------------------ where bwrap cannot run


def _failing_bwrap(folder: Path) -> Path:
    """A bwrap on PATH that fails as it does where user namespaces are disabled."""
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return folder


def test_auto_without_a_working_bwrap_runs_unsandboxed_and_says_so_once(fake_llm, work, tmp_path) -> None:
    fake_bwrap = _failing_bwrap(tmp_path / "bin")
    result, said, _ = _run_commands(work, fake_llm, [{"command": "echo ran"}], "--yes", path_first=fake_bwrap,
                                    in_process=True)
    assert "ran" in said["call_0"]
    assert result["sandbox"] == "unavailable"
    fake_llm.enqueue(openai_text("hi"))
    text_mode = _tidegauge(work, fake_llm, "-p", "hi", path_first=fake_bwrap, output_format="text", in_process=True)
    lines = [line for line in text_mode.stderr.splitlines() if "not sandboxed" in line]
    stderr = text_mode.stderr
    assert len(lines) == 1 and "apt-get install bubblewrap" in lines[0] and "No permissions" in lines[0], stderr


def test_sandbox_on_without_a_working_bwrap_refuses_every_command(fake_llm, work, tmp_path) -> None:
    result, said, _ = _run_commands(work, fake_llm, [{"command": "echo ran > ran.txt"}], "--yes",
                                    "--sandbox", "on", path_first=_failing_bwrap(tmp_path / "bin"), in_process=True)
    assert not (work / "ran.txt").exists()
    assert 'sandbox = "on"' in said["call_0"] and "apt-get install bubblewrap" in said["call_0"]
    assert result["sandbox"] == "unavailable"


def test_sandbox_off_runs_as_before_and_says_so(fake_llm, work) -> None:
    result, said, _ = _run_commands(work, fake_llm, [{"command": "echo ran"}], "--yes", config='sandbox = "off"\n',
                                    in_process=True)
    assert "ran" in said["call_0"] and result["sandbox"] == "off"
    fake_llm.enqueue(openai_text("hi"))
    text_mode = _tidegauge(work, fake_llm, "-p", "hi", "--sandbox", "off", output_format="text", in_process=True)
    assert text_mode.returncode == 0 and "sandbox" not in text_mode.stderr, text_mode.stderr


# ---------------------------------------------------------------- asking to leave it


@needs_bwrap
def test_leaving_the_sandbox_is_refused_headless_without_yes_even_when_an_allow_rule_matches(
        fake_llm, work, outside) -> None:
    config = '[permissions]\nallow = ["run_bash(touch:*)"]\n'
    call = {"command": f"touch {outside}/escaped", "unsandboxed": True, "reason": "write the shared cache"}
    result, said, _ = _run_commands(work, fake_llm, [call, {"command": f"touch {outside}/inside"}], config=config)
    assert not (outside / "escaped").exists() and not (outside / "inside").exists()
    assert "outside the sandbox was refused" in said["call_0"]
    assert "touch: cannot touch" in said["call_1"]  # the allow rule ran this one, in the sandbox
    assert [d["tool_use_id"] for d in result["permission_denials"]] == ["call_0"]


@needs_bwrap
def test_with_yes_an_unsandboxed_call_runs_outside_but_deny_rules_and_a_missing_reason_still_refuse(
        fake_llm, work, outside) -> None:
    config = '[permissions]\ndeny = ["run_bash(rm:*)"]\n'
    (outside / "victim").write_text("keep me")
    calls: list[dict[str, Any]] = [{"command": f"touch {outside}/escaped", "unsandboxed": True, "reason": "write outside on purpose"},
             {"command": f"rm {outside}/victim", "unsandboxed": True, "reason": "clean up"},
             {"command": f"touch {outside}/no-reason", "unsandboxed": True},
             {"command": f"touch {outside}/string", "unsandboxed": "true", "reason": "a string is not a yes"}]
    result, said, _ = _run_commands(work, fake_llm, calls, "--yes", config=config)
    assert (outside / "escaped").exists()
    assert (outside / "victim").read_text() == "keep me" and "deny run_bash(rm:*)" in said["call_1"]
    assert not (outside / "no-reason").exists() and "needs a reason" in said["call_2"]
    assert not (outside / "string").exists() and "unsandboxed" in said["call_3"]


def test_the_approval_of_an_unsandboxed_call_says_so_with_its_reason_and_offers_no_always() -> None:
    event = ApprovalRequestEvent(request_id="r", tool_id="t", name="run_bash", summary="npm install",
                                 input={"command": "npm install", "unsandboxed": True, "reason": "fetch\x1b[2J packages"},
                                 outside_sandbox="fetch\x1b[2J packages")
    question = approval_question(event)
    assert question.startswith("Allow run_bash to run outside the sandbox: fetch") and "\x1b" not in question
    assert [decision for decision, _ in approval_choices(event)] == ["yes", "no"]
    plain = event.model_copy(update={"outside_sandbox": None})
    assert approval_question(plain) == "Allow run_bash?" and "always" in dict(approval_choices(plain))


@needs_bwrap
async def test_the_dashboard_asks_every_time_with_the_reason_and_yes_runs_it_outside(fake_llm, tmp_path, outside,
                                                                                      monkeypatch) -> None:
    """An allow rule matches the command; leaving the sandbox is still asked, twice, with only yes and
    no; yes runs it outside. /permissions says how commands run."""
    from dashboard_helpers import engine_texts, send, settle
    from session_thread import SessionThread
    from textual.widgets import Button

    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session
    from widgets.approval_screen import ApprovalScreen
    from widgets.header_bar import HeaderBar

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    escape: dict[str, Any] = {"command": f"touch {outside}/first", "unsandboxed": True, "reason": "write the shared cache"}
    again: dict[str, Any] = {"command": f"touch {outside}/second", "unsandboxed": True, "reason": "and once more"}
    fake_llm.enqueue(openai_tool_calls([("run_bash", escape, "c1")]), openai_tool_calls([("run_bash", again, "c2")]),
                     openai_text("done"))
    settings = load_settings({"provider": "openai", "model": "m", "base_url": fake_llm.base_url("openai"),
                              "data_dir": str(tmp_path / "data"), "permissions": {"allow": ["run_bash(touch:*)"]}})
    session = build_session(settings, approvals=True, cwd=work)
    app = TidegaugeApp(SessionThread(session).start(), cursor_blink=False)

    async def dialog_for(command: str) -> ApprovalScreen:
        for _ in range(4_000):
            screen = app.screen
            if isinstance(screen, ApprovalScreen) and screen.tool_input.get("command") == command and screen.query(Button):
                return screen
            await pilot.pause()
        raise AssertionError(f"no approval dialog for {command!r}")

    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "go")
        first = await dialog_for(escape["command"])
        assert first.question == "Allow run_bash to run outside the sandbox: write the shared cache?"
        assert [str(b.id) for b in first.query(Button)] == ["yes", "no"]
        await pilot.press("a")  # "always" is not offered: nothing happens
        await pilot.press("y")
        second = await dialog_for(again["command"])
        assert second.question.endswith("outside the sandbox: and once more?")
        await pilot.press("n")
        await settle(pilot)
        await send(pilot, "/permissions")
        await settle(pilot)
        listing = [t for t in engine_texts(app) if t.startswith("permission rules")]
        assert listing and "commands run in a sandbox (bubblewrap)" in listing[-1], listing
        assert "network off" in listing[-1]
        assert "sandboxed" in app.query_one(HeaderBar).render().plain  # 160 columns: room for it
    assert (outside / "first").exists() and not (outside / "second").exists()


@needs_bwrap
def test_the_tool_itself_runs_nothing_unsandboxed_that_the_agent_did_not_approve(tmp_path, outside) -> None:
    """A caller that is not the agent's approval path (a wrapper under another name) cannot leave."""
    from app.demo.tools import UntruncatedBashTool

    context = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "results", call_id="c1",
                          sandbox=policy_for("auto", False, ()))
    args = {"command": f"touch {outside}/escaped", "unsandboxed": True, "reason": "no one asked"}
    for tool in (RunBashTool(), UntruncatedBashTool()):
        with pytest.raises(ToolInputError, match="was not approved"):  # the registry answers it as an error
            asyncio.run(tool.run(args, context))
    assert not (outside / "escaped").exists()
    approved = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "results", call_id="c1",
                           sandbox=context.sandbox, approved_escape="c1")
    assert not asyncio.run(RunBashTool().run(args, approved)).is_error
    assert (outside / "escaped").exists()

"""A first run never pretends: what was asked for runs, or one line says what is missing.

The real binary (``python -m app``) with no API key in its environment: a model or provider
asked for without its key is exit 2 naming the variable, ``--base-url`` alone goes to that
server, the scripted demo runs only when nothing was asked and says so; the answer names the
provider and model that gave it. Bad command lines are one line, before any session exists.
"""

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

from app.wiring.config import load_settings, resolve_provider

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               TIDEGAUGE_DEMO_SPEED="0", PYTHONPATH=str(ROOT), **extra)
    return env


def _run(tmp_path: Path, *args: str, real_process: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
    """``tidegauge ARGS``: the real binary, or with ``real_process=False`` the same CLI in this
    process with exactly the same environment (tests/cli_in_process.py), for a variation on what
    one real run already showed, where a ``python -m app`` start (~0.5 CPU-s) is most of the cost."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if not real_process:
        return run_cli(list(args), cwd=work, env=_env(tmp_path, **extra))
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=work, env=_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _run_in_process(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A run that only makes a session a later command reads: the same CLI, in this process."""
    return _run(tmp_path, *args, real_process=False)


def _sessions_left(tmp_path: Path) -> list[str]:
    folder = tmp_path / "data" / "sessions"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize(("args", "variable"), [
    (("--model", "gpt-4o"), "OPENAI_API_KEY"),
    (("--model", "claude-sonnet-4-5"), "ANTHROPIC_API_KEY"),
    (("--provider", "anthropic"), "ANTHROPIC_API_KEY"),
    (("--provider", "deepseek"), "DEEPSEEK_API_KEY"),
])
def test_a_real_model_asked_for_without_its_key_is_one_line_naming_the_variable(
        tmp_path: Path, args: tuple[str, ...], variable: str) -> None:
    # the first through the real binary; the other providers' keys through the same code in-process
    proc = _run(tmp_path, "-p", "hi", *args, real_process=args == ("--model", "gpt-4o"))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tidegauge: ") and f"set {variable}" in line and args[1] in line
    assert proc.stdout == ""  # no canned answer a script could take for the model's
    assert _sessions_left(tmp_path) == []


def test_base_url_alone_goes_to_that_server_without_a_key(fake_llm, tmp_path: Path) -> None:
    fake_llm.enqueue(openai_text("the local model answers"))
    proc = _run(tmp_path, "-p", "hi", "--base-url", fake_llm.base_url("openai"), "--output-format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["result"] == "the local model answers"
    assert result["provider"] == "openai" and result["model"] == "gpt-4.1"
    assert len(fake_llm.requests) == 1
    assert "authorization" not in {k.lower() for k in fake_llm.requests[0].headers}
    assert "demo" not in proc.stderr


def test_the_demo_runs_when_nothing_was_asked_and_says_so_on_stderr(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-p", "hi", "--output-format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout is still the result alone
    assert (result["provider"], result["model"]) == ("demo", "demo-scripted")
    said = [line for line in proc.stderr.splitlines() if "demo" in line]
    assert len(said) == 1
    assert "no API key" in said[0] and "ANTHROPIC_API_KEY" in said[0] and "scripted" in said[0]


def test_the_session_event_names_provider_and_model_and_sessions_lists_them(fake_llm, tmp_path: Path) -> None:
    fake_llm.enqueue(openai_text("ok"))
    proc = _run_in_process(tmp_path, "-p", "hi", "--provider", "openai", "--model", "local-7b",
                           "--base-url", fake_llm.base_url("openai"), "--output-format", "stream-json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    session = events[0]
    assert session["type"] == "session"
    assert (session["provider"], session["model"]) == ("openai", "local-7b")
    assert (events[-1]["provider"], events[-1]["model"]) == ("openai", "local-7b")

    demo = _run_in_process(tmp_path, "-p", "hello")  # the provider's usual model is named too, not left blank
    assert demo.returncode == 0, demo.stderr
    listing = _run(tmp_path, "sessions")
    assert listing.returncode == 0
    rows = listing.stdout.splitlines()
    assert len(rows) == 2
    assert "openai/local-7b" in rows[1] and rows[1].endswith("hi")
    assert "demo/demo-scripted" in rows[0] and rows[0].endswith("hello")


@pytest.mark.parametrize("url", ["notaurl", "ftp://example.com/v1", "http://", "http://host:port/v1"])
def test_a_malformed_base_url_is_one_line_at_start_and_leaves_no_session(tmp_path: Path, url: str) -> None:
    proc = _run(tmp_path, "-p", "hi", "--base-url", url, real_process=url == "notaurl")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "base_url" in line and "--base-url" in line
    assert _sessions_left(tmp_path) == []


def test_a_password_in_a_bad_base_url_is_not_echoed(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-p", "hi", "--base-url", "gopher://me:hunter2-secret@host/", real_process=False)
    assert proc.returncode == 2
    assert "hunter2-secret" not in proc.stderr and "base_url" in proc.stderr


def test_an_unknown_flag_is_one_line_and_a_hint_to_help(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-p", "hi", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["tidegauge: unrecognized arguments: --bogus (see tidegauge --help)"]
    sessions = _run(tmp_path, "sessions", "--everything", real_process=False)
    assert sessions.returncode == 2 and len(sessions.stderr.splitlines()) == 1 and "--help" in sessions.stderr


@pytest.fixture
def no_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.endswith("_API_KEY") or k.startswith("TIDEGAUGE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.parametrize(("asked", "provider"), [
    ({}, "demo"),
    ({"model": "gpt-4o"}, "openai"),
    ({"model": "o3-mini"}, "openai"),
    ({"model": "claude-opus-4-1"}, "anthropic"),
    ({"model": "deepseek-chat"}, "deepseek"),
    ({"model": "qwen2.5-coder"}, "openai"),  # no maker's name: the protocol local servers speak
    ({"base_url": "http://127.0.0.1:8080/v1"}, "openai"),
    ({"base_url": "http://127.0.0.1:8080", "model": "claude-x"}, "anthropic"),
    ({"api_key_env": "MY_KEY"}, "anthropic"),
])
def test_the_demo_is_chosen_only_when_nothing_was_asked(no_keys: None, asked: dict[str, str], provider: str) -> None:
    assert resolve_provider(load_settings(asked)) == provider


def test_a_key_in_the_environment_still_decides_the_provider(no_keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-0001")
    assert resolve_provider(load_settings({"model": "some-model"})) == "openai"


@pytest.mark.parametrize("prelude", [False, True])
def test_a_web_tabs_dashboard_lines_are_printed_once_when_it_ends(capfd: pytest.CaptureFixture[str],
                                                                    prelude: bool) -> None:
    """A tab's dashboard process that ends (closed early, before its first frame, or after it) has
    its stderr lines ("resume with: …") printed once on the server's output, not twice."""
    import asyncio
    import shlex

    from textual_serve.download_manager import DownloadManager

    from app.surfaces.dashboard.web_server import DashboardServer

    script = ("import sys; " + ("sys.stdout.write('__GANGLION__\\n'); sys.stdout.flush(); " if prelude else "")
              + "sys.stderr.write('resume with: tidegauge --resume 20261206-000000-abcd\\n')")
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"

    async def nothing(*_args: object) -> None:
        return None

    async def scenario() -> None:
        server: Any = DashboardServer
        tab_service = server.TabService
        service = tab_service(command, write_bytes=nothing, write_str=nothing, close=nothing,
                              download_manager=DownloadManager())
        await service.start(80, 24)
        assert service._task is not None
        await service._task  # the process ends by itself
        process = service._process
        assert process is not None
        await process.wait()
        process._transport.close()  # before the loop closes, not in __del__

    capfd.readouterr()
    asyncio.run(scenario())
    printed = capfd.readouterr().out
    assert printed.count("resume with: tidegauge --resume 20261206-000000-abcd") == 1, printed


def test_the_sub_agents_report_is_said_while_it_streams_after_its_last_read(tmp_path: Path) -> None:
    """After the sub-agent's last read its report streamed for ~7 s (at the demo's typing speed)
    with nothing changing under the task call: its progress says how much it has written."""
    proc = _run(tmp_path, "-p", "find where the importer rejects rows", "--output-format", "stream-json",
                real_process=False)
    assert proc.returncode == 0, proc.stderr
    said = [event for event in map(json.loads, proc.stdout.splitlines()) if event["type"] == "sub_agent"]
    statuses = [event["status"] for event in said]
    last_tool = max(i for i, status in enumerate(statuses) if status == "tool")
    writing = [event["written_chars"] for event in said[last_tool:] if event["status"] == "writing"]
    assert statuses[-1] == "finished"
    assert len(writing) >= 2 and writing == sorted(writing) and writing[0] > 0, statuses

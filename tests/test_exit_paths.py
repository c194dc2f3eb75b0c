"""Every way tidegauge ends, ends every process it started: tools, MCP servers and their children.

The real program in a child process (``python -m app``: headless against the loopback
fake LLM, or the dashboard on a pseudo-terminal with its session process), an MCP
server from config.toml that starts a child of its own (tests/mcp_servers/process_tree_plain.py),
and a model that runs ``sleep 1000 & setsid sleep 1001 & exec sleep 1002``. Once all of
them run, the test ends tidegauge one way (a signal, a key, kill -9 of the session
process, of the dashboard or of headless tidegauge) and waits, bounded, until every process recorded is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

from fake_llm_server import openai_text, openai_tool_calls

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_quit import CTRL_Q, Terminal  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KEY = "sk-test-fake-key-0123456789"
KEY_ENV = "TIDEGAUGE_EXIT_TEST_KEY"
PROCESS_TREE = Path(__file__).parent / "mcp_servers" / "process_tree_plain.py"  # no SDK: a cheap start
COMMAND = "sleep 1000 & setsid sleep 1001 & exec sleep 1002"
EXPECTED = ("sleep 1000", "sleep 1001", "sleep 1002", "sleep 600", "process_tree_plain.py")  # 600: the server's child
WAIT_S = 60.0  # a bound, never a sleep: the conditions are polled


def _poll(condition: Callable[[], bool], what: Callable[[], str], timeout: float = WAIT_S) -> None:
    """Until ``condition()`` holds; fails with ``what()`` (what was seen) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what())
        time.sleep(0.05)  # polls the condition above


def _write_config(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(
        f"[mcp_servers.tree]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(PROCESS_TREE))}]\n"
        "startup_timeout = 60\n", encoding="utf-8")


def _script_the_model(fake_llm) -> None:
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": COMMAND, "timeout": 600}, "call_sleep")]),
                     openai_text("done"))
    fake_llm.allow_unscripted = True  # an interrupted turn may never ask for its answer


def _model_args(fake_llm) -> list[str]:
    return ["--provider", "openai", "--model", "m", "--base-url", fake_llm.base_url("openai"),
            "--api-key-env", KEY_ENV, "--yes"]


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return "?"


def _started_tree(root: int, expected: tuple[str, ...] = EXPECTED,
                  started: Callable[[], object] = lambda: None) -> list[psutil.Process]:
    """Every process below ``root`` once the ``expected`` ones (the tool's and the server's) all run.

    ``started`` waits first for what tidegauge says when the tool starts: a walk of the process
    table costs ~13 ms, so it is polled only for the moment the tool needs to start its own."""
    started()
    seen: list[psutil.Process] = []

    def everything_runs() -> bool:
        try:
            seen[:] = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            return False
        lines = [_cmdline(p) for p in seen]  # exact: bash's own command line names every sleep
        return all(any(line == name or (name.endswith(".py") and name in line) for line in lines)
                   for name in expected)

    _poll(everything_runs, lambda: f"not all of {expected} started below {root}: {[_cmdline(p) for p in seen]}")
    return list(seen)


def _gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_all_end(processes: list[psutil.Process]) -> None:
    try:
        _poll(lambda: all(_gone(p) for p in processes),
              lambda: f"still running: {[(p.pid, _cmdline(p)) for p in processes if not _gone(p)]}")
    finally:
        for process in processes:  # never leave one behind for the next test
            if not _gone(process):
                process.kill()


# ------------------------------------------------------------------------------------------- headless


def _tool_started(proc: subprocess.Popen[bytes]) -> Callable[[], object]:
    """Reads headless stream-json until the tool's tool_start line, or the end of its output."""
    def read() -> object:
        assert proc.stdout is not None
        for line in proc.stdout:
            if b'"type": "tool_start"' in line or b'"type":"tool_start"' in line:
                return line
        return None

    return read


def _headless(tmp_path: Path, fake_llm, *, mcp: bool = True) -> subprocess.Popen[bytes]:
    if mcp:
        _write_config(tmp_path)
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                KEY_ENV: KEY})
    return subprocess.Popen([sys.executable, "-m", "app", *_model_args(fake_llm), "--output-format", "stream-json",
                             "-p", "sleep a while"], cwd=tmp_path / "work", env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.parametrize("signals", [(signal.SIGTERM,), (signal.SIGHUP,), (signal.SIGINT, signal.SIGINT)],
                         ids=["SIGTERM", "SIGHUP", "ctrl+c twice"])
def test_headless_ended_by_a_signal_ends_its_tools_and_mcp_servers(tmp_path, fake_llm, signals) -> None:
    _script_the_model(fake_llm)
    proc = _headless(tmp_path, fake_llm)
    try:
        tree = _started_tree(proc.pid, started=_tool_started(proc))
        tool = next(p for p in tree if _cmdline(p) == "sleep 1002")
        proc.send_signal(signals[0])
        if len(signals) > 1:  # the second ctrl+c once the first has stopped the tool (two at once are one)
            _poll(lambda: _gone(tool) or proc.poll() is not None, lambda: "the first ctrl+c never stopped the tool")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signals[1])
        _, stderr = proc.communicate(timeout=WAIT_S)
        assert proc.returncode != 0, stderr.decode(errors="replace")
        assert b"Traceback" not in stderr, stderr.decode(errors="replace")
        _assert_all_end(tree)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------- dashboard


def _dashboard(tmp_path: Path, fake_llm, monkeypatch) -> Terminal:
    _write_config(tmp_path)
    monkeypatch.setenv(KEY_ENV, KEY)  # the Terminal drops the usual key names from its environment
    term = Terminal(tmp_path, _model_args(fake_llm))
    term.wait_for(b"idle")
    term.type(b"sleep a while\r")
    return term


def _session_process(dashboard: int) -> psutil.Process:
    (child,) = [p for p in psutil.Process(dashboard).children() if "app.wiring.session_child" in _cmdline(p)]
    return child


def _end_by_key(term: Terminal) -> None:
    term.type(CTRL_Q)


def _signal(signum: signal.Signals) -> Callable[[Terminal], None]:
    def send(term: Terminal) -> None:
        term.proc.send_signal(signum)

    return send


@pytest.mark.parametrize(("end", "code"), [(_end_by_key, 0), (_signal(signal.SIGTERM), 128 + signal.SIGTERM),
                                           (_signal(signal.SIGHUP), 128 + signal.SIGHUP),
                                           (_signal(signal.SIGKILL), -signal.SIGKILL)],
                         ids=["ctrl+q", "SIGTERM", "SIGHUP", "kill -9 of the dashboard"])
def test_the_dashboard_ended_any_way_ends_its_session_process_tools_and_mcp_servers(
        tmp_path, fake_llm, monkeypatch, end, code) -> None:
    _script_the_model(fake_llm)
    term = _dashboard(tmp_path, fake_llm, monkeypatch)
    try:
        tree = _started_tree(term.proc.pid, started=lambda: term.wait_for(b"run_bash"))
        end(term)
        assert term.proc.wait(timeout=WAIT_S) == code
        _assert_all_end(tree)
        output = term.read_to_end().decode(errors="replace")
        assert "Traceback" not in output, output[-800:]
        if code > 0:  # quit as ctrl+q quits (a signal too): the terminal restored, how to resume said
            assert "resume with: tidegauge --resume " in output, output[-800:]
    finally:
        term.close()


def test_kill_9_of_the_session_process_ends_its_tools_and_mcp_servers_and_the_dashboard_says_so(
        tmp_path, fake_llm, monkeypatch) -> None:
    _script_the_model(fake_llm)
    term = _dashboard(tmp_path, fake_llm, monkeypatch)
    try:
        tree = _started_tree(term.proc.pid, started=lambda: term.wait_for(b"run_bash"))
        session = _session_process(term.proc.pid)
        mark = len(term.output)
        session.kill()
        _assert_all_end(tree)
        term.wait_for(b"session process ended", since=mark)
        assert term.proc.poll() is None  # the dashboard stays, to say how to resume
    finally:
        term.close()


WATCHDOG = "app/system/watchdog.py"
SHORT_GRACE = Path(__file__).parent / "short_grace_dashboard.py"
TOKEN_ENV = "TIDEGAUGE_RUN_TOKEN"


def _end_what_is_left(proc: subprocess.Popen[bytes], recorded: list[psutil.Process]) -> None:
    """A failed test leaves nothing running: what was recorded, and what runs below tidegauge
    (recorded or not: the test may have failed before it could look)."""
    below: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        below = psutil.Process(proc.pid).children(recursive=True)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for process in recorded + below:
        with contextlib.suppress(psutil.Error):
            if not _gone(process):
                process.kill()


def _same_user_process(env: dict[str, str]) -> psutil.Process:
    """A process of this user, outside tidegauge's tree, with ``env`` as its whole environment."""
    started = subprocess.Popen(["sleep", "1003"], env={"PATH": os.environ["PATH"], **env},
                               start_new_session=True)
    return psutil.Process(started.pid)


@pytest.mark.parametrize("kill", [lambda proc: proc.kill(), lambda proc: os.killpg(proc.pid, signal.SIGKILL)],
                         ids=["the process", "its process group"])
def test_kill_9_of_headless_tidegauge_ends_everything_it_started_and_only_that(tmp_path, fake_llm, kill) -> None:
    """The OOM killer's path: nothing of tidegauge runs after it, so the watchdog ends every
    process carrying this run's token (the tool's background, setsid too, the MCP server and
    its child) and then itself. A process of the same user with another token, a token that
    only starts like this one, the token under another name, or none, is never touched."""
    _script_the_model(fake_llm)
    proc = _headless(tmp_path, fake_llm)
    tree: list[psutil.Process] = []
    bystanders: list[psutil.Process] = []
    try:
        tree = _started_tree(proc.pid, started=_tool_started(proc))
        cmdlines = [_cmdline(p) for p in tree]
        token = next(p for p in tree if _cmdline(p) == "sleep 1001").environ().get(TOKEN_ENV, "")
        bystanders = [_same_user_process({TOKEN_ENV: "0" * 32}), _same_user_process({TOKEN_ENV: token + "0"}),
                      _same_user_process({TOKEN_ENV: token[:-1]}), _same_user_process({"OTHER": token}),
                      _same_user_process({})]
        kill(proc)
        proc.wait(timeout=WAIT_S)
        _assert_all_end(tree)  # the watchdog among them: it exits once done
        assert any(line.endswith(WATCHDOG) for line in cmdlines), cmdlines
        assert len(token) == 32, f"no run token in the tool's environment: {token!r}"
        assert not [line for line in cmdlines if token in line]  # ps shows every user's command lines
        alive = [(p.pid, p.environ()) for p in bystanders if not _gone(p)]
        assert len(alive) == len(bystanders), f"a process without this run's exact token was killed: {alive}"
        stdout, stderr = proc.communicate(timeout=WAIT_S)
        assert token.encode() not in stdout + stderr  # the token is never printed
    finally:
        _end_what_is_left(proc, tree + bystanders)


def test_a_normal_headless_exit_leaves_no_watchdog_and_no_process(tmp_path, fake_llm) -> None:
    (tmp_path / "work").mkdir()
    fifo = tmp_path / "work" / "go"  # in the workspace: what a sandboxed command can reach
    os.mkfifo(fifo)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": f"sleep 1000 & read go < {fifo}", "timeout": 600},
                                         "call_wait")]), openai_text("done"))
    proc = _headless(tmp_path, fake_llm, mcp=False)
    tree: list[psutil.Process] = []
    try:
        tree = _started_tree(proc.pid, ("sleep 1000", WATCHDOG), started=_tool_started(proc))
        writer: list[int] = []

        def command_reads() -> bool:  # never a blocking open: tidegauge may have died instead
            with contextlib.suppress(OSError):  # ENXIO: the command has not opened it yet
                writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return bool(writer) or proc.poll() is not None

        _poll(command_reads, lambda: "the command never opened its fifo")
        assert writer, f"tidegauge ended early: {proc.communicate()}"
        os.write(writer[0], b"go\n")  # the command ends, the model answers, tidegauge exits
        os.close(writer[0])
        stdout, stderr = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, stderr.decode(errors="replace")
        assert b"done" in stdout
        _assert_all_end(tree)
    finally:
        _end_what_is_left(proc, tree)


@pytest.mark.parametrize("said", [b"", b"\n", b"x" * 200 + b"\n", b"0" * 31 + b"\n", b"Z" * 32 + b"\n"],
                         ids=["nothing", "an empty line", "a long line", "31 digits", "not hex"])
def test_the_watchdog_told_no_token_kills_nothing(said) -> None:
    """Whatever reaches its stdin other than a token (tidegauge died before it spoke), the watchdog
    exits without a look: an empty token would match every ``TIDEGAUGE_RUN_TOKEN=`` entry."""
    bystander = _same_user_process({TOKEN_ENV: ""})
    try:
        watchdog = subprocess.run([sys.executable, "-I", "-S", str(ROOT / WATCHDOG)], input=said,
                                  capture_output=True, timeout=WAIT_S)
        assert (watchdog.returncode, watchdog.stderr) == (2, b""), watchdog  # quietly: nobody reads it
        assert not _gone(bystander)
    finally:
        bystander.kill()


def test_the_watchdog_kills_the_marked_process_and_loads_only_its_sweep() -> None:
    """The watchdog runs after every headless run: told a token and then the end of its pipe, it
    kills the process carrying exactly that token, leaves one with another, and gets there without
    signal.py's enum, proctree's imports (subprocess, ctypes, uuid, threading) or typing, which
    cost it more CPU than its interpreter's start (seen through ``-X importtime`` on stderr)."""
    token = "0123456789abcdef" * 2
    marked = _same_user_process({TOKEN_ENV: token})
    other = _same_user_process({TOKEN_ENV: token[::-1]})
    try:
        watchdog = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", str(ROOT / WATCHDOG)],
                                  input=f"{token}\n".encode(), capture_output=True, timeout=WAIT_S)
        assert watchdog.returncode == 0, watchdog
        _assert_all_end([marked])
        assert not _gone(other)
        loaded = {line.split(b"|")[-1].strip().decode() for line in watchdog.stderr.splitlines()[1:]}
        assert "app.system.marked_processes" in loaded, loaded
        assert not loaded & {"signal", "enum", "subprocess", "ctypes", "uuid", "threading", "typing",
                             "app.system.proctree"}, sorted(loaded)
    finally:
        for process in (marked, other):
            with contextlib.suppress(psutil.Error):
                process.kill()


def test_a_signal_ends_the_dashboard_even_when_its_terminal_is_no_longer_read(tmp_path) -> None:
    """A terminal that stops reading (a hung ssh, a tmux session killed) fills Textual's output
    queue; the App's loop then waits for ever on its next frame and the orderly quit a SIGHUP
    asks for never runs: the dashboard stayed, idle, for good (1 tmux kill-session in 6 while
    catching up; every time here). It now ends the hard way a few seconds after the signal,
    session process included (exit 129); here half a second after it (tests/short_grace_dashboard.py)."""
    import fcntl
    import shutil
    import termios

    master, slave = os.openpty()
    env = dict(os.environ, TERM="xterm-256color", TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        env.pop(key, None)  # the offline demo
    (tmp_path / "work").mkdir()
    # The grace before the hard way, short: the orderly quit cannot finish here, so the test would
    # only sit it out (5 s by default; ~0.3 s is what an orderly quit takes).
    launcher = tmp_path / "bin" / "tidegauge"
    launcher.parent.mkdir()
    shutil.copyfile(SHORT_GRACE, launcher)
    proc = subprocess.Popen([sys.executable, str(launcher), "0.5", "--yes"], stdin=slave, stdout=slave,
                            stderr=slave, cwd=tmp_path / "work", env=env, start_new_session=True)
    os.close(slave)
    try:
        seen = b""
        deadline = time.monotonic() + WAIT_S
        while b"Ask tidegauge" not in seen:  # read until the prompt is drawn, then never again
            assert time.monotonic() < deadline and proc.poll() is None, seen[-400:]
            with contextlib.suppress(BlockingIOError):
                os.set_blocking(master, False)
                seen += os.read(master, 65536)
            time.sleep(0.05)  # polls the terminal above
        session = _session_process(proc.pid)
        os.write(master, b"flood\r")

        def unread() -> int:
            return int.from_bytes(fcntl.ioctl(master, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)

        still = [unread()]

        def backed_up() -> bool:  # what it wrote waits unread, and nothing more comes: it is stuck
            still.append(unread())
            return len(still) > 20 and still[-1] > 0 and len(set(still[-20:])) == 1

        _poll(backed_up, lambda: f"the terminal never backed up: {still[-5:]} bytes unread")
        proc.send_signal(signal.SIGHUP)
        _poll(lambda: proc.poll() is not None, lambda: "the dashboard is still running after SIGHUP")
        assert proc.returncode == 128 + signal.SIGHUP
        _poll(lambda: _gone(session), lambda: f"its session process {session.pid} is still running")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)

"""Reliability probes on sessions: a real ``tidegauge -p`` process against the scripted server.

Each probe is something an unlucky user or a hostile server did to a session:
a kill -9 at a bad moment, a server that reuses tool-call ids, two processes on
one session, a damaged transcript, bytes that are not UTF-8. After each, the
next ``--continue`` must send a valid request and keep the conversation.

What happens to a process (killed mid-tool, holding the lock, writing bytes to a real stdout)
runs as a real process; a turn that only makes the session, or only sends the request a
resumed session builds, runs the same CLI in-process (tests/cli_in_process.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from cli_in_process import run_cli
from fake_llm_server import FakeLLMServer, openai_events, openai_text, openai_tool_calls

from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.session.store import SessionStore
from app.kernel.markers import INTERRUPTED_RESULT
from app.session.transcript import TranscriptWriter, restore, sendable_problems

API_KEY = "sk-test-reliability-secret-2718281828"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items()
                 if not k.startswith("TIDEGAUGE_") and not k.endswith("_API_KEY")}
    variables.update(TIDEGAUGE_DATA_DIR=str(tmp_path / "data"), TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"),
                     OPENAI_API_KEY=API_KEY, PYTHONUNBUFFERED="1")
    return variables


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "notes.txt").write_text("the first file\n")
    return path


def cli_args(fake_llm, *args: str) -> list[str]:
    return ["--provider", "openai", "--model", "fake-model", "--base-url", fake_llm.base_url("openai"),
            "--output-format", "stream-json", *args]


def cli(fake_llm, *args: str) -> list[str]:
    return [sys.executable, "-m", "app", *cli_args(fake_llm, *args)]


def in_process(fake_llm, project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A turn whose process is not what is tested: the same CLI, run in this process."""
    return run_cli(cli_args(fake_llm, *args), cwd=project, env=env)


def wire_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What an OpenAI-compatible server would reject in a sent ``messages`` list."""
    problems: list[str] = []
    seen: set[str] = set()
    open_calls: list[str] = []
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            if not open_calls or m["tool_call_id"] != open_calls[0]:
                problems.append(f"message {i}: tool result {m['tool_call_id']!r} answers no pending call")
            else:
                open_calls.pop(0)
            continue
        if open_calls:
            problems.append(f"message {i}: calls {open_calls} left without results")
            open_calls = []
        for call in m.get("tool_calls") or []:
            if call["id"] in seen:
                problems.append(f"message {i}: duplicate tool call id {call['id']!r}")
            seen.add(call["id"])
            open_calls.append(call["id"])
    if open_calls:
        problems.append(f"calls {open_calls} left without results at the end")
    return problems


class BlockingTool:
    """A run_bash command that says it started through a FIFO, then sleeps: the process is mid-tool.

    The FIFO is in the workspace (a sandboxed command reaches nothing else); the sleep carries a
    mark in its argv, so ``end`` finds it from here (its $$ is a pid of the sandbox's namespace)."""

    def __init__(self, workspace: Path, name: str = "tool-started") -> None:
        self.fifo = workspace / name
        os.mkfifo(self.fifo)
        self.mark = f"tg-blocking-{uuid.uuid4().hex}"
        self.command = f"echo started > {self.fifo}; exec -a {self.mark} sleep 600"
        self.started: list[str] = []

    def wait(self, proc: subprocess.Popen) -> None:
        reader = threading.Thread(target=lambda: self.started.append(self.fifo.read_text().strip()), daemon=True)
        reader.start()
        reader.join(timeout=90)
        if self.started != ["started"]:
            if proc.poll() is None:
                proc.kill()
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"the tool never started: {err.decode(errors='replace')[-2000:]}")

    def end(self) -> None:
        for process in psutil.process_iter(["cmdline"]):
            if (process.info["cmdline"] or [""])[0] == self.mark:
                with contextlib.suppress(psutil.Error):
                    process.kill()


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate(timeout=30)


def start(fake_llm, project: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(cli(fake_llm, *args), cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


# ---------------------------------------------------------------- results matched by position

def test_reused_call_id_after_kill_gets_its_own_interrupted_result(fake_llm, env, project, tmp_path) -> None:
    """call_0 in turn 1 and again in turn 2; a kill during the second must not give it the first's result."""
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "notes.txt"}, "call_0")]),
                     openai_text("The file says: the first file."))
    first = in_process(fake_llm, project, env, "-p", "read notes.txt", "--yes")
    assert first.returncode == 0, first.stderr

    tool = BlockingTool(project)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": tool.command}, "call_0")]))
    proc = start(fake_llm, project, env, "-p", "now run the long job", "--yes", "--continue")
    try:
        tool.wait(proc)
    finally:
        kill_group(proc)
        tool.end()

    fake_llm.enqueue(openai_text("It was interrupted."))
    third = in_process(fake_llm, project, env, "-p", "what happened?", "--continue")
    assert third.returncode == 0, third.stderr
    sent = fake_llm.last_json["messages"]
    assert wire_problems(sent) == []
    results = [m["content"] for m in sent if m["role"] == "tool"]
    assert len(results) == 2
    assert "the first file" in results[0]
    assert INTERRUPTED_RESULT in results[1] and "the first file" not in results[1]


# ---------------------------------------------------------------- one writer per session

def test_second_process_on_a_live_session_refuses_naming_the_first(fake_llm, env, project, tmp_path) -> None:
    tool = BlockingTool(project)
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": tool.command}, "call_long")]))
    holder = start(fake_llm, project, env, "-p", "run the long job", "--yes")
    try:
        tool.wait(holder)
        second = subprocess.run(cli(fake_llm, "-p", "another task", "--continue"), cwd=project, env=env,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"process {holder.pid}" in lines[0] and "--fork-session" in lines[0]
        assert "Traceback" not in second.stderr

        # With --fork-session the same command continues in a copy, while the first still runs.
        fake_llm.enqueue(openai_text("Forked and answered."))
        forked = in_process(fake_llm, project, env, "-p", "another task", "--continue", "--fork-session")
        assert forked.returncode == 0, forked.stderr
        sent = fake_llm.last_json["messages"]
        assert "run the long job" in json.dumps(sent)  # the copy has the earlier conversation
        assert wire_problems(sent) == []
    finally:
        kill_group(holder)
        tool.end()

    store = SessionStore(tmp_path / "data")
    sessions = store.list_for(project)
    assert len(sessions) == 2
    copy = next(s for s in sessions if s.meta.forked_from)
    original = next(s for s in sessions if not s.meta.forked_from)
    assert copy.meta.forked_from == original.id
    assert "another task" not in original.transcript_path.read_text()  # the original was not touched
    assert "another task" in copy.transcript_path.read_text()



def test_a_continued_session_is_read_only_once_its_lock_is_held(fake_llm, env, project, monkeypatch) -> None:
    """--continue reads the history under the session's lock: read before it, a turn another process
    was writing meanwhile was missing from it, and this run's "resume" history line dropped that turn
    and left its prompt beside this run's (two tasks in one message, seen under stress-ng)."""
    from app.session.lock import lock_path_for
    from app.wiring import runtime

    fake_llm.enqueue(openai_text("Started."))
    assert in_process(fake_llm, project, env, "-p", "start", "--yes").returncode == 0
    held_while_read: list[bool] = []
    real_restore = restore  # the transcript's own, which runtime calls

    def restore_noting_the_lock(session: Any) -> Any:
        fd = os.open(lock_path_for(session.transcript_path), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: conflicts even in this process
            held_while_read.append(False)
        except BlockingIOError:
            held_while_read.append(True)
        finally:
            os.close(fd)
        return real_restore(session)

    monkeypatch.setattr(runtime, "restore", restore_noting_the_lock)
    fake_llm.enqueue(openai_text("Done."))
    assert in_process(fake_llm, project, env, "-p", "more", "--continue").returncode == 0
    assert held_while_read == [True]

def test_two_concurrent_continues_never_merge_their_tasks(fake_llm, env, project) -> None:
    fake_llm.enqueue(openai_text("Started."))
    assert in_process(fake_llm, project, env, "-p", "start", "--yes").returncode == 0
    fake_llm.default = lambda body, path: openai_text("Done.")
    procs = [start(fake_llm, project, env, "-p", f"task number {n}", "--continue") for n in (1, 2)]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        outcomes.append((proc.returncode, err.decode(errors="replace")))
    for code, err in outcomes:
        assert code in (0, 2), err
        if code == 2:
            assert "is in use by process" in err and len(err.strip().splitlines()) == 1
    assert any(code == 0 for code, _ in outcomes)

    session = SessionStore(env["TIDEGAUGE_DATA_DIR"]).latest_for(project)
    state = restore(session)  # type: ignore[arg-type]
    assert sendable_problems(state.history) == []
    user_texts = [m.text for m in state.history if m.role == "user"]
    for text in user_texts:
        assert not ("task number 1" in text and "task number 2" in text), user_texts
    finished = sum(code == 0 for code, _ in outcomes)
    assert sum("task number" in t for t in user_texts) == finished


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    transcript = tmp_path / "s" / "transcript.jsonl"
    transcript.parent.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = transcript.with_name(transcript.name + ".lock")
    lock.write_text(json.dumps({"pid": dead.pid, "since": 0}))
    with TranscriptWriter(transcript) as writer:
        writer.append_message(Message.user("hello"))
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def _waits_on_lock(pid: int, inode: int) -> bool:
    """Whether process ``pid`` is blocked waiting for a flock on the file with ``inode`` (/proc/locks)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 4] == str(pid) \
                and fields[fields.index("->") + 5].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


def test_a_holder_between_its_flock_and_its_pid_is_not_taken_for_a_dead_one(tmp_path: Path) -> None:
    # A live process has just locked the session, and the pid of a dead earlier holder (one
    # that exited without releasing) is still in the file. A second process must not judge
    # the lock leaked and take a fresh one: both would write one transcript.
    transcript = tmp_path / "s" / "transcript.jsonl"
    transcript.parent.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = transcript.with_name(transcript.name + ".lock")
    guard_path = lock.with_name(lock.name + ".take.lock")
    guard = os.open(guard_path, os.O_RDWR | os.O_CREAT, 0o600)
    held = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        os.write(held, json.dumps({"pid": dead.pid, "since": 0}).encode())
        fcntl.flock(held, fcntl.LOCK_EX)  # this process is now the holder, its pid not yet written
        code = ("import sys; from app.session.transcript import TranscriptWriter\n"
                "try:\n    TranscriptWriter(sys.argv[1])\nexcept Exception as err:\n"
                "    print(type(err).__name__, err); sys.exit(2)\n")
        other = subprocess.Popen([sys.executable, "-c", code, str(transcript)], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).resolve().parents[1])
        inode = os.fstat(guard).st_ino
        # Go on once the other process waits for the guard (or has already decided without it).
        # The bound only keeps a kernel that lists no waiters in /proc/locks from hanging here.
        give_up = time.monotonic() + 60
        while other.poll() is None and not _waits_on_lock(other.pid, inode) and time.monotonic() < give_up:
            threading.Event().wait(0.01)  # polling a condition, not timing it
        os.ftruncate(held, 0)
        os.pwrite(held, json.dumps({"pid": os.getpid(), "since": 0}).encode(), 0)
        fcntl.flock(guard, fcntl.LOCK_UN)
        out, _ = other.communicate(timeout=60)
        assert other.returncode == 2, out
        assert out.startswith("SessionLocked") and f"process {os.getpid()}" in out
        assert lock.exists() and os.stat(lock).st_ino == os.fstat(held).st_ino  # not replaced
    finally:
        os.close(held)
        os.close(guard)


def test_a_lock_held_by_a_live_process_refuses_in_another(tmp_path: Path) -> None:
    transcript = tmp_path / "s" / "transcript.jsonl"
    with TranscriptWriter(transcript):
        code = ("import sys; from app.session.transcript import TranscriptWriter\n"
                "try:\n    TranscriptWriter(sys.argv[1])\nexcept Exception as err:\n"
                "    print(type(err).__name__, err); sys.exit(2)\n")
        other = subprocess.run([sys.executable, "-c", code, str(transcript)], capture_output=True, text=True,
                               timeout=60, cwd=Path(__file__).resolve().parents[1])
        assert other.returncode == 2, other.stdout + other.stderr
        assert other.stdout.startswith("SessionLocked") and f"process {os.getpid()}" in other.stdout
    # released on close: now the other process can write
    assert subprocess.run([sys.executable, "-c", code, str(transcript)], capture_output=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[1]).returncode == 0


# ---------------------------------------------------------------- damaged transcripts

def _conversation(path: Path) -> list[bytes]:
    """A transcript of two tool rounds; returns its lines."""
    with TranscriptWriter(path) as w:
        w.append_message(Message.user("task"))
        w.append_message(Message(role="assistant", content=[TextBlock(text="reading"),
                                                            ToolUseBlock(id="call_0", name="read_file",
                                                                         input={"path": "a"})]))
        w.append_message(Message(role="user", content=[ToolResultBlock(tool_use_id="call_0", content="A")]))
        w.append_message(Message(role="assistant", content=[ToolUseBlock(id="call_1", name="list_files",
                                                                         input={})]))
        w.append_message(Message(role="user", content=[ToolResultBlock(tool_use_id="call_1", content="B")]))
        w.append_message(Message.assistant_text("done"))
        w.end_turn()
    return path.read_bytes().splitlines(keepends=True)


def _message_line(message: Message) -> bytes:
    return (json.dumps({"kind": "message", "ts": 1.0, "message": message.model_dump(mode="json")}) + "\n").encode()


DAMAGES = {
    "torn assistant line": lambda lines: lines[:3] + [lines[3][: len(lines[3]) // 2]],
    "garbage for the assistant line": lambda lines: lines[:3] + [b"\x00\xff{{garbage\n"] + lines[4:],
    "assistant line wrongly typed": lambda lines: lines[:3] + [lines[3].replace(b'"assistant"', b'"user"', 1)]
    + lines[4:],
    "assistant line with a result in it": lambda lines: lines[:3] + [_message_line(Message(
        role="assistant", content=[ToolResultBlock(tool_use_id="call_0", content="A")]))] + lines[4:],
    "duplicated assistant line": lambda lines: lines[:4] + [lines[3]] + lines[4:],
    "duplicated results line": lambda lines: lines[:5] + [lines[4]] + lines[5:],
    "results line lost": lambda lines: lines[:4] + lines[5:],
    "assistant line lost": lambda lines: lines[:3] + lines[4:],
    "first line lost": lambda lines: lines[1:],
    "an id reused in one message": lambda lines: lines[:3] + [lines[3].replace(b'"call_1"', b'"call_0"')]
    + [lines[4].replace(b'"call_1"', b'"call_0"')] + lines[5:],
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_transcript_restores_to_a_valid_history_with_warnings(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "transcript.jsonl"
    lines = _conversation(path)
    path.write_bytes(b"".join(DAMAGES[damage](lines)))
    state = restore(path)
    assert sendable_problems(state.history) == [], state.history
    assert state.warnings, "a repair or a skipped line must be reported"
    assert state.history and state.history[0].role == "user"


def test_a_damaged_transcript_resumes_through_the_cli_with_a_valid_request(fake_llm, env, project) -> None:
    fake_llm.enqueue(openai_tool_calls([("read_file", {"path": "notes.txt"}, "call_0")]),
                     openai_text("Read it."))
    assert in_process(fake_llm, project, env, "-p", "read notes.txt", "--yes").returncode == 0
    session = SessionStore(env["TIDEGAUGE_DATA_DIR"]).latest_for(project)
    lines = session.transcript_path.read_bytes().splitlines(keepends=True)
    assistant = next(line for line in lines if b'"tool_calls"' not in line and b'"tool_use"' in line
                     and b'"kind":"message"' in line)
    # the assistant line written twice, and a garbage line after it
    index = lines.index(assistant)
    session.transcript_path.write_bytes(b"".join(lines[: index + 1] + [assistant, b"\xff\xfe{not json\n"]
                                                 + lines[index + 1:]))
    fake_llm.enqueue(openai_text("Still fine."))
    resumed = in_process(fake_llm, project, env, "-p", "and now?", "--continue")  # builds and sends a request
    assert resumed.returncode == 0, resumed.stderr
    assert wire_problems(fake_llm.last_json["messages"]) == []


# ---------------------------------------------------------------- bytes that are not UTF-8

SURROGATE_DELTA = '{"choices":[{"index":0,"delta":{"content":"half \\ud800 a pair"},"finish_reason":null}]}'


def test_non_utf8_cwd_and_a_lone_surrogate_delta_keep_the_session_usable(fake_llm, env, tmp_path) -> None:
    project = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9"))
    project.mkdir()
    fake_llm.enqueue(openai_events([{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "finish_reason": None}]},
                                    SURROGATE_DELTA,
                                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]))
    first = subprocess.run(cli(fake_llm, "-p", "hello"), cwd=project, env=env, capture_output=True, timeout=120)
    assert first.returncode == 0, first.stderr.decode(errors="replace")
    for line in first.stdout.splitlines():
        json.loads(line.decode("utf-8"))  # strict UTF-8, valid JSON: one object per line
    assert b"half " in first.stdout

    # The session stays usable on every later --continue: the first in-process (its output
    # encoded strictly, as a real stdout would), the last a real process again.
    fake_llm.enqueue(openai_text("Answer 0."))
    later = in_process(fake_llm, project, env, "-p", "again 0", "--continue")
    assert later.returncode == 0, later.stderr
    for text_line in later.stdout.splitlines():
        text_line.encode("utf-8")  # strict: a lone surrogate raises here as it would on a real stdout
        json.loads(text_line)
    sent = json.dumps(fake_llm.last_json["messages"])
    assert "half " in sent and "hello" in sent and "again 0" in sent
    fake_llm.enqueue(openai_text("Answer 1."))
    last = subprocess.run(cli(fake_llm, "-p", "again 1", "--continue"), cwd=project, env=env,
                          capture_output=True, timeout=120)
    assert last.returncode == 0, last.stderr.decode(errors="replace")
    for line in last.stdout.splitlines():
        json.loads(line.decode("utf-8"))
    sent = json.dumps(fake_llm.last_json["messages"])
    assert "half " in sent and "hello" in sent and "again 0" in sent
    assert len(SessionStore(env["TIDEGAUGE_DATA_DIR"]).list_for(project)) == 1


# ---------------------------------------------------------------- kill -9 at many points

def _scripted_task(body: dict, path: str):
    """Answers by what was sent: a read, then a command, then the answer; a resume gets text.

    A body the kill cut off mid-send arrives incomplete (the fake server hands it over as {}):
    nobody is left to read the reply."""
    if "messages" not in body:
        return openai_text("")
    messages = body["messages"]
    last_user: dict[str, Any] = next((m for m in reversed(messages) if m["role"] == "user"), {})
    if "resume check" in json.dumps(last_user.get("content", "")):
        return openai_text("Resumed fine.")
    calls = sum(len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant")
    step = calls
    if step == 0:
        return openai_tool_calls([("read_file", {"path": "notes.txt"}, "call_0")], text="Reading.")
    if step == 1:
        return openai_tool_calls([("run_bash", {"command": "echo checked"}, "call_0"),
                                  ("list_files", {}, "call_1")])
    return openai_text("All done: " + "the notes are fine. " * 20)


KILL_POINTS = (1, 2, 3, 5, 7, 9, 11, 13, 16, 20)


@dataclass(frozen=True)
class KilledAtEachPoint:
    """One ``tidegauge -p`` run and, for each point of KILL_POINTS, the data directory as a kill -9
    after that many stream-json lines leaves it."""

    project: Path
    env: dict[str, str]
    data_at: dict[int, Path]


def _group_stopped(leader: psutil.Process) -> bool:
    """Every process of ``leader``'s group has taken its SIGSTOP (a sandboxed command, in a session
    of its own, is not of the group: it writes nothing of the session's)."""
    try:
        below = leader.children(recursive=True)
    except psutil.NoSuchProcess:
        return True
    for process in [leader, *below]:
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            if os.getpgid(process.pid) == leader.pid and process.status() not in (
                    psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return False
    return True


def _stop_group(leader_pid: int) -> None:
    """SIGSTOP the group until every process in it has taken the signal. A command caught between
    its vfork and its exec stops there, and the thread that started it, waiting for that exec,
    cannot stop: then the group goes on for a moment and is stopped again."""
    leader = psutil.Process(leader_pid)
    deadline = time.monotonic() + 60
    while True:
        os.killpg(leader_pid, signal.SIGSTOP)
        attempt_ends = time.monotonic() + 1.0
        while time.monotonic() < attempt_ends:
            if _group_stopped(leader):  # the signal is delivered, not yet taken
                return
            time.sleep(0.001)  # polls the condition above
        assert time.monotonic() < deadline, "the run never stopped"
        os.killpg(leader_pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def killed_at_each_point(tmp_path_factory: pytest.TempPathFactory) -> KilledAtEachPoint:
    """One process instead of one per point (a start is a Python and its imports): at each point but
    the last its whole group is stopped (SIGSTOP), its data directory copied, and it goes on
    (SIGCONT); at the last it is killed -9. A stopped process writes nothing more and a copy sees
    what the kernel holds, so each copy is the disk a kill -9 there leaves: its flock gone with it
    (the copy's is held by nobody), and the pid in its lock file dead by the time a test continues."""
    root = tmp_path_factory.mktemp("kill-points")
    project = root / "project"
    project.mkdir()
    (project / "notes.txt").write_text("the first file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGAUGE_") and not k.endswith("_API_KEY")}
    env.update(TIDEGAUGE_DATA_DIR=str(root / "data"), TIDEGAUGE_CONFIG_DIR=str(root / "config"),
               OPENAI_API_KEY=API_KEY, PYTHONUNBUFFERED="1")
    server = FakeLLMServer().start()
    server.default = _scripted_task
    server.allow_unscripted = True
    data_at: dict[int, Path] = {}

    def keep(point: int) -> None:
        data_at[point] = root / f"data-at-{point}"
        shutil.copytree(root / "data", data_at[point], symlinks=True)

    try:
        proc = start(server, project, env, "-p", "check the notes", "--yes")
        assert proc.stdout is not None
        waiting = list(KILL_POINTS)
        seen = 0
        try:
            for line in proc.stdout:
                if seen or b'"type": "user_message"' in line:
                    seen += 1
                while len(waiting) > 1 and seen >= waiting[0]:
                    point = waiting.pop(0)
                    try:
                        _stop_group(proc.pid)
                        keep(point)
                    finally:
                        os.killpg(proc.pid, signal.SIGCONT)
                if seen >= waiting[-1]:
                    break  # the last point: a real kill -9
        finally:
            kill_group(proc)
        for point in waiting:  # the last, and any the run ended before: what the kill or the end left
            keep(point)
    finally:
        server.stop()
    assert not server.handler_errors, server.handler_errors
    return KilledAtEachPoint(project, env, data_at)


@pytest.mark.parametrize("kill_after_lines", KILL_POINTS)
def test_kill_9_at_many_points_then_continue_sends_a_valid_request(fake_llm, killed_at_each_point: KilledAtEachPoint,
                                                                   kill_after_lines: int) -> None:
    """kill -9 after the Nth stream-json line from the task's own (a state, not a delay), then --continue.

    Counting starts at the user_message line: the lines before it (session, context) come
    before the task is recorded, and a session killed there has no task to resume."""
    run = killed_at_each_point
    data = run.data_at[kill_after_lines]
    session = SessionStore(data).latest_for(run.project)
    assert session is not None
    state = restore(session)
    assert sendable_problems(state.history) == []

    # The kill is what is tested; the resume that follows only builds and sends a request.
    fake_llm.default = _scripted_task
    fake_llm.allow_unscripted = True
    resumed = in_process(fake_llm, run.project, {**run.env, "TIDEGAUGE_DATA_DIR": str(data)},
                         "-p", "resume check", "--continue", "--yes")
    assert resumed.returncode == 0, resumed.stderr
    sent = fake_llm.last_json["messages"]
    assert wire_problems(sent) == []
    assert "check the notes" in json.dumps(sent)


# ---------------------------------------------------------------- random damage, as a property

from hypothesis import given, strategies as st  # noqa: E402


def _round_trip_lines(tmp: Path) -> list[bytes]:
    path = tmp / "base.jsonl"
    if not path.exists():
        _conversation(path)
    return path.read_bytes().splitlines(keepends=True)


@pytest.fixture(scope="module")
def base_lines(tmp_path_factory) -> list[bytes]:
    return _round_trip_lines(tmp_path_factory.mktemp("base"))


damage_op = st.one_of(
    st.tuples(st.just("drop"), st.integers(0, 30)),
    st.tuples(st.just("duplicate"), st.integers(0, 30)),
    st.tuples(st.just("swap"), st.integers(0, 30)),
    st.tuples(st.just("tear"), st.integers(0, 30), st.floats(0.05, 0.95)),
    st.tuples(st.just("garbage"), st.integers(0, 30), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("retype"), st.integers(0, 30)),
)


def _apply(lines: list[bytes], op: tuple) -> list[bytes]:
    if not lines:
        return lines
    i = op[1] % len(lines)
    kind = op[0]
    if kind == "drop":
        return lines[:i] + lines[i + 1:]
    if kind == "duplicate":
        return lines[:i + 1] + [lines[i]] + lines[i + 1:]
    if kind == "swap" and i + 1 < len(lines):
        return lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2:]
    if kind == "tear":
        return lines[:i] + [lines[i][: max(1, int(len(lines[i]) * op[2]))]] + lines[i + 1:]
    if kind == "garbage":
        return lines[:i] + [op[2] + b"\n"] + lines[i:]
    if kind == "retype":
        line = lines[i]
        flipped = (line.replace(b'"role":"assistant"', b'"role":"@"').replace(b'"role":"user"', b'"role":"assistant"')
                   .replace(b'"role":"@"', b'"role":"user"'))
        return lines[:i] + [flipped] + lines[i + 1:]
    return lines


@given(ops=st.lists(damage_op, min_size=1, max_size=6))
def test_any_damage_restores_to_a_sendable_history(base_lines, tmp_path_factory, ops) -> None:
    lines = list(base_lines)
    for op in ops:
        lines = _apply(lines, op)
    path = tmp_path_factory.mktemp("damaged") / "transcript.jsonl"
    path.write_bytes(b"".join(lines))
    state = restore(path)
    assert sendable_problems(state.history) == []
    assert not state.history or state.history[0].role == "user"

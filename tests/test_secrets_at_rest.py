"""Secrets at rest: what tidegauge leaves under the data directory holds no key, is the owner's
only, is bounded, and is never written through a symlink someone planted.

Through the real CLI (the fake LLM on loopback, a real MCP server over stdio) where a user would
see it: the session memory file, an MCP server's stderr log, a token in an MCP server's URL. A
subprocess where what the process prints is checked; in-process (tests/cli_in_process.py) where
only what it writes to disk or sends is. The file primitives themselves are checked directly.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from cli_in_process import run_cli
from fake_llm_server import Reply, openai_text

from app.context.session_memory import MAX_MEMORY_FILE_BYTES, MEMORY_FILE_NAME, MEMORY_PROMPT_HEAD, SessionMemory
from app.mcp.stderr_log import MAX_LOG_BYTES
from app.kernel.redact import REDACTED, register_secret
from app.session.store import SessionStore
from app.session.lock import lock_path_for
from app.session.transcript import TranscriptWriter

KEY = "sk-test-fake-key-0123456789"  # the provider key: OPENAI_API_KEY, so registered as a secret


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               OPENAI_API_KEY=KEY, TIDEGAUGE_MEMORY_UPDATE_TOKENS="0")
    return env


def _tidegauge(tmp_path: Path, fake, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "app", "--provider", "openai", "--model", "m",
                           "--base-url", fake.base_url("openai"), "--output-format", "stream-json", *args],
                          cwd=work, env={**_env(tmp_path), **env}, capture_output=True, text=True, timeout=180)


def _tidegauge_in_process(tmp_path: Path, fake, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The same CLI, in this process (a ``python -m app`` start is ~0.5 CPU-s): for a run whose
    outcome is what it writes to disk or sends, not what the process prints on its own streams."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return run_cli(["--provider", "openai", "--model", "m", "--base-url", fake.base_url("openai"),
                    "--output-format", "stream-json", *args], cwd=work, env={**_env(tmp_path), **env})


def _write_config(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text(text, encoding="utf-8")


def _session_dir(tmp_path: Path) -> Path:
    sessions = [d for d in (tmp_path / "data" / "sessions").iterdir() if d.is_dir()]
    assert len(sessions) == 1, f"expected one session, found {sessions}"
    return sessions[0]


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    """Bounded polling (in the fake server's thread): fails with what it waited for."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.02)


# ---- the session memory ----

def _memory_server(fake, main_waits_for: Callable[[], bool], what: str) -> list[dict[str, Any]]:
    """Memory updates answer with a summary that repeats the key; the main reply waits for ``main_waits_for``
    (so the background update is over before the turn ends). Returns the memory requests, as they come."""
    memory_requests: list[dict[str, Any]] = []

    def reply(body: dict[str, Any], _path: str) -> Reply:
        if MEMORY_PROMPT_HEAD in json.dumps(body):
            memory_requests.append(body)
            return openai_text(f"## Task\nDeploy the service with the API key {KEY} as the user asked.")
        _wait_for(main_waits_for, what)
        return openai_text("Deployed.")

    fake.default = reply
    return memory_requests


def test_session_memory_on_disk_holds_no_key_and_is_the_owners_only(fake_llm, tmp_path):
    def memory_written() -> bool:
        return any((tmp_path / "data" / "sessions").glob(f"*/{MEMORY_FILE_NAME}"))

    _memory_server(fake_llm, memory_written, "session-memory.md to be written")
    proc = _tidegauge_in_process(tmp_path, fake_llm, "-p", f"deploy with the key {KEY}",
                                 TIDEGAUGE_MEMORY_UPDATE_TOKENS="1", TIDEGAUGE_MEMORY_INIT_TOKENS="0",
                                 TIDEGAUGE_MEMORY_UPDATE_TOOL_CALLS="0")

    assert proc.returncode == 0, proc.stderr
    memory = _session_dir(tmp_path) / MEMORY_FILE_NAME
    text = memory.read_text(encoding="utf-8")
    assert KEY not in text, "the session memory file holds the API key from the prompt"
    assert f"API key {REDACTED} as the user asked" in text
    assert _mode(memory) == 0o600


def test_a_resumed_session_does_not_reload_a_key_from_its_memory_file(fake_llm, tmp_path):
    fake_llm.enqueue(openai_text("Noted."))
    first = _tidegauge_in_process(tmp_path, fake_llm, "-p", "remember the deployment")
    assert first.returncode == 0, first.stderr
    # As an older tidegauge wrote it: the model's summary, key included, in clear.
    memory = _session_dir(tmp_path) / MEMORY_FILE_NAME
    memory.write_text(f"## Task\nDeploy with the API key {KEY}.\n", encoding="utf-8")

    requests = _memory_server(fake_llm, lambda: bool(requests), "the memory update request")
    resumed = _tidegauge_in_process(tmp_path, fake_llm, "--continue", "-p", "go on",
                                    TIDEGAUGE_MEMORY_UPDATE_TOKENS="1")

    assert resumed.returncode == 0, resumed.stderr
    assert requests, "no memory update was asked for"
    sent = json.dumps(requests[0])
    assert f"Deploy with the API key {REDACTED}." in sent  # the memory was reloaded and used...
    assert KEY not in sent  # ...without the key
    assert KEY not in memory.read_text(encoding="utf-8")


def test_a_memory_file_holding_a_key_in_clear_is_rewritten_redacted_when_it_is_loaded(tmp_path):
    """An older version's file: the key leaves the disk at resume, not only at the next update
    (which a short run may never finish)."""
    register_secret(KEY)
    old = tmp_path / MEMORY_FILE_NAME
    old.write_text(f"## Task\nDeploy with the API key {KEY}.\n", encoding="utf-8")
    loaded = SessionMemory.load(old)
    assert loaded.text == f"## Task\nDeploy with the API key {REDACTED}."
    assert old.read_text(encoding="utf-8") == f"## Task\nDeploy with the API key {REDACTED}.\n"
    assert _mode(old) == 0o600


def test_session_memory_is_not_read_through_a_symlink_nor_without_bound(tmp_path):
    register_secret(KEY)
    elsewhere = tmp_path / "someone-elses.txt"
    elsewhere.write_text("not a memory\n")
    planted = tmp_path / MEMORY_FILE_NAME
    planted.symlink_to(elsewhere)
    assert SessionMemory.load(planted).text == ""

    planted.unlink()
    planted.write_bytes(b"m" * (5 * MAX_MEMORY_FILE_BYTES))
    assert len(SessionMemory.load(planted).text) == MAX_MEMORY_FILE_BYTES

    SessionMemory(path=planted).save(f"the key is {KEY}", None)
    assert planted.read_text() == f"the key is {REDACTED}\n" and _mode(planted) == 0o600


# ---- an MCP server's stderr log ----

GITHUB_TOKEN = "ghp_" + "T0kenT0kenT0kenT0kenT0kenT0kenT0ken0"
GITHUB_PAT = "pat-9f8e7d6c5b4a39281706"  # its name says nothing secret, but a server's env is its secrets
# A server that says too much on stderr and then dies in its handshake: its log is all that is left
# (no MCP import: the test stays fast). tests/test_mcp_headless.py runs a server that works.
NOISY_SERVER = """
import os, sys
size = int(sys.argv[1])
err = sys.stderr
err.write(f"starting with GITHUB_TOKEN={os.environ['GITHUB_TOKEN']} GITHUB_PAT={os.environ['GITHUB_PAT']}\\n")
line = "noise " + "x" * 93 + "\\n"
for _ in range(size // len(line)):
    err.write(line)
err.write(f"last words: GITHUB_TOKEN={os.environ['GITHUB_TOKEN']}\\n")
sys.exit(1)
"""


def _noisy_server_config(tmp_path: Path, stderr_bytes: int) -> None:
    script = tmp_path / "noisy_server.py"
    script.write_text(NOISY_SERVER, encoding="utf-8")
    _write_config(tmp_path, (
        f"[mcp_servers.noisy]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(script))}, \"{stderr_bytes}\"]\n"
        f"env = {{ GITHUB_TOKEN = \"{GITHUB_TOKEN}\", GITHUB_PAT = \"{GITHUB_PAT}\" }}\nstartup_timeout = 120\n"))


def test_an_mcp_servers_stderr_log_is_redacted_capped_and_private(fake_llm, tmp_path):
    _noisy_server_config(tmp_path, 5 * 1024 * 1024)
    fake_llm.enqueue(openai_text("done"))

    proc = _tidegauge(tmp_path, fake_llm, "-p", "hello")

    assert proc.returncode == 0, proc.stderr
    statuses = [e["status"] for e in map(json.loads, proc.stdout.splitlines()) if e["type"] == "mcp_server"]
    assert statuses == ["starting", "failed"], proc.stdout[-2000:]
    log = _session_dir(tmp_path) / "mcp-noisy.log"
    data = log.read_bytes()
    assert GITHUB_TOKEN.encode() not in data and GITHUB_PAT.encode() not in data
    assert f"starting with GITHUB_TOKEN={REDACTED} GITHUB_PAT={REDACTED}".encode() in data  # the head
    assert f"last words: GITHUB_TOKEN={REDACTED}".encode() in data  # the newest part is kept
    assert b"server log capped at" in data
    assert len(data) <= MAX_LOG_BYTES, f"{len(data):,} bytes"
    assert _mode(log) == 0o600
    assert GITHUB_TOKEN not in proc.stdout and GITHUB_TOKEN not in proc.stderr


def test_a_symlink_planted_at_the_mcp_log_path_is_not_followed(fake_llm, tmp_path):
    _noisy_server_config(tmp_path, 1000)
    fake_llm.enqueue(openai_text("done"))
    (tmp_path / "work").mkdir()
    session = SessionStore(tmp_path / "data").create(tmp_path / "work", "openai", "m")
    log = session.dir / "mcp-noisy.log"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    log.symlink_to(victim)

    resumed = _tidegauge_in_process(tmp_path, fake_llm, "--resume", session.id, "-p", "again")

    assert resumed.returncode == 0, resumed.stderr
    assert victim.read_text() == "precious\n", "the server's stderr was written through the planted symlink"
    assert log.is_symlink()


# ---- a token in an MCP server's URL ----

def test_a_token_in_an_mcp_url_is_in_no_output_and_no_file(fake_llm, tmp_path):
    long_key = "K3yK3yK3yK3yK3y"
    password = "hunter2hunter2"
    # The fake LLM answers POST /mcp with a 404: the server fails to start, and the SDK's error repeats the URL.
    url = fake_llm.url.replace("http://", f"http://alice:{password}@") + f"/mcp?token=SECRET&api_key={long_key}"
    _write_config(tmp_path, f"[mcp_servers.remote]\nurl = {json.dumps(url)}\nstartup_timeout = 60\n")
    fake_llm.enqueue(openai_text("done"))

    proc = _tidegauge(tmp_path, fake_llm, "-p", "hello")

    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    remote = [e for e in events if e["type"] == "mcp_server"]
    assert remote[0]["status"] == "starting" and remote[0]["detail"].endswith("/mcp?token=***&api_key=***")
    assert remote[-1]["status"] == "failed", remote
    written = [p for p in (tmp_path / "data").rglob("*") if p.is_file()]
    assert any(p.name == "transcript.jsonl" for p in written)
    for secret in ("SECRET", long_key, password):
        assert secret not in proc.stdout, f"{secret} in a stream-json line"
        assert secret not in proc.stderr
        for path in written:
            assert secret not in path.read_text(errors="replace"), f"{secret} in {path}"


def test_a_bad_mcp_url_is_named_without_its_token(tmp_path, monkeypatch):
    from app.wiring.config import load_settings
    from app.kernel.errors import ConfigError

    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    _write_config(tmp_path, '[mcp_servers.remote]\nurl = "ftp://mcp.example/sse?token=SECRET"\n')
    with pytest.raises(ConfigError) as err:
        load_settings({})
    assert "http:// or https://" in str(err.value) and "ftp://mcp.example/sse?token=***" in str(err.value)
    assert "SECRET" not in str(err.value)


# ---- every file under the data directory ----

def test_a_new_data_dir_and_its_session_files_are_the_owners_only(tmp_path):
    session = SessionStore(tmp_path / "data").create(tmp_path, "openai", "m")
    assert _mode(tmp_path / "data") == 0o700
    assert _mode(tmp_path / "data" / "sessions") == 0o700 and _mode(session.dir) == 0o700
    assert _mode(session.dir / "meta.json") == 0o600


def test_an_existing_transcript_is_made_private_and_a_symlink_at_it_is_refused(tmp_path):
    transcript = tmp_path / "session" / "transcript.jsonl"
    transcript.parent.mkdir()
    transcript.write_text("")
    transcript.chmod(0o644)
    TranscriptWriter(transcript).close()
    assert _mode(transcript) == 0o600

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    transcript.unlink()
    transcript.symlink_to(victim)
    with pytest.raises(OSError):
        TranscriptWriter(transcript)
    assert victim.read_text() == "precious\n"


def test_a_symlink_at_the_session_lock_is_refused(tmp_path):
    transcript = tmp_path / "transcript.jsonl"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock_path_for(transcript).symlink_to(victim)
    with pytest.raises(OSError):
        TranscriptWriter(transcript)
    assert victim.read_text() == "precious\n"
    assert not transcript.exists()


def test_a_symlink_at_the_session_locks_guard_is_refused(tmp_path):
    # The guard under which the lock is taken is a file beside the transcript too: one planted
    # by someone who can write the session folder must not be opened through.
    transcript = tmp_path / "transcript.jsonl"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock = lock_path_for(transcript)
    lock.with_name(lock.name + ".take.lock").symlink_to(victim)
    with pytest.raises(OSError):
        TranscriptWriter(transcript)
    assert victim.read_text() == "precious\n"
    assert not transcript.exists()


def test_a_fifo_planted_at_the_transcript_is_refused_at_once(tmp_path):
    """Opening a FIFO for writing waits for a reader: a planted one must be refused, not hang the session."""
    transcript = tmp_path / "transcript.jsonl"
    os.mkfifo(transcript)
    refused: list[BaseException] = []

    def open_it() -> None:
        try:
            TranscriptWriter(transcript).close()
        except OSError as err:
            refused.append(err)

    opener = threading.Thread(target=open_it, daemon=True)
    opener.start()
    opener.join(30)
    assert not opener.is_alive(), "opening the transcript blocked on a FIFO planted at its path"
    assert refused, "a FIFO at the transcript's path was accepted as a transcript"


def test_the_stderr_log_redacts_a_token_split_across_writes_and_inside_an_endless_line(tmp_path):
    from app.mcp.stderr_log import ServerStderrLog

    register_secret(GITHUB_TOKEN)
    log = ServerStderrLog(tmp_path / "mcp-x.log", env_values=[GITHUB_PAT])
    assert log.writer is not None
    # No whitespace anywhere: one 500 KB "line", a token cut in two between writes, the server's own value.
    log.writer.write("a" * 200_000 + GITHUB_TOKEN[:10])
    log.writer.flush()
    log.writer.write(GITHUB_TOKEN[10:] + "b" * 300_000 + GITHUB_PAT)
    log.writer.flush()
    log.close()
    data = (tmp_path / "mcp-x.log").read_text()
    assert GITHUB_TOKEN not in data and GITHUB_PAT not in data
    assert data == "a" * 200_000 + REDACTED + "b" * 300_000 + REDACTED


def test_an_error_that_repeats_the_mcp_url_shows_it_without_its_token():
    from app.kernel.events import McpServerEvent
    from app.mcp.client import McpConnection, McpServerError, describe_failure
    from app.mcp.hub import McpHub
    from app.mcp.settings import McpServerConfig

    url = "https://bob:pw@mcp.example/sse?token=SECRET&region=eu"
    said = describe_failure(RuntimeError(f"Client error '401 Unauthorized' for url '{url}'\nFor more information"))
    assert said == "RuntimeError: Client error '401 Unauthorized' for url 'https://mcp.example/sse?token=***&region=***'"

    events: list[McpServerEvent] = []
    hub = McpHub(emit=events.append)  # type: ignore[arg-type]
    connection = McpConnection("remote", McpServerConfig(url=url), Path("."))
    hub._failed(connection, McpServerError(f"HTTPStatusError: 401 for url {url}"))
    hub._exited(connection, f"lost {url}")
    assert [e.detail for e in events] == ["HTTPStatusError: 401 for url https://mcp.example/sse?token=***&region=***",
                                          "lost https://mcp.example/sse?token=***&region=***"]

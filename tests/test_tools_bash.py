"""run_bash: output and exit code, secrets kept out, process groups killed, bounded memory."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from app.tools import bash
from app.tools.base import ToolContext
from app.tools.registry import ToolRun, default_registry
from tool_helpers import tool_context

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return tool_context(tmp_path, "call_bash")


async def bash_run(ctx: ToolContext, command: str, max_output: int = 40_000, **extra: object) -> ToolRun:
    return await default_registry(max_output).run("run_bash", {"command": command, **extra}, ctx)


def process_gone(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` has exited (a zombie waiting for init to reap it counts as gone)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


async def read_pid(pidfile: Path) -> int:
    """The pid a command wrote, once it has written it (the pytest timeout guards the wait)."""
    while not (pidfile.exists() and pidfile.read_text().strip()):
        await asyncio.sleep(0.01)
    return int(pidfile.read_text())


# A child that ignores SIGTERM and would outlive bash.
STUBBORN_CHILD = "(trap '' TERM; exec sleep 1000) & echo $! > child.pid; wait"


async def test_combined_output_then_the_exit_code(ctx: ToolContext) -> None:
    run = await bash_run(ctx, "echo out; echo err >&2; pwd; exit 3")
    assert run.content == f"out\nerr\n{ctx.workspace}\n[exit code: 3]"
    assert not run.is_error and not run.truncated


async def test_no_output_and_no_stdin(ctx: ToolContext) -> None:
    run = await bash_run(ctx, "cat")  # would wait for ever on a terminal's stdin
    assert run.content == "(no output)\n[exit code: 0]"


async def test_provider_keys_never_reach_the_command(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx.env.update(OPENAI_API_KEY="sk-leak-1", MY_SERVICE_API_KEY="leak-2", KEEP_ME="visible")
    run = await bash_run(ctx, "env")
    assert "sk-leak-1" not in run.content and "leak-2" not in run.content
    assert "KEEP_ME=visible" in run.content

    # With no environment given, the process's own is used, minus the keys.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-leak-3")
    ctx.env = {}
    run = await bash_run(ctx, "env")
    assert "sk-ant-leak-3" not in run.content and "PATH=" in run.content


async def test_hostile_bytes_come_back_as_safe_text(ctx: ToolContext) -> None:
    run = await bash_run(ctx, r"printf 'ok \xff\xfe \033]0;pwned\007\033[31mred\033[0m\n'")
    assert run.content == "ok \ufffd\ufffd red\n[exit code: 0]"


async def test_timeout_kills_the_whole_process_group(ctx: ToolContext) -> None:
    run = await bash_run(ctx, STUBBORN_CHILD, timeout=1)
    child = int((ctx.workspace / "child.pid").read_text())
    assert run.is_error
    assert "timed out after 1 s" in run.content and "every process it started were killed" in run.content
    assert "background" in run.content  # says how to avoid it next time
    assert process_gone(child)


async def test_cancellation_kills_the_whole_process_group(ctx: ToolContext) -> None:
    task = asyncio.create_task(bash_run(ctx, STUBBORN_CHILD))
    child = await read_pid(ctx.workspace / "child.pid")
    assert not process_gone(child, within_s=0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert process_gone(child)


async def test_a_background_process_holding_the_pipe_does_not_hang_the_call(ctx: ToolContext) -> None:
    run = await bash_run(ctx, "sleep 60 & echo $! > bg.pid; echo started", timeout=30)
    bg = int((ctx.workspace / "bg.pid").read_text())
    try:
        assert run.content.startswith("started\n[exit code: 0]")
        assert "background process still holds the output open" in run.content
        assert not run.is_error
    finally:
        os.kill(bg, signal.SIGKILL)


async def test_big_output_is_cut_by_the_registry_and_saved_whole(ctx: ToolContext) -> None:
    run = await bash_run(ctx, "seq 1 20000", max_output=1_000)
    expected = "".join(f"{i}\n" for i in range(1, 20_001))
    assert run.truncated and run.content.startswith("1\n2\n3\n")
    assert run.content.endswith("19999\n20000\n[exit code: 0]")
    assert Path(run.full_output_path or "").read_text() == expected + "[exit code: 0]"


async def test_with_truncation_off_the_output_comes_back_whole(ctx: ToolContext) -> None:
    run = await bash_run(ctx, "seq 1 200000", max_output=0)  # ~1.3 MB, more than a 64 KB head+tail
    assert not run.truncated
    assert run.content == "".join(f"{i}\n" for i in range(1, 200_001)) + "[exit code: 0]"


async def test_with_truncation_off_memory_is_still_bounded(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash, "UNTRUNCATED_KEEP_CHARS", 4_096)
    run = await bash_run(ctx, "seq 1 100000", max_output=0)
    full = "".join(f"{i}\n" for i in range(1, 100_001))
    assert run.truncated and run.content.count("output truncated") == 1
    assert run.content.startswith("1\n2\n") and run.content.endswith("100000\n[exit code: 0]")
    assert run.original_chars == len(full) + len("[exit code: 0]")
    assert f"{run.original_chars:,} characters in total" in run.content
    assert Path(run.full_output_path or "").read_text() == full + "[exit code: 0]"
    assert len(run.content) < 2 * 4_096 + 500


async def test_spilled_multibyte_output_is_not_garbled_at_the_cuts(ctx: ToolContext) -> None:
    # ~1.5 MB of 3-byte characters: spilled to disk, then cut by the registry.
    run = await bash_run(ctx, "for i in $(seq 1 20000); do echo '数据库连接被拒绝了啊啊啊啊啊啊啊啊啊啊啊啊'; done", max_output=1_000)
    assert run.truncated and "\ufffd" not in run.content
    assert run.content.startswith("数据库连接被拒绝")
    assert Path(run.full_output_path or "").read_text(encoding="utf-8").count("数据库") == 20_000


async def test_bad_arguments(ctx: ToolContext) -> None:
    assert "at least 1" in (await bash_run(ctx, "true", timeout=0)).content
    assert (await bash_run(ctx, "   ")).is_error


FLOOD_SCRIPT = """
import asyncio, json, resource, sys
from pathlib import Path
from app.tools.base import ToolContext
from app.tools.registry import default_registry

async def main() -> None:
    ws = Path(sys.argv[1])
    ctx = ToolContext(workspace=ws, tool_results_dir=ws / "tool-results", call_id="flood")
    registry = default_registry(40_000)
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = await registry.run("run_bash", {"command": "yes | head -c 200000000"}, ctx)
    after_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(run.full_output_path, "rb") as saved:
        saved.seek(-20, 2)
        saved_end = saved.read().decode()
    print(json.dumps({"growth_kb": after_kb - before_kb, "path": run.full_output_path,
                      "saved_end": saved_end,
                      "truncated": run.truncated, "original_chars": run.original_chars,
                      "tail": run.content[-40:], "length": len(run.content)}))

asyncio.run(main())
"""


def test_a_flood_of_output_keeps_memory_bounded_and_lands_on_disk(tmp_path: Path) -> None:
    # A fresh interpreter, so its peak RSS belongs to this flood alone.
    done = subprocess.run(
        [sys.executable, "-c", FLOOD_SCRIPT, str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=110, check=True,
    )
    result = json.loads(done.stdout)
    assert result["growth_kb"] < 100 * 1024, result  # 200 MB went through
    # All 200,000,000 bytes, then the exit line the model saw.
    assert os.path.getsize(result["path"]) == 200_000_000 + len("[exit code: 0]")
    assert result["saved_end"].endswith("y\ny\ny\n[exit code: 0]")
    assert result["truncated"]
    assert result["original_chars"] == 200_000_000 + len("[exit code: 0]")
    assert result["tail"].endswith("y\ny\n[exit code: 0]")
    assert result["length"] < 40_000 + 400


async def test_spilled_bytes_that_are_not_utf8_land_on_disk_unchanged(ctx: ToolContext) -> None:
    original = os.urandom(400_000)
    (ctx.workspace / "blob.bin").write_bytes(original)
    run = await bash_run(ctx, "cat blob.bin")
    saved = Path(run.full_output_path or "").read_bytes()
    assert saved.startswith(original) and saved.endswith(b"[exit code: 0]")
    assert "\x1b" not in run.content and "\x00" not in run.content


async def test_a_secret_in_the_output_is_redacted_on_screen_and_on_disk(ctx: ToolContext) -> None:
    from app.kernel import redact

    secret = "sk-live-0123456789abcdefghijklmnop"
    redact.register_secret(secret)
    try:
        ctx.env["SERVICE_TOKEN"] = secret  # not a *_API_KEY name: reaches the command
        # ~2 MB in one write with the key on every line: copies straddle the pipe's reads.
        script = "import os, sys; t = os.environ['SERVICE_TOKEN']; sys.stdout.write(''.join(f'line {i} token={t}\\n' for i in range(50000)))"
        run = await bash_run(ctx, f'{sys.executable} -c "{script}"')
        saved = Path(run.full_output_path or "").read_text()
        assert secret not in saved and saved.count("token=[REDACTED]") == 50_000
        assert secret not in run.content and "token=[REDACTED]" in run.content
    finally:
        redact.clear_secrets()


async def test_a_folded_base64_copy_of_a_secret_is_redacted_on_disk_across_the_pipes_reads(ctx: ToolContext) -> None:
    import base64
    import textwrap

    from app.kernel import redact

    secret = "sk-live-folded-0123456789abcdefghijklmnop"
    redact.register_secret(secret)
    try:
        ctx.env["SERVICE_TOKEN"] = secret
        # ~1 MB: the key's base64 folded at 20 columns (`base64 -w 20`), 8,000 times, at
        # shifting offsets: copies straddle the pipe's reads, some with the cut at a line end.
        script = ("import base64, os, sys, textwrap; t = os.environ['SERVICE_TOKEN'].encode(); "
                  "sys.stdout.write(''.join('\\n'.join(textwrap.wrap(base64.b64encode(b'x' * (i % 3) + b'export K=' + t)"
                  ".decode(), 20)) + '\\n' + 'y' * (i % 211) + '\\n' for i in range(8000)))")
        run = await bash_run(ctx, f'{sys.executable} -c "{script}"')
        saved = Path(run.full_output_path or "").read_text()
        for offset in range(3):
            folded = "\n".join(textwrap.wrap(base64.b64encode(b"x" * offset + b"export K=" + secret.encode()).decode(), 20))
            assert folded not in saved
        assert saved.count("[REDACTED]") == 8000
    finally:
        redact.clear_secrets()


async def test_a_command_leaves_a_large_tidegauge_its_memory_unshared(ctx: ToolContext) -> None:
    """Starting bash copies nothing of tidegauge: after a command, writing to 100 MB of tidegauge's
    memory faults no page. A fork (what a ``preexec_fn`` forces) shares every page with the child
    until it execs and leaves each one write-protected: the first write to each then faults, one
    per page (25,600 here), on top of the page tables the fork copied, 13-80 ms of CPU a command."""
    pages = [bytearray(4096) for _ in range(25_600)]
    run = await bash_run(ctx, "echo started")
    assert run.content == "started\n[exit code: 0]"
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for page in pages:
        page[0] = 1
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
    assert faults < 256, f"{faults} page faults writing to {len(pages)} pages after one command"


DEATH_SCRIPT = """
import asyncio, sys
from pathlib import Path
from app.tools.base import ToolContext
from app.tools.registry import default_registry

ws = Path(sys.argv[1])
ctx = ToolContext(workspace=ws, tool_results_dir=ws / "tool-results", call_id="orphan")
asyncio.run(default_registry(40_000).run("run_bash", {"command": "echo $$ > bash.pid; exec sleep 600"}, ctx))
"""


def test_a_command_dies_with_the_process_that_started_it_killed_outright(tmp_path: Path) -> None:
    """kill -9 leaves tidegauge no time to end its command: the kernel does (the parent-death
    signal). A plain process that runs the tool, with no watchdog and no dashboard to clean up."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runner = subprocess.Popen([sys.executable, "-c", DEATH_SCRIPT, str(workspace)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pidfile = workspace / "bash.pid"
    try:
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert runner.poll() is None, runner.stderr.read().decode() if runner.stderr else ""
            time.sleep(0.01)  # polls for the file the command writes (the pytest timeout guards it)
        command = int(pidfile.read_text())  # bash, or the sleep it became
        runner.kill()
        runner.wait(timeout=30)
        assert process_gone(command, within_s=30), "the command outlived the process that started it"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(timeout=30)
        if runner.stderr is not None:
            runner.stderr.close()


async def test_a_setpriv_on_the_commands_path_is_never_run_in_front_of_it(tmp_path: Path) -> None:
    """The death signal's setpriv comes from the system's folders only: a repository's own
    ``setpriv`` first on PATH (a hostile checkout's bin/) does not run in front of every command."""
    ctx = tool_context(tmp_path, "call_path")
    bin_dir = tmp_path / "hostile-bin"
    bin_dir.mkdir()
    ran = tmp_path / "hostile-setpriv-ran"
    fake = bin_dir / "setpriv"
    fake.write_text(f"#!/bin/sh\ntouch {ran}\nshift 3\nexec \"$@\"\n")
    fake.chmod(0o755)
    ctx.env["PATH"] = f"{bin_dir}:{ctx.env['PATH']}"
    run = await bash_run(ctx, "echo ran")
    assert run.content == "ran\n[exit code: 0]"
    assert not ran.exists()

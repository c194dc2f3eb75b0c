"""Tools that cannot be escaped, hung or made to flood the disk (issue 12, the Tools part).

Each test is one of the probes that broke the first wave: a racing swapper
against the workspace boundary, FIFOs and devices, huge sparse files, an
interrupt during blocking I/O, process trees that leave their group, an
endless spill, file names that are not UTF-8, and bad tool arguments.
Real files, real processes, a real swapper process; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from app.wiring.config import Settings
from app.tools import bash
from app.tools.base import ArgsTool, ToolContext
from app.tools.registry import ToolRegistry, ToolRun, default_registry
from tool_helpers import tool_context

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return tool_context(tmp_path, "call_rel")


_REGISTRIES: dict[int, ToolRegistry] = {}


async def call(ctx: ToolContext, name: str, max_output: int = 0, **args: object) -> ToolRun:
    """One call through the registry a session would hold: built once per output limit, as a
    session builds its one (the tools keep nothing between calls; the context holds a call's state).
    Building one per call cost a schema copy per tool, a sixth of the racing test's CPU."""
    if max_output not in _REGISTRIES:
        _REGISTRIES[max_output] = default_registry(max_output)
    return await _REGISTRIES[max_output].run(name, dict(args), ctx)


def bytes_read_by_this_process() -> int:
    """rchar: bytes this process asked read() for, whatever the page cache held."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def process_gone(pid: int, within_s: float = 10.0) -> bool:
    """True once ``pid`` has exited (a zombie counts as gone). The wait is a hang guard only."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def is_sleep_1003(pid: int) -> bool:
    try:
        return psutil.Process(pid).cmdline()[-1:] == ["1003"]
    except psutil.NoSuchProcess:
        return False


async def read_pid(pidfile: Path) -> int:
    """The pid a command wrote, once written (pytest's timeout guards the wait)."""
    while not (pidfile.exists() and pidfile.read_text().strip()):
        await asyncio.sleep(0.01)
    return int(pidfile.read_text())


# --- 1. the boundary under a racing swapper ---------------------------------------------

SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    # Swaps ws/d (a real directory) and ws/parked (a symlink to outside) atomically,
    # again and again, until the stop file appears or the count runs out.
    ws, stop = sys.argv[1], sys.argv[2]
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    a, b = os.path.join(ws, "d").encode(), os.path.join(ws, "parked").encode()
    swaps = 0
    while swaps < 5_000_000 and not (swaps % 64 == 0 and os.path.exists(stop)):
        if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            sys.exit(f"renameat2 failed: errno {ctypes.get_errno()}")
        swaps += 1
        # A breath between swaps: still many swaps per tool call, but the tools get
        # the directory lock and a CPU often enough on a loaded 2-core machine.
        time.sleep(0.0002)
    print(swaps)
    """
)


async def test_a_racing_swapper_never_gets_a_file_tool_outside_the_workspace(
    ctx: ToolContext, tmp_path: Path
) -> None:
    ws = ctx.workspace
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE\n")
    (outside / "e.txt").write_text("inside e\n")  # an edit that escaped would change it
    (outside / "only-outside.txt").write_text("x\n")
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    (ws / "d" / "e.txt").write_text("inside e\n")
    os.symlink(outside, ws / "parked")
    stop = tmp_path / "stop"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws), str(stop)], stdout=subprocess.PIPE, text=True
    )
    counts = {"inside": 0, "refused": 0, "other": 0, "escapes": 0}
    tries = 0
    try:
        for i in range(3_000):
            kind = i % 6
            if kind in (0, 1, 2):
                run = await call(ctx, "read_file", path="d/f.txt")
                escaped = "OUTSIDE" in run.content
                inside = "inside" in run.content
            elif kind == 3:
                run = await call(ctx, "write_file", path=f"d/w{i}.txt", content="written\n")
                escaped = (outside / f"w{i}.txt").exists()
                inside = not run.is_error
            elif kind == 4:
                run = await call(ctx, "list_files", path="d")
                escaped = "only-outside" in run.content
                inside = not run.is_error
            else:
                await call(ctx, "read_file", path="d/e.txt")
                run = await call(ctx, "edit_file", path="d/e.txt", old="inside e", new="inside e!")
                escaped = (outside / "e.txt").read_text() != "inside e\n"
                inside = not run.is_error
            tries += 1
            counts["escapes"] += escaped
            if escaped:
                continue
            if inside:
                counts["inside"] += 1
            elif "outside the workspace" in run.content:
                counts["refused"] += 1
            else:
                counts["other"] += 1  # not found mid-swap, and the like
    finally:
        stop.touch()
        out, _ = swapper.communicate(timeout=60)
    assert swapper.returncode == 0, out
    assert tries == 3_000
    assert counts["escapes"] == 0, counts
    # Both states were really seen: the swapper raced the tools, it did not just run beside them.
    assert counts["inside"] > 0 and counts["refused"] > 0, counts
    assert sorted(p.name for p in outside.iterdir()) == ["e.txt", "f.txt", "only-outside.txt"]


async def test_symlinks_inside_the_workspace_still_work_and_allow_outside_still_leaves(
    ctx: ToolContext, tmp_path: Path
) -> None:
    ws = ctx.workspace
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "m.py").write_text("x = 1\n")
    os.symlink("src/pkg", ws / "alias")  # relative, inside
    os.symlink(ws / "src", ws / "abs-alias")  # absolute, inside
    assert (await call(ctx, "read_file", path="alias/m.py")).content == "     1\tx = 1"
    assert (await call(ctx, "read_file", path="abs-alias/pkg/../pkg/m.py")).content == "     1\tx = 1"
    wrote = await call(ctx, "write_file", path="alias/new.py", content="y = 2\n")
    assert not wrote.is_error and (ws / "src" / "pkg" / "new.py").read_text() == "y = 2\n"
    (tmp_path / "notes.txt").write_text("hello\n")
    escape = await call(ctx, "read_file", path="alias/../../../notes.txt")
    assert escape.is_error and "outside the workspace" in escape.content
    ctx.allow_outside = True
    assert (await call(ctx, "read_file", path="alias/../../../notes.txt")).content == "     1\thello"


# --- 2. special files and huge files ------------------------------------------------------


def make_special_files(ws: Path) -> dict[str, str]:
    """name -> the kind the refusal must name."""
    os.mkfifo(ws / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(ws / "sock"))
    server.close()
    kinds = {"pipe": "named pipe", "sock": "socket"}
    try:
        os.mknod(ws / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        kinds["null"] = "character device"
    except PermissionError:
        pass  # not root: the FIFO and the socket still cover the check
    return kinds


async def test_fifos_sockets_and_devices_are_refused_at_once_with_a_way_forward(ctx: ToolContext) -> None:
    kinds = make_special_files(ctx.workspace)
    for name, kind in kinds.items():
        for tool, args in [
            ("read_file", {"path": name}),
            ("write_file", {"path": name, "content": "x"}),
            ("edit_file", {"path": name, "old": "a", "new": "b"}),
        ]:
            # A FIFO used to block here for ever; the pytest timeout is only a guard.
            run = await call(ctx, tool, **args)  # type: ignore[arg-type]
            assert run.is_error, (tool, name, run.content)
            if tool != "edit_file":  # edit_file may refuse earlier (not read in this session)
                assert kind in run.content and "not a regular file" in run.content, run.content
                assert "run_bash" in run.content
    listing = await call(ctx, "list_files")
    assert not listing.is_error and "pipe" in listing.content


async def test_a_device_outside_the_workspace_is_refused_even_with_allow_outside(ctx: ToolContext) -> None:
    ctx.allow_outside = True
    run = await call(ctx, "read_file", path="/dev/null")
    assert run.is_error and "character device" in run.content


async def test_a_64_gb_sparse_file_returns_promptly_with_a_bounded_read(ctx: ToolContext) -> None:
    huge = ctx.workspace / "huge.log"
    with open(huge, "wb") as f:
        f.write(b"start of a line that never ends " * 400)  # text first: not refused as binary
        f.truncate(64 * 1024**3)
    before = bytes_read_by_this_process()
    run = await call(ctx, "read_file", path="huge.log")
    consumed = bytes_read_by_this_process() - before
    assert not run.is_error, run.content[:300]
    assert run.content.startswith("     1\tstart of a line")
    assert "line cut at 2,000 of at least" in run.content
    assert f"{ctx.read_max_bytes:,}-byte limit" in run.content
    # Bounded by the setting, not the file: 64 GB used to be read to the end.
    assert consumed <= 4 * ctx.read_max_bytes


async def test_a_2_gb_file_of_lines_returns_promptly_with_a_bounded_read(ctx: ToolContext) -> None:
    big = ctx.workspace / "big.log"
    with open(big, "wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(1, 10_001)))
        f.truncate(2 * 1024**3)  # the rest: one 2 GB line of NULs after 8 KB of text
    before = bytes_read_by_this_process()
    run = await call(ctx, "read_file", path="big.log", offset=9_000)
    consumed = bytes_read_by_this_process() - before
    assert run.content.splitlines()[0] == "  9000\tline 9000"
    assert "more remain" in run.content
    assert consumed < 2 * 1024**3 // 8


async def test_a_read_is_bounded_by_bytes_as_well_as_lines(ctx: ToolContext) -> None:
    (ctx.workspace / "wide.txt").write_text("".join(f"{i:04} " + "w" * 95 + "\n" for i in range(1, 1_001)))
    ctx.read_max_bytes = 10_000  # 100 lines of 100 bytes
    first = await call(ctx, "read_file", path="wide.txt")
    numbers = [line.split("\t")[0].strip() for line in first.content.splitlines() if "\t" in line]
    assert numbers[0] == "1" and len(numbers) == 100
    assert "10,000-byte limit" in first.content and "offset=101" in first.content
    second = await call(ctx, "read_file", path="wide.txt", offset=101)
    assert second.content.splitlines()[0].startswith("   101\t0101 ")
    assert Settings(read_max_bytes=2048).read_max_bytes == 2048
    assert Settings().read_max_bytes == ToolContext(Path("."), Path(".")).read_max_bytes


# --- 3. every tool interruptible ----------------------------------------------------------


def io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]


async def test_cancelling_a_read_returns_at_once_and_stops_its_reading(ctx: ToolContext) -> None:
    huge = ctx.workspace / "huge.log"
    with open(huge, "wb") as f:
        f.write(b"x" * 10_000)
        f.truncate(64 * 1024**3)
    ctx.read_max_bytes = 64 * 1024**3  # the byte bound off: only the interrupt can stop it
    baseline = set(io_threads())
    start = bytes_read_by_this_process()
    task = asyncio.create_task(call(ctx, "read_file", path="huge.log"))
    while bytes_read_by_this_process() - start < 64 * 1024**2:  # it is deep in the file
        await asyncio.sleep(0.01)
    task.cancel()
    for _ in range(5):  # a few turns of the event loop, no clock: the task is over
        await asyncio.sleep(0)
    assert task.done() and task.cancelled()
    # And the reading itself stops: no thread is left behind reading the 64 GB.
    deadline = time.monotonic() + 20  # hang guard only
    while set(io_threads()) - baseline and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not set(io_threads()) - baseline
    settled = bytes_read_by_this_process()
    await asyncio.sleep(0.1)
    assert bytes_read_by_this_process() - settled < 1024**2


async def test_an_interrupt_ends_run_bash_well_before_the_kill_grace(ctx: ToolContext) -> None:
    # bash and its child ignore SIGTERM: only the SIGKILL ends them.
    task = asyncio.create_task(
        call(ctx, "run_bash", command="trap '' TERM; echo $$ > bash.pid; sleep 1000; true")
    )
    pid = await read_pid(ctx.workspace / "bash.pid")
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    elapsed = time.monotonic() - started
    assert process_gone(pid)
    assert elapsed < bash.KILL_GRACE_S / 2, elapsed  # i.e. within a second, not after the 2 s grace


# --- 4. whole process trees ---------------------------------------------------------------


async def test_setsid_children_die_at_the_timeout(ctx: ToolContext) -> None:
    run = await call(ctx, "run_bash", command="setsid sleep 1003 & echo $! > orphan.pid; sleep 100", timeout=1)
    pid = int((ctx.workspace / "orphan.pid").read_text())
    assert run.is_error and "timed out" in run.content
    assert process_gone(pid), psutil.Process(pid).cmdline()


async def test_setsid_children_die_at_an_interrupt(ctx: ToolContext) -> None:
    task = asyncio.create_task(call(ctx, "run_bash", command="setsid sleep 1003 & echo $! > orphan.pid; wait"))
    pid = await read_pid(ctx.workspace / "orphan.pid")
    while not is_sleep_1003(pid):  # setsid has exec'd sleep (pytest's timeout guards the wait)
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert process_gone(pid)


EXIT_SCRIPT = """
import asyncio, json, os, sys
from pathlib import Path
import psutil
from app.system import proctree
from app.tools.base import ToolContext
from app.tools.registry import default_registry

async def main() -> None:
    ws = Path(sys.argv[1])
    ctx = ToolContext(workspace=ws, tool_results_dir=ws / "tool-results", call_id="bg")
    command = "setsid sleep 1003 > /dev/null 2>&1 & echo $! > orphan.pid"
    run = await default_registry().run("run_bash", {"command": command}, ctx)
    pid = int((ws / "orphan.pid").read_text())
    # bash is gone; the detached sleep lives on (a background server would) and is ours now.
    parent = psutil.Process(pid).ppid()
    killed = proctree.kill_all_descendants() if sys.argv[2] == "explicit" else None
    print(json.dumps({"pid": pid, "parent": parent, "me": os.getpid(), "killed": killed,
                      "result": run.content}))

asyncio.run(main())
"""


@pytest.mark.parametrize("how", ["explicit", "atexit"])
def test_what_a_command_left_running_dies_when_tidegauge_exits(tmp_path: Path, how: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(ws), how],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "[exit code: 0]" in report["result"]
    assert report["parent"] == report["me"]  # the orphan came to tidegauge, not to init
    if how == "explicit":
        assert report["killed"] >= 1
    assert process_gone(report["pid"])


async def test_a_normal_run_leaves_its_background_process_alone(ctx: ToolContext) -> None:
    run = await call(ctx, "run_bash", command="nohup sleep 1003 > /dev/null 2>&1 & echo $! > bg.pid")
    pid = int((ctx.workspace / "bg.pid").read_text())
    try:
        assert "[exit code: 0]" in run.content
        # Still running: a server started on purpose must survive the call. Right after the fork
        # its command line may still be the shell's (nohup has not exec'd sleep yet): wait for the
        # exec, failing at once if the process is gone.
        for _ in range(1000):
            if is_sleep_1003(pid) or not psutil.pid_exists(pid):
                break
            await asyncio.sleep(0.01)  # polls the condition above
        assert is_sleep_1003(pid), f"pid {pid}: {'gone' if not psutil.pid_exists(pid) else 'not sleep 1003'}"
    finally:
        with_marker = bash.proctree.kill_all_descendants()  # type: ignore[attr-defined]
    assert with_marker >= 1 and process_gone(pid)


# --- 5. bounded spill -----------------------------------------------------------------------


async def test_the_saved_output_is_capped_keeps_its_tail_and_says_so(ctx: ToolContext) -> None:
    cap = 1_000_000
    ctx.max_saved_output = cap
    run = await call(ctx, "run_bash", max_output=40_000, command="yes | head -c 5000000; echo END-OF-OUTPUT")
    assert run.truncated and run.full_output_path
    saved = Path(run.full_output_path)
    size = saved.stat().st_size
    assert size < cap + 1_000  # the cap plus its one marker line
    data = saved.read_bytes()
    assert data.startswith(b"y\ny\n")
    assert data.rstrip().endswith(b"END-OF-OUTPUT\n[exit code: 0]")
    assert b"saved output capped at 1,000,000 bytes" in data
    assert "capped at 1,000,000 bytes" in run.content and "max_saved_output" in run.content
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert Settings().max_saved_output == 1024**3


async def test_every_saved_output_is_private(ctx: ToolContext) -> None:
    old = os.umask(0o022)
    try:
        (ctx.workspace / "big.txt").write_text("z" * 100 + "\n" * 5_000)
        read = await call(ctx, "read_file", max_output=1_000, path="big.txt")
        ran = await call(ctx, "run_bash", max_output=1_000, command="seq 1 200000")
    finally:
        os.umask(old)
    for run in (read, ran):
        assert run.truncated and run.full_output_path
        assert stat.S_IMODE(Path(run.full_output_path).stat().st_mode) == 0o600


async def test_a_capped_save_from_the_registry_keeps_the_tail_too(ctx: ToolContext) -> None:
    ctx.max_saved_output = 10_000
    (ctx.workspace / "log.txt").write_text("".join(f"entry {i}\n" for i in range(1, 2_001)))
    run = await call(ctx, "read_file", max_output=1_000, path="log.txt")
    data = Path(run.full_output_path or "").read_text()
    assert "entry 1\n" in data and data.rstrip().endswith("entry 2000")
    assert len(data) < 11_000 and "capped at 10,000 bytes" in run.content


# --- 6. names that are not UTF-8 ----------------------------------------------------------


async def test_names_that_are_not_utf8_are_shown_escaped_and_can_be_read_back(ctx: ToolContext) -> None:
    ws = os.fsencode(ctx.workspace)
    os.mkdir(ws + b"/d\xe9j\xe0")
    with open(ws + b"/caf\xe9.txt", "wb") as f:
        f.write(b"bonjour\n")
    with open(ws + b"/d\xe9j\xe0/inner.txt", "wb") as f:
        f.write(b"x\n")
    listing = await call(ctx, "list_files")
    assert "caf\\xe9.txt" in listing.content.splitlines()
    assert "d\\xe9j\\xe0/inner.txt" in listing.content.splitlines()
    json.loads(json.dumps(listing.content, ensure_ascii=False).encode("utf-8"))  # valid UTF-8 JSON
    shown = await call(ctx, "read_file", path="caf\\xe9.txt")  # the name as the listing showed it
    assert shown.content == "     1\tbonjour"
    surrogate = await call(ctx, "read_file", path="caf\udce9.txt")  # JSON "\\udce9" from a model
    assert surrogate.content == "     1\tbonjour"
    missing = await call(ctx, "read_file", path="caf\udce9-nope.txt")
    assert missing.is_error and "caf\\xe9-nope.txt" in missing.content
    for run in (listing, shown, surrogate, missing):
        run.content.encode("utf-8")  # no lone surrogate reaches the model or the transcript
    edited = await call(ctx, "edit_file", path="caf\\xe9.txt", old="bonjour", new="salut")
    assert not edited.is_error, edited.content
    assert Path(os.fsdecode(ws + b"/caf\xe9.txt")).read_bytes() == b"salut\n"


# --- 7. arguments declared once, as a pydantic model -------------------------------------


def test_every_built_in_schema_comes_from_its_argument_model() -> None:
    registry = default_registry()
    for spec in registry.specs():
        tool = registry.get(spec.name)
        assert isinstance(tool, ArgsTool), spec.name
        model_schema = tool.Args.model_json_schema()
        assert set(spec.input_schema["properties"]) == set(model_schema["properties"])
        assert spec.input_schema.get("required", []) == model_schema.get("required", [])
        for prop in spec.input_schema["properties"].values():
            assert prop["type"] in ("string", "integer", "boolean") and prop["description"]


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("read_file", {"path": 5, "offset": 0}, ["path must be a string, got int 5", "offset must be at least 1, got 0"]),
        ("read_file", {"path": "a.txt", "limit": True}, ["limit must be an integer, got True"]),
        ("read_file", {"path": "a.txt", "offset": "third"}, ["offset must be an integer, got str 'third'"]),
        ("run_bash", {"command": "true", "timeout": 2.5}, ["timeout must be an integer"]),
        ("edit_file", {"path": "a.txt", "old": None, "new": "x"}, ["old must be a string, got null"]),
        ("write_file", {"content": "x"}, ["path is required"]),
    ],
)
async def test_bad_arguments_get_one_line_naming_each_argument(
    ctx: ToolContext, tool: str, args: dict[str, object], expected: list[str]
) -> None:
    run = await call(ctx, tool, **args)  # type: ignore[arg-type]
    assert run.is_error
    assert "\n" not in run.content
    assert run.content.startswith(f"Bad arguments for {tool}: ")
    for piece in expected:
        assert piece in run.content, run.content
    assert run.content.endswith(f"Call {tool} again with them corrected.")


async def test_numbers_sent_as_strings_still_work(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("one\ntwo\nthree\n")
    run = await call(ctx, "read_file", path="a.txt", offset="2", limit=1.0)
    assert run.content.splitlines()[0] == "     2\ttwo"

"""read_file / list_files / write_file / edit_file limits and refusals, through the registry."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from app.tools.base import ToolContext, ToolInputError
from app.tools.registry import ToolRun, default_registry
from app.tools.workspace import resolve_path


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext(workspace=workspace, tool_results_dir=tmp_path / "tool-results", call_id="c1")


async def call(ctx: ToolContext, name: str, **args: object) -> ToolRun:
    # Truncation off: these tests look at what each tool itself returns.
    return await default_registry(0).run(name, dict(args), ctx)


def write_lines(path: Path, count: int, fmt: str = "line {i}") -> None:
    path.write_text("".join(fmt.format(i=i) + "\n" for i in range(1, count + 1)), encoding="utf-8")


# --- read_file ---------------------------------------------------------------------


async def test_read_file_numbers_lines_like_cat_n(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("import os\n\tindented\nlast", encoding="utf-8")
    run = await call(ctx, "read_file", path="a.py")
    assert run.content == "     1\timport os\n     2\t\tindented\n     3\tlast"


async def test_read_file_stops_at_2000_lines_and_says_how_to_continue(ctx: ToolContext) -> None:
    write_lines(ctx.workspace / "big.txt", 5_000)
    first = await call(ctx, "read_file", path="big.txt")
    lines = first.content.splitlines()
    assert lines[0] == "     1\tline 1"
    assert lines[1999] == "  2000\tline 2000"
    assert "offset=2001" in lines[-1] and "of 5,000" in lines[-1]
    assert len(lines) == 2001

    second = await call(ctx, "read_file", path="big.txt", offset=2001)
    assert second.content.splitlines()[0] == "  2001\tline 2001"
    assert "offset=4001" in second.content

    last = await call(ctx, "read_file", path="big.txt", offset=4001)
    assert last.content.splitlines()[-1] == "  5000\tline 5000"
    assert "offset=" not in last.content


async def test_read_file_limit_and_its_ceiling(ctx: ToolContext) -> None:
    write_lines(ctx.workspace / "big.txt", 5_000)
    run = await call(ctx, "read_file", path="big.txt", offset=10, limit=3)
    assert run.content.splitlines()[:3] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    assert "offset=13" in run.content
    huge = await call(ctx, "read_file", path="big.txt", limit=100_000)
    assert "offset=2001" in huge.content


async def test_read_file_cuts_long_lines_with_a_marker(ctx: ToolContext) -> None:
    (ctx.workspace / "min.js").write_text("a" * 10_000 + "\nshort\n", encoding="utf-8")
    run = await call(ctx, "read_file", path="min.js")
    first, second = run.content.splitlines()
    assert first.startswith("     1\t" + "a" * 2_000 + " … [line cut at 2,000 of 10,000 characters")
    assert "a" * 2_001 not in first
    assert second == "     2\tshort"


async def test_read_file_streams_a_15_mb_file(ctx: ToolContext) -> None:
    write_lines(ctx.workspace / "app.log", 300_000, "2026-10-18 12:00:00 INFO request handled id={i}")
    tracemalloc.start()
    try:
        run = await call(ctx, "read_file", path="app.log", offset=150_000, limit=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert run.content.splitlines()[0] == "150000\t2026-10-18 12:00:00 INFO request handled id=150000"
    assert "of 300,000" in run.content
    assert peak < 5 * 1024 * 1024  # the file is ~14 MB; reading it whole would show here


async def test_read_file_handles_crlf_and_invalid_utf8(ctx: ToolContext) -> None:
    (ctx.workspace / "w.txt").write_bytes(b"one\r\ntwo \xff\xfe\r\n")
    run = await call(ctx, "read_file", path="w.txt")
    assert run.content == "     1\tone\n     2\ttwo \ufffd\ufffd"


@pytest.mark.parametrize(
    ("setup", "path", "expected"),
    [
        (lambda ws: (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "img.png", "binary"),
        (lambda ws: None, "missing.txt", "File not found: missing.txt"),
        (lambda ws: (ws / "src").mkdir(), "src", "is a directory"),
        (lambda ws: (ws / "short.txt").write_text("x\n"), "short.txt", "past the end"),
    ],
)
async def test_read_file_errors_say_what_to_do(ctx: ToolContext, setup, path: str, expected: str) -> None:
    setup(ctx.workspace)
    offset = 50 if path == "short.txt" else 1
    run = await call(ctx, "read_file", path=path, offset=offset)
    assert run.is_error
    assert expected in run.content


async def test_read_file_rejects_a_bad_offset(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("x\n")
    run = await call(ctx, "read_file", path="a.txt", offset=0)
    assert run.is_error and "offset must be at least 1" in run.content


# --- list_files --------------------------------------------------------------------


async def test_list_files_caps_at_500_and_counts_the_rest(ctx: ToolContext) -> None:
    for i in range(700):
        (ctx.workspace / f"f{i:03}.txt").touch()
    run = await call(ctx, "list_files")
    entries = [line for line in run.content.splitlines()[1:] if not line.startswith("[")]
    assert len(entries) == 500
    assert "500 of 700 entries shown; 200 left out" in run.content


async def test_list_files_skips_junk_directories(ctx: ToolContext) -> None:
    ws = ctx.workspace
    for junk in [".git/objects", "node_modules/react", "__pycache__", ".mypy_cache", ".pytest_cache",
                 ".tox/py311", "build/lib", "dist", "pkg.egg-info", "myenv/lib"]:
        (ws / junk).mkdir(parents=True)
        (ws / junk / "inside.txt").touch()
    (ws / "myenv" / "pyvenv.cfg").touch()  # a virtualenv under any name
    (ws / "src" / "app").mkdir(parents=True)
    (ws / "src" / "app" / "main.py").touch()

    run = await call(ctx, "list_files")
    assert "src/app/main.py" in run.content
    assert "inside.txt" not in run.content
    assert "pyvenv.cfg" not in run.content
    assert "node_modules/  (skipped" in run.content and "myenv/  (skipped" in run.content


async def test_list_files_of_a_subdirectory_and_errors(ctx: ToolContext) -> None:
    (ctx.workspace / "src").mkdir()
    (ctx.workspace / "src" / "a.py").touch()
    run = await call(ctx, "list_files", path="src")
    assert run.content.splitlines()[1:] == ["a.py"]
    assert (await call(ctx, "list_files", path="nope")).is_error
    assert "read_file" in (await call(ctx, "list_files", path="src/a.py")).content


# --- write_file / edit_file --------------------------------------------------------


async def test_write_creates_parents_and_a_following_edit_works(ctx: ToolContext) -> None:
    run = await call(ctx, "write_file", path="pkg/mod/util.py", content="def f():\n    return 1\n")
    assert not run.is_error and "Created pkg/mod/util.py" in run.content
    edit = await call(ctx, "edit_file", path="pkg/mod/util.py", old="return 1", new="return 2")
    assert not edit.is_error, edit.content
    assert (ctx.workspace / "pkg/mod/util.py").read_text() == "def f():\n    return 2\n"
    again = await call(ctx, "edit_file", path="pkg/mod/util.py", old="return 2", new="return 3")
    assert not again.is_error  # the edit updated the read-state


async def test_edit_refuses_a_file_not_read_in_this_session(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x = 1\n")
    run = await call(ctx, "edit_file", path="a.py", old="x = 1", new="x = 2")
    assert run.is_error and "read it first with read_file" in run.content
    assert (ctx.workspace / "a.py").read_text() == "x = 1\n"


async def test_edit_refuses_a_file_changed_since_it_was_read(ctx: ToolContext) -> None:
    target = ctx.workspace / "a.py"
    target.write_text("x = 1\n")
    await call(ctx, "read_file", path="a.py")
    target.write_text("x = 1\ny = 2\n")  # someone else changed it
    run = await call(ctx, "edit_file", path="a.py", old="x = 1", new="x = 9")
    assert run.is_error and "changed on disk" in run.content and "read_file" in run.content
    assert target.read_text() == "x = 1\ny = 2\n"


async def test_edit_needs_old_to_occur_exactly_once(ctx: ToolContext) -> None:
    target = ctx.workspace / "a.py"
    target.write_text("x = 1\nx = 1\nx = 1\n")
    await call(ctx, "read_file", path="a.py")
    many = await call(ctx, "edit_file", path="a.py", old="x = 1", new="x = 2")
    assert many.is_error and "occurs 3 times" in many.content
    none = await call(ctx, "edit_file", path="a.py", old="y = 1", new="y = 2")
    assert none.is_error and "not found" in none.content
    assert target.read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_keeps_crlf_line_endings(ctx: ToolContext) -> None:
    target = ctx.workspace / "w.txt"
    target.write_bytes(b"a\r\nb\r\nc\r\n")
    await call(ctx, "read_file", path="w.txt")
    run = await call(ctx, "edit_file", path="w.txt", old="a\nb", new="a\nB")
    assert not run.is_error, run.content
    assert target.read_bytes() == b"a\r\nB\r\nc\r\n"


# --- the workspace boundary --------------------------------------------------------


async def test_paths_outside_the_workspace_are_refused(ctx: ToolContext, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret\n")
    for path in ["../secret.txt", str(secret)]:
        run = await call(ctx, "read_file", path=path)
        assert run.is_error and "outside the workspace" in run.content and "--allow-outside" in run.content
        assert "s3cret" not in run.content
    wrote = await call(ctx, "write_file", path="../evil.txt", content="x")
    assert wrote.is_error and not (tmp_path / "evil.txt").exists()


async def test_a_symlink_out_of_the_workspace_is_refused(ctx: ToolContext, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keys.txt").write_text("s3cret\n")
    os.symlink(tmp_path / "outside", ctx.workspace / "link")
    run = await call(ctx, "read_file", path="link/keys.txt")
    assert run.is_error and "outside the workspace" in run.content
    assert "s3cret" not in run.content


async def test_allow_outside_lets_file_tools_leave(ctx: ToolContext, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    ctx.allow_outside = True
    run = await call(ctx, "read_file", path="../notes.txt")
    assert run.content == "     1\thello"


def test_resolve_path_stays_inside(ctx: ToolContext) -> None:
    (ctx.workspace / "a").mkdir()
    assert resolve_path("a/../b.txt", ctx) == (ctx.workspace / "b.txt").resolve()
    assert resolve_path(".", ctx) == ctx.workspace.resolve()
    with pytest.raises(ToolInputError):
        resolve_path("a/../../b.txt", ctx)
    with pytest.raises(ToolInputError):
        resolve_path("", ctx)

"""File-read cache: stubs only while the earlier result is in context, diffs on change, LRU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.context.file_cache import FileReadCache
from app.tools.base import ToolContext
from app.tools.registry import ToolRun, default_registry


def read(cache: FileReadCache, in_context: set[str] | None = None, **overrides: Any) -> str:
    args: dict[str, Any] = dict(
        path="/ws/a.py", offset=1, limit=2000, mtime_ns=1, size=20, sha256="h1",
        content="     1\tx = 1\n     2\ty = 2", first_line=1, last_line=2, call_id="c1",
    )
    args.update(overrides)
    known = in_context if in_context is not None else {"c1"}
    return cache.record_read(result_in_context=lambda call_id: call_id in known, **args)


# --- the cache on its own ----------------------------------------------------------


def test_an_unchanged_range_still_in_context_becomes_a_stub() -> None:
    cache = FileReadCache()
    assert read(cache) == "     1\tx = 1\n     2\ty = 2"
    stub = read(cache, call_id="c2")
    assert stub.startswith("File unchanged since read_file call c1 above (lines 1-2)")
    assert "x = 1" not in stub


def test_once_the_earlier_result_left_the_context_the_content_comes_back() -> None:
    cache = FileReadCache()
    read(cache)
    again = read(cache, in_context=set(), call_id="c2")  # c1 was compacted away
    assert again == "     1\tx = 1\n     2\ty = 2"
    # Now c2 holds the content: a further re-read points there.
    assert "read_file call c2" in read(cache, in_context={"c2"}, call_id="c3")


def test_another_range_of_the_same_file_is_not_a_stub() -> None:
    cache = FileReadCache()
    read(cache)
    other = read(cache, offset=2, content="     2\ty = 2", first_line=2, call_id="c2")
    assert other == "     2\ty = 2"


def test_a_changed_file_comes_back_fresh_with_a_diff() -> None:
    cache = FileReadCache()
    read(cache)
    fresh = read(
        cache, mtime_ns=2, size=21, sha256="h2", call_id="c2",
        content="     1\tx = 1\n     2\ty = 3",
    )
    first_line = fresh.splitlines()[0]
    assert "/ws/a.py changed on disk since read_file call c1" in first_line
    assert "\n-y = 2\n+y = 3\n" in fresh  # line numbers stripped: insertions diff cleanly
    assert fresh.endswith("     1\tx = 1\n     2\ty = 3")


def test_a_big_change_is_noted_without_a_diff() -> None:
    cache = FileReadCache()
    old = "\n".join(f"{i:>6}\told line {i}" for i in range(1, 2001))
    new = "\n".join(f"{i:>6}\tnew line {i}" for i in range(1, 2001))
    read(cache, content=old)
    fresh = read(cache, content=new, mtime_ns=2, sha256="h2", call_id="c2")
    assert "diff is too large to show" in fresh.splitlines()[0]
    assert "-old line 1\n" not in fresh
    assert fresh.endswith(new)


def test_a_touched_file_with_the_same_lines_says_so() -> None:
    cache = FileReadCache()
    read(cache)
    fresh = read(cache, mtime_ns=5, size=30, call_id="c2")  # appended to, same range bytes
    assert "lines 1-2 are the same" in fresh.splitlines()[0]


def test_lru_eviction_by_count() -> None:
    cache = FileReadCache(max_entries=3)
    for name in "abc":
        read(cache, path=f"/ws/{name}")
    assert cache.get("/ws/a", 1, 2000) is not None  # touched: now the newest
    read(cache, path="/ws/d")
    assert len(cache) == 3
    assert cache.get("/ws/b", 1, 2000) is None
    assert cache.get("/ws/a", 1, 2000) is not None


def test_lru_eviction_by_bytes() -> None:
    cache = FileReadCache(max_bytes=10_000)
    for name in "abcd":
        read(cache, path=f"/ws/{name}", content="x" * 3_000)
    assert cache.total_bytes <= 10_000
    assert cache.get("/ws/a", 1, 2000) is None
    assert cache.get("/ws/d", 1, 2000) is not None
    read(cache, path="/ws/huge", content="x" * 20_000)  # bigger than the whole budget
    assert cache.get("/ws/huge", 1, 2000) is None
    assert cache.get("/ws/d", 1, 2000) is not None


def test_edit_read_state(tmp_path: Path) -> None:
    cache = FileReadCache()
    target = tmp_path / "a.py"
    target.write_text("x = 1\n")
    assert "read it first with read_file" in (cache.check_editable(target) or "")
    st = target.stat()
    cache.mark_read(target, st.st_mtime_ns, st.st_size)
    assert cache.check_editable(target) is None
    assert "changed on disk" in (cache.check_editable(target, st.st_mtime_ns + 1, st.st_size) or "")
    target.write_text("x = 1\ny = 2\n")
    assert "changed on disk" in (cache.check_editable(target) or "")
    target.unlink()
    assert "no longer exists" in (cache.check_editable(target) or "")


# --- through read_file ---------------------------------------------------------------


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext(workspace=workspace, tool_results_dir=tmp_path / "tool-results", file_cache=FileReadCache())


async def read_file(ctx: ToolContext, call_id: str, **args: Any) -> ToolRun:
    ctx.call_id = call_id
    return await default_registry(40_000).run("read_file", {"path": "m.py", **args}, ctx)


async def test_read_file_returns_a_stub_only_while_the_first_read_is_in_context(ctx: ToolContext) -> None:
    (ctx.workspace / "m.py").write_text("def main():\n    return 0\n")
    in_context = {"r1"}
    ctx.result_in_context = lambda call_id: call_id in in_context

    first = await read_file(ctx, "r1")
    assert "return 0" in first.content
    second = await read_file(ctx, "r2")
    assert second.content.startswith("File unchanged since read_file call r1 above (lines 1-2)")

    in_context.clear()  # compaction replaced r1
    third = await read_file(ctx, "r3")
    assert "return 0" in third.content


async def test_read_file_shows_what_changed_on_disk(ctx: ToolContext) -> None:
    target = ctx.workspace / "m.py"
    target.write_text("def main():\n    return 0\n")
    ctx.result_in_context = lambda call_id: True
    await read_file(ctx, "r1")
    target.write_text("def main():\n    return 1\n")
    os.utime(target, ns=(1, 1))  # a changed mtime even on coarse clocks

    fresh = await read_file(ctx, "r2")
    assert "m.py changed on disk since read_file call r1" in fresh.content.splitlines()[0]
    assert "-    return 0\n+    return 1" in fresh.content
    assert fresh.content.endswith("     2\t    return 1")


async def test_a_read_makes_the_file_editable(ctx: ToolContext) -> None:
    (ctx.workspace / "m.py").write_text("a = 1\n")
    ctx.call_id = "e0"
    registry = default_registry(40_000)
    refused = await registry.run("edit_file", {"path": "m.py", "old": "a = 1", "new": "a = 2"}, ctx)
    assert refused.is_error
    await read_file(ctx, "r1", offset=1, limit=1)  # reading any part counts
    edited = await registry.run("edit_file", {"path": "m.py", "old": "a = 1", "new": "a = 2"}, ctx)
    assert not edited.is_error, edited.content


def test_the_diff_of_a_range_names_file_line_numbers() -> None:
    cache = FileReadCache()
    base: dict[str, Any] = dict(offset=500, limit=3, first_line=500, last_line=502)
    read(cache, content="   500\tx = 1\n   501\ty = 2\n   502\tz", **base)
    fresh = read(cache, content="   500\tx = 1\n   501\ty = 3\n   502\tz", sha256="h2", mtime_ns=2, call_id="c2", **base)
    assert "@@ -500,3 +500,3 @@" in fresh

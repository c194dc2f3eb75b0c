"""Before-images of the files write_file and edit_file change, and a rewind putting them back:
per turn, bounded, never clobbering what someone else changed since, never writing outside the
workspace whatever the session folder's index says."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from app.tools import file_history
from app.tools.base import ToolContext
from app.tools.file_history import FileHistory
from app.tools.registry import ToolRun, default_registry


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = tmp_path / "session"
    return ToolContext(workspace=workspace, tool_results_dir=session / "tool-results", call_id="c1",
                       file_history=FileHistory(session, workspace))


async def call(ctx: ToolContext, name: str, **args: object) -> ToolRun:
    return await default_registry(0).run(name, dict(args), ctx)


def history(ctx: ToolContext) -> FileHistory:
    kept: FileHistory = ctx.file_history
    return kept


async def test_files_go_back_to_before_the_first_change_of_the_turn_rewound_to(ctx: ToolContext) -> None:
    ws = ctx.workspace
    (ws / "a.txt").write_text("original\n")
    history(ctx).turn = "u-1"
    await call(ctx, "write_file", path="a.txt", content="turn one\n")
    history(ctx).turn = "u-2"
    await call(ctx, "read_file", path="a.txt")
    await call(ctx, "edit_file", path="a.txt", old="turn one", new="turn two")
    await call(ctx, "write_file", path="new/b.txt", content="made in turn two\n")
    assert history(ctx).plan(["u-2"]).files == ["a.txt", "new/b.txt"]
    done = history(ctx).restore(["u-2"])
    assert sorted(done.restored) == ["a.txt", "new/b.txt"] and not done.skipped
    assert (ws / "a.txt").read_text() == "turn one\n"  # as it was before turn two's first change
    assert not (ws / "new" / "b.txt").exists()  # it did not exist: removed
    done = history(ctx).restore(["u-1", "u-2"])
    assert (ws / "a.txt").read_text() == "original\n"
    # the session folder holds the copies, 0600
    kept = [p for p in (ctx.tool_results_dir.parent / "file-history").iterdir()]
    assert kept and all(os.stat(p).st_mode & 0o077 == 0 for p in kept)


async def test_a_file_changed_since_by_someone_else_is_named_and_left_alone(ctx: ToolContext) -> None:
    ws = ctx.workspace
    (ws / "a.txt").write_text("original\n")
    history(ctx).turn = "u-1"
    await call(ctx, "write_file", path="a.txt", content="tidegauge wrote this\n")
    (ws / "a.txt").write_text("the user's own edit\n")  # e.g. in their editor, or run_bash
    plan = history(ctx).plan(["u-1"])
    assert plan.changed_since == ["a.txt"]
    done = history(ctx).restore(["u-1"])
    assert done.skipped == ["a.txt"] and not done.restored
    assert (ws / "a.txt").read_text() == "the user's own edit\n"
    done = history(ctx).restore(["u-1"], overwrite_changed=True)  # asked for: overwritten
    assert done.restored == ["a.txt"] and (ws / "a.txt").read_text() == "original\n"


async def test_a_file_over_the_bound_is_named_as_not_restorable(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_history, "MAX_BEFORE_IMAGE", 16)
    (ctx.workspace / "big.txt").write_text("x" * 17)
    history(ctx).turn = "u-1"
    await call(ctx, "write_file", path="big.txt", content="small")
    plan = history(ctx).plan(["u-1"])
    assert plan.not_restorable == ["big.txt"] and plan.files == []
    assert history(ctx).restore(["u-1"]).not_restorable == ["big.txt"]
    assert (ctx.workspace / "big.txt").read_text() == "small"


async def test_a_planted_index_never_makes_a_restore_write_outside_the_workspace(ctx: ToolContext, tmp_path: Path) -> None:
    """The attacker writes index lines (or plants a symlink in the workspace) naming a file outside
    it: ``..``, an absolute path, a link to a folder outside, a blob name that is a path."""
    ws = ctx.workspace
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me\n")
    (ws / "link").symlink_to(outside, target_is_directory=True)
    history(ctx).turn = "u-1"
    await call(ctx, "write_file", path="a.txt", content="x")  # a real entry: the folder exists
    folder = ctx.tool_results_dir.parent / "file-history"
    blob = hashlib.sha256(b"planted\n").hexdigest()  # a valid copy: only the paths are hostile
    (folder / blob).write_bytes(b"planted\n")
    os.chmod(folder / blob, 0o600)
    planted = [
        {"kind": "before", "turn": "u-1", "path": "../outside/victim.txt", "existed": True, "blob": blob},
        {"kind": "before", "turn": "u-1", "path": str(outside / "victim.txt"), "existed": True, "blob": blob},
        {"kind": "before", "turn": "u-1", "path": "link/victim.txt", "existed": True, "blob": blob},
        {"kind": "before", "turn": "u-1", "path": "link/gone.txt", "existed": False},
        {"kind": "before", "turn": "u-1", "path": "b.txt", "existed": True, "blob": "../../outside/victim.txt"},
        {"kind": "before", "turn": "u-1", "path": "c.txt", "existed": True, "blob": blob},
    ]
    with open(folder / "index.jsonl", "a") as f:
        f.writelines(json.dumps(line) + "\n" for line in planted)
    done = history(ctx).restore(["u-1"], overwrite_changed=True)
    assert (outside / "victim.txt").read_text() == "keep me\n"
    assert sorted(os.listdir(outside)) == ["victim.txt"]
    assert "link/victim.txt" not in done.restored and "link/gone.txt" not in done.restored
    assert any(p.startswith("link/victim.txt") for p in done.problems)  # refused, and said
    assert "b.txt" in done.not_restorable  # a blob name that is a path is no copy
    assert (ws / "c.txt").read_bytes() == b"planted\n"  # the same copy, inside: restored (the check is real)


async def test_a_file_written_outside_the_workspace_is_not_recorded(ctx: ToolContext, tmp_path: Path) -> None:
    ctx.allow_outside = True
    history(ctx).turn = "u-1"
    await call(ctx, "write_file", path=str(tmp_path / "elsewhere.txt"), content="x")
    assert history(ctx).plan(["u-1"]).files == []


async def test_a_write_that_fails_records_nothing(ctx: ToolContext) -> None:
    (ctx.workspace / "folder").mkdir()
    history(ctx).turn = "u-1"
    run = await call(ctx, "write_file", path="folder", content="x")  # a directory: refused
    assert run.is_error
    assert history(ctx).plan(["u-1"]) == file_history.RestorePlan()


async def test_a_file_swapped_for_a_link_to_outside_is_never_written_through(ctx: ToolContext, tmp_path: Path) -> None:
    """A hostile repository (a build step, a git hook) replaces a file tidegauge changed with a
    symlink to a file outside the workspace; a rewind that puts files back, overwriting changed
    ones, must not write the before-image through it."""
    ws = ctx.workspace
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    (ws / "a.txt").write_text("original\n")
    history(ctx).turn = "u-1"
    await call(ctx, "write_file", path="a.txt", content="changed\n")
    (ws / "a.txt").unlink()
    (ws / "a.txt").symlink_to(outside)
    done = history(ctx).restore(["u-1"], overwrite_changed=True)
    assert outside.read_text() == "keep me\n"
    assert "a.txt" not in done.restored

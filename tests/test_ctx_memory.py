"""Memory files: order, imports, cycles, caps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.context.memory import MAX_IMPORT_DEPTH, find_repo_root, load_memory
from app.context.tokens import count_tokens


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "services" / "api").mkdir(parents=True)
    return root


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_user_dir_first_then_root_down_to_cwd(repo: Path, tmp_path: Path) -> None:
    config = tmp_path / "config"
    write(config / "AGENTS.md", "user rule")
    write(repo / "CLAUDE.md", "root claude rule")
    write(repo / "AGENTS.md", "root agents rule")
    write(repo / "services" / "AGENTS.md", "services rule")
    write(repo / "services" / "api" / "CLAUDE.md", "api rule")
    write(tmp_path / "AGENTS.md", "outside the repo: never loaded")
    bundle = load_memory(repo / "services" / "api", config)
    assert [f.text for f in bundle.files] == [
        "user rule", "root agents rule", "root claude rule", "services rule", "api rule"]
    text = bundle.text
    assert text.index("user rule") < text.index("root agents") < text.index("api rule")
    assert f"{repo / 'services' / 'api' / 'CLAUDE.md'}" in text  # header names the path
    assert "outside the repo" not in text
    assert bundle.tokens == count_tokens(text)
    assert all(f.tokens == count_tokens(f.text) for f in bundle.files)


def test_without_a_repo_only_cwd(tmp_path: Path) -> None:
    cwd = tmp_path / "a" / "b"
    write(tmp_path / "a" / "AGENTS.md", "parent")
    write(cwd / "AGENTS.md", "here")
    assert find_repo_root(cwd) is None
    assert [f.text for f in load_memory(cwd, None).files] == ["here"]


def test_nothing_to_load(tmp_path: Path) -> None:
    bundle = load_memory(tmp_path, tmp_path / "no-config")
    assert bundle.files == [] and bundle.text == "" and bundle.tokens == 0


def test_same_file_twice_is_loaded_once(repo: Path) -> None:
    write(repo / "AGENTS.md", "shared rules")
    os.symlink(repo / "AGENTS.md", repo / "CLAUDE.md")
    bundle = load_memory(repo, repo)  # config dir == repo too
    assert [f.text for f in bundle.files] == ["shared rules"]


def test_imports_are_inlined_where_they_appear(repo: Path) -> None:
    write(repo / "docs" / "style.md", "Use black. See @../more/tests.md")
    write(repo / "more" / "tests.md", "Run pytest -q.")
    write(repo / "AGENTS.md", "Intro line\nStyle: @docs/style.md\nLast line")
    text = load_memory(repo, None).files[0].text
    lines = text.splitlines()
    assert lines[0] == "Intro line"
    assert lines[1] == "Style: @docs/style.md"
    assert text.index("Use black.") < text.index("Run pytest -q.") < text.index("Last line")


def test_not_imports(repo: Path) -> None:
    write(repo / "x.md", "SECRET CONTENT")
    write(repo / "AGENTS.md", "\n".join([
        "mail me at someone@x.md",  # not at the start of a token
        "decorators like @property are fine",  # no such file
        "inline `@x.md` is code",
        "```", "@x.md", "```",
    ]))
    text = load_memory(repo, None).text
    assert "SECRET CONTENT" not in text
    assert "@property" in text


def test_trailing_punctuation_is_tolerated(repo: Path) -> None:
    write(repo / "x.md", "IMPORTED")
    write(repo / "AGENTS.md", "Read @x.md.")
    assert "IMPORTED" in load_memory(repo, None).text


def test_import_cycles_are_safe(repo: Path) -> None:
    write(repo / "a.md", "A text @b.md")
    write(repo / "b.md", "B text @a.md")
    write(repo / "AGENTS.md", "root @a.md")
    text = load_memory(repo, None).text
    assert text.count("A text") == 1 and text.count("B text") == 1
    assert "skipped" in text


def test_self_import(repo: Path) -> None:
    write(repo / "AGENTS.md", "me @AGENTS.md")
    text = load_memory(repo, None).text
    assert text.count("me @AGENTS.md") == 1 and "cycle" in text


def test_depth_is_capped(repo: Path) -> None:
    for i in range(1, 9):
        write(repo / f"d{i}.md", f"level {i} @d{i + 1}.md")
    write(repo / "AGENTS.md", "level 0 @d1.md")
    text = load_memory(repo, None).text
    assert f"level {MAX_IMPORT_DEPTH}" in text
    assert f"level {MAX_IMPORT_DEPTH + 1}" not in text
    assert "deeper than 5" in text


def test_file_imported_and_also_a_memory_file_loads_once(repo: Path) -> None:
    write(repo / "CLAUDE.md", "CLAUDE RULES")
    write(repo / "AGENTS.md", "see @CLAUDE.md")
    bundle = load_memory(repo, None)
    assert bundle.text.count("CLAUDE RULES") == 1
    assert len(bundle.files) == 1


def test_size_caps(repo: Path) -> None:
    write(repo / "AGENTS.md", "Z" * 50_000)
    write(repo / "CLAUDE.md", "b" * 10_000)
    bundle = load_memory(repo, None, max_file_chars=40_000, max_total_chars=45_000)
    first, second = bundle.files
    assert first.text.count("Z") == 40_000 and "capped" in first.text
    assert second.text.startswith("b" * 100) and "memory files total capped" in second.text
    assert len(bundle.text) < 46_000
    big = load_memory(repo, None)
    assert "b" * 10_000 in big.text and "memory files total capped" not in big.text


def test_many_imports_stop_at_the_total_cap(repo: Path) -> None:
    for i in range(20):
        write(repo / f"f{i}.md", str(i) * 10_000)
    write(repo / "AGENTS.md", " ".join(f"@f{i}.md" for i in range(20)))
    text = load_memory(repo, None).text
    assert len(text) < 110_000
    assert "memory size cap reached" in text or "capped" in text

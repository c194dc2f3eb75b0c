"""Path-scoped rules: front matter, globs, discovery and de-duplication; memory
files de-duplicated by content; where a memory compaction may cut; forecasts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.context.forecast import forecast, request_cost
from app.context.memory import load_memory
from app.context.prices import Price
from app.context.rules import RuleParseError, glob_matches, load_rules, parse_front_matter
from app.context.session_memory import SessionMemory, safe_cut
from app.kernel.messages import Message, ToolResultBlock, ToolUseBlock


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---- front matter ----

@pytest.mark.parametrize("header, globs", [
    ("paths:\n  - \"src/**/*.py\"\n  - tests/*.py", ["src/**/*.py", "tests/*.py"]),
    ("paths: [\"src/**/*.ts\", 'lib/*.js']", ["src/**/*.ts", "lib/*.js"]),
    ("paths: src/**/*.{ts,tsx}, docs/*.md", ["src/**/*.{ts,tsx}", "docs/*.md"]),
    ("paths: \"*.sql\"  # comment\ndescription: db rules", ["*.sql"]),
])
def test_front_matter_paths_in_each_form(header, globs):
    fields, body = parse_front_matter(f"---\n{header}\n---\nThe rule.\n")
    assert fields["paths"] == globs and body.strip() == "The rule."


def test_no_front_matter_is_all_body():
    assert parse_front_matter("# Title\ntext") == ({}, "# Title\ntext")


@pytest.mark.parametrize("text, problem", [
    ("---\npaths: a\nno end", "never closed"),
    ("---\n- a\n---\n", "list item outside a list"),
    ("---\njust words\n---\n", "expected 'key: value'"),
])
def test_bad_front_matter_names_the_file_and_line(text, problem):
    with pytest.raises(RuleParseError, match=problem) as err:
        parse_front_matter(text, "rule file x.md")
    assert "rule file x.md" in str(err.value)


@pytest.mark.parametrize("glob, path, expected", [
    ("src/**/*.py", "src/a.py", True),
    ("src/**/*.py", "src/pkg/deep/a.py", True),
    ("src/**/*.py", "lib/a.py", False),
    ("src/*.py", "src/pkg/a.py", False),
    ("*.md", "docs/guide/x.md", True),  # no slash: any depth
    ("src/**/*.{ts,tsx}", "src/ui/App.tsx", True),
    ("src/**/*.{ts,tsx}", "src/ui/App.js", False),
    ("test_?.py", "test_a.py", True),
    ("[ab].txt", "c.txt", False),
    ("./src/**", "src/x/y", True),
])
def test_globs(glob, path, expected):
    assert glob_matches(glob, path) is expected


# ---- discovery ----

RULE = "---\npaths:\n  - \"src/**/*.py\"\n---\nUse type hints.\n"


def test_rules_from_both_trees_and_the_config_dir(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / ".agents" / "rules" / "py.md", RULE)
    write(repo / ".claude" / "rules" / "sub" / "sql.md", "---\npaths: \"*.sql\"\n---\nUppercase keywords.\n")
    write(repo / ".claude" / "rules" / "always.md", "Be brief.\n")
    write(tmp_path / "config" / ".claude" / "rules" / "mine.md", "---\npaths: [\"**/*.md\"]\n---\nWrap at 100.\n")
    rules = load_rules(repo, tmp_path / "config")
    assert sorted(r.path.name for r in rules.rules) == ["mine.md", "py.md", "sql.md"]
    assert [r.path.name for r in rules.unconditional] == ["always.md"]
    assert [r.path.name for r in rules.matching(repo / "src" / "a" / "b.py")] == ["py.md"]
    assert [r.path.name for r in rules.matching(repo / "db" / "q.sql")] == ["sql.md"]
    assert rules.matching(repo / "README.txt") == []
    assert rules.matching(tmp_path / "elsewhere" / "src" / "a.py") == []  # outside its base dir


def test_a_rule_reached_twice_is_loaded_once(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / ".agents" / "rules" / "py.md", RULE)
    (repo / ".claude").mkdir()
    os.symlink(repo / ".agents" / "rules", repo / ".claude" / "rules")  # the same directory twice
    write(repo / "services" / ".claude" / "rules" / "copy.md", RULE)  # same text, another directory
    rules = load_rules(repo / "services", None)
    assert len(rules.rules) == 1


def test_a_broken_rule_is_reported_and_the_others_load(tmp_path: Path):
    write(tmp_path / ".claude" / "rules" / "bad.md", "---\npaths: x\n")
    write(tmp_path / ".claude" / "rules" / "good.md", RULE)
    rules = load_rules(tmp_path, None)
    assert [r.path.name for r in rules.rules] == ["good.md"]
    assert len(rules.problems) == 1 and "bad.md" in rules.problems[0] and "never closed" in rules.problems[0]


# ---- memory files and unconditional rules: each text once ----

def test_the_same_memory_text_under_two_names_loads_once(tmp_path: Path):
    write(tmp_path / "AGENTS.md", "shared rules")
    write(tmp_path / "CLAUDE.md", "shared rules")  # a copy, not a link
    assert [f.text for f in load_memory(tmp_path, None).files] == ["shared rules"]


def test_unconditional_rules_join_the_memory_once(tmp_path: Path):
    write(tmp_path / "AGENTS.md", "Main rules. See @.claude/rules/always.md")
    write(tmp_path / ".claude" / "rules" / "always.md", "Be brief.")
    write(tmp_path / ".agents" / "rules" / "style.md", "Use black.")
    write(tmp_path / ".claude" / "rules" / "py.md", RULE)  # path-scoped: not in the memory
    bundle = load_memory(tmp_path, None)
    assert bundle.text.count("Be brief.") == 1  # imported once, not loaded again as a rule
    assert "Use black." in bundle.text and "Use type hints." not in bundle.text
    assert (tmp_path / ".claude" / "rules" / "always.md").resolve() in bundle.sources


# ---- where a memory compaction cuts ----

def _round(i: int, size: int) -> list[Message]:
    return [Message(role="assistant", content=[ToolUseBlock(id=f"c{i}", name="read_file", input={"path": "x"})]),
            Message(role="user", content=[ToolResultBlock(tool_use_id=f"c{i}", content="word " * size)])]


def test_the_cut_never_separates_a_call_from_its_result():
    history = [Message.user("task")]
    for i in range(6):
        history += _round(i, 200)
    for covered in range(1, len(history) + 1):
        for keep in (0, 50, 300, 900):
            cut = safe_cut(history, covered, keep)
            if cut is None:
                continue
            assert history[cut].role == "assistant"  # the kept part starts with a call
            assert cut <= covered  # nothing the memory does not cover is replaced


def test_the_cut_keeps_at_least_the_asked_tokens():
    from app.context.tokens import estimate_messages

    history = [Message.user("task")]
    for i in range(6):
        history += _round(i, 200)
    cut = safe_cut(history, len(history), 450)
    assert cut is not None and estimate_messages(history[cut:]) >= 450
    assert safe_cut(history, 0, 0) is None  # a memory that covers nothing cannot compact


def test_memory_file_round_trip(tmp_path: Path):
    path = tmp_path / "session-memory.md"
    memory = SessionMemory(path=path)
    first = Message.user("x")
    memory.save("## Task\nread files", first)
    assert path.read_text().strip() == "## Task\nread files"
    assert memory.covered_index([Message.user("y"), first]) == 2
    loaded = SessionMemory.load(path)
    assert loaded.text == "## Task\nread files" and loaded.covered is None  # coverage is not resumed


# ---- forecasts ----

PRICE = Price(input_per_mtok=3.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75, output_per_mtok=15.0)


def test_cached_tokens_cost_the_cached_price():
    assert request_cost(1_000, 0, PRICE) / request_cost(1_000, 1_000, PRICE) == pytest.approx(10)
    assert request_cost(1_000, 5_000, PRICE) == request_cost(1_000, 1_000, PRICE)  # never more than the request
    assert request_cost(1_000, 0, None) is None


def test_compaction_forecast_figures():
    f = forecast("compact", tokens_before=100_000, tokens_after=5_000, cached_prefix=90_000, stable_prefix=3_000,
                 price=PRICE, summary_tokens=1_500)
    assert f.tokens_freed == 95_000
    assert f.cache_tokens_invalidated == 87_000  # only the system prompt and tools stay cached
    assert f.next_request_cost_after_usd < f.next_request_cost_before_usd
    assert f.operation_cost_usd == pytest.approx(request_cost(100_000, 90_000, PRICE) + 1_500 * 15.0 / 1e6)
    assert f.model_call


def test_compacting_a_small_cached_context_can_make_the_next_request_dearer():
    f = forecast("compact", tokens_before=6_000, tokens_after=4_500, cached_prefix=5_800, stable_prefix=2_000,
                 price=PRICE, summary_tokens=1_500)
    assert f.next_request_cost_after_usd > f.next_request_cost_before_usd
    assert "→" in f.describe()


def test_reset_and_memory_forecasts_make_no_call():
    for action in ("reset", "memory_compact"):
        f = forecast(action, tokens_before=50_000, tokens_after=3_000, cached_prefix=0, stable_prefix=3_000,
                     price=None)
        assert not f.model_call and f.operation_cost_usd == 0
        assert f.next_request_cost_before_usd is None and "no model call" in f.describe()

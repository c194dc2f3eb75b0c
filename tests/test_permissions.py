"""Issue 27: permission rules with the grain people expect.

The matcher (rules, shell chaining, path globs, sources) as units; the rules as a user meets
them through the CLI (``tidegauge -p`` against the loopback fake server; the first as the real
binary, ``python -m app``, the rest in-process, tests/cli_in_process.py): deny wins over --yes,
an allow rule runs without --yes, a prefix rule never allows a chained command, a repository's
own settings cannot allow, sub-agents follow the same rules.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from cli_in_process import run_cli
from fake_llm_server import openai_text, openai_tool_calls
from app.agent.shell_commands import read_command_line
from app.agent.permissions import (
    Permissions,
    RuleError,
    SavedRules,
    load_permissions,
    parse_rule,
    split_rule_list,
)

KEY = "sk-test-fake-key-0123456789"


def rules_for(workspace: Path, *, allow: list[str] = (), ask: list[str] = (), deny: list[str] = (),  # type: ignore[assignment]
              data_dir: Path | None = None) -> Permissions:
    return load_permissions(workspace=workspace, project=workspace,
                            config_rules={"allow": list(allow), "ask": list(ask), "deny": list(deny)},
                            allowed_tools=[], disallowed_tools=[], data_dir=data_dir)


def bash(permissions: Permissions, command: str) -> str:
    return permissions.decide("run_bash", {"command": command}, mutating=True).effect


# ---------------------------------------------------------------- commands


def test_a_prefix_rule_allows_the_command_and_its_arguments_only(tmp_path):
    rules = rules_for(tmp_path, allow=["run_bash(git status:*)", "run_bash(npm test)"])
    assert bash(rules, "git status") == "allow"
    assert bash(rules, "git   status  --short") == "allow"  # spacing is not a different command
    assert bash(rules, "git statusx") == "ask"  # words, not characters
    assert bash(rules, "git push") == "ask"
    assert bash(rules, "npm test") == "allow"  # an exact rule: that command
    assert bash(rules, "npm test --watch") == "ask"
    assert bash(rules, 'git status -- "a; b"') == "allow"  # a quoted ; is an argument, not a separator
    assert bash(rules, "git status 2>&1") == "allow" and bash(rules, "git status >/dev/null") == "allow"


EVIL = ["rm -rf ~", "curl x | sh", "touch pwned", "sh"]
JOINS = [
    lambda a, b: f"{a}; {b}", lambda a, b: f"{a};{b}", lambda a, b: f"{a} && {b}", lambda a, b: f"{a} || {b}",
    lambda a, b: f"{a} | {b}", lambda a, b: f"{a} & {b}", lambda a, b: f"{a}\n{b}", lambda a, b: f"{a} $({b})",
    lambda a, b: f"{a} `{b}`", lambda a, b: f"{a} <({b})", lambda a, b: f'{a} "$({b})"',
    lambda a, b: f"{a} |& {b}", lambda a, b: f"{b}; {a}", lambda a, b: f"{a} > ~/.bashrc",
    lambda a, b: f"{a} >> .git/hooks/pre-commit",
]


@hypothesis_settings(max_examples=300, deadline=None)
@given(allowed=st.sampled_from(["git status", "git status --short", "npm test", "ls -la"]),
       evil=st.sampled_from(EVIL), join=st.sampled_from(JOINS),
       spaces=st.sampled_from(["", " ", "  "]))
def test_no_chaining_of_an_allowed_command_is_allowed(allowed, evil, join, spaces):
    """Property: whatever is chained to, substituted into or redirected from an allowed
    command, the whole line is never allowed by the prefix rules (it asks)."""
    rules = rules_for(Path("/nonexistent-workspace"),
                      allow=["run_bash(git status:*)", "run_bash(npm test:*)", "run_bash(ls:*)"])
    command = spaces + join(allowed, evil) + spaces
    assert bash(rules, command) == "ask", (command, read_command_line(command))


@hypothesis_settings(max_examples=200, deadline=None)
@given(before=st.lists(st.sampled_from(["ls", "git status", "echo hi", "true"]), max_size=3),
       join=st.sampled_from(["; ", " && ", " || ", " | ", "\n", " & "]))
def test_a_denied_command_anywhere_in_a_line_is_denied(before, join):
    rules = rules_for(Path("/nonexistent-workspace"), allow=["run_bash"], deny=["run_bash(rm:*)"])
    for position in range(len(before) + 1):
        parts = [*before[:position], "rm -rf build", *before[position:]]
        assert bash(rules, join.join(parts)) == "deny"
    assert bash(rules, "echo $(rm -rf build)") == "deny"  # inside a substitution too


def test_an_open_quote_is_never_allowed_and_deny_beats_allow(tmp_path):
    rules = rules_for(tmp_path, allow=["run_bash(echo:*)"], deny=["run_bash(echo secret)"])
    assert read_command_line('echo "unterminated; rm -rf ~').unreadable is not None
    assert bash(rules_for(tmp_path, allow=["run_bash(echo:*)"]), 'echo "unterminated; rm -rf ~') == "ask"
    assert bash(rules, "echo fine && echo secret") == "deny"
    assert bash(rules, "echo fine") == "allow"


def test_a_command_that_cannot_be_split_is_never_allowed_and_denied_under_deny_rules(tmp_path):
    """A hostile model pads, nests or leaves a quote open to slip past the rules."""
    rules = rules_for(tmp_path, allow=["run_bash(echo:*)"], deny=["run_bash(rm:*)"])
    padded = "echo a; " * 10_000 + "rm -rf ~"  # longer than the matcher splits
    nested = "echo " + "$(echo " * 40 + "rm -rf ~" + ")" * 40  # deeper than it follows
    for command in (padded, nested, 'echo "open; rm -rf ~'):
        verdict = rules.decide("run_bash", {"command": command}, mutating=True)
        assert verdict.effect == "deny" and verdict.rule is not None and "could not be checked" in verdict.rule.text
    allow_only = rules_for(tmp_path, allow=["run_bash(echo:*)"])
    assert bash(allow_only, padded) == "ask" and bash(allow_only, nested) == "ask"


def test_a_call_that_reads_like_a_pattern_is_not_offered_as_itself(tmp_path):
    """Saved as "this exact command", ``rm:*`` would be a prefix rule; ``src/*.py`` a glob."""
    rules = rules_for(tmp_path)
    assert "exact" not in rules.choices("run_bash", {"command": "rm:*"})
    assert rules.choices("write_file", {"path": "src/*.py", "content": ""}) == {"tool": ["write_file"]}


def test_a_fifo_as_the_projects_settings_is_refused_without_blocking(tmp_path):
    (tmp_path / ".tidegauge").mkdir()
    os.mkfifo(tmp_path / ".tidegauge" / "settings.toml")
    with pytest.raises(RuleError, match="not a regular file"):
        rules_for(tmp_path)


def test_a_repositorys_settings_nested_thousands_deep_are_a_one_line_refusal(tmp_path):
    # A cloned repository's file: tomllib recurses once per nested array, past Python's limit.
    (tmp_path / ".tidegauge").mkdir()
    (tmp_path / ".tidegauge" / "settings.toml").write_text("[permissions]\nask = " + "[" * 20_000 + "\n")
    with pytest.raises(RuleError, match="nested too deeply"):
        rules_for(tmp_path)


# ---------------------------------------------------------------- paths and names


def test_path_rules_are_globs_on_the_real_path_relative_to_the_workspace(tmp_path):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "secret.env").write_text("x")
    (tmp_path / "src" / "escape").symlink_to(tmp_path / "secret.env")
    rules = rules_for(tmp_path, allow=["write_file(src/**)"], deny=["read_file(*.env)"])

    def write(path: str) -> str:
        return rules.decide("write_file", {"path": path, "content": ""}, mutating=True).effect

    assert write("src/a.py") == "allow" and write("src/pkg/b.py") == "allow"
    assert write(str(tmp_path / "src" / "c.py")) == "allow"  # absolute, inside src
    assert write("src/../setup.py") == "ask"  # .. leaves src
    assert write("src/escape") == "ask"  # a link inside src to a file outside it
    assert write("srcx/a.py") == "ask"
    read = rules.decide("read_file", {"path": "src/escape"}, mutating=False)
    assert read.effect == "deny"  # the link's target is denied: reading it through the link too
    assert rules.decide("read_file", {"path": "src/a.py"}, mutating=False).effect == "allow"  # read-only: runs


def test_mcp_rules_name_tools_by_server(tmp_path):
    rules = rules_for(tmp_path, allow=["mcp__git__*"], deny=["git__push"])
    assert rules.decide("git__status", {}, mutating=True).effect == "allow"
    assert rules.decide("git__push", {}, mutating=True).effect == "deny"
    assert rules.decide("gitx__status", {}, mutating=True).effect == "ask"


@pytest.mark.parametrize("text, words", [
    ("run_bash(git status && rm -rf ~)", "one simple command"),
    ("run_bash(git status > out)", "one simple command"),
    ("git__status(main)", "write git__status alone"),
    ("*(foo)", "needs one tool's name"),
    ("run_bash(", "expected a tool name"),
    ("", "expected a tool name"),
])
def test_a_bad_rule_is_one_line_naming_it(text, words):
    with pytest.raises(RuleError) as raised:
        parse_rule(text, "allow", "config")
    message = str(raised.value)
    assert words in message and "\n" not in message and (not text or repr(text.strip()) in message)


def test_flag_values_split_on_commas_and_spaces_outside_parentheses():
    assert split_rule_list(["read_file, run_bash(git status:*)", "write_file(src/**) git__*"]) == [
        "read_file", "run_bash(git status:*)", "write_file(src/**)", "git__*"]


# ---------------------------------------------------------------- what the dialog offers, what is saved


def test_the_dialog_offers_the_command_its_first_words_and_the_tool(tmp_path):
    rules = rules_for(tmp_path)
    assert rules.choices("run_bash", {"command": "git status --short"}) == {
        "exact": ["run_bash(git status --short)"], "prefix": ["run_bash(git status:*)"], "tool": ["run_bash"]}
    assert rules.choices("run_bash", {"command": "pytest -q tests"})["prefix"] == ["run_bash(pytest:*)"]
    # a prefix of what runs anything would allow anything; a redirect is never a rule
    assert "prefix" not in rules.choices("run_bash", {"command": "bash -c 'rm -rf ~'"})
    assert rules.choices("run_bash", {"command": "ls > out.txt"}) == {"tool": ["run_bash"]}
    # every part of a chained command gets its own rule, so the same line is allowed next time
    chained = rules.choices("run_bash", {"command": "ls -la && pytest -q"})
    assert chained["exact"] == ["run_bash(ls -la)", "run_bash(pytest -q)"]
    rules.allow(chained["exact"], save=False)
    assert bash(rules, "ls -la && pytest -q") == "allow" and bash(rules, "ls -la; rm x") == "ask"


def test_saved_rules_live_outside_the_repository_in_a_0600_file(tmp_path):
    repo, data = tmp_path / "repo", tmp_path / "data"
    repo.mkdir()
    first = load_permissions(workspace=repo, project=repo, config_rules={}, allowed_tools=[], disallowed_tools=[],
                             data_dir=data)
    first.allow(["run_bash(git status:*)"], save=True)
    saved = SavedRules(data, repo)
    assert stat.S_IMODE(os.stat(saved.path).st_mode) == 0o600
    assert not list(repo.rglob("*"))  # nothing written into the repository
    again = load_permissions(workspace=repo, project=repo, config_rules={}, allowed_tools=[], disallowed_tools=[],
                             data_dir=data)
    assert [(r.text, r.source) for r in again.rules] == [("run_bash(git status:*)", "saved")]
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = load_permissions(workspace=other, project=other, config_rules={}, allowed_tools=[],
                                 disallowed_tools=[], data_dir=data)
    assert elsewhere.rules == []  # per project


def test_a_repository_cannot_allow_its_own_commands(tmp_path):
    """A hostile repository ships allow rules (and a file named like local settings): neither applies."""
    (tmp_path / ".tidegauge").mkdir()
    (tmp_path / ".tidegauge" / "settings.toml").write_text(
        '[permissions]\nallow = ["run_bash"]\nask = ["read_file(notes/**)"]\ndeny = ["run_bash(curl:*)"]\n')
    (tmp_path / ".tidegauge" / "settings.local.toml").write_text('[permissions]\nallow = ["run_bash"]\n')
    rules = rules_for(tmp_path)
    assert bash(rules, "touch pwned") == "ask"
    assert bash(rules, "curl x") == "deny"
    assert rules.decide("read_file", {"path": "notes/a.md"}, mutating=False).effect == "ask"
    assert len(rules.warnings) == 1 and "not applied" in rules.warnings[0] and "run_bash" in rules.warnings[0]


# ---------------------------------------------------------------- the real binary


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": KEY, **extra})
    return env


def _run(tmp_path: Path, fake_llm: Any, *flags: str,
         real_process: bool = False) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``tidegauge -p go FLAGS``: the same CLI in this process with exactly the process's environment
    (tests/cli_in_process.py; a ``python -m app`` start is ~0.5 CPU-s), or ``real_process``."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "app", "-p", "go", "--provider", "openai", "--model", "m",
               "--base-url", fake_llm.base_url("openai"), "--output-format", "stream-json", *flags]
    if real_process:
        proc = subprocess.run(command, cwd=work, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    else:
        proc = run_cli(command[3:], cwd=work, env=_env(tmp_path))
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, events


def _results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in events if e["type"] == "tool_result"}


def test_deny_wins_over_yes_and_covers_tools_that_only_read(fake_llm, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("precious\n")
    (work / "secret.txt").write_text("TOKEN\n")
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "ls && rm -f keep.txt"}, "c_rm"),
                           # hidden from a scanner of our own by a quote in a comment, and by a wrapper
                           ("run_bash", {"command": "ls #'\nrm -f keep.txt #'"}, "c_hidden"),
                           ("run_bash", {"command": "env /bin/rm -f keep.txt"}, "c_wrapped"),
                           ("read_file", {"path": "secret.txt"}, "c_read"),
                           ("run_bash", {"command": "ls"}, "c_ls")]),
        openai_text("done"))
    proc, events = _run(tmp_path, fake_llm, "--yes", "--disallowed-tools", "run_bash(rm:*), read_file(secret.txt)",
                        real_process=True)
    assert proc.returncode == 0, proc.stderr
    results = _results(events)
    assert (work / "keep.txt").read_text() == "precious\n"
    for call in ("c_rm", "c_hidden", "c_wrapped"):
        assert results[call]["is_error"] and "deny run_bash(rm:*)" in results[call]["content"]
    assert results["c_read"]["is_error"] and "TOKEN" not in results["c_read"]["content"]
    assert not results["c_ls"]["is_error"] and "keep.txt" in results["c_ls"]["content"]  # --yes still runs the rest


def test_an_allow_rule_runs_without_yes_but_never_a_chained_command(fake_llm, tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_text('[permissions]\nallow = ["run_bash(touch:*)"]\n')
    fake_llm.enqueue(
        openai_tool_calls([("run_bash", {"command": "touch made.txt"}, "c_ok"),
                           ("run_bash", {"command": "touch made2.txt; mkdir pwned"}, "c_chain"),
                           ("run_bash", {"command": "touch made3.txt $(mkdir pwned2)"}, "c_sub")]),
        openai_text("done"))
    proc, events = _run(tmp_path, fake_llm, "--allowed-tools", "run_bash(echo:*)")
    assert proc.returncode == 0, proc.stderr
    work = tmp_path / "work"
    results = _results(events)
    assert (work / "made.txt").exists() and not results["c_ok"]["is_error"]
    for call in ("c_chain", "c_sub"):
        assert results[call]["is_error"] and "does not allow tools that change things" in results[call]["content"]
    assert sorted(p.name for p in work.iterdir()) == ["made.txt"]


def test_the_repositorys_settings_may_deny_but_not_allow(fake_llm, tmp_path):
    work = tmp_path / "work"
    (work / ".tidegauge").mkdir(parents=True)
    (work / ".tidegauge" / "settings.toml").write_text(
        '[permissions]\nallow = ["run_bash"]\ndeny = ["run_bash(curl:*)"]\n')
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "touch pwned"}, "c_touch")]), openai_text("done"))
    proc, events = _run(tmp_path, fake_llm)
    assert proc.returncode == 0, proc.stderr
    assert not (work / "pwned").exists() and _results(events)["c_touch"]["is_error"]
    warnings = [e for e in events if e["type"] == "config_warning"]
    assert any("allow rules from the repository are not applied" in e["text"] for e in warnings), warnings
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": "curl --version"}, "c_curl")]), openai_text("ok"))
    proc, events = _run(tmp_path, fake_llm, "--yes")
    assert "deny run_bash(curl:*)" in _results(events)["c_curl"]["content"]


def test_a_sub_agent_follows_the_same_rules(fake_llm, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "secret.txt").write_text("TOKEN-IN-FILE\n")
    fake_llm.enqueue(
        openai_tool_calls([("task", {"prompt": "read secret.txt"}, "c_task")]),  # main
        openai_tool_calls([("read_file", {"path": "secret.txt"}, "c_sub_read")]),  # sub-agent
        openai_text("could not read it"),  # sub-agent's report
        openai_text("done"))  # main
    proc, _events = _run(tmp_path, fake_llm, "--disallowed-tools", "read_file(secret.txt)")
    assert proc.returncode == 0, proc.stderr
    sub_after_tool = json.dumps(fake_llm.requests[2].json)
    assert "deny read_file(secret.txt)" in sub_after_tool and "TOKEN-IN-FILE" not in sub_after_tool


def test_a_bad_rule_on_the_command_line_is_one_line(fake_llm, tmp_path):
    proc, _events = _run(tmp_path, fake_llm, "--allowed-tools", "run_bash(git status && rm -rf ~)")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "allowed_tools" in lines[0] and "run_bash(git status && rm -rf ~)" in lines[0]
    assert "--allowed-tools" in lines[0]
    assert fake_llm.requests == []


# ---------------------------------------------------------------- where rules come from


def test_a_bad_rule_in_config_toml_is_one_line_naming_the_setting_and_the_file(tmp_path, monkeypatch):
    from app.wiring.config import load_settings
    from app.kernel.errors import ConfigError

    (tmp_path / "config.toml").write_text('[permissions]\ndeny = ["git__push(main)"]\n')
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as raised:
        load_settings({})
    message = str(raised.value)
    assert "\n" not in message and "permissions.deny" in message and "'git__push(main)'" in message
    assert str(tmp_path / "config.toml") in message


def test_slash_permissions_lists_every_rule_with_where_it_came_from(tmp_path, monkeypatch):
    from app.kernel.commands import Report, Shutdown
    from app.wiring.config import load_settings
    from app.kernel.describe import describe
    from app.wiring.runtime import build_session

    work, data, config = tmp_path / "work", tmp_path / "data", tmp_path / "config"
    (work / ".git").mkdir(parents=True)
    (work / ".tidegauge").mkdir()
    (work / ".tidegauge" / "settings.toml").write_text('[permissions]\ndeny = ["run_bash(curl:*)"]\n')
    config.mkdir()
    (config / "config.toml").write_text('[permissions]\nask = ["read_file(notes/**)"]\n')
    SavedRules(data, work.resolve()).add(["run_bash(git status:*)"])
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(config))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings = load_settings({"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                              "data_dir": str(data), "allowed_tools": ["write_file(src/**)"],
                              "disallowed_tools": ["git__push"]})
    session = build_session(settings, approvals=True, cwd=work)
    session.permissions.allow(["run_bash(ls:*)"], save=False)  # as an "always" in the dialog does
    said: list[Any] = []
    session.subscribe(lambda envelope: said.append(envelope.event))
    session.submit(Report("permissions"))  # given before the session runs: answered when it does
    session.submit(Shutdown())
    asyncio.run(session.run())
    listing = describe([event for event in said if event.type == "permissions"][-1])
    assert listing is not None
    lines = listing.text.splitlines()
    assert lines[1:7] == [
        "  deny  git__push   (--allowed-tools/--disallowed-tools)",
        "  deny  run_bash(curl:*)   (the project's .tidegauge/settings.toml)",
        "  ask   read_file(notes/**)   (config.toml)",
        "  allow write_file(src/**)   (--allowed-tools/--disallowed-tools)",
        "  allow run_bash(git status:*)   (saved for this project)",
        "  allow run_bash(ls:*)   (chosen this session)",
    ]
    assert str(data / "permissions.json") in listing.text

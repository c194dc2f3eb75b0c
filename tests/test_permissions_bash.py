"""Permission rules against what bash really runs.

Every line here is also run under real bash (``bash --noprofile --norc -c LINE``) in a temporary
folder, with a ``PATH`` of stub commands that append their name and arguments to a log and run
nothing else (the wrappers' stubs then run their target, as the real ones would). What the log
and the folder show is the oracle: the checker must never *allow* (with ``git status:*``,
``ls:*`` and ``echo:*`` allowed) a line that ran a command those rules do not allow or left a
file behind, and never let through a line that ran a denied command (``rm:*``, ``touch:*``).

The shapes a scanner of our own got wrong are fixed tests; a grammar of the same constructs
feeds a property test; the first five also go through the real binary (headless, no --yes).
"""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from fake_llm_server import openai_text, openai_tool_calls
from app.agent.permissions import Permissions, load_permissions

ALLOW = ["run_bash(git status:*)", "run_bash(ls:*)", "run_bash(echo:*)"]
DENY = ["run_bash(rm:*)", "run_bash(touch:*)"]
DENIED_NAMES = {"rm", "touch"}
VICTIM = "victim"

# The stubs: each appends "name\x1farg\x1f...\x1e\x1f" to the log in one write (a pipeline's
# stubs run at once). A wrapper's stub then skips its options (and env's NAME=value, timeout's
# duration) and runs the rest, as the real wrapper does; bash's and sh's run the real shell.
_RECORD = """#!/bin/sh
printf '%s\\037' "${0##*/}" "$@" '\x1e' >> LOG
"""
_SKIP_OPTIONS = """while [ $# -gt 0 ]; do
  case "$1" in -u|-n|-I|-s|-k) shift 2;; -*) shift;; *=*) [ "${0##*/}" = env ] && shift || break;; *) break;; esac
done
"""
_STUBS = {
    **{name: "" for name in ("git", "rm", "touch", "ls", "echo", "cat", "tee", "grep", "true")},
    **{name: _SKIP_OPTIONS + '[ $# -gt 0 ] && exec "$@"\n' for name in ("env", "sudo", "xargs", "nice", "nohup")},
    "timeout": _SKIP_OPTIONS + 'shift\n[ $# -gt 0 ] && exec "$@"\n',
    "bash": 'exec /bin/bash "$@"\n',
    "sh": 'exec /bin/sh "$@"\n',
}
BASH = shutil.which("bash") or "/bin/bash"


@dataclass
class Ran:
    commands: list[list[str]]  # each command the stubs saw: its name, then its arguments
    left_behind: set[str]  # files the line left in the folder (besides the victim)
    victim_gone: bool


class BashOracle:
    """Runs a line under real bash among stubs; a fresh folder and log each time."""

    def __init__(self, root: Path) -> None:
        self.stubs, self.work, self.log = root / "stubs", root / "work", root / "log"
        self.stubs.mkdir()
        for name, tail in _STUBS.items():
            stub = self.stubs / name
            stub.write_text(_RECORD.replace("LOG", shlex.quote(str(self.log))) + tail)
            stub.chmod(0o755)
        # echo is a bash builtin: disabled, it is the stub, so an echo shows in the log too
        self.bash_env = root / "bash_env"
        self.bash_env.write_text("enable -n echo true\n")

    def run(self, line: str) -> Ran:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir()
        (self.work / VICTIM).write_text("precious\n")
        self.log.write_bytes(b"")
        # a background command (&) outlives bash: each stub holds this pipe, read to its end
        done_read, done_write = os.pipe()
        try:
            subprocess.run([BASH, "--noprofile", "--norc", "-c", line], cwd=self.work, timeout=30,
                                  env={"PATH": str(self.stubs), "BASH_ENV": str(self.bash_env), "LC_ALL": "C"},
                                  stdin=subprocess.DEVNULL, capture_output=True, pass_fds=(done_write,))
            os.close(done_write)
            done_write = -1
            while select.select([done_read], [], [], 30)[0] and os.read(done_read, 4096):
                pass
        finally:
            os.close(done_read)
            if done_write >= 0:
                os.close(done_write)
        records = self.log.read_bytes().decode("utf-8", "replace").split("\x1e\x1f")
        commands = [record.split("\x1f")[:-1] for record in records if record]
        names = {p.name for p in self.work.iterdir()}
        return Ran(commands, names - {VICTIM}, VICTIM not in names)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> BashOracle:
    return BashOracle(tmp_path_factory.mktemp("bash-oracle"))


def _rules(**config: list[str]) -> Permissions:
    return load_permissions(workspace=Path("/nonexistent-workspace"), project=Path("/nonexistent-workspace"),
                            config_rules=config, allowed_tools=[], disallowed_tools=[], data_dir=None)


@pytest.fixture(scope="module")
def rules() -> Permissions:
    return _rules(allow=ALLOW, deny=DENY)


ALLOW_ONLY = _rules(allow=ALLOW)  # without deny rules, so that a line running rm can show as allowed


def allowed_by_the_rules(command: list[str]) -> bool:
    return command[:2] == ["git", "status"] or command[:1] in (["ls"], ["echo"])


def check(rules: Permissions, oracle: BashOracle, line: str) -> tuple[str, Ran]:
    """The checker's verdict on the line, held against what bash did with it."""
    verdict = rules.decide("run_bash", {"command": line}, mutating=True).effect
    ran = oracle.run(line)
    for effect in {verdict, ALLOW_ONLY.decide("run_bash", {"command": line}, mutating=True).effect}:
        if effect == "allow":
            assert all(allowed_by_the_rules(c) for c in ran.commands), (line, effect, ran)
            assert not ran.left_behind and not ran.victim_gone, (line, effect, ran)
    if any(c[0] in DENIED_NAMES for c in ran.commands):
        assert verdict == "deny", (line, verdict, ran)
    return verdict, ran


# ---------------------------------------------------------------- the shapes of the finding

# (line, what bash does with it that the rules must not let through). {stub} is the stubs' folder:
# an absolute path that bash runs and the log sees.
SHAPES = [
    ("git status #'\ntouch X #'", "touch"),
    ("git status $'\\'';touch X #'", "touch"),
    ("git status <<EOF\nit's a quote\nEOF\ntouch X", "touch"),
    ("git status >&1NAME", "file"),
    ("git status #'\nrm -f victim #'", "rm"),
    ("git status `touch X`", "touch"),
    ("git status $(touch X)", "touch"),
    ("git status <(touch X)", "touch"),
    ("{ git status; touch X; }", "touch"),
    ("(git status; touch X)", "touch"),
    ("f() { touch X; }; git status; f", "touch"),
    ("eval 'git status; touch X'", "touch"),
    ("bash -c 'git status; touch X'", "touch"),
    ("sh -c 'touch X'", "touch"),
    ("exec touch X", "touch"),
    ("VAR=1 git status", "other"),
    ("env rm -f victim", "rm"),
    ("command rm -f victim", "rm"),
    ("sudo rm -f victim", "rm"),
    ("xargs rm -f victim", "rm"),
    ("nice rm -f victim", "rm"),
    ("timeout 1 rm -f victim", "rm"),
    ("nohup rm -f victim", "rm"),
    ("\\rm -f victim", "rm"),
    ("{stub}/rm -f victim", "rm"),
    ("'rm' -f victim", "rm"),
    ('"rm" -f victim', "rm"),
    ("git status\ntouch X", "touch"),
    ("git status & touch X", "touch"),
    ("git status |& tee X", "other"),
    ("git status;touch X", "touch"),
    ("git status > X", "file"),
    ("git status 2>X", "file"),
    ("git status &>X", "file"),
    ('git status <<< "$(touch X)"', "touch"),
    ("builtin eval 'touch X'", "touch"),
    ("r\\\nm -f victim", "rm"),
    ("git status -- $'a\\'' ;touch X #'", "touch"),
    ("echo hi | bash", "other"),
    ("bash <<EOF\ntouch X\nEOF", "touch"),
    ("git status & rm -f victim", "rm"),
    ("sudo -u root env A=1 timeout 1 rm -f victim", "rm"),
    ("find . -exec rm -f victim ';'", "other"),
]


@pytest.mark.parametrize("line, effect", SHAPES, ids=[repr(s[0])[:40] for s in SHAPES])
def test_a_shape_that_fooled_the_old_scanner_is_never_allowed(rules, oracle, line, effect):
    line = line.replace("{stub}", str(oracle.stubs))
    verdict, ran = check(rules, oracle, line)
    assert verdict != "allow", (line, ran)
    if effect in DENIED_NAMES:
        # the shape is real: bash did run the denied command, and the checker denies the line
        assert any(c[0] == effect for c in ran.commands), (line, ran)
        assert verdict == "deny", (line, ran)
    if effect == "file":
        assert ran.left_behind, (line, ran)


@pytest.mark.parametrize("line", ["/bin/rm -f victim", "/usr/bin/env /bin/rm x", "./rm x", "bash -lc 'rm x'",
                                  "sh -ec \"echo; rm x\"", "echo $(echo $(rm x))", "x=$(rm y)",
                                  "export A=$(rm y)", "trap 'rm x' EXIT", "watch -n 1 'rm x'", "$CMD x",
                                  "\"$(echo rm)\" x", "echo 'open", "cat <<EOF\n$(rm x)\nEOF",
                                  "if true; then rm x; fi", "for f in a; do rm $f; done", "! rm x",
                                  "case a in a) rm x;; esac", "while rm x; do :; done", "time rm x",
                                  "coproc rm x", "[[ $(rm x) ]]", "echo $((1 + $(rm x)))",
                                  "cat <<EOF\n`rm x`\nEOF", "echo ${x:-`rm x`}", "echo \"a `rm x` b\"",
                                  "shopt -s expand_aliases; alias ls='rm -rf'\nls", "hash -p /bin/rm ls; ls x"])
def test_a_denied_command_is_found_wherever_bash_would_run_it(rules, line):
    """Lines not run (they would reach the real /bin or need what the stubs lack)."""
    assert rules.decide("run_bash", {"command": line}, mutating=True).effect == "deny", line


@pytest.mark.parametrize("line", ["git status", "git status --short 2>&1", "git status >/dev/null 2>&1",
                                  "ls -la && echo 'a; b' || git status | ls", 'echo "it\'s #not a comment"',
                                  "git status; ls\necho done", "echo a#b --x=\"y z\""])
def test_lines_of_plain_words_are_still_allowed_and_run_only_what_they_say(rules, oracle, line):
    verdict, ran = check(rules, oracle, line)
    assert verdict == "allow", (line, ran)


def test_a_rule_for_a_wrapper_or_a_shell_is_never_offered_as_a_prefix(rules):
    for line in ["env A=1 ls", "bash -c 'ls'", "sudo ls", "timeout 5 pytest", "eval ls", "xargs ls"]:
        offered = rules.choices("run_bash", {"command": line})
        assert "prefix" not in offered, (line, offered)
    for line in ["git status #'\ntouch X #'", "ls > out", "echo $(date)", "A=1 ls", "ls &"]:
        assert rules.choices("run_bash", {"command": line}) == {"tool": ["run_bash"]}, line


def test_a_prefix_rule_on_a_wrapper_does_not_allow_what_it_wraps(tmp_path):
    wide = load_permissions(workspace=tmp_path, project=tmp_path, config_rules={"allow": ["run_bash(env:*)",
                            "run_bash(timeout 5 pytest)"]}, allowed_tools=[], disallowed_tools=[], data_dir=None)
    assert wide.decide("run_bash", {"command": "env rm -rf ~"}, mutating=True).effect == "ask"
    # an exact rule names the whole line, wrapper included
    assert wide.decide("run_bash", {"command": "timeout 5 pytest"}, mutating=True).effect == "allow"


# ---------------------------------------------------------------- the property


# Mostly what the allow rules allow, so that the hostile pieces sit among allowed commands. An
# absolute path names the stubs' folder only ({stub}): nothing generated reaches the real /bin,
# and every command that runs shows in the log (/bin/rm itself is checked without running it).
SAFE = ["status", "-la", "--short", "a", "1", "hi", "'a b'", '"x y"', "--x=1", "/dev/null", "-f"]
ODD_WORDS = ["rm", "touch", "X", "victim", "'rm'", '"rm"', "\\rm", "$'rm'", "$'\\''", "'#'", "\"it's\"", "$X", "*", "~",
             "\"$(touch X)\"", "r\\\nm", "{stub}/rm", "{stub}/ls", "'\"'", "a#b", "#'", "$'a\\nb'", "`touch X`",
             "{a,b}", "\\\n", "$(rm -f victim)", "${x:-`touch X`}", "${x:-$(touch X)}"]
REDIRECTS = [">/dev/null", "2>&1", "2>/dev/null", ">&1NAME", "> X", ">> X", "2>X", "&>/dev/null", "<<< 'a'",
             "< /dev/null", ">& 2", "1>&2X", ">&-", "{fd}>&1"]
HEADS = ["git status", "git status", "ls", "ls", "echo", "echo", "rm -f victim", "touch X", "cat", "git",
         "'git' status", "{stub}/ls", "{stub}/touch X"]
WRAPPERS = ["env ", "env A=1 ", "command ", "builtin ", "exec ", "sudo ", "xargs ", "nice ", "nice -n 5 ",
            "timeout 1 ", "nohup ", "VAR=x ", "eval ", "time ", "! "]
JOINS = ["; ", ";", " && ", " || ", " | ", "\n", " & ", " |& ", " && \n", ";\n"]
COMMENTS = [" #'", " # it's", " #", "#'", " # \"", " #'\ntouch X #'"]


# Each strategy is built once: a strategy built inside a draw is built and validated again at every
# draw of every example (most of the two properties' CPU). The draws, and so the examples, are the same.
_ONE_IN = {n: st.integers(0, n - 1) for n in (4, 5, 8, 12)}
_REPEATS = {n: st.integers(0, n) for n in (2, 3)}
_HEADS, _ODD_WORDS, _SAFE = st.sampled_from(HEADS), st.sampled_from(ODD_WORDS), st.sampled_from(SAFE)
_WRAPPERS, _REDIRECTS = st.sampled_from(WRAPPERS), st.sampled_from(REDIRECTS)
_JOINS, _COMMENTS = st.sampled_from(JOINS), st.sampled_from(COMMENTS)


def one_in(draw: st.DrawFn, n: int) -> bool:
    return draw(_ONE_IN[n]) == 0


@st.composite
def simple_command(draw: st.DrawFn) -> str:
    words = [draw(_HEADS)]
    for _ in range(draw(_REPEATS[3])):
        words.append(draw(_ODD_WORDS if one_in(draw, 8) else _SAFE))
    if one_in(draw, 12):
        words[0] = draw(_ODD_WORDS)
    text = " ".join(words)
    if one_in(draw, 8):
        text = draw(_WRAPPERS) + text
    if one_in(draw, 4):
        text += " " + draw(_REDIRECTS)
    return text


SIMPLE_COMMAND = simple_command()


@st.composite
def statement(draw: st.DrawFn, depth: int) -> str:
    plain = draw(SIMPLE_COMMAND)
    if depth <= 0 or not one_in(draw, 5):
        return plain
    inner = draw(COMMAND_LINES[depth - 1])
    shapes = [f"{plain} $({inner})", f"{plain} `{inner}`", f"{plain} <({inner})", f"( {inner} )",
              f"{{ {inner}; }}", f"f() {{ {inner}; }}; f", f"bash -c {shlex.quote(inner)}",
              f"sh -c {shlex.quote(inner)}", f"eval {shlex.quote(inner)}",
              f"{plain} <<EOF\n{draw(_HEREDOC_BODIES)}\nEOF\n{inner}",
              f"{plain} <<'EOF'\n$(touch X)\nEOF\n{inner}"]
    return draw(st.sampled_from(shapes))


HEREDOC_BODIES = ["it's", "$(touch X)", 'a"b', "`touch X`", "EOF2", "#'"]
_HEREDOC_BODIES = st.sampled_from(HEREDOC_BODIES)


@st.composite
def command_line(draw: st.DrawFn, depth: int = 2) -> str:
    line = draw(STATEMENTS[depth])
    for _ in range(draw(_REPEATS[2])):
        line += draw(_JOINS) + draw(STATEMENTS[depth])
    if one_in(draw, 5):
        line += draw(_COMMENTS)
    return line


STATEMENTS = {depth: statement(depth) for depth in range(3)}
COMMAND_LINES = {depth: command_line(depth) for depth in range(2)}


@hypothesis_settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(line=command_line(2))
def test_the_checker_never_allows_or_lets_through_what_bash_runs(rules, oracle, line):
    """Property: a line the checker allows runs only allowed commands and writes no file; a line
    that runs a denied command is denied."""
    check(rules, oracle, line.replace("{stub}", str(oracle.stubs)))


# ---------------------------------------------------------------- the real binary


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "PYTHONUNBUFFERED": "1", "OPENAI_API_KEY": "sk-test-fake-key-0123456789"})
    return env


def test_the_findings_five_do_nothing_through_the_real_binary(fake_llm: Any, tmp_path: Path) -> None:
    """Headless, no --yes, the README's own rules: a model's hostile commands neither create X nor
    delete the victim; each result says the call was refused."""
    work = tmp_path / "work"
    work.mkdir()
    (work / VICTIM).write_text("precious\n")
    first_five = [line for line, _ in SHAPES[:5]]
    fake_llm.enqueue(openai_tool_calls([("run_bash", {"command": line}, f"c{i}") for i, line in enumerate(first_five)]
                                       + [("run_bash", {"command": "git status --short >/dev/null 2>&1"}, "c_ok")]),
                     openai_text("done"))
    proc = subprocess.run(
        [sys.executable, "-m", "app", "-p", "go", "--provider", "openai", "--model", "m",
         "--base-url", fake_llm.base_url("openai"), "--output-format", "stream-json",
         "--allowed-tools", "run_bash(git status:*)", "--disallowed-tools", "run_bash(rm:*)"],
        cwd=work, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert sorted(p.name for p in work.iterdir()) == [VICTIM]  # no X, no 1NAME, the victim kept
    assert (work / VICTIM).read_text() == "precious\n"
    for call in ("c0", "c1", "c2", "c3"):
        assert results[call]["is_error"] and "does not allow tools that change things" in results[call]["content"]
    assert results["c4"]["is_error"] and "deny run_bash(rm:*)" in results["c4"]["content"]
    assert "refused" not in results["c_ok"]["content"]  # the allowed line ran


@pytest.mark.parametrize("line", ["env " * 16_000 + "rm x", "eval " * 3_000 + "rm x", "ls " + "a " * 30_000 + "; rm x",
                                  "trap " + '"a b" ' * 10_000 + "'rm x'"])
def test_a_line_too_big_to_check_is_denied_and_never_allowed(rules, line):
    """A hostile model pads a line so the checker would walk it for seconds: past a bound on the
    nodes walked and the text parsed (scripts read again included), the line is unreadable."""
    verdict = rules.decide("run_bash", {"command": line}, mutating=True)
    assert verdict.effect == "deny" and verdict.rule is not None and "could not be checked" in verdict.rule.text
    assert ALLOW_ONLY.decide("run_bash", {"command": line}, mutating=True).effect == "ask"


@hypothesis_settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(line=command_line(2))
def test_what_the_dialog_offers_allows_the_line_and_nothing_it_cannot(line):
    """Property: an "always" the dialog offers (this exact command, commands starting with its
    first words) allows that very line next time; a line no pattern could allow is offered as
    the whole tool only."""
    offered = ALLOW_ONLY.choices("run_bash", {"command": line})
    for kind in ("exact", "prefix"):
        if kind in offered:
            fresh = _rules()
            fresh.allow(offered[kind], save=False)
            assert fresh.decide("run_bash", {"command": line}, mutating=True).effect == "allow", (line, offered)
    if ALLOW_ONLY.decide("run_bash", {"command": line}, mutating=True).effect != "allow" and "exact" not in offered:
        assert offered == {"tool": ["run_bash"]}, (line, offered)

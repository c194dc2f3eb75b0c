"""Permission rules: ``allow``, ``ask`` and ``deny`` patterns, as Claude Code's.

A rule names a tool, optionally with an argument pattern::

    run_bash                    every shell command
    run_bash(git status)        exactly that command
    run_bash(npm test:*)        commands starting with the words "npm test"
    write_file(src/**)          a path argument, as a glob relative to the workspace
    git__*   mcp__git__*        tools by name (an MCP tool is named SERVER__TOOL)

Every tool call is checked before it runs: **deny** wins over everything (``--yes`` too),
then **ask**, then **allow**; with no rule, tools that change things ask and the rest run.

A shell command is read as bash reads it (``shell_commands.py``: a real bash grammar). A
command pattern allows a line only when every node of it is one that module reads completely
(simple commands of literal words joined by ``&&``, ``||``, ``;``, ``|``; redirects only to
``/dev/null`` or ``2>&1``) and *every* simple command matches an allow rule; a prefix rule
(``:*``) never allows a command that runs others (``env``, ``sudo``, ``bash``, ``eval``…). So
``run_bash(git status:*)`` allows neither ``git status; rm -rf ~`` nor ``git status #'⏎touch X``
nor ``git status > out``: they ask. A deny (or ask) rule refuses the line when it may name any
command the line runs: nested in substitutions and subshells, after wrappers, inside
``bash -c`` strings, ``/bin/rm`` and ``\rm`` as ``rm``; a line that cannot be read matches
every deny rule with a command pattern. Deny rules on commands are a guard, not a sandbox: a
script file, a pipe into ``sh`` or a program's own options can still run what they name.

Where rules come from (``/permissions`` shows each with its source):

- ``--allowed-tools`` / ``--disallowed-tools``: this run only.
- ``config.toml`` ``[permissions]``: the user's own file.
- the project's ``.tidegauge/settings.toml`` ``[permissions]``: **only ``ask`` and
  ``deny``**. The file comes with the repository, and a hostile repository that could
  ship ``allow = ["run_bash"]`` would switch approval off for whoever opens it; its
  ``allow`` rules are ignored and said so at start.
- rules the user saved from the approval dialog: per project in ``permissions.json``
  under the data directory (0600). Not inside the repository, because a repository can
  ship any file it likes, including one named like a local settings file.
- rules chosen in the dialog for this session.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, Mapping

from app.agent.shell_commands import RUNS_OTHERS, may_name, pattern_words, quote_words, read_command_line
from app.kernel.private_files import read_private, refusal, write_private_atomic
from app.kernel.describe import source_words as source_words  # re-exported: the loop names a rule's source too

Effect = Literal["allow", "ask", "deny"]
Source = Literal["flag", "config", "project", "saved", "session"]
EFFECTS: tuple[Effect, ...] = ("deny", "ask", "allow")

# Where a rule came from, as /permissions and a refusal name it.


PROJECT_SETTINGS = Path(".tidegauge") / "settings.toml"
SAVED_RULES_FILE = "permissions.json"
MAX_SETTINGS_BYTES = 256 * 1024

# Tools whose rules may carry a pattern, and the argument the pattern is matched against.
COMMAND_TOOLS = frozenset({"run_bash", "run_bash_untruncated"})
PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_files"})
# First words after which the second word is the command (git status, npm test): the
# "always commands starting with" choice takes both.
_TWO_WORD_COMMANDS = frozenset({"git", "npm", "pnpm", "yarn", "cargo", "go", "docker", "kubectl", "uv", "pip",
                                "pip3", "poetry", "make", "gh", "bun", "deno", "dotnet", "mvn", "gradle"})
# First words that run whatever follows them: a prefix rule on these would allow anything.
_RUNS_ANYTHING = frozenset({"bash", "sh", "zsh", "fish", "dash", "ksh", "eval", "exec", "sudo", "doas", "su", "env",
                            "xargs", "command", "builtin", "nohup", "time", "timeout", "nice", "watch", "python",
                            "python3", "node", "perl", "ruby", "php", "source", ".", "ssh", "find", "awk", "sed"})

_RULE = re.compile(r"^(?P<tool>[A-Za-z0-9_*-]+)(?:\((?P<argument>.*)\))?$", re.DOTALL)


class RuleError(ValueError):
    """A rule that cannot be read: the message is one line naming it and what is wrong."""


@dataclass(frozen=True)
class Rule:
    effect: Effect
    text: str  # as the user wrote it (an ``mcp__`` prefix kept): what /permissions shows
    source: Source
    tool: str  # a tool name, or a pattern with * (mcp__ prefix dropped)
    argument: str | None = None  # None: every call of the tool
    words: tuple[str, ...] | None = None  # a command pattern's words (without its ":*")
    prefix: bool = False  # a command pattern ending in ":*": commands starting with those words

    def names(self, tool_name: str) -> bool:
        return fnmatchcase(tool_name, self.tool)


@dataclass(frozen=True)
class Verdict:
    effect: Effect
    rule: Rule | None = None  # None: the default (tools that change things ask)


def parse_rule(text: str, effect: Effect, source: Source) -> Rule:
    """``run_bash(git status:*)`` and the like; RuleError naming the rule otherwise."""
    written = text.strip()
    match = _RULE.match(written)
    if not written or match is None:
        raise RuleError(f"permission rule {text!r}: expected a tool name, optionally with a pattern in "
                        "parentheses, e.g. run_bash(git status:*) or write_file(src/**)")
    tool = match.group("tool")
    if tool.startswith("mcp__"):  # Claude Code's naming; here an MCP tool is SERVER__TOOL
        tool = tool.removeprefix("mcp__")
    argument = match.group("argument")
    if argument is not None:
        argument = argument.strip()
        if argument in ("", "*", "**", ":*"):
            argument = None  # the whole tool
        elif "*" in tool:
            raise RuleError(f"permission rule {written!r}: a pattern in parentheses needs one tool's name, not {tool!r}")
        elif tool in COMMAND_TOOLS:
            words = pattern_words(argument.removesuffix(":*"))
            if words is None:
                raise RuleError(f"permission rule {written!r}: a command pattern is one simple command "
                                "(write one rule per command; ;, &&, |, $(...) and > are not allowed in it)")
            return Rule(effect=effect, text=written, source=source, tool=tool, argument=argument, words=words,
                        prefix=argument.endswith(":*"))
        elif tool not in PATH_TOOLS:
            raise RuleError(f"permission rule {written!r}: only {', '.join(sorted(COMMAND_TOOLS | PATH_TOOLS))} "
                            f"take a pattern; write {tool} alone to match every call")
    return Rule(effect=effect, text=written, source=source, tool=tool, argument=argument)


def split_rule_list(values: list[str]) -> list[str]:
    """``--allowed-tools "read_file, run_bash(git status:*)"``: commas and spaces outside parentheses separate."""
    found: list[str] = []
    for value in values:
        depth, current = 0, list[str]()
        for char in value:
            if char == "(":
                depth += 1
            elif char == ")":
                depth = max(0, depth - 1)
            if depth == 0 and (char == "," or char.isspace()):
                if "".join(current).strip():
                    found.append("".join(current).strip())
                current = []
                continue
            current.append(char)
        if "".join(current).strip():
            found.append("".join(current).strip())
    return found


# ---------------------------------------------------------------- shell commands


def _allows(rule: Rule, words: tuple[str, ...]) -> bool:
    """An allow rule's pattern and one simple command of a line a pattern may allow."""
    if rule.words is None:
        return False
    if not rule.prefix:
        return words == rule.words
    # a prefix of what runs other commands would allow those commands too
    name = words[0].rsplit("/", 1)[-1]
    return words[:len(rule.words)] == rule.words and name not in RUNS_OTHERS


# ---------------------------------------------------------------- paths


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    # a folder's pattern also names what is under it
    return re.compile("".join(out).rstrip("/") + "(?:/.*)?", re.DOTALL)


def _path_forms(value: str, workspace: Path) -> tuple[list[str], list[str]]:
    """(forms an allow rule must match, forms any of which a deny rule may match).

    The real path (symlinks followed): a link inside ``src/`` to a file elsewhere is not in
    ``src/``. For deny, the path as written too (normalised)."""
    raw = Path(value).expanduser()
    written = Path(os.path.normpath(raw if raw.is_absolute() else workspace / raw))
    real = Path(os.path.realpath(written))
    root = Path(os.path.realpath(workspace))

    def forms(path: Path) -> list[str]:
        found = [path.as_posix()]
        for base in (root, workspace):
            try:
                found.append(path.relative_to(base).as_posix())
            except ValueError:
                continue
        return found

    return forms(real), forms(real) + forms(written)


def _path_matches(pattern: str, forms: list[str], workspace: Path) -> bool:
    absolute = pattern.startswith(("/", "~"))
    if absolute:
        pattern = Path(pattern).expanduser().as_posix() if not pattern.startswith("/") else pattern
    regex = _glob_regex(pattern.removeprefix("./"))
    return any(regex.fullmatch(form) for form in forms if form.startswith("/") == absolute)


# ---------------------------------------------------------------- the rules in force


@dataclass
class Permissions:
    """The rules in force for one session, and the file the user's saved rules go to."""

    workspace: Path
    rules: list[Rule] = field(default_factory=list)
    saved: "SavedRules | None" = None
    # what was set and is not applied, said once at start
    warnings: list[str] = field(default_factory=list)

    def decide(self, tool_name: str, tool_input: Mapping[str, Any], *, mutating: bool) -> Verdict:
        """deny > ask > allow > the default (tools that change things ask, the rest run)."""
        for effect in EFFECTS:
            rule = self._first_match(effect, tool_name, tool_input)
            if rule is not None:
                return Verdict(effect, rule)
        return Verdict("ask" if mutating else "allow")

    def _first_match(self, effect: Effect, tool_name: str, tool_input: Mapping[str, Any]) -> Rule | None:
        rules = [r for r in self.rules if r.effect == effect and r.names(tool_name)]
        whole = next((r for r in rules if r.argument is None), None)
        if whole is not None:
            return whole
        patterned = [r for r in rules if r.argument is not None]
        if not patterned:
            return None
        if tool_name in COMMAND_TOOLS:
            return self._command_match(effect, patterned, str(tool_input.get("command", "")))
        value = tool_input.get("path")
        if tool_name == "list_files" and value in (None, ""):
            value = "."
        if not isinstance(value, str) or "\0" in value:
            return None
        allow_forms, deny_forms = _path_forms(value, self.workspace)
        forms = allow_forms if effect == "allow" else deny_forms
        return next((r for r in patterned if _path_matches(r.argument or "", forms, self.workspace)), None)

    @staticmethod
    def _command_match(effect: Effect, rules: list[Rule], command: str) -> Rule | None:
        line = read_command_line(command)
        if effect == "allow":
            # every simple command allowed; a line with anything else in it is never allowed
            if line.simple is None:
                return None
            matched = [next((r for r in rules if _allows(r, words)), None) for words in line.simple]
            return matched[0] if all(matched) else None
        if line.unreadable is not None:  # what cannot be checked against a deny rule does not run, --yes or not
            rule = rules[0]
            return replace(rule, text=f"{rule.text} (the command could not be checked against it: "
                                      f"{line.unreadable})")
        for words, start in line.everything:
            for rule in rules:
                if rule.words is not None and may_name(words, start, rule.words, prefix=rule.prefix):
                    return rule
        return None

    # ---- what the dialog offers, and remembering a choice

    def choices(self, tool_name: str, tool_input: Mapping[str, Any]) -> dict[str, list[str]]:
        """The rules "always" would add: ``exact`` (this command / this file), ``prefix`` (commands
        starting with the first word(s) / files in this folder), ``tool`` (every call). A choice
        that cannot be a rule is left out (a command writing a file, ``bash -c …``)."""
        offered: dict[str, list[str]] = {}
        if tool_name in COMMAND_TOOLS:
            simple = read_command_line(str(tool_input.get("command", ""))).simple
            if simple is not None:  # a line no pattern can allow is offered as the tool alone
                exact = _unique(f"{tool_name}({quote_words(words)})" for words in simple)
                # a command that reads as a pattern ("rm:*") would be a prefix rule, not itself
                if not any(text.endswith(":*)") for text in exact):
                    offered["exact"] = exact
                prefixes = [_prefix_of(words) for words in simple]
                if all(prefixes):
                    offered["prefix"] = _unique(f"{tool_name}({prefix}:*)" for prefix in prefixes)
        elif tool_name in PATH_TOOLS and isinstance(tool_input.get("path"), str):
            allow_forms, _ = _path_forms(str(tool_input["path"]), self.workspace)
            relative = next((form for form in allow_forms if not form.startswith("/")), None)
            # a name holding * or ? would be a glob as a rule, not that file
            if relative and relative != "." and not any(char in relative for char in "*?"):
                offered["exact"] = [f"{tool_name}({relative})"]
                folder = Path(relative).parent.as_posix()
                if folder != ".":
                    offered["prefix"] = [f"{tool_name}({folder}/**)"]
        offered["tool"] = [tool_name]
        return offered

    def allow(self, texts: list[str], *, save: bool) -> list[Rule]:
        """Add allow rules chosen in the dialog: for this session, and saved for the project when ``save``."""
        source: Source = "saved" if save and self.saved is not None else "session"
        added = [parse_rule(text, "allow", source) for text in texts]
        self.rules.extend(added)
        if source == "saved" and self.saved is not None:
            self.saved.add([rule.text for rule in added])
        return added


def _unique(texts: Any) -> list[str]:
    return list(dict.fromkeys(texts))


def _prefix_of(words: tuple[str, ...]) -> str | None:
    """The first word(s) of a simple command, or None when a prefix rule would allow anything."""
    if not words or words[0] in _RUNS_ANYTHING or words[0] in RUNS_OTHERS or "=" in words[0] \
            or not re.fullmatch(r"[\w./+-]+", words[0]):
        return None
    if words[0] in _TWO_WORD_COMMANDS and len(words) > 1 and re.fullmatch(r"[\w.:+-]+", words[1]) \
            and not words[1].startswith("-"):
        return f"{words[0]} {words[1]}"
    return words[0]


# ---------------------------------------------------------------- sources


@dataclass
class SavedRules:
    """Allow rules the user saved from the dialog, per project (the repository's root), in a
    0600 JSON file under the data directory: outside any repository, so none can ship one."""

    data_dir: Path
    project: Path
    # Why the file was not read (a symlink planted there...), one line; None when it was or is missing.
    refused: str | None = None

    @property
    def path(self) -> Path:
        return self.data_dir / SAVED_RULES_FILE

    def _read(self) -> dict[str, list[str]]:
        try:
            raw = read_private(self.path, MAX_SETTINGS_BYTES + 1)  # never through a symlink
            data = json.loads(raw) if len(raw) <= MAX_SETTINGS_BYTES else {}
        except OSError as error:
            self.refused = refusal(self.path, error)
            return {}  # missing or refused: nothing is allowed by it, the safe side
        except ValueError:
            return {}  # damaged: the same
        if not isinstance(data, dict):
            return {}
        return {k: [r for r in v if isinstance(r, str)] for k, v in data.items() if isinstance(v, list)}

    def rules(self) -> list[str]:
        return self._read().get(str(self.project), [])

    def add(self, texts: list[str]) -> None:
        stored = self._read()
        mine = stored.setdefault(str(self.project), [])
        mine.extend(text for text in texts if text not in mine)
        write_private_atomic(self.path, json.dumps(stored, indent=1).encode())  # 0600, never through a link


def _project_rules(project: Path) -> tuple[list[Rule], list[str]]:
    """The project file's ask and deny rules, and a warning for its allow rules (never applied)."""
    from app.context.memory import read_bounded  # a FIFO or a device is refused without blocking

    path = project / PROJECT_SETTINGS
    if not path.exists():
        return [], []
    got = read_bounded(path, MAX_SETTINGS_BYTES)
    if got.data is None:
        raise RuleError(f"{path}: {got.refusal}")
    if got.size > MAX_SETTINGS_BYTES:
        raise RuleError(f"{path}: larger than {MAX_SETTINGS_BYTES // 1024} KiB")
    raw = got.data
    import tomllib  # only when the project has a settings file: most runs never parse TOML

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise RuleError(f"{path}: invalid TOML ({error})") from None
    except RecursionError:  # a repository's file nesting arrays thousands deep: tomllib recurses per level
        raise RuleError(f"{path}: invalid TOML (nested too deeply)") from None
    table = data.get("permissions", {})
    if not isinstance(table, dict):
        raise RuleError(f"{path}: [permissions] must be a table of allow/ask/deny lists")
    rules: list[Rule] = []
    for effect in ("ask", "deny"):
        rules += [_checked(text, effect, "project", path) for text in _rule_list(table, effect, path)]
    allowed = _rule_list(table, "allow", path)
    warnings = []
    if allowed:
        warnings.append(f"{path}: allow rules from the repository are not applied ({', '.join(allowed)}): "
                        "a repository cannot approve its own commands; choose \"always\" in the approval "
                        "dialog and save it, or put them in config.toml")
    return rules, warnings


def _rule_list(table: Mapping[str, Any], effect: str, where: Path | str) -> list[str]:
    value = table.get(effect, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RuleError(f"{where}: permissions.{effect} must be a list of rules (strings)")
    return value


def _checked(text: str, effect: Effect, source: Source, where: Path | str) -> Rule:
    try:
        return parse_rule(text, effect, source)
    except RuleError as error:
        raise RuleError(f"{where}: {error}") from None


def load_permissions(*, workspace: Path, project: Path, config_rules: Mapping[str, list[str]],
                     allowed_tools: list[str], disallowed_tools: list[str], data_dir: Path | None) -> Permissions:
    """Every source's rules, in the order /permissions lists them; RuleError (one line) on a bad one."""
    rules = [parse_rule(t, "allow", "flag") for t in split_rule_list(allowed_tools)]
    rules += [parse_rule(t, "deny", "flag") for t in split_rule_list(disallowed_tools)]
    for effect in EFFECTS:
        rules += [parse_rule(text, effect, "config") for text in config_rules.get(effect, [])]
    project_rules, warnings = _project_rules(project)
    rules += project_rules
    saved = SavedRules(data_dir, project) if data_dir is not None else None
    if saved is not None:
        for text in saved.rules():
            try:
                rules.append(parse_rule(text, "allow", "saved"))
            except RuleError as error:
                warnings.append(f"{saved.path}: {error}; not applied")
        if saved.refused is not None:
            warnings.append(f"{saved.refused}; the rules you saved are not applied")
    return Permissions(workspace=workspace, rules=rules, saved=saved, warnings=warnings)

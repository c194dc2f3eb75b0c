"""Path-scoped rules: loaded only when the model touches a file they are about.

Rule files are Markdown files under ``.agents/rules/`` and ``.claude/rules/``
(in the user's config dir and in every directory from the repository root
down to the working directory). One whose YAML front matter has a
``paths:`` glob list applies only to matching files: the engine attaches it
to the result of the read or edit that touched such a file, once while it is
in the context, and again after a compaction or clearing removed it. A rule
without ``paths:`` applies everywhere and goes to the system prompt with the
memory files.

Only the small subset of YAML these headers use is parsed (no dependency):
``paths: glob``, ``paths: [a, "b"]``, ``paths: a, b`` and a block list of
``- glob`` lines. Globs: ``*`` (within a directory), ``**`` (any depth),
``?``, ``[abc]`` and ``{a,b}``; relative to the directory holding
``.agents``/``.claude``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from app.context.import_policy import ImportPolicy, find_repo_root
from app.context.tokens import count_tokens

RULE_DIRS = (".agents/rules", ".claude/rules")
MAX_RULE_CHARS = 20_000
MAX_RULE_FILES = 200
ATTACH_OPEN = "<rule file=\""  # the marker an attached rule starts with (found again after compaction)


class RuleParseError(ValueError):
    """A rule file's front matter could not be read; the message names the file and the line."""


@dataclass
class Rule:
    path: Path  # the rule file
    base_dir: Path  # globs are relative to this directory
    globs: tuple[str, ...]  # empty: applies everywhere
    body: str

    @cached_property
    def tokens(self) -> int:
        return count_tokens(self.attachment())

    def attachment(self) -> str:
        """The text appended to a tool result (its first line is the marker)."""
        return (f"{ATTACH_OPEN}{self.path}\" paths=\"{', '.join(self.globs)}\">\n"
                f"Project rule for files matching these paths; follow it for this file.\n"
                f"{self.body.strip()}\n</rule>")

    @property
    def marker(self) -> str:
        return f"{ATTACH_OPEN}{self.path}\""

    def matches(self, file_path: Path) -> bool:
        try:
            rel = file_path.resolve().relative_to(self.base_dir.resolve())
        except ValueError:
            return False
        text = rel.as_posix()
        return any(_glob_regex(g).fullmatch(text) for g in self.globs)


@dataclass
class RuleSet:
    rules: list[Rule] = field(default_factory=list)  # path-scoped ones
    unconditional: list[Rule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line per unreadable rule file

    def matching(self, file_path: Path) -> list[Rule]:
        return [r for r in self.rules if r.matches(file_path)]


# ---- front matter ----

def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _split_flow(value: str) -> list[str]:
    """``a, "b,c", d`` -> [a, b,c, d]: commas inside quotes or braces do not split."""
    items: list[str] = []
    current = ""
    quote: str | None = None
    depth = 0
    for ch in value:
        if quote:
            current += ch
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            current += ch
        elif ch == "{":
            depth += 1
            current += ch
        elif ch == "}":
            depth = max(0, depth - 1)
            current += ch
        elif ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [_unquote(i) for i in items if i.strip()]


def parse_front_matter(text: str, where: str = "rule file") -> tuple[dict[str, list[str] | str], str]:
    """(header fields, body). No front matter: ({}, text). ``paths`` is always a list."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        raise RuleParseError(f"{where}: front matter opened with '---' on line 1 is never closed") from None
    fields_: dict[str, list[str] | str] = {}
    key: str | None = None
    for number, raw in enumerate(lines[1:end], start=2):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith("- ") or stripped == "-":
            items = fields_.get(key) if key is not None else None
            if not isinstance(items, list):
                raise RuleParseError(f"{where}: line {number}: a list item outside a list")
            item = _unquote(stripped[1:])
            if item:
                items.append(item)
            continue
        name, sep, value = stripped.partition(":")
        if not sep or not name.strip():
            raise RuleParseError(f"{where}: line {number}: expected 'key: value', got {stripped!r}")
        key = name.strip()
        value = value.strip()
        if key == "paths":
            if not value:
                fields_[key] = []
            elif value.startswith("[") and value.endswith("]"):
                fields_[key] = _split_flow(value[1:-1])
            else:
                fields_[key] = _split_flow(value)
        else:
            fields_[key] = [] if not value else _unquote(value)
    body = "\n".join(lines[end + 1:])
    return fields_, body


# ---- globs ----

def _expand_braces(pattern: str) -> list[str]:
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    for i in range(start, len(pattern)):
        if pattern[i] == "{":
            depth += 1
        elif pattern[i] == "}":
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1:i]
                options = _split_flow(inner) if "," in inner else [inner]
                return [e for opt in options for e in _expand_braces(pattern[:start] + opt + pattern[i + 1:])]
    return [pattern]  # unbalanced: literal


@lru_cache(maxsize=512)
def _glob_regex(glob: str) -> re.Pattern[str]:
    glob = glob.strip().removeprefix("./")
    alternatives: list[str] = []
    for pattern in _expand_braces(glob):
        out = ""
        i = 0
        while i < len(pattern):
            c = pattern[i]
            if pattern.startswith("**/", i):
                out += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                out += ".*"
                i += 2
            elif c == "*":
                out += "[^/]*"
                i += 1
            elif c == "?":
                out += "[^/]"
                i += 1
            elif c == "[":
                close = pattern.find("]", i + 1)
                if close < 0:
                    out += re.escape(c)
                    i += 1
                else:
                    inner = pattern[i + 1:close].replace("\\", "\\\\")
                    if inner.startswith("!"):
                        inner = "^" + inner[1:]
                    out += f"[{inner}]"
                    i = close + 1
            else:
                out += re.escape(c)
                i += 1
        # A pattern without a slash names a file anywhere below (like .gitignore).
        if "/" not in pattern:
            out = "(?:.*/)?" + out
        alternatives.append(out)
    return re.compile("|".join(f"(?:{a})" for a in alternatives))


def glob_matches(glob: str, relative_path: str) -> bool:
    return _glob_regex(glob).fullmatch(relative_path) is not None


# ---- discovery ----

def rule_dirs(cwd: Path, user_config_dir: Path | None) -> list[tuple[Path, Path]]:
    """(rules directory, base directory for its globs), general first."""
    bases: list[Path] = []
    if user_config_dir is not None:
        bases.append(user_config_dir)
    cwd = cwd.resolve()
    root = find_repo_root(cwd) or cwd
    chain: list[Path] = []
    d = cwd
    while True:
        chain.append(d)
        if d == root or d.parent == d:
            break
        d = d.parent
    bases.extend(reversed(chain))
    out: list[tuple[Path, Path]] = []
    for base in bases:
        for sub in RULE_DIRS:
            if (base / sub).is_dir():
                out.append((base / sub, base))
    return out


def _rule_files(directory: Path) -> Iterable[Path]:
    # Not only regular files: a FIFO or a device among the rules is refused, and said, when read.
    return sorted(p for p in directory.rglob("*.md") if p.exists() and not p.is_dir())


def load_rules(cwd: Path, user_config_dir: Path | None, *, policy: ImportPolicy | None = None) -> RuleSet:
    """Every rule file once: the same file reached through two directories (a
    symlinked rules dir) or the same text in two places loads once. A rule file whose
    real path is outside the repository (a symlink out of it) needs the user's approval,
    as an import does (``policy``; its notices say what was held back)."""
    if policy is None:
        policy = ImportPolicy.for_workspace(cwd, user_config_dir)
    result = RuleSet()
    seen_paths: set[Path] = set()
    seen_text: set[str] = set()
    count = 0
    for directory, base in rule_dirs(cwd, user_config_dir):
        for path in _rule_files(directory):
            resolved = path.resolve()
            if resolved in seen_paths or count >= MAX_RULE_FILES:
                continue
            seen_paths.add(resolved)
            if not policy.admit(resolved, directory, user_level=policy.user_level(directory)):
                continue
            text = policy.read(resolved, path, scan=True)  # a credential in it waits for approval
            if text is None:
                continue
            try:
                header, body = parse_front_matter(text, f"rule file {path}")
            except RuleParseError as err:
                result.problems.append(str(err))
                continue
            body = body.strip()
            if len(body) > MAX_RULE_CHARS:
                body = body[:MAX_RULE_CHARS] + f"\n[... rule capped at {MAX_RULE_CHARS} characters ...]"
            digest = hashlib.sha256(body.encode()).hexdigest()
            if not body or digest in seen_text:
                continue
            seen_text.add(digest)
            count += 1
            paths = header.get("paths")
            globs = tuple(paths) if isinstance(paths, list) else ()
            rule = Rule(path=path, base_dir=base, globs=globs, body=body)
            (result.rules if globs else result.unconditional).append(rule)
    return result


def attached_rule_paths(texts: Sequence[str]) -> set[str]:
    """Rule files whose attachment is in these texts (tool results of the live history)."""
    found: set[str] = set()
    for text in texts:
        start = 0
        while True:
            i = text.find(ATTACH_OPEN, start)
            if i < 0:
                break
            j = text.find('"', i + len(ATTACH_OPEN))
            if j < 0:
                break
            found.add(text[i + len(ATTACH_OPEN):j])
            start = j
    return found

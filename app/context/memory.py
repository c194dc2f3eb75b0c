"""Memory files: rules that survive compaction.

AGENTS.md / CLAUDE.md from the user's config dir, then from the repository
root down to the working directory (nearer files later, so more specific
rules come last). ``@relative/path`` imports are inlined where they appear.
The bundle goes into the system prompt, never into the history.

What goes into the system prompt goes to the provider with every request, so
what may be read is decided by ``ImportPolicy``: inside the
repository, or approved by the user; never a secret store or tidegauge's own
config; never more than a byte cap; never a FIFO or a device.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ValidationError

from app.context.import_policy import (  # re-exported: callers know them as memory's
    ImportNotice as ImportNotice,
    ImportPolicy as ImportPolicy,
    real_path,
    find_repo_root as find_repo_root,
    read_bounded as read_bounded,
)
from app.context.rules import RuleSet, load_rules
from app.context.tokens import count_tokens
from app.kernel.private_files import read_private, refusal, write_private_atomic

MAX_IMPORT_DEPTH = 5
MAX_FILE_CHARS = 40_000
MAX_TOTAL_CHARS = 100_000

# An import is a whole whitespace-separated token starting with "@".
_IMPORT_RE = re.compile(r"(?<!\S)@(\S+)")
_TRAILING_PUNCT = ".,;:!?)]}>\"'"


@dataclass
class MemoryFile:
    path: Path
    text: str  # imports already inlined

    @cached_property
    def tokens(self) -> int:
        # Counted on first use, not at load: loading the encoder must not delay the first frame.
        return count_tokens(self.text)


@dataclass
class MemoryBundle:
    files: list[MemoryFile] = field(default_factory=list)
    # Every file read into the bundle, imports included (resolved): a path-scoped
    # rule already here is not attached to a tool result again.
    sources: set[Path] = field(default_factory=set)
    # What was held back or cut, one notice per file (imports needing approval among them).
    notices: list[ImportNotice] = field(default_factory=list)
    # The rule files read with the memory (None: not asked for); the runtime uses these.
    rules: RuleSet | None = None

    @property
    def pending(self) -> list[ImportNotice]:
        """Imports and rule files outside the repository that wait for the user's approval."""
        return [n for n in self.notices if n.action == "ask"]

    @cached_property
    def text(self) -> str:
        """Each file under a header line naming its path."""
        return "\n\n".join(f"Contents of {f.path}:\n\n{f.text}" for f in self.files)

    @cached_property
    def tokens(self) -> int:
        return count_tokens(self.text)

    @property
    def paths(self) -> list[Path]:
        return [f.path for f in self.files]


def _cap(text: str, limit: int, what: str) -> str:
    if len(text) <= limit:
        return text
    return (text[:limit] + f"\n[... {what} capped: {len(text)} characters, "
            f"showing the first {limit} ...]")


class _Loader:
    def __init__(self, max_file_chars: int, max_total_chars: int, policy: ImportPolicy) -> None:
        self.policy = policy
        self.seen: set[Path] = set()
        # The same text under two paths (AGENTS.md copied to CLAUDE.md, a rule copied
        # into two rules dirs) is loaded once: by content, not only by path.
        self.seen_text: set[str] = set()
        self.max_file_chars = max_file_chars
        self.chars_left = max_total_chars
        self.capped = False
        # Imports read so far: a hostile tree of many imports stops early.
        self.import_chars_left = max_total_chars

    def _resolve_import(self, raw: str, base_dir: Path) -> Path | None:
        """The real path an import names (symlinks followed), or None when it names no file
        ("@someone", a folder, nothing there): then it is plain text."""
        candidates = [raw]
        stripped = raw.rstrip(_TRAILING_PUNCT)
        if stripped and stripped != raw:
            candidates.append(stripped)
        for cand in candidates:
            p = Path(os.path.expanduser(cand))
            p = p if p.is_absolute() else base_dir / p
            try:
                info = p.stat()  # follows symlinks; never opens (a FIFO does not block here)
            except (OSError, ValueError):
                continue
            if not stat.S_ISDIR(info.st_mode):
                return real_path(p)
        return None

    def expand(self, path: Path, depth: int, stack: tuple[Path, ...], *, user_level: bool,
               importer: Path) -> str:
        """The text of ``path`` with its imports inlined after the line naming them. An import
        (``depth`` > 0) holding something shaped like a credential waits for approval."""
        text = self.policy.read(path, importer, scan=depth > 0)
        if text is None:
            return ""
        text = _cap(text, self.max_file_chars, f"file {path}")
        out: list[str] = []
        in_fence = False
        for line in text.splitlines():
            out.append(line)
            if line.lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
                continue
            if in_fence or "@" not in line:
                continue
            # Imports inside `inline code` do not count: look only outside backticks.
            outside = " ".join(line.split("`")[0::2])
            for match in _IMPORT_RE.finditer(outside):
                target = self._resolve_import(match.group(1), path.parent)
                if target is None:
                    continue  # "@someone" or a missing file: plain text
                if target in stack:
                    out.append(f"(import of {target} skipped: import cycle)")
                elif target in self.seen:
                    out.append(f"(import of {target} skipped: already loaded above)")
                elif self.import_chars_left <= 0:
                    out.append(f"(import of {target} skipped: memory size cap reached)")
                elif depth + 1 > MAX_IMPORT_DEPTH:
                    out.append(f"(import of {target} skipped: imports nest deeper than "
                               f"{MAX_IMPORT_DEPTH})")
                elif not self.policy.admit(target, path, user_level=user_level):
                    out.append(f"(import of {match.group(1)} not loaded: outside the repository or a "
                               "protected file)")
                else:
                    self.seen.add(target)
                    body = self.expand(target, depth + 1, (*stack, target), user_level=user_level,
                                       importer=path)
                    self.import_chars_left -= len(body)
                    out.append(f"--- imported from {target} ---\n{body}\n--- end of {target} ---")
        return "\n".join(out)

    def load(self, path: Path) -> MemoryFile | None:
        resolved = real_path(path)
        if resolved in self.seen or self.chars_left <= 0:
            return None
        self.seen.add(resolved)
        user_level = self.policy.user_level(path)
        # AGENTS.md itself may be a symlink out of the repository: checked like an import.
        if not self.policy.admit(resolved, path, user_level=user_level):
            return None
        text = self.expand(resolved, 0, (resolved,), user_level=user_level, importer=path).strip()
        if not text:
            return None
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in self.seen_text:
            return None
        self.seen_text.add(digest)
        if len(text) > self.chars_left:
            text = _cap(text, self.chars_left, "memory files total")
            self.capped = True
            self.chars_left = 0
        else:
            self.chars_left -= len(text)
        return MemoryFile(path=path, text=text)


def memory_candidates(cwd: Path, user_config_dir: Path | None,
                      names: Sequence[str] = ("AGENTS.md", "CLAUDE.md")) -> list[Path]:
    """Where memory files may be, in load order (existing entries that are not folders:
    a FIFO named AGENTS.md is refused when read, with a notice, rather than skipped unsaid)."""
    dirs: list[Path] = []
    if user_config_dir is not None:
        dirs.append(user_config_dir)
    cwd = cwd.resolve()
    root = find_repo_root(cwd) or cwd
    chain: list[Path] = []
    d = cwd
    while True:  # cwd up to the root; the root is cwd or one of its ancestors
        chain.append(d)
        if d == root or d.parent == d:
            break
        d = d.parent
    dirs.extend(reversed(chain))
    return [d / name for d in dirs for name in names if (d / name).exists() and not (d / name).is_dir()]


def load_memory(cwd: Path, user_config_dir: Path | None,
                names: Sequence[str] = ("AGENTS.md", "CLAUDE.md"),
                max_file_chars: int = MAX_FILE_CHARS,
                max_total_chars: int = MAX_TOTAL_CHARS, include_rules: bool = True,
                policy: ImportPolicy | None = None) -> MemoryBundle:
    """All memory files in load order, each file once, imports inlined, size-capped; what the
    policy held back is in ``notices`` (default policy: the repository of ``cwd``, nothing
    approved outside it)."""
    if policy is None:
        policy = ImportPolicy.for_workspace(cwd, user_config_dir)
    loader = _Loader(max_file_chars, max_total_chars, policy)
    files: list[MemoryFile] = []
    for path in memory_candidates(cwd, user_config_dir, names):
        loaded = loader.load(path)
        if loaded is not None:
            files.append(loaded)
    rules = None
    if include_rules:
        rules = load_rules(cwd, user_config_dir, policy=policy)
        files.extend(_unconditional_rules(loader, rules))
    return MemoryBundle(files, sources=set(loader.seen), notices=list(policy.notices), rules=rules)


def _unconditional_rules(loader: _Loader, rules: RuleSet) -> list[MemoryFile]:
    """Rule files without ``paths:`` apply everywhere: they join the memory files,
    each once (a rule a memory file already imported is not loaded again)."""
    out: list[MemoryFile] = []
    for rule in rules.unconditional:
        resolved = rule.path.resolve()
        digest = hashlib.sha256(rule.body.encode()).hexdigest()
        if resolved in loader.seen or digest in loader.seen_text or loader.chars_left <= 0:
            continue
        loader.seen.add(resolved)
        loader.seen_text.add(digest)
        text = rule.body
        if len(text) > loader.chars_left:
            text = _cap(text, loader.chars_left, "memory files total")
            loader.chars_left = 0
        else:
            loader.chars_left -= len(text)
        out.append(MemoryFile(path=rule.path, text=text))
    return out


# ---- the user's answers, remembered per project ----

APPROVALS_FILE = "memory-imports.json"
MAX_APPROVALS_BYTES = 1024 * 1024


class _ProjectDecisions(BaseModel):
    approved: list[str] = []
    declined: list[str] = []


class _DecisionsFile(BaseModel):
    version: int = 1
    projects: dict[str, _ProjectDecisions] = {}


@dataclass
class ImportApprovals:
    """Imports from outside the repository the user approved or declined, per project (the
    repository's root), in a 0600 file under the data directory: each is asked once."""

    data_dir: Path
    project: Path
    # Why the file was not read (a symlink planted there...), one line; None when it was or is missing.
    refused: str | None = None

    @property
    def path(self) -> Path:
        return self.data_dir / APPROVALS_FILE

    def _read(self) -> _DecisionsFile:
        try:
            raw = read_private(self.path, MAX_APPROVALS_BYTES)  # never through a symlink
        except OSError as error:
            self.refused = refusal(self.path, error)
            return _DecisionsFile()  # missing or refused: asked again, which is the safe side
        try:
            return _DecisionsFile.model_validate_json(raw or b"{}")
        except ValidationError:
            return _DecisionsFile()  # damaged: the same

    def decisions(self) -> tuple[set[Path], set[Path]]:
        """(approved, declined) for this project."""
        mine = self._read().projects.get(str(self.project), _ProjectDecisions())
        return {Path(p) for p in mine.approved}, {Path(p) for p in mine.declined}

    def record(self, target: Path, approved: bool) -> None:
        stored = self._read()
        mine = stored.projects.setdefault(str(self.project), _ProjectDecisions())
        name = str(target)
        mine.approved = [p for p in mine.approved if p != name] + ([name] if approved else [])
        mine.declined = [p for p in mine.declined if p != name] + ([] if approved else [name])
        write_private_atomic(self.path, json.dumps(stored.model_dump(), indent=1).encode())  # 0600, never through a link

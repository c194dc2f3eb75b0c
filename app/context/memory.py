"""Memory files: rules that survive compaction.

AGENTS.md / CLAUDE.md from the user's config dir, then from the repository
root down to the working directory (nearer files later, so more specific
rules come last). ``@relative/path`` imports are inlined where they appear.
The bundle goes into the system prompt, never into the history.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

from app.context.tokens import count_tokens

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


def find_repo_root(cwd: Path) -> Path | None:
    """The nearest ancestor (or ``cwd`` itself) holding ``.git`` (a dir or a worktree file)."""
    for d in (cwd, *cwd.parents):
        if (d / ".git").exists():
            return d
    return None


def _read(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None  # binary: not a rules file
    return data.decode("utf-8", errors="replace")


def _cap(text: str, limit: int, what: str) -> str:
    if len(text) <= limit:
        return text
    return (text[:limit] + f"\n[... {what} capped: {len(text)} characters, "
            f"showing the first {limit} ...]")


class _Loader:
    def __init__(self, max_file_chars: int, max_total_chars: int) -> None:
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
        candidates = [raw]
        stripped = raw.rstrip(_TRAILING_PUNCT)
        if stripped and stripped != raw:
            candidates.append(stripped)
        for cand in candidates:
            p = Path(os.path.expanduser(cand))
            p = p if p.is_absolute() else base_dir / p
            if p.is_file():
                return p.resolve()
        return None

    def expand(self, path: Path, depth: int, stack: tuple[Path, ...]) -> str:
        """The text of ``path`` with its imports inlined after the line naming them."""
        text = _read(path)
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
                else:
                    self.seen.add(target)
                    body = self.expand(target, depth + 1, (*stack, target))
                    self.import_chars_left -= len(body)
                    out.append(f"--- imported from {target} ---\n{body}\n--- end of {target} ---")
        return "\n".join(out)

    def load(self, path: Path) -> MemoryFile | None:
        resolved = path.resolve()
        if resolved in self.seen or self.chars_left <= 0:
            return None
        self.seen.add(resolved)
        text = self.expand(resolved, 0, (resolved,)).strip()
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
    """Where memory files may be, in load order (existing files only)."""
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
    return [d / name for d in dirs for name in names if (d / name).is_file()]


def load_memory(cwd: Path, user_config_dir: Path | None,
                names: Sequence[str] = ("AGENTS.md", "CLAUDE.md"),
                max_file_chars: int = MAX_FILE_CHARS,
                max_total_chars: int = MAX_TOTAL_CHARS, include_rules: bool = True) -> MemoryBundle:
    """All memory files in load order, each file once, imports inlined, size-capped."""
    loader = _Loader(max_file_chars, max_total_chars)
    files: list[MemoryFile] = []
    for path in memory_candidates(cwd, user_config_dir, names):
        loaded = loader.load(path)
        if loaded is not None:
            files.append(loaded)
    if include_rules:
        files.extend(_unconditional_rules(loader, cwd, user_config_dir))
    return MemoryBundle(files, sources=set(loader.seen))


def _unconditional_rules(loader: _Loader, cwd: Path, user_config_dir: Path | None) -> list[MemoryFile]:
    """Rule files without ``paths:`` apply everywhere: they join the memory files,
    each once (a rule a memory file already imported is not loaded again)."""
    from app.context.rules import load_rules  # rules imports this module

    out: list[MemoryFile] = []
    for rule in load_rules(cwd, user_config_dir).unconditional:
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

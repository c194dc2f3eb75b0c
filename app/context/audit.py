"""Audited summaries: a deterministic checklist compared with every summary.

A summary written by a model (or by the session memory) can silently drop
the things a successor most needs: which files were changed, which commands
ran and how they ended, which errors are still open, what the user asked
last. This module extracts those facts
from the history being replaced, checks which of them the summary (plus
whatever is kept verbatim after it) already names, and returns the missing
ones as lines for a "checked facts" section.

The user's own words are not its business: a summary keeps every message the user typed
(``app.context.compaction.kept_user_words``), chosen by size, never by words; the audit
takes no sentence of theirs by its words either. It checks the latest request, which the
kept words always hold.

No model call, no randomness: the same history and summary always give the
same items, in the order they happened.
"""

from __future__ import annotations

import functools
import math
import re

from app.kernel.markers import EXIT_CODE
from dataclasses import dataclass, field
from typing import Sequence

from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.context.user_words import user_words

CHECKED_FACTS_HEADER = "## Checked facts"
CHECKED_FACTS_NOTE = ("(added by tidegauge: facts from the replaced history that the summary above did not "
                      "mention; they are exact)")
EDIT_TOOLS = ("write_file", "edit_file")
COMMAND_TOOL = "run_bash"
MAX_COMMANDS = 12  # the latest ones; older commands are counted, not listed
MAX_ITEM_CHARS = 200  # a command's or a request's line
# A fact counts as named when this share of its significant words is in the summary.
WORD_COVERAGE = 0.8

_EXIT_RE = EXIT_CODE  # run_bash's marker (app.kernel.markers)
_FAILURE_RE = re.compile(r"error|fail|exit|not found|missing|does not exist|denied|refused|crash", re.IGNORECASE)
_WORD_RE = re.compile(r"[A-Za-z0-9_./-]{3,}")
_STOPWORDS = frozenset("""the and for with that this from into your you are was were have has had but all any
can will would should could then than them they their there here what when where which while who why how about
after before also just only very more most some such each other into onto over under please""".split())


@dataclass(frozen=True)
class Fact:
    kind: str  # "file", "command", "error", "request"; "words": what the bound on the user's words left out
    text: str  # the line shown in the checked-facts section
    # What the summary must contain for the fact to count as named.
    needles: tuple[str, ...] = ()  # any one of these substrings (case-insensitive)
    words: tuple[str, ...] = ()  # or ``coverage`` of these words
    coverage: float = WORD_COVERAGE
    # or one of these (the failing call's command or path) with a word saying it failed
    failed_call: tuple[str, ...] = ()
    # Tokens that tell this fact from a near twin (identifiers, paths, numbers, quoted
    # strings): nothing counts as naming the fact unless every one of these is there verbatim.
    distinctive: tuple[str, ...] = ()


@dataclass
class AuditResult:
    facts: list[Fact] = field(default_factory=list)  # everything the checklist holds
    missing: list[Fact] = field(default_factory=list)  # what the summary did not name

    @property
    def added(self) -> list[str]:
        return [f.text for f in self.missing]

    def section(self) -> str:
        """The text appended to the summary ("" when nothing is missing)."""
        if not self.missing:
            return ""
        lines = [CHECKED_FACTS_HEADER, CHECKED_FACTS_NOTE, *(f"- {f.text}" for f in self.missing)]
        return "\n".join(lines)


def _one_line(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _significant_words(text: str) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(text.lower()):
        word = word.strip("./-")
        if len(word) >= 3 and word not in _STOPWORDS:
            seen.setdefault(word, None)
    return tuple(seen)


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def is_named(fact: Fact, summary: str) -> bool:
    """Does ``summary`` name this fact (a needle verbatim, or most of its words)?

    Whatever else matches, a fact with distinctive tokens is named only when every one of
    them is there verbatim: "never name a file ZX0QW" is not kept by a rule about ZX7QW.
    """
    if fact.distinctive and not _all_verbatim(fact.distinctive, summary):
        return False
    norm = _normalise(summary)
    if any(n and _normalise(n) in norm for n in fact.needles):
        return True
    if fact.failed_call and _FAILURE_RE.search(summary) and any(
            c and _normalise(c) in norm for c in fact.failed_call):
        return True
    if fact.words:
        present = set(_significant_words(summary))
        hits = sum(1 for w in fact.words if w in present)
        return hits >= max(1, math.ceil(fact.coverage * len(fact.words) - 1e-9))
    return False


# Quoted strings; a single quote opens only where no letter precedes it (so "don't" does not).
_QUOTED_RE = re.compile(r'"([^"\n]+)"|`([^`\n]+)`|“([^”\n]+)”|(?<!\w)\'([^\'\n]+)\'(?!\w)')
_TOKEN_EDGES = ".,;:!?()[]{}<>\"'`“”"


def _is_distinctive(token: str) -> bool:
    """An identifier, path, number or flag: a digit, a path or name separator, a dot inside
    a name, an inner capital (camelCase), or a leading dash (--force)."""
    return bool(re.search(r"\d|[/\\_]|\w\.\w|[a-z][A-Z]", token) or re.match(r"-+[A-Za-z]", token))


@functools.lru_cache(maxsize=8)
def _tokens_of(summary: str) -> frozenset[str]:
    return frozenset(t.strip(_TOKEN_EDGES) for t in summary.split())


def _all_verbatim(tokens: Sequence[str], summary: str) -> bool:
    """Every token in ``summary`` as a whole token (a "3" inside "2023" is not a 3);
    a quoted string of several words as it stands."""
    words = _tokens_of(summary)
    if all(t in words for t in tokens):
        return True
    folded = " ".join(summary.split())  # a quoted string's spacing as the rule folds it
    return all((" ".join(t.split()) in folded) if any(c.isspace() for c in t) else (t in words) for t in tokens)


def distinctive_tokens(text: str) -> tuple[str, ...]:
    """What must appear verbatim in a summary for ``text`` to count as named."""
    found: dict[str, None] = {}
    for match in _QUOTED_RE.finditer(text):
        quoted = next(g for g in match.groups() if g is not None).strip()
        if quoted:
            found.setdefault(quoted, None)
    for raw in text.split():
        token = raw.strip(_TOKEN_EDGES)
        if token and _is_distinctive(token):
            found.setdefault(token, None)
    return tuple(found)


def _user_texts(history: Sequence[Message]) -> list[str]:
    return [b.text for b in user_words(history)]


def _exit_code(content: str) -> str | None:
    matches = _EXIT_RE.findall(content[-400:])
    return matches[-1][0] if matches else None  # the code; the rest of the marker says how it ended


def _error_line(content: str) -> str:
    """The most telling line of an error output: the last line naming an error, else the first."""
    lines = [ln.strip() for ln in content.splitlines() if ln.strip() and not _EXIT_RE.fullmatch(ln.strip())]
    if not lines:
        return "(no output)"
    for pattern in (r"error|exception|traceback", r"fail|not found|denied|refused"):
        for line in reversed(lines):
            if re.search(pattern, line, re.IGNORECASE):
                return line
    return lines[0]


def _call_key(use: ToolUseBlock) -> str:
    for key in ("command", "path", "pattern"):
        value = use.input.get(key)
        if isinstance(value, str):
            return value
    return ""


def extract_facts(history: Sequence[Message]) -> list[Fact]:
    """The checklist of the history a summary is about to replace."""
    uses: dict[str, ToolUseBlock] = {}
    results: list[tuple[ToolUseBlock, ToolResultBlock]] = []
    for msg in history:
        for block in msg.content:
            if isinstance(block, ToolUseBlock):
                uses[block.id] = block
            elif isinstance(block, ToolResultBlock) and block.tool_use_id in uses:
                results.append((uses[block.tool_use_id], block))

    facts: list[Fact] = []
    # Files written or edited (successfully), each once, in order of first change.
    changed: dict[str, str] = {}
    for use, result in results:
        path = use.input.get("path")
        if use.name in EDIT_TOOLS and isinstance(path, str) and not result.is_error:
            verb = "written" if use.name == "write_file" else "edited"
            if path not in changed:
                changed[path] = verb
            elif changed[path] != verb:
                changed[path] = "written and edited"
    for path, verb in changed.items():
        base = path.rsplit("/", 1)[-1]
        facts.append(Fact("file", f"file {verb}: {path}", needles=(path, base) if len(base) >= 4 else (path,)))

    # Commands with their exit codes; the latest ones listed.
    commands = [(use, result) for use, result in results if use.name == COMMAND_TOOL
                and isinstance(use.input.get("command"), str)]
    if len(commands) > MAX_COMMANDS:
        facts.append(Fact("command", f"{len(commands) - MAX_COMMANDS} earlier commands not listed here",
                          needles=("commands",)))
    for use, result in commands[-MAX_COMMANDS:]:
        command = _one_line(use.input["command"], 120)
        code = _exit_code(result.content)
        status = f"exit code {code}" if code is not None else ("failed" if result.is_error else "exit code unknown")
        facts.append(Fact("command", f"ran `{command}` → {status}", needles=(command,),
                          words=_significant_words(command)))

    # Errors not followed by a success of the same call (same tool and key argument).
    last_outcome: dict[tuple[str, str], tuple[ToolUseBlock, ToolResultBlock, bool]] = {}
    for use, result in results:
        code = _exit_code(result.content) if use.name == COMMAND_TOOL else None
        failed = result.is_error or (code is not None and code not in ("0",))
        last_outcome[(use.name, _call_key(use))] = (use, result, failed)
    for (name, key), (_use, result, failed) in last_outcome.items():
        if not failed:
            continue
        line = _one_line(_error_line(result.content), 160)
        code = _exit_code(result.content) if name == COMMAND_TOOL else None
        if code is not None and line == "(no output)":
            line = f"exit code {code}, no output"
        where = f"{name}({_one_line(key, 60)})" if key else name
        facts.append(Fact("error", f"unresolved error from {where}: {line}", needles=(line,),
                          words=_significant_words(line), failed_call=(key,) if key else ()))

    texts = _user_texts(history)
    if texts:
        latest = texts[-1]
        facts.append(Fact("request", f"the user's latest request: {_one_line(latest)}",
                          needles=(_one_line(latest, 10_000),), words=_significant_words(latest),
                          distinctive=distinctive_tokens(latest)))
    return facts


def audit_summary(history: Sequence[Message], summary: str, kept: Sequence[Message] = ()) -> AuditResult:
    """Compare the checklist of ``history`` with ``summary`` (and the messages kept verbatim after it)."""
    facts = extract_facts(history)
    kept_text = "\n".join(_message_text(m) for m in kept)
    against = summary + ("\n" + kept_text if kept_text else "")
    missing = [f for f in facts if not is_named(f, against)]
    return AuditResult(facts=facts, missing=missing)


def _message_text(msg: Message) -> str:
    parts: list[str] = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            parts.append(f"{block.name} {_call_key(block)}")
        elif isinstance(block, ToolResultBlock):
            parts.append(block.content[:2_000])
    return "\n".join(parts)


def append_checked_facts(summary: str, result: AuditResult) -> str:
    section = result.section()
    return summary if not section else f"{summary.rstrip()}\n\n{section}"

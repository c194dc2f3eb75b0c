"""The scripted model's scenarios: what it decides, from the request alone.

Its decisions are canned, but it decides each call from the request it
receives (the latest user request, the tool calls made since and their
results, or the compaction summary that replaced them), exactly as a real
model would have to. So it carries on after an auto-compaction, an overflow
recovery or a resumed session, and any prompt works after any other in one
session: only the latest request picks the scenario, and only what happened
since it counts as the scenario's own work.

Scenarios (``SCENARIOS``, in the order the menu lists them):
1. "find errors in app.log" (seed 000, experiment 2): ``cat app.log`` meets
   the registry's head+tail truncation; it spots the ERROR in the tail and
   follows the notice with ``grep -n ERROR app.log``.
2. "summarize the project" (experiment 3): reads file after file, so the
   context climbs through the warning line into an auto-compaction with the
   demo's small budget, then carries on from the summary.
3. "flood" (experiment 1 made safe): one ``cat`` of the 15 MB log through
   ``run_bash_untruncated``, a tool the plug-in registers with no output
   limit; the engine's projection cuts the result before sending, and the
   request still overflows the demo server's real (smaller) window, so the
   overflow recovery runs too (see ``DemoProvider.FLOOD_SERVER_WINDOW``).
4. "what did I ask first?": answers from the history or the summary (the
   seed's check that compaction kept the user's words).
5. "find where the importer rejects rows": delegates the search to
   a sub-agent through the real ``task`` tool. The same scripted model then
   serves the sub-agent: it knows it is one from the sub-agent's system prompt
   (as a real model would), lists the workspace and reads the importer and the
   module it validates rows with, and reports file and lines
   (``app.demo.rejections``); the main model's answer quotes that report, and
   none of the sub-agent's reading enters the main context.
6. "add a changelog entry": reads CHANGELOG.md and adds an "Unreleased" entry with edit_file,
   then says how to take it back: Esc Esc (or ``tidegauge rewind``) takes the conversation back
   to before the request and, with the files, the changelog as it was.

Besides the menu, "what is in your context?" answers from the request what its tool results
are now: after the user takes one out (the tool list's d), a one-line stub naming the saved
file stands where it was, which is what the demo's walk-through shows of an eviction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from app.context.compaction import is_summary_message, summary_parts
from app.context.overflow import DROPPED_NOTE
from app.context.pruning import CLEARED_PREFIX, EVICTED_TEMPLATE
from app.context.summarizer import (
    SummaryFacts,
    collect_facts,
    extractive_summary,
    outline,
    parse_summary,
    strip_line_numbers,
)
from app.demo.rejections import SourceFile, find_rejections, rejection_report
from app.demo.tools import UNTRUNCATED_BASH
from app.kernel.describe import plural
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.providers.base import ModelRequest
from app.agent.subagent import SUB_SYSTEM_PROMPT, TASK_TOOL

COMPACTION_MARK = "[Context compaction]"
MEMORY_MARK = "[Session memory update]"  # app.context.session_memory.MEMORY_PROMPT_HEAD
_INSTRUCTION_MARKS = (COMPACTION_MARK, MEMORY_MARK)
MEMORY_HEADER = "# Project and user rules (memory files)"
_FOCUS = re.compile(r"Focus especially on:\s*(.+)", re.DOTALL)
_GREP_LINE = re.compile(r"^(\d+):(.*)$")
_NOTICE = re.compile(r"… \[output truncated: [^\]]*\] …")
# What "summarize the project" reads, and what it leaves alone.
_READABLE = (".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".csv", ".json", ".yaml", ".yml")
_MAX_FILES = 40
# The flood scenario's warm-up: some ordinary history for the overflow recovery to drop.
FLOOD_WARMUP = ("inventory/storage.py", "inventory/orders.py")
# How the scripted model knows it is serving a sub-agent: the sub-agent's system prompt
# opens with this line (the same way a real model learns its role).
SUB_AGENT_MARK = SUB_SYSTEM_PROMPT.split("\n", 1)[0]
# What the delegate scenario hands the sub-agent: everything it needs, as the task tool asks.
DELEGATED_DESCRIPTION = "find where the importer rejects rows"
DELEGATED_TASK = (
    "Find where the importer in this workspace rejects rows of a stock snapshot. List the files, read the "
    "importer and the module it calls to validate a row, and report each place a row is rejected (file path "
    "and line numbers, with the check) and what the import does once a row has been rejected.")

# ---- reading the request ----

@dataclass
class ToolCall:
    use: ToolUseBlock
    result: ToolResultBlock | None

    @property
    def command(self) -> str:
        return str(self.use.input.get("command", ""))

    @property
    def path(self) -> str:
        return str(self.use.input.get("path", ""))


@dataclass
class Turn:
    """The latest genuine user request and what happened since."""

    request: str
    start: int  # index of the message that holds it (-1: none)
    calls: list[ToolCall] = field(default_factory=list)
    # Set when a compaction happened during this request: the summary's record of its work.
    summary: SummaryFacts | None = None
    from_summary: bool = False  # the request itself is quoted by that summary


def _genuine(text: str) -> bool:
    """Typed by the user: not the engine's drop note, not a compaction instruction."""
    return bool(text.strip()) and text != DROPPED_NOTE and not text.startswith(_INSTRUCTION_MARKS)


def user_requests(messages: Sequence[Message]) -> list[tuple[int, str, bool]]:
    """Everything the user asked, oldest first: (index of the message that holds it,
    the words, whether a compaction summary quotes them).

    Block order is time order: a summary quotes what came before it, and a prompt
    typed after a compaction is merged into the summary message as a later block;
    the overflow recovery appends the words of the rounds it dropped to the task
    message, after its note, and every round it kept is newer than those.
    """
    found: list[tuple[int, str, bool]] = []
    for index, msg in enumerate(messages):
        if msg.role != "user":
            continue
        blocks = [b for b in msg.content if isinstance(b, TextBlock)]
        parts = summary_parts(msg)
        if parts is not None:
            quoted = [b.text for b in parts.kept]
            if not quoted:  # a summary that quotes nothing: its own record of the request
                facts = parse_summary(parts.summary)
                quoted = [facts.latest_request] if facts and facts.latest_request else []
            found += [(index, text, True) for text in quoted]
            blocks = parts.later
        found += [(index, b.text, False) for b in blocks if _genuine(b.text)]
    return found


def read_turn(messages: Sequence[Message]) -> Turn:
    """The latest thing the user asked and the tool calls made since."""
    requests = user_requests(messages)
    start, request, from_summary = requests[-1] if requests else (-1, "", False)
    # The summary's record of work counts only when the compaction happened during this
    # request; a summary of earlier requests is their work, not this one's.
    summary = parse_summary(messages[start].text) if from_summary else None
    results = {b.tool_use_id: b for m in messages[start + 1:] for b in m.tool_results}
    calls = [ToolCall(use, results.get(use.id))
             for m in messages[start + 1:] if m.role == "assistant" for use in m.tool_uses]
    return Turn(request=request, start=start, calls=calls, summary=summary, from_summary=from_summary)


def pick_scenario(request: str) -> str:
    """The scenario the request asks for ("menu" when none): the first that matches, in
    ``MATCH_ORDER`` (so "flood app.log" floods, and "what did I ask first" is a recall)."""
    text = request.lower()
    for name in MATCH_ORDER:
        if SCENARIOS[name].pattern.search(text):
            return name
    return "menu"


# ---- what the model decides ----

@dataclass
class PlannedCall:
    name: str
    input: dict[str, Any]


@dataclass
class Decision:
    text: str
    thinking: str = ""
    calls: list[PlannedCall] = field(default_factory=list)
    is_summary: bool = False  # a compaction answer streams faster (the UI shows "compacting")


def _first_line_with(text: str, word: str) -> str | None:
    for line in text.splitlines():
        if word in line and not line.startswith("… [output truncated"):
            return line.strip()
    return None


def _last_line_with(text: str, word: str) -> str | None:
    for line in reversed(text.splitlines()):
        if word in line and not line.startswith("… [output truncated"):
            return line.strip()
    return None


def _notice(text: str) -> str | None:
    match = _NOTICE.search(text)
    return match.group(0).strip("… ").strip() if match else None


def _refusal(call: ToolCall) -> str | None:
    if call.result is not None and call.result.is_error and "[exit code" not in call.result.content:
        return call.result.content.strip()
    return None


def _decide_errors(turn: Turn) -> Decision:
    cat = next((c for c in turn.calls if c.use.name == "run_bash" and c.command.startswith("cat ")
                and c.result is not None), None)
    grep = next((c for c in turn.calls if c.use.name == "run_bash" and "grep" in c.command
                 and c.result is not None), None)
    carried_cat = bool(turn.summary and any("cat app.log" in c for c in turn.summary.commands))
    if cat is None and grep is None and not carried_cat:
        return Decision(
            thinking="The user wants the errors in app.log. Start by looking at the whole file.",
            text="Let me look at `app.log` first.",
            calls=[PlannedCall("run_bash", {"command": "cat app.log"})])
    if grep is None:
        refused = _refusal(cat) if cat else None
        if refused:
            return Decision(thinking="The command was refused.", text=(
                f"I couldn't run `cat`: {refused}\n\nTo let me run commands, approve the call when asked, "
                "or start tidegauge with `--yes`."))
        parts = []
        if cat is not None and cat.result is not None:
            notice = _notice(cat.result.content)
            tail_error = _last_line_with(cat.result.content, "ERROR")
            if notice:
                parts.append("The output was too long, so the tool registry kept only its head and its tail, "
                             f"with a notice in between:\n\n> {notice}")
            if tail_error:
                parts.append(f"The tail already shows an error:\n\n```\n{tail_error}\n```")
            else:
                parts.append("I see no ERROR line in what was kept.")
        else:
            parts.append("The summary says `cat app.log` already ran and its output was cut.")
        parts.append("The middle was left out, so there may be more. Following the notice, I'll grep for "
                     "every ERROR with its line number instead of reading it all.")
        return Decision(thinking="Truncated output: the head and tail are real, the middle is unknown. "
                                 "grep -n narrows it without flooding the context.",
                        text="\n\n".join(parts),
                        calls=[PlannedCall("run_bash", {"command": "grep -n ERROR app.log"})])
    refused = _refusal(grep)
    if refused:
        return Decision(text=f"I couldn't run `grep`: {refused}")
    hits = [(int(m.group(1)), m.group(2)) for line in grep.result.content.splitlines()  # type: ignore[union-attr]
            if (m := _GREP_LINE.match(line.strip())) and "ERROR" in m.group(2)]
    if not hits:
        return Decision(text="`grep -n ERROR app.log` found no ERROR lines: the log has no errors.")
    listed = "\n".join(f"{number}:{line}" for number, line in hits[:20])
    more = f"\n… and {len(hits) - 20} more" if len(hits) > 20 else ""
    number, line = hits[-1]
    last_line = ""
    if cat is not None and cat.result is not None:
        kept_tail = [row for row in cat.result.content.splitlines() if row.strip() and not row.startswith("[exit code")]
        if kept_tail and kept_tail[-1].strip() == line.strip():
            last_line = " It is the very last line of the file, which is why the head+tail truncation kept it."
    count = "one ERROR line" if len(hits) == 1 else f"{len(hits)} ERROR lines"
    cause = " The application lost its database: the connection was refused." if "database" in line else ""
    return Decision(
        thinking=f"grep found {plural(len(hits), 'line')}; the last is line {number}.",
        text=(f"Found {count} in `app.log`:\n\n```\n{listed}{more}\n```\n\n"
              f"**Line {number}**: `{line.strip()}`.{last_line}{cause} Everything else in the log is INFO "
              "traffic. The full `cat` output is saved on disk (the notice names the file), but it never had to enter "
              "my context: the truncation notice told me how to narrow it."))


def _listing(turn: Turn) -> list[str] | None:
    for call in reversed(turn.calls):
        if call.use.name == "list_files" and call.result is not None and not call.result.is_error:
            paths = []
            for line in call.result.content.splitlines()[1:]:
                entry = line.strip()
                if not entry or entry.startswith("[") or entry.endswith(("/", "@")) or "(skipped" in entry:
                    continue
                if entry.endswith(_READABLE) and not entry.startswith(("tool-results", ".")):
                    paths.append(entry)
            return paths
    return None


def _reading_order(path: str) -> tuple[int, str]:
    p = PurePosixPath(path)
    name = p.name.lower()
    if name.startswith("readme"):
        group = 0
    elif name in ("agents.md", "claude.md"):
        group = 1
    elif name in ("pyproject.toml", "setup.cfg", "setup.py", "package.json"):
        group = 2
    elif p.suffix == ".md":
        group = 3
    elif p.suffix == ".py" and not (name.startswith("test") or "tests" in p.parts or name == "conftest.py"):
        group = 4
        name = "" if name == "__init__.py" else name
        return group, str(p.parent / name)
    elif p.suffix == ".py":
        group = 5
        name = "" if name == "conftest.py" else name
        return group, str(p.parent / name)
    else:
        group = 6
    return group, path


@lru_cache(maxsize=64)
def _outline_of_read(path: str, result: str) -> str:
    """The outline of a read_file result. Each step of a summary decides again from every read
    so far, so a file read early in a turn would be outlined again at each later read."""
    return outline(path, strip_line_numbers(result))


def _read_outlines(turn: Turn) -> dict[str, str]:
    """path -> outline for every file read: before the compaction (from the summary) and since."""
    outlines = dict(turn.summary.files_read) if turn.summary else {}
    for call in turn.calls:
        if call.use.name != "read_file" or call.result is None:
            continue
        if call.result.is_error:
            outlines[call.path] = "could not be read: " + call.result.content.splitlines()[0][:120]
        elif call.result.content.startswith("File unchanged since"):
            outlines.setdefault(call.path, "read earlier")
        else:
            outlines[call.path] = _outline_of_read(call.path, call.result.content)
    return outlines


def _clip_words(text: str, limit: int) -> str:
    """``text`` cut at a word boundary with an ellipsis, if longer than ``limit``."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0].rstrip(",;:—- ")
    return cut + " …"


def _brief(note: str, limit: int = 70) -> str:
    """A short comment between reads (the final answer has the whole outline)."""
    return _clip_words(note.split("; ")[0].rstrip("."), limit)


def _tests_note(note: str) -> str:
    names = note.removeprefix("functions ").split(", ")
    tests = [n for n in names if n.startswith("test")]
    return f"{len(tests)} tests" if tests and note.startswith("functions ") else note


def _decide_summarize(turn: Turn) -> Decision:
    listing = _listing(turn)
    outlines = _read_outlines(turn)
    if listing is None:
        if turn.from_summary and outlines:
            return Decision(
                thinking="The history was compacted. The summary lists what I read; list again to find the rest.",
                text=(f"Carrying on from the summary: I had read {plural(len(outlines), 'file')} before the context was "
                      "compacted. Listing the project again to see what is left."),
                calls=[PlannedCall("list_files", {"path": "."})])
        return Decision(thinking="To summarize a project, first see what it contains.",
                        text="I'll list the project first, then read it file by file.",
                        calls=[PlannedCall("list_files", {"path": "."})])
    todo = [p for p in sorted(listing, key=_reading_order) if p not in outlines][:_MAX_FILES]
    last = next((c for c in reversed(turn.calls) if c.use.name == "read_file" and c.result is not None), None)
    if todo:
        nxt = todo[0]
        if turn.calls and turn.calls[-1].use.name == "list_files" and outlines:
            comment = f"{len(todo)} files left to read."
        elif last is not None and last.path in outlines:
            brief = _brief(outlines[last.path])
            if _reading_order(last.path)[0] == 5:
                brief = _tests_note(outlines[last.path])
            comment = f"`{last.path}`: {brief}" + ("" if brief.endswith("…") else ".")
        else:
            comment = f"{len(listing)} files to look at; starting with the overview."
        done, total = len(outlines), len(outlines) + len(todo)
        return Decision(thinking=f"Read {done} of {total} files; next {nxt}.",
                        text=f"{comment} Next: `{nxt}`.",
                        calls=[PlannedCall("read_file", {"path": nxt})])
    return Decision(thinking="Every file is read; write the summary from what I saw.",
                    text=_project_summary(outlines, turn))


def _project_summary(outlines: dict[str, str], turn: Turn) -> str:
    groups: dict[int, list[str]] = {}
    for path in sorted(outlines, key=_reading_order):
        groups.setdefault(_reading_order(path)[0], []).append(path)
    readme = next((p for p in outlines if PurePosixPath(p).name.lower().startswith("readme")), None)
    lines = ["## Summary of the project", ""]
    if readme:
        lines += [f"From `{readme}`: {outlines[readme]}", ""]
    titles = {1: "Rules for agents", 2: "Packaging", 3: "Docs", 4: "Modules", 5: "Tests", 6: "Data and other files"}
    for group in sorted(groups):
        if group == 0:
            continue
        lines.append(f"**{titles[group]}**")
        for p in groups[group]:
            note = _tests_note(outlines[p]) if group == 5 else _clip_words(outlines[p], 200)
            lines.append(f"- `{p}` — {note}")
        lines.append("")
    before = _read_before_compaction(outlines, turn)
    if before:
        total = len(outlines)
        summarized = len(turn.summary.files_read) if turn.summary else 0
        when = (f"all {before} before the context was compacted" if before == total
                else f"{before} of them before the context was compacted")
        source = ("those comes from the compaction summary" if summarized == before
                  else f"the {plural(summarized, 'file')} the compaction summary lists comes from it")
        lines.append(f"I read {total} files, {when}; what I say about {source}, the rest from the files "
                     "themselves.")
    else:
        lines.append(f"I read {plural(len(outlines), 'file')}.")
    return "\n".join(lines)


def _read_before_compaction(outlines: dict[str, str], turn: Turn) -> int:
    """How many of the files read were read before this request's compaction: those the summary
    lists, and those read in the rounds it kept verbatim. After a compaction I list the project
    again ("Carrying on from the summary"), so every read before the last listing came before it."""
    if not turn.summary:
        return 0
    before = set(turn.summary.files_read)
    listings = [i for i, c in enumerate(turn.calls) if c.use.name == "list_files"]
    if listings:
        before |= {c.path for c in turn.calls[:listings[-1]] if c.use.name == "read_file" and c.result is not None}
    return len(before & outlines.keys())


def _decide_flood(turn: Turn, dropped_note: bool, untruncated_offered: bool) -> Decision:
    cat = next((c for c in turn.calls if c.use.name in ("run_bash", UNTRUNCATED_BASH)
                and c.command.startswith("cat ")), None)
    reads = [c for c in turn.calls if c.use.name == "read_file"]
    if cat is None:
        warm = [p for p in FLOOD_WARMUP if p not in {c.path for c in reads}]
        if warm and not any(c.use.name in ("run_bash", UNTRUNCATED_BASH) for c in turn.calls):
            intro = ("Experiment 1 from the seed, made safe. First some ordinary work, so there is older history "
                     "in the context: " if not reads else "")
            return Decision(thinking="Build up some history before the flood.",
                            text=f"{intro}reading `{warm[0]}`.",
                            calls=[PlannedCall("read_file", {"path": warm[0]})])
        if not untruncated_offered:  # a session without the plug-in's tool: the registry's cut applies
            return Decision(
                thinking="No tool with the output limit off here; run_bash is cut by the registry.",
                text=(f"This session has no `{UNTRUNCATED_BASH}` tool, so the registry's truncation stays on. "
                      "Running `cat app.log` anyway: watch its cut."),
                calls=[PlannedCall("run_bash", {"command": "cat app.log"})])
        return Decision(
            thinking="Now the crash test: one call with truncation off.",
            text=(f"Now the flood: I'm running `cat app.log` through `{UNTRUNCATED_BASH}`, a tool registered with "
                  "no output limit, so the tool registry's truncation is **off for this one call** — 15 MB, about "
                  "six million tokens. Without further defences the next request could never be sent. Watch the "
                  "engine: its projection sees the result before it is sent."),
            calls=[PlannedCall(UNTRUNCATED_BASH, {"command": "cat app.log"})])
    if cat.result is None:
        return Decision(text="The `cat` produced no result.")
    refused = _refusal(cat)
    if refused:
        return Decision(text=f"I couldn't run `cat`: {refused}\n\nApprove the call or start with `--yes`.")
    content = cat.result.content
    notice = _notice(content)
    error = _last_line_with(content, "ERROR")
    parts = [f"The `cat` result reached me as {len(content):,} characters, not 15 MB."]
    if notice and cat.use.name == UNTRUNCATED_BASH:
        parts.append("Truncation was off, so the cut came from the context engine: the result alone would have "
                     "pushed the request over the blocking line, so it was cut head+tail *before* being sent, "
                     f"with this notice:\n\n> {notice}")
    elif notice:
        parts.append(f"It was cut head+tail before it reached me, with this notice:\n\n> {notice}")
    if error:
        parts.append(f"The tail kept the line that matters:\n\n```\n{error}\n```")
    if dropped_note:
        kept = {c.path for c in reads}
        gone = [p for p in FLOOD_WARMUP if p not in kept]
        lost = (f"my read of {', '.join(f'`{p}`' for p in gone)} is gone from my context" if gone
                else "older rounds are gone from my context")
        parts.append("Then the server still refused the request (\"prompt is too long\"): its real window is "
                     "smaller than the one tidegauge was told. The overflow recovery dropped the oldest rounds — "
                     f"{lost}, though not from the transcript on disk — and retried. What has entered the context "
                     "cannot be rescued by compaction; cutting it at the entrance is what saved this session.")
    return Decision(thinking="The flood was contained; report what happened.", text="\n\n".join(parts))


def _decide_recall(messages: Sequence[Message], system: str) -> Decision:
    if len(user_requests(messages)) <= 1:
        return Decision(thinking="Nothing came before this request.", text=(
            "This is the first thing you've asked in this session, so there is nothing earlier to recall. "
            "Ask me again after another prompt — or after a compaction, to check that your words survived it."))
    facts = collect_facts(list(messages))
    parts = []
    if facts.first_request:
        parts.append(f"Your first request was:\n\n> {facts.first_request}")
    earlier = [r for r in facts.later_requests[:-1]]
    if earlier:
        # One quote per prompt: quoted lines in a row are one paragraph, and the prompts ran together.
        parts.append("After that you asked:\n\n" + "\n\n".join(f"> {r}" for r in earlier[-4:]))
    if facts.preferences:
        parts.append("Requirements you stated:\n\n" + "\n".join(f"- {p}" for p in facts.preferences))
    # Only the memory files' part of the system prompt (the engine puts them under this header).
    _, found, memory = system.partition(MEMORY_HEADER)
    rules = [line.strip("- ").strip() for line in (memory if found else "").splitlines()
             if re.search(r"\b(never|always|must)\b", line, re.IGNORECASE) and line.lstrip().startswith("-")]
    if rules:
        parts.append("Rules from the memory files (they live in the system prompt, so no compaction can drop "
                     "them):\n\n" + "\n".join(f"- {r}" for r in rules[:6]))
    compacted = any(is_summary_message(m) for m in messages)
    dropped = any(isinstance(b, TextBlock) and b.text == DROPPED_NOTE for m in messages for b in m.content)
    if compacted:
        parts.append("The conversation was compacted; I know this from the summary, which quotes your words verbatim.")
    elif dropped:
        parts.append("The overflow recovery dropped older rounds from my context (they stay in the transcript on "
                     "disk); it kept your words with its note, so I read them from the conversation.")
    else:
        parts.append("Nothing has been compacted yet, so I read it straight from the conversation.")
    return Decision(thinking="Look up the user's own words.", text="\n\n".join(parts))


CHANGELOG = "CHANGELOG.md"
_CHANGELOG_HEAD = "# Changelog\n\n"
CHANGELOG_ENTRY = "## Unreleased\n- Docs: a line the demo added (rewind with files puts the file back as it was).\n\n"


def _decide_changelog(turn: Turn) -> Decision:
    """Read the changelog, add an entry at its top, then show the way back (a rewind with its files)."""
    reads = [c for c in turn.calls if c.use.name == "read_file" and c.path == CHANGELOG and c.result is not None]
    edits = [c for c in turn.calls if c.use.name == "edit_file" and c.result is not None]
    if not reads:
        return Decision(thinking="Read the changelog before changing it.",
                        text="Reading the changelog first.", calls=[PlannedCall("read_file", {"path": CHANGELOG})])
    if not edits:
        return Decision(thinking="Add the entry under the title.", text="Adding an **Unreleased** entry.",
                        calls=[PlannedCall("edit_file", {"path": CHANGELOG, "old": _CHANGELOG_HEAD,
                                                         "new": _CHANGELOG_HEAD + CHANGELOG_ENTRY})])
    result = edits[-1].result
    if result is not None and result.is_error:
        return Decision(thinking="The edit did not apply.", text=(
            f"The changelog did not take the entry ({_brief(result.content)}); it may already be there. "
            "A rewind with its files (**Esc Esc**, then **f**) puts it back as it was before."))
    return Decision(thinking="Done; show the way back.", text=(
        f"Added an **Unreleased** entry to `{CHANGELOG}`. To take it back, press **Esc Esc**: the list shows "
        "your messages with the context just before each; pick this one and press **f**. The conversation and "
        f"`{CHANGELOG}` go back to before it, and your message returns to the prompt to edit "
        "(headless: `tidegauge rewind --to N --files`)."))


def _decide_delegate(turn: Turn, task_offered: bool) -> Decision:
    """The main agent's side: hand the search to a sub-agent, then quote its report."""
    task = next((c for c in reversed(turn.calls) if c.use.name == TASK_TOOL), None)
    if task is None:
        # Compacted right after the report arrived: the extractive summary keeps that I
        # delegated (its last action), not the report, so the honest move is to ask again.
        lost = bool(turn.summary and (turn.summary.last_action or "").split(" ")[0] == TASK_TOOL)
        if not task_offered:
            return Decision(thinking="No task tool in this session: sub-agents are off.", text=(
                f"This session has no `{TASK_TOOL}` tool (sub-agents are off: `subagents = false` in the "
                "config), so I can't delegate the search. Turn them on and ask again to see the sub-agent "
                "read the importer in a context of its own."))
        return Decision(
            thinking="A search through several files: delegate it, so the reading stays out of my context.",
            text=("The context was compacted just after the sub-agent's report arrived, and the summary kept only "
                  "that I had delegated the search, not the report. Asking a sub-agent again: its reading still "
                  "stays out of my context, and only its report comes back." if lost else
                  "Finding that means reading the importer and whatever it validates rows with. I'm handing the "
                  "search to a **sub-agent** with a fresh context of its own: its reading stays in its context, "
                  "and only its report comes back into mine."),
            calls=[PlannedCall(TASK_TOOL, {"description": DELEGATED_DESCRIPTION, "prompt": DELEGATED_TASK})])
    if task.result is None:
        return Decision(text="The sub-agent gave no report.")
    if task.result.is_error:
        return Decision(text=f"The sub-agent could not finish: {task.result.content.strip().splitlines()[0]}")
    quoted = "\n".join(f"> {line}" if line.strip() else ">" for line in task.result.content.strip().splitlines())
    return Decision(
        thinking="The sub-agent reported; pass its findings on.",
        text=(f"The sub-agent's report:\n\n{quoted}\n\nOnly this report entered my context: the files the "
              "sub-agent listed and read stayed in its own, and its model calls are in the ledger as agent `sub`."))


def _importer_in(listing: list[str], request: str) -> str | None:
    """The file the task is about: the first word of the task that names a module (not a test)."""
    modules = {PurePosixPath(p).stem: p for p in listing
               if p.endswith(".py") and "tests" not in PurePosixPath(p).parts and not PurePosixPath(p).name.startswith("test")}
    return next((modules[word] for word in re.findall(r"\w+", request.lower()) if word in modules), None)


def _decide_sub_agent(turn: Turn) -> Decision:
    """The sub-agent's side: list, read the importer, follow its validation, report file and lines."""
    if pick_scenario(turn.request) != "delegate":
        return Decision(thinking="Not a task this scripted sub-agent knows.", text=(
            "I'm the demo's scripted sub-agent and I only know one task: finding where the importer rejects "
            "rows. I did not investigate this one."))
    listing = _listing(turn)
    if listing is None:
        return Decision(thinking="Fresh context: I know nothing of this workspace yet.",
                        text="Listing the workspace to find the importer.",
                        calls=[PlannedCall("list_files", {"path": "."})])
    read = {c.path: c.result for c in turn.calls if c.use.name == "read_file" and c.result is not None}
    failed = next(((path, result) for path, result in read.items() if result.is_error), None)
    if failed:
        return Decision(text=f"I could not read `{failed[0]}`: {failed[1].content.strip().splitlines()[0]}")
    importer = _importer_in(listing, turn.request)
    if importer is None:
        return Decision(text=f"I listed {len(listing)} files and none of them is an importer.")
    if importer not in read:
        return Decision(thinking=f"{importer} is the importer.", text=f"Reading `{importer}`.",
                        calls=[PlannedCall("read_file", {"path": importer})])
    findings = find_rejections(SourceFile.from_read(importer, read[importer].content))
    if findings is None:
        return Decision(text=f"`{importer}` raises nothing: I found no place where it rejects a row.")
    follow = [p for p in findings.modules_to_follow() if p in listing and p not in read]
    if follow:
        return Decision(thinking=f"{findings.function} validates through {follow[0]}; read it for the checks.",
                        text=f"`{findings.function}` rejects rows; the checks it calls are in `{follow[0]}`.",
                        calls=[PlannedCall("read_file", {"path": follow[0]})])
    followed = {p: SourceFile.from_read(p, r.content) for p, r in read.items() if p != importer}
    return Decision(thinking="Enough read; write the report.", text=rejection_report(findings, followed))


def _strip_instruction(messages: Sequence[Message]) -> tuple[list[Message], str | None]:
    """A compaction request's history without the instruction, and the user's focus if any."""
    history = list(messages)
    focus = None
    if history and history[-1].role == "user":
        last = history[-1]
        kept = []
        for block in last.content:
            if isinstance(block, TextBlock) and block.text.startswith(_INSTRUCTION_MARKS):
                match = _FOCUS.search(block.text)
                focus = match.group(1).strip() if match else None
                continue
            kept.append(block)
        if len(kept) != len(last.content):
            history[-1] = last.copy_with(kept) if kept else last
            if not kept:
                history.pop()
    return history, focus


def serves_sub_agent(request: ModelRequest) -> bool:
    """Is this request a sub-agent's (the task tool's fresh context), not the main agent's?"""
    return request.system.startswith(SUB_AGENT_MARK)


def decide(request: ModelRequest) -> Decision:
    """The scripted model: what to say and which tools to call, from the request alone."""
    if request.tool_choice == "none":
        history, focus = _strip_instruction(request.messages)
        return Decision(text=extractive_summary(history, focus), is_summary=True,
                        thinking="Write the handoff summary from the transcript.")
    turn = read_turn(request.messages)
    if serves_sub_agent(request):
        return _decide_sub_agent(turn)
    scenario = pick_scenario(turn.request)
    if scenario == "delegate":
        return _decide_delegate(turn, task_offered=any(tool.name == TASK_TOOL for tool in request.tools))
    if scenario == "errors":
        return _decide_errors(turn)
    if scenario == "summarize":
        return _decide_summarize(turn)
    if scenario == "flood":
        dropped = any(isinstance(b, TextBlock) and b.text == DROPPED_NOTE
                      for m in request.messages for b in m.content)
        offered = any(tool.name == UNTRUNCATED_BASH for tool in request.tools)
        return _decide_flood(turn, dropped, offered)
    if scenario == "recall":
        return _decide_recall(request.messages, request.system)
    if scenario == "changelog":
        return _decide_changelog(turn)
    if CONTEXT_QUESTION.search(turn.request.lower()):
        return _decide_context(request.messages)
    return Decision(text=menu_text(), thinking="No scenario asked for: offer the list.")


# A question about the context itself (not on the menu: it is the eviction's step in the walk-through).
CONTEXT_QUESTION = re.compile(r"(?:in|of) (?:your|the) context|what do you (?:see|hold)")
_EVICTED_HEAD = EVICTED_TEMPLATE.split("{", 1)[0]


def _decide_context(messages: Sequence[Message]) -> Decision:
    """What the request's tool results are now, each in a line: whole, cleared, or taken out by the user
    (a real model would read it from the same text)."""
    uses = {u.id: u for m in messages if m.role == "assistant" for u in m.tool_uses}
    lines: list[str] = []
    for message in messages:
        for result in message.tool_results:
            use = uses.get(result.tool_use_id)
            call = f"`{use.name} {next(iter(use.input.values()), '')}`" if use is not None else "a call"
            if result.content.startswith(_EVICTED_HEAD):
                saved = re.search(r"Full output: (.+?)\. Read it", result.content)
                lines.append(f"- {call}: **taken out by you**, a one-line stub in its place; the whole output is "
                             f"in `{saved.group(1) if saved else 'its saved file'}`")
            elif result.content.startswith(CLEARED_PREFIX):
                lines.append(f"- {call}: cleared by micro-compaction, a stub naming its saved file")
            else:
                lines.append(f"- {call}: {len(result.content):,} characters, whole")
    if not lines:
        return Decision(text="No tool results are in my context yet: ask me to find errors in app.log first.",
                        thinking="Nothing to list.")
    out = sum(1 for line in lines if "taken out by you" in line)
    tail = (f"\n\nYou took {plural(out, 'result')} out: I no longer see {'it' if out == 1 else 'them'}, and "
            "ctrl+t in the tool list puts it back." if out else
            "\n\nIn the tool list, d takes a result out of my context and p pins one through compactions.")
    return Decision(text="The tool results in my context now:\n\n" + "\n".join(lines) + tail,
                    thinking="List the tool results the request holds, as they are now.")


# ---- the scenarios, as the menu and the banner list them ----

@dataclass(frozen=True)
class Scenario:
    prompt: str  # what to type
    pitch: str  # one paragraph for the menu (markdown)
    pattern: re.Pattern[str]  # what in a request picks it (lower case)


SCENARIOS: dict[str, Scenario] = {
    "errors": Scenario(
        "find errors in app.log",
        "I `cat` a 15 MB, 300,001-line log. The tool registry cuts it to head + tail with a notice; I spot the "
        "ERROR in the tail and follow the notice with `grep -n`.",
        re.compile(r"\berrors?\b|app\.log|报错|错误")),
    "summarize": Scenario(
        "summarize the project",
        "I read the project file after file. Watch the gauge climb through the warning line into an "
        "auto-compaction (the demo's budget is small), then see me carry on from the summary.",
        re.compile(r"summar|project|总结|概括")),
    "flood": Scenario(
        "flood",
        "the seed's crash experiment made safe: truncation off for one `cat` of the whole log. The engine cuts "
        "the result before it is sent, and when the server still rejects the request as too long, the overflow "
        "recovery drops old rounds and retries.",
        re.compile(r"flood|淹")),
    "recall": Scenario(
        "what did I ask first?",
        "after a compaction, check that your own words survived.",
        re.compile(r"remember|what did i (?:ask|say)|first (?:request|ask|question)|asked (?:you )?first|记得")),
    "delegate": Scenario(
        "find where the importer rejects rows",
        "I hand the search to a **sub-agent** (the `task` tool): it reads the importer in a fresh context of its "
        "own, folded under the call with its own small gauge, and only its short report enters my context.",
        re.compile(r"\brejects?\b|\brejected\b|importer|sub-?agent|delegat|拒绝")),
    "changelog": Scenario(
        "add a changelog entry",
        "I add a line to `CHANGELOG.md` with `edit_file`. Then **rewind** (Esc Esc): back to before your "
        "message, with the file as it was, and your message in the prompt again.",
        re.compile(r"changelog|更新日志")),
}
# Which scenario a request picks when several words match: the most specific first.
MATCH_ORDER = ("flood", "recall", "changelog", "delegate", "errors", "summarize")


def menu_text() -> str:
    """The scripted model's answer to anything that is not a scenario."""
    items = "\n".join(f"{n}. **{s.prompt}** — {s.pitch}" for n, s in enumerate(SCENARIOS.values(), 1))
    return ("I'm the **demo model**: a scripted stand-in that needs no API key. My decisions are canned; "
            "everything else is real — the tools run in a scratch workspace, tool output is truncated, tokens "
            "are counted with tiktoken, and the context engine compacts and recovers for real. Type one of these, "
            "in any order:\n\n" + items)


def banner_text() -> str:
    """One line for the dashboard to show when the session opens: what this is and every prompt."""
    prompts = " · ".join(s.prompt for s in SCENARIOS.values())
    return ("demo (scripted model): a scripted model drives real tools; no API key needed. "
            f"Try, in any order: {prompts}")

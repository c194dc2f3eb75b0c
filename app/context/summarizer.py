"""An extractive handoff summary: built from the transcript, no model call.

Deterministic and cheap, so it works when nothing else can: the demo
provider answers compaction requests with it, and the engine falls back to
it when the breaker is open and the context is over the blocking line.
Everything in it is copied from the history, never paraphrased: the user's
requests verbatim, the files read and written (with the classes and
functions seen in them), the commands run with their exit codes, the last
error lines, the last thing the assistant said, and the user's stated
preferences. A history that starts with an earlier summary carries that
summary's facts forward, so nothing is lost across repeated compactions.
"""

from __future__ import annotations

import re

from app.kernel.markers import EXIT_CODE, TIMED_OUT, TRUNCATED
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from app.context.compaction import recent_user_messages, summary_parts
from app.context.user_words import carried_rule_blocks
from app.context.overflow import DROPPED_NOTE
from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

MAX_SUMMARY_CHARS = 6_000
END_MARK = "(end of summary)"

H_TASK = "## Task goal and acceptance criteria"
H_DONE = "## Done so far"
H_FINDINGS = "## Key findings"
H_PROGRESS = "## In progress / next step"
H_PREFS = "## User preferences"

FIRST_LABEL = "First request (verbatim):"
LATER_LABEL = "Later request (verbatim):"
READ_LABEL = "Files read"
WRITTEN_LABEL = "Files written or edited"
COMMANDS_LABEL = "Commands run"
CARRIED_LABEL = "Earlier summary (carried forward):"
UNCONFIRMED_NOTE = ("An earlier summary gave these as the user's words; they are in none of the user's "
                    "messages kept here:")

MAX_REQUEST_CHARS = 1_200
MAX_LATER_REQUESTS = 4
MAX_FINDINGS = 10
MAX_COMMANDS = 15
MAX_PREFERENCES = 10
MAX_LINE_CHARS = 300
MAX_ASSISTANT_CHARS = 800
MAX_CARRIED_CHARS = 1_500

# A line of a tool result that reports a problem.
_ERROR_LINE = re.compile(r"\b(ERROR|Error|Traceback|FAIL(?:ED)?|Exception|FATAL|panic)\b|error:")
# read_file numbers its lines like cat -n: right-aligned number, a tab.
_NUMBERED = re.compile(r"^\s*\d+\t")
_EXIT, _TRUNCATED, _TIMED_OUT = EXIT_CODE, TRUNCATED, TIMED_OUT  # what the tools write (app.kernel.markers)
_PREFERENCE = re.compile(
    r"\b(never|always|don'?t|do not|must(?:n'?t)?|please|should(?:n'?t)?|avoid|make sure|prefer)\b", re.I)
_NEXT_HINT = re.compile(r"^(next|then|now|i'll|i will|let me|continuing)\b", re.I)
_CACHE_STUB = "File unchanged since read_file call"


@dataclass
class SummaryFacts:
    """What a summary says, as data: collected from a history or parsed from a summary."""

    first_request: str | None = None
    later_requests: list[str] = field(default_factory=list)
    files_read: dict[str, str] = field(default_factory=dict)  # path -> one line
    files_written: dict[str, str] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)  # "`cmd` → exit 0 ..."
    findings: list[str] = field(default_factory=list)
    last_assistant: str | None = None
    last_action: str | None = None
    next_step: str | None = None
    preferences: list[str] = field(default_factory=list)
    carried: str | None = None  # an earlier summary in another format, kept as text

    @property
    def latest_request(self) -> str | None:
        return self.later_requests[-1] if self.later_requests else self.first_request


# What an empty section says; a placeholder, never parsed back as a finding or a requirement.
NO_FINDINGS = "No error lines seen in tool results."
NO_PREFERENCES = "None stated."


# ---- small text helpers ----

def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _add_unique(items: list[str], item: str) -> None:
    if item in items:
        items.remove(item)
    items.append(item)


def strip_line_numbers(text: str) -> str:
    """The file content of a read_file result (numbers and paging notes removed)."""
    lines = text.splitlines()
    if not lines or not any(_NUMBERED.match(line) for line in lines[:5]):
        return text
    return "\n".join(_NUMBERED.sub("", line, count=1) for line in lines if _NUMBERED.match(line))


def outline(path: str, content: str) -> str:
    """One extractive line about a file: its top-level names, or its first heading and sentence."""
    lines = content.splitlines()
    if path.endswith(".py"):
        classes = [m.group(1) for line in lines if (m := re.match(r"class (\w+)", line))]
        functions = [m.group(1) for line in lines
                     if (m := re.match(r"(?:async )?def (\w+)", line)) and not m.group(1).startswith("_")]
        doc = ""
        stripped = content.lstrip()
        if stripped.startswith(('"""', "'''")):
            doc = stripped[3:].split("\n", 1)[0].strip().strip('"\'').rstrip(".")
        parts = []
        if doc:
            parts.append(doc)
        if classes:
            parts.append("classes " + ", ".join(classes))
        if functions:
            parts.append("functions " + ", ".join(functions))
        return _clip("; ".join(parts) or f"{len(lines)} lines of Python", MAX_LINE_CHARS)
    if path.endswith(".md"):
        heading = next((line.lstrip("# ").strip() for line in lines if line.startswith("#")), "")
        body = _first_paragraph(lines)
        sentence = re.split(r"(?<=[.!?])\s", body, maxsplit=1)[0] if body else ""
        return _clip(" — ".join(p for p in (heading, sentence) if p) or f"{len(lines)} lines", MAX_LINE_CHARS)
    first = next((line.strip() for line in lines if line.strip()), "")
    return _clip(f"{len(lines)} lines; starts: {first}", MAX_LINE_CHARS)


def _first_paragraph(lines: list[str]) -> str:
    """The first prose paragraph of Markdown, joined into one line."""
    paragraph: list[str] = []
    for line in lines:
        stripped = line.strip()
        prose = stripped and not stripped.startswith(("#", "-", "*", "`", "|", ">", "<"))
        if prose:
            paragraph.append(stripped)
        elif paragraph:
            break
    return " ".join(paragraph)


def _sentences(text: str) -> Iterable[str]:
    for part in re.split(r"(?<=[.!?。！？])\s+|\n+", text):
        part = part.strip(" -*\t")
        if part:
            yield part


# ---- collecting facts from a history ----

def _user_texts(msg: Message) -> list[str]:
    """What the user typed in one message (no tool results, engine notes or instructions)."""
    return [b.text for b in msg.content if isinstance(b, TextBlock)
            and b.text.strip() and b.text != DROPPED_NOTE and not b.text.startswith("[Context compaction]")]


def parse_summary(text: str) -> SummaryFacts | None:
    """The facts of a summary this module wrote (None for any other text)."""
    if H_TASK not in text or H_DONE not in text:
        return None
    start = text.find(H_TASK)
    end = text.find(END_MARK, start)
    body = text[start: end if end >= 0 else len(text)]
    facts = SummaryFacts()
    section = ""
    label = ""
    quote: list[str] | None = None

    def close_quote() -> None:
        nonlocal quote
        if quote is not None:
            request = "\n".join(quote).strip()
            if request:
                if label == FIRST_LABEL:
                    facts.first_request = request
                else:
                    facts.later_requests.append(request)
        quote = None

    for line in body.splitlines():
        if line.startswith("## "):
            close_quote()
            section, label = line.strip(), ""
            continue
        if section == H_TASK:
            if line.strip() in (FIRST_LABEL, LATER_LABEL):
                close_quote()
                label, quote = line.strip(), []
            elif quote is not None and (line.startswith("> ") or line == ">"):
                quote.append(line[2:])
            else:
                close_quote()
            continue
        if section == H_DONE:
            if line.startswith(READ_LABEL):
                label = READ_LABEL
            elif line.startswith(WRITTEN_LABEL):
                label = WRITTEN_LABEL
            elif line.startswith(COMMANDS_LABEL):
                label = COMMANDS_LABEL
            elif line.startswith(CARRIED_LABEL):
                label = CARRIED_LABEL
                facts.carried = ""
            elif line.startswith("- …"):
                continue
            elif line.startswith("- ") and label in (READ_LABEL, WRITTEN_LABEL):
                path, _, note = line[2:].partition(" — ")
                target = facts.files_read if label == READ_LABEL else facts.files_written
                target[path.strip().strip("`")] = note.strip()
            elif line.startswith("- ") and label == COMMANDS_LABEL:
                facts.commands.append(line[2:].strip())
            elif label == CARRIED_LABEL and line.startswith("> "):
                facts.carried = ((facts.carried or "") + "\n" + line[2:]).strip()
            continue
        if section == H_FINDINGS and line.startswith("- ") and line[2:].strip() != NO_FINDINGS:
            facts.findings.append(line[2:].strip())
        elif section == H_PROGRESS:
            if line.startswith("- Last action: "):
                facts.last_action = line[len("- Last action: "):].strip()
            elif line.startswith("- Next step: "):
                facts.next_step = line[len("- Next step: "):].strip()
            elif line.startswith("> "):
                facts.last_assistant = ((facts.last_assistant or "") + "\n" + line[2:]).strip()
        elif section == H_PREFS and line.startswith("- ") and line[2:].strip() != NO_PREFERENCES:
            facts.preferences.append(line[2:].strip())
    close_quote()
    return facts


def _typed(quoted: str, typed: Sequence[str]) -> bool:
    """Are these words (as a summary quotes them: whole, a sentence, or cut with "…")
    in a message the user typed?"""
    words = quoted[:-1].rstrip() if quoted.endswith("…") else quoted
    return bool(words) and any(words in text for text in typed)


def _drop_words_not_typed(parsed: SummaryFacts, typed: Sequence[str]) -> list[str]:
    """An earlier summary's record of the user's requests and preferences is only text: a
    model wrote it, and it may quote a tool output that imitates this format. Words found
    in no message the user typed stop being the user's here; they are returned, to be
    carried as what the earlier summary said."""
    unconfirmed: list[str] = []
    if parsed.first_request is not None and not _typed(parsed.first_request, typed):
        unconfirmed.append(parsed.first_request)
        parsed.first_request = None
    for field_name in ("later_requests", "preferences"):
        items: list[str] = getattr(parsed, field_name)
        unconfirmed += [w for w in items if not _typed(w, typed)]
        setattr(parsed, field_name, [w for w in items if _typed(w, typed)])
    return unconfirmed


def _merge(into: SummaryFacts, earlier: SummaryFacts) -> None:
    if into.first_request is None:
        into.first_request = earlier.first_request
    for request in earlier.later_requests:
        _add_unique(into.later_requests, request)
    into.files_read.update(earlier.files_read)
    into.files_written.update(earlier.files_written)
    into.commands.extend(earlier.commands)
    into.findings.extend(earlier.findings)
    for pref in earlier.preferences:
        _add_unique(into.preferences, pref)
    into.last_assistant = earlier.last_assistant or into.last_assistant
    into.last_action = earlier.last_action or into.last_action
    into.next_step = earlier.next_step or into.next_step
    if earlier.carried:
        into.carried = earlier.carried


def _command_line(use: ToolUseBlock, result: ToolResultBlock | None) -> str:
    command = str(use.input.get("command", "")).strip().replace("\n", " ")
    line = f"`{_clip(command, 200)}`"
    if result is None:
        return line + " → no result"
    content = result.content
    if result.is_error and "[exit code" not in content and not _TIMED_OUT.search(content):
        return line + " → not run: " + _clip(content.splitlines()[0] if content else "error", 160)
    notes = []
    timed = _TIMED_OUT.search(content)
    exits = _EXIT.findall(content)
    if timed:
        notes.append(f"timed out after {timed.group(1)} s")
    elif exits:
        code, extra = exits[-1]
        notes.append(f"exit {code}{extra}")
    cut = _TRUNCATED.search(content)
    if cut:
        where = f"; full output: {result.full_output_path}" if result.full_output_path else ""
        notes.append(f"output cut head+tail ({cut.group(1)} chars, {cut.group(2)} left out{where})")
    return line + " → " + ", ".join(notes or ["done"])


def _error_lines(use: ToolUseBlock, result: ToolResultBlock) -> list[str]:
    """Problem lines of a result; file contents are what was read, not errors seen."""
    where = use.name if use.name != "run_bash" else f"`{_clip(str(use.input.get('command', '')), 60)}`"
    if result.is_error:
        first = result.content.strip().splitlines()[0] if result.content.strip() else "error"
        return [f"{where}: {_clip(first, MAX_LINE_CHARS)}"]
    if use.name in ("read_file", "list_files"):
        return []
    found = []
    for line in result.content.splitlines():
        if _ERROR_LINE.search(line) and not line.startswith(("… [output truncated", "[exit code")):
            found.append(f"{where}: {_clip(line, MAX_LINE_CHARS)}")
    return found[-MAX_FINDINGS:]


def collect_facts(history: Sequence[Message]) -> SummaryFacts:
    """Everything the summary needs, extracted from ``history`` (oldest first)."""
    facts = SummaryFacts()
    results: dict[str, ToolResultBlock] = {}
    for msg in history:
        for block in msg.tool_results:
            results[block.tool_use_id] = block

    # The user's own words, oldest first (earlier summaries contribute the words they kept).
    typed = recent_user_messages(history)
    # The rules earlier summaries carry (blocks with the id of the message they were typed
    # in) confirm an earlier summary's preferences as the user's words too.
    confirmed = [*typed, *(b.text for b in carried_rule_blocks(history))]
    for msg in history:
        parts = summary_parts(msg)
        if parts is None:
            continue
        parsed = parse_summary(parts.summary)
        if parsed is not None:
            unconfirmed = _drop_words_not_typed(parsed, confirmed)
            _merge(facts, parsed)
            if unconfirmed:
                facts.carried = "\n".join(filter(None, [facts.carried, UNCONFIRMED_NOTE,
                                                         *(f"- {w}" for w in unconfirmed)]))
        else:
            facts.carried = _clip(parts.summary, MAX_CARRIED_CHARS)

    if facts.first_request is None and typed:
        facts.first_request = typed[0]
    for text in typed:
        if text != facts.first_request:
            _add_unique(facts.later_requests, text)
    if typed and typed[-1] == facts.first_request and facts.later_requests:
        _add_unique(facts.later_requests, typed[-1])
    for text in typed:
        for sentence in _sentences(text):
            if _PREFERENCE.search(sentence):
                _add_unique(facts.preferences, _clip(sentence, MAX_LINE_CHARS))

    contents: dict[str, str] = {}
    last_made_calls = False
    for msg in history:
        if msg.role != "assistant":
            continue
        if msg.text.strip():
            facts.last_assistant = msg.text.strip()
        facts.next_step = None  # a newer message decides what comes next
        last_made_calls = bool(msg.tool_uses)
        for use in msg.tool_uses:
            result = results.get(use.id)
            path = str(use.input.get("path", "")).strip()
            if use.name == "read_file" and path:
                if result is None or result.is_error:
                    pass
                elif result.content.startswith(_CACHE_STUB) or result.content.startswith("[Old tool result"):
                    facts.files_read.setdefault(path, "read (content seen earlier)")
                else:
                    text = strip_line_numbers(result.content)
                    contents[path] = contents.get(path, "") + "\n" + text if path in contents else text
                    facts.files_read.pop(path, None)
                    facts.files_read[path] = outline(path, contents[path])
            elif use.name in ("write_file", "edit_file") and path:
                ok = result is not None and not result.is_error
                what = (f"{use.name}, {len(str(use.input.get('content', '')))} chars" if use.name == "write_file"
                        else use.name)
                facts.files_written[path] = what + ("" if ok else " (failed)")
            elif use.name == "run_bash":
                facts.commands.append(_command_line(use, result))
            elif use.name == "list_files":
                facts.commands.append(f"list_files {path or '.'}" + (" (failed)" if result and result.is_error else ""))
            if result is not None:
                facts.findings.extend(_error_lines(use, result))
            args = path or str(use.input.get("command", "")) or ""
            facts.last_action = f"{use.name} {_clip(args, 120)}".strip()
    if facts.next_step is None and last_made_calls and facts.last_action:
        # Its announced intent was carried out: the successor continues after it.
        facts.next_step = f"continue the latest request after `{facts.last_action}` (its result was received)."
    elif facts.next_step is None and facts.last_assistant:
        for sentence in _sentences(facts.last_assistant):
            if _NEXT_HINT.match(sentence):
                facts.next_step = _clip(sentence, MAX_LINE_CHARS)
    # The newest findings are the useful ones; keep each once.
    unique: list[str] = []
    for finding in facts.findings:
        _add_unique(unique, finding)
    facts.findings = unique[-MAX_FINDINGS:]
    facts.commands = facts.commands[-MAX_COMMANDS:]
    facts.preferences = facts.preferences[-MAX_PREFERENCES:]
    return facts


# ---- rendering ----

def _quote(text: str, limit: int) -> list[str]:
    return ["> " + line if line else ">" for line in _clip(text, limit).splitlines()]


def render_summary(facts: SummaryFacts, focus: str | None = None, *, compact: bool = False,
                   max_files: int | None = None) -> str:
    """The summary text; ``compact`` shortens quotes and lists to save room, and
    ``max_files`` lists only the newest files read (the rest are counted)."""
    out: list[str] = [H_TASK]
    if facts.first_request:
        out += [FIRST_LABEL, *_quote(facts.first_request, MAX_REQUEST_CHARS)]
    later = facts.later_requests[-(2 if compact else MAX_LATER_REQUESTS):]
    for request in later:
        out += [LATER_LABEL, *_quote(request, MAX_REQUEST_CHARS // (2 if compact else 1))]
    if focus and focus.strip():
        out.append(f"- Focus requested for this summary: {focus.strip()}")
    out.append("- Acceptance: the latest request answered; the user's stated requirements (below) kept.")

    out += ["", H_DONE]
    out.append(f"{READ_LABEL} ({len(facts.files_read)}):" + ("" if facts.files_read else " none"))
    files = list(facts.files_read.items())
    if max_files is not None and len(files) > max_files:
        out.append(f"- … {len(files) - max_files} earlier files, not listed to fit")
        files = files[len(files) - max_files:] if max_files else []
    for path, note in files:
        note = _clip(note, 80) if compact and note else note
        note = "" if max_files is not None else note
        out.append(f"- {path}" + (f" — {note}" if note else ""))
    out.append(f"{WRITTEN_LABEL} ({len(facts.files_written)}):" + ("" if facts.files_written else " none"))
    out += [f"- {path} — {note}" for path, note in facts.files_written.items()]
    commands = facts.commands[-(5 if compact else MAX_COMMANDS):]
    out.append(f"{COMMANDS_LABEL} ({len(commands)}, with exit codes):" + ("" if commands else " none"))
    out += [f"- {c}" for c in commands]
    if facts.carried:
        out += [CARRIED_LABEL, *_quote(facts.carried, MAX_CARRIED_CHARS // (3 if compact else 1))]

    out += ["", H_FINDINGS]
    findings = facts.findings
    if focus:
        words = [w.lower() for w in re.findall(r"\w{4,}", focus)]  # skips "the", "and"...
        findings = sorted(findings, key=lambda f: not any(w in f.lower() for w in words))
    findings = findings[-(4 if compact else MAX_FINDINGS):]
    out += [f"- {f}" for f in findings] or [f"- {NO_FINDINGS}"]

    out += ["", H_PROGRESS]
    if facts.last_assistant:
        out += ["Last assistant message (verbatim):",
                *_quote(facts.last_assistant, MAX_ASSISTANT_CHARS // (3 if compact else 1))]
    if facts.last_action:
        out.append(f"- Last action: {facts.last_action}")
    out.append(f"- Next step: {facts.next_step or 'carry on with the latest request; re-read files as needed.'}")

    out += ["", H_PREFS]
    out += [f"- {p}" for p in facts.preferences[-(5 if compact else MAX_PREFERENCES):]] or [f"- {NO_PREFERENCES}"]
    out += ["", END_MARK]
    return "\n".join(out)


def extractive_summary(history: list[Message], focus: str | None = None,
                       max_chars: int = MAX_SUMMARY_CHARS) -> str:
    """A deterministic handoff summary of ``history`` in the compaction prompt's sections."""
    facts = collect_facts(history)
    text = render_summary(facts, focus)
    if len(text) > max_chars:
        text = render_summary(facts, focus, compact=True)
    max_files = len(facts.files_read)
    while len(text) > max_chars and max_files > 0:
        max_files //= 2
        text = render_summary(facts, focus, compact=True, max_files=max_files)
    if len(text) > max_chars:  # last resort: very long quotes; cut, keep the end mark
        keep = max_chars - len(END_MARK) - 40
        text = text[:keep].rstrip() + "\n… (summary cut to fit)\n\n" + END_MARK
    return text

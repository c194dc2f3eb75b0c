"""Compaction: ask the model for a handoff summary, replace the history with it.

Seed 000 part 4 point by point: the instruction goes on a copy of the
history (a failure leaves the original untouched), at the end of the last
user message when there is one (roles keep alternating), with the tool
definitions present and tool choice none. On success the history becomes
one user message: the summary plus every message the user typed (a paste as its head and
tail, the whole saved).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from app.kernel.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolSpec
from app.kernel.model_call import ModelRequest

from app.context import tokens as _tokens
from app.context.user_words import SUMMARY_INTRO as _SUMMARY_INTRO
from app.context.user_words import carried_rule_blocks, is_legacy_summary, user_words

COMPACT_PROMPT = """\
[Context compaction] The context is nearly full. Write a handoff summary of the conversation so far. \
The next session will see ONLY this summary: anything you leave out is lost for good.

Use exactly these sections. Write only what the successor needs to carry on; do not narrate the process.

## Task goal and acceptance criteria
What the user originally asked for, and how success will be judged.

## Done so far
Each change made (file path + one line each), and what has been verified (which tests or commands passed).

## Key findings
Important facts learned while reading code and running commands: project structure, relevant files \
and functions, exact error text (quote it verbatim), pitfalls already hit.

## In progress / next step
What is half done, and the very next step, down to the file and the command.

## User preferences
Requirements the user stated explicitly and approaches the user refused.

Do not call any tools. Reply with the summary only."""

SUMMARY_INTRO = _SUMMARY_INTRO  # where the user's words are found: app.context.user_words
RECENT_INTRO = "The user's most recent messages, verbatim:"
SUMMARY_OUTRO = "Continue the task from here. Re-read files if you need their exact content."
# Each kept user message sits between these lines, for the model to read. The engine
# itself knows the user's words by their blocks (TextBlock.user_message_id), never by
# these tags: a summary may quote a tool output that imitates them.
_QUOTE_OPEN = "<user-message>"
_QUOTE_CLOSE = "</user-message>"
# What ends a summary's first block when user words follow it.
_FRAME_HEAD = f"\n\n{RECENT_INTRO}\n\n{_QUOTE_OPEN}\n"
_INTERRUPTED_RESULT = "(not run: the conversation is being compacted)"


class CompactionFailed(Exception):
    """The compaction produced nothing usable; the history must stay as it was."""


def build_compaction_request(system: str, history: Sequence[Message], tools: Sequence[ToolSpec],
                             focus: str | None = None, max_tokens: int = 8_000) -> ModelRequest:
    """The compaction call: the history plus the instruction, on a copy."""
    if not history:
        raise CompactionFailed("nothing to compact: the history is empty")
    instruction = COMPACT_PROMPT
    if focus and focus.strip():
        instruction += f"\n\nFocus especially on: {focus.strip()}"
    messages = list(history)
    last = messages[-1]
    if last.role == "user":
        messages[-1] = last.copy_with([*last.content, TextBlock(text=instruction)])
    else:
        # A dangling tool call would make the request invalid: answer it first.
        results = [ToolResultBlock(tool_use_id=u.id, content=_INTERRUPTED_RESULT, is_error=True)
                   for u in last.tool_uses]
        messages.append(Message(role="user", content=[*results, TextBlock(text=instruction)]))
    return ModelRequest(system=system, messages=messages, tools=list(tools),
                        max_tokens=max_tokens, tool_choice="none")


def extract_summary(message: Message) -> str:
    """The summary text of the compaction reply (text blocks only)."""
    summary = "\n".join(b.text for b in message.content if isinstance(b, TextBlock)).strip()
    if not summary:
        raise CompactionFailed("empty summary")
    return summary


def summary_problem(summary: str, output_tokens: int | None, cap: int,
                    tokens_before: int, tokens_after: int) -> str | None:
    """Why a summary the model wrote is not a successful compaction (None when it is).

    A small or misconfigured server may ignore the output cap, or write a "summary"
    longer than what it summarizes; installing it would lose the history and gain
    nothing. ``output_tokens`` is the server's count (estimated when it sent none);
    ``tokens_after`` is the whole context with the summary installed.
    """
    produced = output_tokens if output_tokens is not None else _tokens.count_tokens(summary)
    if produced > cap:
        return (f"the summary is {produced:,} tokens, over its output cap of {cap:,} "
                "(the server did not honour max_tokens)")
    if tokens_after >= tokens_before:
        return (f"the summary does not make the context smaller ({tokens_before:,} tokens before, "
                f"~{tokens_after:,} with the summary)")
    return None


def is_summary_message(msg: Message) -> bool:
    """A compaction summary (this format, or the previous one of a resumed transcript)."""
    if msg.role != "user":
        return False
    return any(isinstance(b, TextBlock) and b.in_summary for b in msg.content) or is_legacy_summary(msg)


def _head_tail(text: str, budget: int) -> str:
    """Cut an over-long message to about ``budget`` tokens, keeping both ends."""
    chars = max(200, budget * 3)
    if len(text) <= chars:
        return text
    half = chars // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters of this message left out ...]\n{text[-half:]}"


def _id_for(block: TextBlock) -> str:
    """The block's own id; words from before ids get one from their text (the same every
    time, so a summary built twice keeps the same ids)."""
    if block.user_message_id is not None:
        return block.user_message_id
    return "u-" + hashlib.sha256(block.text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


# A message of the user's is a paste (a log, a file, a trace) by its size and shape, never by its
# words: over PASTE_CHARS characters, or PASTE_LINES lines and more of over PASTE_MIN_CHARS (forty
# one-word lines are a list the user typed). Every other message is kept whole by every summary.
PASTE_CHARS = 4_000
PASTE_LINES = 40
PASTE_MIN_CHARS = 1_000
# What a summary keeps of a paste: its head and its tail, each at most this many characters and
# lines; the cut is smaller than a paste, so a later compaction never cuts it again.
PASTE_END_CHARS = 1_000
PASTE_END_LINES = 12
PASTE_FIRST_LINE_CHARS = 160


def is_paste(text: str) -> bool:
    """Is this message of the user's a paste (long, or many lines)? Its words play no part."""
    return len(text) > PASTE_CHARS or (len(text) > PASTE_MIN_CHARS and text.count("\n") >= PASTE_LINES)


def paste_call_id(user_message_id: str) -> str:
    """The name a paste's saved copy goes by (``read_saved_output``'s call_id, the file's stem):
    letters, digits, ``-`` and ``_`` only, so no id can name a path outside the folder."""
    return "paste-" + ("".join(c if c.isalnum() or c in "-_" else "_" for c in user_message_id)[:90] or "x")


def _where(user_message_id: str, saved_as: str) -> str:
    if not saved_as:
        return "it could not be saved; the session transcript keeps it whole"
    return (f"the whole message is saved in {saved_as}: read it with read_saved_output "
            f"(call_id \"{paste_call_id(user_message_id)}\")")


def cut_paste(text: str, user_message_id: str, saved_as: str | None) -> TextBlock:
    """A paste as a summary keeps it: head and tail, with a line between them saying how much
    was left out and where the whole is (``saved_as``: the file; None or "": not saved)."""
    head = "\n".join(text[:PASTE_END_CHARS].split("\n")[:PASTE_END_LINES])
    tail = "\n".join(text[-PASTE_END_CHARS:].split("\n")[-PASTE_END_LINES:])
    omitted = len(text) - len(head) - len(tail)
    lines = text.count("\n") + 1
    middle = (f"[... pasted message cut by compaction: {omitted:,} of its {len(text):,} characters "
              f"({lines:,} lines) left out here; {_where(user_message_id, saved_as or '')} ...]")
    return TextBlock(text=f"{head}\n{middle}\n{tail}", user_message_id=user_message_id, paste_copy=saved_as or "")


def paste_first_line(text: str, user_message_id: str, saved_as: str) -> TextBlock:
    """A paste (whole, or cut by an earlier summary) down to its first line: what the bound on
    the user's words keeps of the oldest pastes before it leaves out any message."""
    first = text.split("\n", 1)[0][:PASTE_FIRST_LINE_CHARS]
    return TextBlock(text=f"{first}\n[... the rest of this pasted message left out by compaction; "
                          f"{_where(user_message_id, saved_as)} ...]",
                     user_message_id=user_message_id, paste_copy=saved_as)

def kept_word_id(block: TextBlock) -> str:
    """The id a summary keeps ``block`` under (its own, or one made from its text)."""
    return _id_for(block)


def typed_words(history: Sequence[Message]) -> list[TextBlock]:
    """Every block of the user's words in ``history``, oldest first: what the user typed (and
    earlier summaries kept), and the rules a summary of the previous format carried apart (a
    rule there is a sentence of a message no longer kept: it is kept as it is)."""
    typed = user_words(history)
    ids = {b.user_message_id for b in typed if b.user_message_id is not None}
    carried = {id(b) for b in carried_rule_blocks(history) if b.user_message_id not in ids}
    if not carried:
        return typed
    mine = {id(b) for b in typed} | carried
    return [b for msg in history if msg.role == "user" for b in msg.content
            if isinstance(b, TextBlock) and id(b) in mine]


@dataclass(frozen=True)
class KeptWords:
    """The user's words a summary keeps (oldest first) and what the bound left out."""

    blocks: list[TextBlock]
    left_out: int = 0  # the oldest messages, left out whole
    left_out_chars: int = 0
    budget: int = 0  # the bound, in tokens

    def left_out_line(self) -> str:
        return (f"{self.left_out:,} of the user's earliest messages ({self.left_out_chars:,} characters) not "
                f"kept: over the {self.budget:,}-token bound of the user's words a summary keeps; "
                "the session transcript keeps them")


def kept_user_words(history: Sequence[Message], budget: int,
                    saved: Mapping[str, str | None] | None = None) -> KeptWords:
    """Every message the user typed, each a block with the id of its message: whole, or for a
    paste its head and tail naming the saved copy (``saved``: message id -> the file, None or
    absent when it was not saved). Chosen by size and shape alone, never by words.

    The bound, ``budget`` tokens: over it, the oldest pastes keep only their first line; still
    over, the oldest messages are left out whole (the newest always stays) and counted
    (``KeptWords.left_out_line``), so a session of thousands of short messages still compacts
    below its window. A short message gives way only to the bound, never to a paste.
    """
    saved = saved or {}
    words = typed_words(history)
    kept: list[TextBlock] = []
    pastes: list[int] = []  # positions in ``kept`` of the pastes, oldest first
    for block in words:
        ident = _id_for(block)
        if block.paste_copy is not None:
            pastes.append(len(kept))
            kept.append(TextBlock(text=block.text, user_message_id=ident, paste_copy=block.paste_copy))
        elif is_paste(block.text):
            pastes.append(len(kept))
            kept.append(cut_paste(block.text, ident, saved.get(ident)))
        else:
            kept.append(TextBlock(text=block.text, user_message_id=ident))
    costs = [_tokens.count_tokens(b.text) for b in kept]
    total = sum(costs)
    for index in pastes:
        if total <= budget:
            break
        block = kept[index]
        short = paste_first_line(block.text, block.user_message_id or "", block.paste_copy or "")
        cost = _tokens.count_tokens(short.text)
        if cost < costs[index]:
            total += cost - costs[index]
            kept[index], costs[index] = short, cost
    start = 0
    while total > budget and start < len(kept) - 1:
        total -= costs[start]
        start += 1
    if not start:
        return KeptWords(kept, budget=budget)
    left = words[:start]
    return KeptWords(kept[start:], start, sum(len(b.text) for b in left), budget)


def recent_user_messages(history: Sequence[Message]) -> list[str]:
    """The text of every message the user typed (and earlier summaries kept), oldest first."""
    return [b.text for b in typed_words(history)]


# A tag or intro that imitates the frame around the user's kept words, in text a model or a
# tool wrote: any case, any spacing, "_" or " " for "-", attributes. Shown defused, so the
# model reading a summary sees one list of the user's words: the engine's.
_FRAME_LOOKALIKE = re.compile(r"<(\s*/?\s*user[\s_-]*message\b[^<>]*)>", re.IGNORECASE)
_INTRO_LOOKALIKE = re.compile(r"the\s+user[’']?s\s+most\s+recent\s+messages", re.IGNORECASE)


def defuse_frame_lookalikes(text: str) -> str:
    """``text`` with every imitation of the engine's frame made visibly inert."""
    text = _FRAME_LOOKALIKE.sub(lambda m: f"‹{m.group(1)}›", text)
    return _INTRO_LOOKALIKE.sub(lambda m: f"(quoted) {m.group(0)}", text)


def build_summary_history(summary: str, history: Sequence[Message], kept_budget: int = 50_000,
                          saved: Mapping[str, str | None] | None = None) -> list[Message]:
    """The whole new history: one user message with the summary and the user's words
    (``kept_user_words``: every message, a paste as head and tail naming its saved copy).

    The user's words are blocks of their own (with the ids of the messages they were typed
    in), between frame blocks that show the model where each begins and ends; joined, the
    blocks read as one text: the summary, then each message in <user-message> tags, then
    what the bound left out, counted. Whatever the summary says, the next compaction finds
    the user's words by their blocks.
    """
    return _summary_message(summary, kept_user_words(history, kept_budget, saved))


def _summary_message(summary: str, kept: KeptWords | Sequence[TextBlock]) -> list[Message]:
    if not isinstance(kept, KeptWords):
        kept = KeptWords(list(kept))
    recent = kept.blocks
    head = f"{SUMMARY_INTRO}\n\n{defuse_frame_lookalikes(summary.strip())}"
    outro = SUMMARY_OUTRO if not kept.left_out else f"({kept.left_out_line()}.)\n\n{SUMMARY_OUTRO}"
    if not recent:
        return [Message(role="user", content=[TextBlock(text=f"{head}\n\n{outro}", in_summary=True)])]
    blocks: list[ContentBlock] = [TextBlock(text=head + _FRAME_HEAD, in_summary=True)]
    for index, words in enumerate(recent):
        blocks.append(words)
        after = f"{_QUOTE_OPEN}\n" if index < len(recent) - 1 else outro
        blocks.append(TextBlock(text=f"\n{_QUOTE_CLOSE}\n\n{after}", in_summary=True))
    return [Message(role="user", content=blocks)]


def _quoted(text: str) -> str:
    return f"{_QUOTE_OPEN}\n{text}\n{_QUOTE_CLOSE}"


def upgrade_legacy_summary(summary: Message, replaced: Sequence[Message],
                           recent_user_budget: int = 4_000) -> Message:
    """A summary of the previous format (one text block, the user's words quoted in it),
    rebuilt in this format. The user's kept words are taken from ``replaced``, the recorded
    history it replaced, never from its text: the previous engine quoted the last k
    messages the user typed there (the latest alone cut head+tail when over the budget),
    so the largest k whose quotes end the text exactly are the ones kept (a quote before
    them that no record holds stays text of the summary). When none match, nothing is
    kept and the whole text stays the summary (to be read, never parsed)."""
    text = summary.content[0].text if summary.content and isinstance(summary.content[0], TextBlock) else ""
    later = list(summary.content[1:])
    words = [TextBlock(text=b.text, user_message_id=_id_for(b)) for b in user_words(replaced)]
    outro = f"\n\n{SUMMARY_OUTRO}"
    intro = f"\n\n{RECENT_INTRO}\n\n"
    found: tuple[int, list[TextBlock]] | None = None  # (where the summary ends, the kept words)
    if words:
        newest = words[-1]
        cut = TextBlock(text=_head_tail(newest.text, recent_user_budget), user_message_id=newest.user_message_id)
        if cut.text != newest.text and text.endswith(intro + _quoted(cut.text) + outro):
            found = (len(text) - len(intro + _quoted(cut.text) + outro), [cut])
    quotes = outro
    for k in range(1, len(words) + 1):  # each k's quotes end with the quotes of k - 1
        quotes = _quoted(words[-k].text) + ("\n\n" if k > 1 else "") + quotes
        if not text.endswith(quotes):
            break  # a quote the records do not hold (one the previous version took from a summary)
        # the intro line goes with the quotes when they are all of them
        frame = intro + quotes if text.endswith(intro + quotes) else "\n\n" + quotes
        found = (len(text) - len(frame), words[len(words) - k:])
    end, kept = found if found is not None else (len(text) - len(outro) if text.endswith(outro) else len(text), [])
    [message] = _summary_message(text[len(SUMMARY_INTRO):max(end, len(SUMMARY_INTRO))], kept)
    return message.copy_with([*message.content, *later])


@dataclass(frozen=True)
class SummaryParts:
    """A summary message taken apart by its blocks (never by reading its text)."""

    summary: str  # the summary's own text (without the intro)
    kept: list[TextBlock]  # the user's words it keeps, oldest first
    later: list[TextBlock]  # text blocks after it: words typed since, engine notes


def summary_parts(msg: Message) -> SummaryParts | None:
    """The parts of a summary message (None when ``msg`` is not one)."""
    if not is_summary_message(msg):
        return None
    texts = [b for b in msg.content if isinstance(b, TextBlock)]
    if is_legacy_summary(msg):
        # One block: the summary, then (after the first intro line, possibly one a tool
        # printed: at worst the summary is cut short) the quotes, which are not read.
        body = texts[0].text[len(SUMMARY_INTRO):].split(RECENT_INTRO, 1)[0]
        return SummaryParts(summary=body.strip(), kept=[], later=texts[1:])
    last_frame = max(i for i, b in enumerate(texts) if b.in_summary)
    first = next(b for b in texts if b.in_summary)
    body = first.text[len(SUMMARY_INTRO):] if first.text.startswith(SUMMARY_INTRO) else first.text
    # the engine's own frame ends the block (exactly these words, never looked for inside it)
    body = body.removesuffix(_FRAME_HEAD) if last_frame > 0 else body.strip().removesuffix(SUMMARY_OUTRO)
    kept = [b for b in texts[:last_frame] if not b.in_summary]
    return SummaryParts(summary=body.strip(), kept=kept, later=texts[last_frame + 1:])


class CircuitBreaker:
    """Pauses auto-compaction after ``threshold`` consecutive failures.

    While paused, ``allows_auto`` is False until ``cooldown_s`` has passed; then
    auto-compaction may try again, and one more failure pauses it again at once
    (the failure count stays at or above the threshold until a success).
    Manual compaction never consults the breaker.
    """

    def __init__(self, threshold: int = 3, cooldown_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.failures = 0
        self._paused_until: float | None = None

    def record_failure(self) -> None:
        self.failures += 1
        if self.failures >= self.threshold:
            self._paused_until = self.clock() + self.cooldown_s

    def record_success(self) -> None:
        self.failures = 0
        self._paused_until = None

    def allows_auto(self) -> bool:
        return not self.paused

    @property
    def paused(self) -> bool:
        return self._paused_until is not None and self.clock() < self._paused_until

    @property
    def tripped(self) -> bool:
        """At or over the threshold (paused, or cooled down and awaiting its trial)."""
        return self.failures >= self.threshold

    @property
    def retry_at(self) -> float | None:
        """Clock value when the trial is allowed (None when not tripped)."""
        return self._paused_until

    def retry_in(self) -> float | None:
        """Seconds until the trial (0 once allowed; None when not tripped);
        add it to time.time() for an epoch timestamp."""
        if self._paused_until is None:
            return None
        return max(0.0, self._paused_until - self.clock())

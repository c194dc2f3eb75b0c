"""Compaction: ask the model for a handoff summary, replace the history with it.

Seed 000 part 4 point by point: the instruction goes on a copy of the
history (a failure leaves the original untouched), at the end of the last
user message when there is one (roles keep alternating), with the tool
definitions present and tool choice none. On success the history becomes
one user message: the summary plus the user's own latest words verbatim.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from app.messages import Message, TextBlock, ToolResultBlock, ToolSpec
from app.providers.base import ModelRequest

from app.context import tokens as _tokens
from app.context.overflow import DROPPED_NOTE

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

SUMMARY_INTRO = ("This is a summary of an earlier conversation that was compacted because "
                 "the context grew too long.")
RECENT_INTRO = "The user's most recent messages, verbatim:"
SUMMARY_OUTRO = "Continue the task from here. Re-read files if you need their exact content."
# Each verbatim user message sits between these lines, so a later compaction
# can carry the user's words forward again.
_QUOTE_OPEN = "<user-message>"
_QUOTE_CLOSE = "</user-message>"
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
    return msg.role == "user" and msg.text.startswith(SUMMARY_INTRO)


def _quoted_in_summary(text: str) -> list[str]:
    """The verbatim user messages a previous summary carried, oldest first."""
    _, sep, rest = text.partition(RECENT_INTRO)
    if not sep:
        return []
    found: list[str] = []
    while True:
        start = rest.find(_QUOTE_OPEN + "\n")
        if start < 0:
            return found
        rest = rest[start + len(_QUOTE_OPEN) + 1:]
        end = rest.find("\n" + _QUOTE_CLOSE)
        if end < 0:
            return found
        found.append(rest[:end])
        rest = rest[end + len(_QUOTE_CLOSE) + 1:]


def _genuine_user_texts(history: Sequence[Message]) -> list[str]:
    """What the user typed, oldest first: no tool results, no compaction
    instruction, no engine notes; earlier summaries contribute the words they quoted."""
    texts: list[str] = []
    for msg in history:
        if msg.role != "user":
            continue
        blocks = [b for b in msg.content if isinstance(b, TextBlock)]
        if is_summary_message(msg):
            texts.extend(_quoted_in_summary(blocks[0].text))
            # What the user typed next may have been merged into the summary message
            # (roles alternate): it comes after the summary, in its own blocks.
            blocks = blocks[1:]
        for block in blocks:
            text = block.text
            if text.startswith("[Context compaction]") or text == DROPPED_NOTE or not text.strip():
                continue
            texts.append(text)
    return texts


def _head_tail(text: str, budget: int) -> str:
    """Cut an over-long message to about ``budget`` tokens, keeping both ends."""
    chars = max(200, budget * 3)
    if len(text) <= chars:
        return text
    half = chars // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} characters of this message left out ...]\n{text[-half:]}"


def recent_user_messages(history: Sequence[Message], budget: int = 4_000) -> list[str]:
    """The user's latest messages that fit in ``budget`` tokens, oldest first.

    The newest is always included (cut head+tail if alone it is too long).
    """
    picked: list[str] = []
    left = budget
    for text in reversed(_genuine_user_texts(history)):
        cost = _tokens.count_tokens(text)
        if cost > left:
            if not picked and budget > 0:
                picked.append(_head_tail(text, budget))
            break
        picked.append(text)
        left -= cost
    picked.reverse()
    return picked


def build_summary_history(summary: str, history: Sequence[Message],
                          recent_user_budget: int = 4_000) -> list[Message]:
    """The whole new history: one user message with the summary and the user's own words."""
    parts = [SUMMARY_INTRO, summary.strip()]
    recent = recent_user_messages(history, recent_user_budget)
    if recent:
        quoted = "\n\n".join(f"{_QUOTE_OPEN}\n{t}\n{_QUOTE_CLOSE}" for t in recent)
        parts.append(f"{RECENT_INTRO}\n\n{quoted}")
    parts.append(SUMMARY_OUTRO)
    return [Message.user("\n\n".join(parts))]


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

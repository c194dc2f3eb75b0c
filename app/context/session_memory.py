"""Session memory: a rolling handoff summary kept up to date in the background.

Every ``update_tokens`` of new context the engine asks the model (on a copy
of the history, like a compaction) to update a memory file in the session
folder; the memory has the five sections of the handoff summary. When the
context later reaches the auto-compact line and the memory is up to date, the
compaction needs no model call: the memory replaces the history it covers and
the most recent messages stay verbatim.

Updates are incremental: a request carries the memory so far and only
the messages it has not seen, so an update costs what is new, not the whole
history. The engine keeps the unseen messages (``UnseenMessages``) in the order
they were appended, as they were then: a compaction, a clearing or an overflow
drop between two updates never hides one from the memory.

This module holds the pure parts: the update request, the file, the unseen
messages, and where a compaction may cut (never between a tool call and its result).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from app.context import tokens as _tokens
from app.context.compaction import COMPACT_PROMPT, build_compaction_request, build_summary_history
from app.kernel.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolSpec
from app.kernel.private_files import read_private, write_private_atomic
from app.kernel.model_call import ModelRequest
from app.kernel.redact import redact

MEMORY_FILE_NAME = "session-memory.md"
# A memory is a few thousand tokens; a file far bigger than this is not one of ours.
MAX_MEMORY_FILE_BYTES = 1024 * 1024
# The request's marker: a reader of the wire (tests, a proxy) can tell a memory
# update from a compaction by its first words.
MEMORY_PROMPT_HEAD = "[Session memory update]"
MEMORY_INTRO = ("This is the session memory: a running summary of the earlier part of this conversation, "
                "kept up to date while it went on and put here because the context grew too long.")


# Where the memory so far stands in an update request: the head of the conversation it is
# sent with, framed as the summary a memory compaction installs (one shape for both).
MEMORY_SO_FAR_INTRO = ("This is the session memory as it stands: a running summary of the conversation "
                       "up to the messages that follow it, which it does not cover yet.")
# Where the update's first message is a model turn (no memory yet to stand before it).
CONTINUED_NOTE = "[The conversation continues from an earlier part the session memory covers.]"
EARLIER_RESULT_HEAD = "(the result of a tool call made before these messages)"


def memory_prompt(current: str | None) -> str:
    """The update instruction: the handoff prompt's sections; with a memory, update it from what is new."""
    sections = COMPACT_PROMPT.split("\n\n", 1)[1]  # "use exactly these sections", the list, the rules
    if current and current.strip():
        return (f"{MEMORY_PROMPT_HEAD} Update the session memory at the start of this conversation with "
                "the messages after it, so it stays a handoff summary of the whole conversation so far "
                "that a successor could continue from if the earlier messages were removed (keep what is "
                "still true, add what happened since, drop what is obsolete).\n\n" + sections)
    return (f"{MEMORY_PROMPT_HEAD} Update the session memory: a handoff summary of the whole conversation so far "
            "that a successor could continue from if the earlier messages were removed.\n\n" + sections)


def update_messages(new_messages: Sequence[Message], current: str | None) -> list[Message]:
    """The conversation an update is sent: the memory so far, then the messages it has not seen.

    The messages may start anywhere in the conversation: a tool result whose call the memory
    already covers is sent as text (a result without its call is an invalid request for
    every protocol), and the first message is a user one, as every protocol wants.
    """
    messages = list(new_messages)
    if not messages:
        raise ValueError("a memory update needs at least one new message")
    first = messages[0]
    if first.role == "user" and first.tool_results:
        messages[0] = first.copy_with([_as_text(b) for b in first.content])
    head: list[ContentBlock] = []
    if current and current.strip():
        head = list(build_summary_history(f"{MEMORY_SO_FAR_INTRO}\n\n{current.strip()}", [])[0].content)
    elif messages[0].role != "user":
        head = [TextBlock(text=CONTINUED_NOTE)]
    if not head:
        return messages
    if messages[0].role == "user":
        messages[0] = messages[0].copy_with([*head, *messages[0].content])
        return messages
    return [Message(role="user", content=head), *messages]


def _as_text(block: ContentBlock) -> ContentBlock:
    if not isinstance(block, ToolResultBlock):
        return block
    status = " (an error)" if block.is_error else ""
    return TextBlock(text=f"{EARLIER_RESULT_HEAD}{status}\n{block.content}")


def build_memory_request(system: str, new_messages: Sequence[Message], tools: Sequence[ToolSpec],
                         current: str | None, max_tokens: int) -> ModelRequest:
    """The update call: the memory so far, the messages it has not seen, then the instruction;
    tools present, tool choice none.

    The system prompt and the tools are the main requests' own, so a provider's prompt cache
    serves that prefix; the history is not resent (its part of the prefix would be read from
    the cache at a tenth of the price, but it grows with every turn).
    """
    request = build_compaction_request(system, update_messages(new_messages, current), tools, None, max_tokens)
    last = request.messages[-1]
    blocks = list(last.content)
    # build_compaction_request put the compaction instruction last: put ours in its place.
    blocks[-1] = TextBlock(text=memory_prompt(current))
    request.messages[-1] = last.copy_with(blocks)
    return request


@dataclass
class UnseenMessages:
    """The messages the memory has not seen, oldest first, as they were when appended.

    Kept apart from the live history so that what a compaction, a clearing or an overflow
    drop takes out of the context before the next update still reaches the memory.
    """

    messages: list[Message] = field(default_factory=list)

    def add(self, message: Message) -> None:
        self.messages.append(message)

    def merged(self, old: Message, new: Message) -> None:
        """``new`` is ``old`` with blocks appended (the user typed after an interrupted turn):
        a message not yet seen is replaced; one already seen is followed by just what was added."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i] is old:
                self.messages[i] = new
                return
        added = new.content[len(old.content):]
        if added:
            self.messages.append(new.copy_with(added))

    def batch(self, max_tokens: int) -> list[Message]:
        """The next update's messages: from the oldest, within ``max_tokens`` where the
        messages allow, ending after a user message (never between a tool call and its result)."""
        end = 0
        tokens = 0
        for i, message in enumerate(self.messages):
            tokens += _tokens.estimate_message(message)
            if message.role == "user":
                if end and tokens > max_tokens:
                    break
                end = i + 1
        return self.messages[:end] if end else list(self.messages)

    def seen(self, sent: Sequence[Message]) -> None:
        """The memory now covers ``sent`` (the leading messages of an earlier ``batch``)."""
        n = 0
        while n < len(sent) and n < len(self.messages) and self.messages[n] is sent[n]:
            n += 1
        del self.messages[:n]

    def clear(self) -> None:
        self.messages.clear()

    def tokens(self) -> int:
        return _tokens.estimate_messages(self.messages)


@dataclass
class SessionMemory:
    """The memory text and how much of the live history it covers.

    ``covered`` is the last message the memory summarises (by identity: the
    engine's history is a list of messages that compactions replace, never
    edit in place). ``None``: the memory covers nothing of the live history.
    """

    path: Path | None
    text: str = ""
    covered: Message | None = None
    updates: int = 0

    @property
    def exists(self) -> bool:
        return bool(self.text.strip())

    def covered_index(self, history: Sequence[Message]) -> int:
        """How many leading messages of ``history`` the memory covers (0 when none or not found)."""
        if self.covered is None:
            return 0
        for i in range(len(history) - 1, -1, -1):
            if history[i] is self.covered:
                return i + 1
        return 0

    def save(self, text: str, covered: Message | None) -> None:
        """Keep the new text; write it atomically (a crash leaves the old file or the new one).

        The file is redacted (the model's summary repeats what the user pasted, keys
        included) and the owner's only; the text in RAM stays as the model wrote it,
        like the live history it summarises.
        """
        self.text = text.strip()
        self.covered = covered
        self.updates += 1
        if self.path is None:
            return
        try:
            write_private_atomic(self.path, (redact(self.text) + "\n").encode("utf-8", errors="replace"))
        except OSError:
            pass  # the memory still works from RAM; the file is a convenience for the user

    @classmethod
    def load(cls, path: Path | None) -> "SessionMemory":
        """A memory file from an earlier run is read, but covers nothing of a resumed history
        (which message it reached is not known): it is the starting text of the next update."""
        if path is None:
            return cls(path=path, text="")
        try:
            raw = read_private(path, MAX_MEMORY_FILE_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return cls(path=path, text="")  # missing, a symlink, not a file: start without a memory
        # Redacted again: a file written by an older version may hold a key in clear; and written
        # back at once, so the key leaves the disk at resume, not at the next update (which a
        # short run may never finish).
        text = redact(raw)
        if text != raw:
            try:
                write_private_atomic(path, (text.strip() + "\n").encode("utf-8", errors="replace"))
            except OSError:
                pass  # the memory still works from RAM
        return cls(path=path, text=text.strip())


def safe_cut(history: Sequence[Message], covered: int, keep_tokens: int) -> int | None:
    """Where a memory compaction cuts: messages before the index are replaced.

    Everything after ``covered`` stays; the kept part is extended back until it
    holds at least ``keep_tokens``; it must start with an assistant message (the
    summary is a user message, roles alternate), so no tool result is ever kept
    without its call. None when no cut replaces anything.
    """
    if covered <= 0:
        return None
    cut = min(covered, len(history))
    kept = _tokens.estimate_messages(history[cut:])
    while cut > 0 and kept < keep_tokens:
        cut -= 1
        kept += _tokens.estimate_message(history[cut])
    if cut >= len(history):
        # The memory covers everything: keep the last exchange anyway, so the model
        # sees its own latest step and the results it is waiting for.
        cut = max((i for i, m in enumerate(history) if m.role == "assistant"), default=0)
    while cut > 0 and history[cut].role != "assistant":
        cut -= 1
    return cut if cut > 0 else None

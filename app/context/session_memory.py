"""Session memory: a rolling handoff summary kept up to date in the background.

Every ``update_tokens`` of new context the engine asks the model (on a copy
of the history, like a compaction) to update a memory file in the session
folder; the memory has the five sections of the handoff summary. When the
context later reaches the auto-compact line and the memory is up to date, the
compaction needs no model call: the memory replaces the history it covers and
the most recent messages stay verbatim.

This module holds the pure parts: the update request, the file, and where a
compaction may cut (never between a tool call and its result).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from app.context import tokens as _tokens
from app.context.compaction import COMPACT_PROMPT, build_compaction_request
from app.messages import Message, TextBlock, ToolSpec
from app.private_files import read_private, write_private_atomic
from app.providers.base import ModelRequest
from app.redact import redact

MEMORY_FILE_NAME = "session-memory.md"
# A memory is a few thousand tokens; a file far bigger than this is not one of ours.
MAX_MEMORY_FILE_BYTES = 1024 * 1024
# The request's marker: a reader of the wire (tests, a proxy) can tell a memory
# update from a compaction by its first words.
MEMORY_PROMPT_HEAD = "[Session memory update]"
MEMORY_INTRO = ("This is the session memory: a running summary of the earlier part of this conversation, "
                "kept up to date while it went on and put here because the context grew too long.")


def memory_prompt(current: str | None) -> str:
    """The update instruction: the handoff prompt's sections, plus the memory so far."""
    sections = COMPACT_PROMPT.split("\n\n", 1)[1]  # "use exactly these sections", the list, the rules
    text = (f"{MEMORY_PROMPT_HEAD} Update the session memory: a handoff summary of the whole conversation so far "
            "that a successor could continue from if the earlier messages were removed.\n\n" + sections)
    if current and current.strip():
        text += ("\n\nThe memory as it stands (keep what is still true, add what happened since, "
                 f"drop what is obsolete):\n\n<memory>\n{current.strip()}\n</memory>")
    return text


def build_memory_request(system: str, history: Sequence[Message], tools: Sequence[ToolSpec],
                         current: str | None, max_tokens: int) -> ModelRequest:
    """The update call: the history (a copy) plus the instruction, tools present, tool choice none.

    The same prefix as the main requests, so a provider's prompt cache serves most of it.
    """
    request = build_compaction_request(system, history, tools, None, max_tokens)
    last = request.messages[-1]
    blocks = list(last.content)
    # build_compaction_request put the compaction instruction last: put ours in its place.
    blocks[-1] = TextBlock(text=memory_prompt(current))
    request.messages[-1] = last.copy_with(blocks)
    return request


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
        text = ""
        if path is not None:
            try:
                raw = read_private(path, MAX_MEMORY_FILE_BYTES)
                # Redacted again: a file written by an older version may hold a key in clear.
                text = redact(raw.decode("utf-8", errors="replace"))
            except OSError:
                text = ""  # missing, a symlink, not a file: start without a memory
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

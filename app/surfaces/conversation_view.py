"""The conversation as the dashboard shows it: its entries, in order, and the rules that make them.

One entry per thing drawn: a user prompt, a reply (streamed or whole), its thinking, a tool call
(the view model's record of it), a line of the engine's or the dashboard's own, a task call's
sub-agent. The rules live here, not in the widget: a prompt or a tool call ends the reply
streaming before it, a failed stream's partial is set apart, a rewind dims the turns it went back
before, a sub-agent's events fold into one entry under its call. The conversation widget
(``widgets/conversation.py``) folds the session's messages in here as it draws them, in the order it
draws them (the dashboard's own lines among them), and keeps only what drawing needs: which
entries are mounted and their widgets. So ``entries`` is exactly what the conversation shows,
mounted or scrolled away, and a test reads it without Textual.

Plain Python and no pydantic: the conversation is built before the first frame, before the
session's vocabulary is imported. Used on the UI thread only (the widget's message handlers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from app.surfaces.tool_calls import ToolCallRecord

if TYPE_CHECKING:
    from app.kernel.events import SubAgentEvent

EntryKind = Literal["user", "assistant", "thinking", "tool", "engine", "sub"]


@dataclass
class SubAgentState:
    """What the conversation shows of one task call's sub-agent, folded from its events."""

    call_id: str
    description: str = ""
    status: str = "running"  # running | finished
    stop_reason: str = ""
    step: int = 0
    max_steps: int = 0
    context_tokens: int = 0
    auto_compact_line: int = 0
    window: int = 0
    tools: list[tuple[str, str]] = field(default_factory=list)  # (tool, its arguments in one line)
    written_chars: int = 0  # of the reply it is streaming now (0: none streaming)

    def apply(self, event: "SubAgentEvent") -> None:
        if event.status == "started":
            self.description = event.summary
        elif event.status == "writing":
            self.written_chars = event.written_chars
        elif event.status == "tool":
            self.tools.append((event.tool, event.summary))
            self.written_chars = 0
        elif event.status == "finished":
            self.stop_reason = event.summary
        self.status = "finished" if event.status == "finished" else "running"
        self.step = event.step or self.step
        self.max_steps = event.max_steps or self.max_steps
        if event.context_tokens:
            self.context_tokens = event.context_tokens
        self.auto_compact_line = event.auto_compact_line or self.auto_compact_line
        self.window = event.window or self.window


@dataclass
class ConversationEntry:
    """One thing the conversation shows (its widget is made from it, and made again after scrolling)."""

    kind: EntryKind
    # The text in the pieces it came in (a streamed reply's batches): joined when first read, so a
    # delta costs an append, not a copy of the reply so far.
    chunks: list[str] = field(default_factory=list)
    engine_kind: str = ""  # kind "engine": its kind of line (info, warning, error, ...)
    tool: ToolCallRecord | None = None  # kind "tool": the view model's record of the call, as it stands
    sub: SubAgentState | None = None  # kind "sub": a task call's sub-agent, under the call
    discarded: bool = False  # kind "assistant": a failed stream's partial text, set apart from the retry
    abandoned: bool = False  # a turn a rewind went back before: out of the context, drawn dimmed

    @property
    def text(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


@dataclass
class ConversationView:
    """The conversation's entries, oldest first, and the streams still open at their end.

    Each method folds one thing in. What it adds is at the end (past the length before the call);
    those that can change entries already there return their indexes, for the widget to redraw."""

    entries: list[ConversationEntry] = field(default_factory=list)
    reply: int | None = None  # the reply streaming (its deltas go there), if any
    thinking: int | None = None  # the thinking streaming, if any
    _tools: dict[str, int] = field(default_factory=dict)  # call id -> its entry
    _subs: dict[str, int] = field(default_factory=dict)  # a task call's id -> its sub-agent's entry

    def _add(self, entry: ConversationEntry) -> int:
        self.entries.append(entry)
        return len(self.entries) - 1

    def end_streams(self) -> None:
        """A turn ended (or a prompt came): the next delta starts a reply of its own."""
        self.reply = None
        self.thinking = None

    def user(self, text: str) -> None:
        self.end_streams()
        self._add(ConversationEntry("user", [text]))

    def line(self, kind: str, text: str) -> None:
        """A line of the engine's (described from an event) or of the dashboard's own."""
        self.thinking = None
        self._add(ConversationEntry("engine", [text], engine_kind=kind))

    def tool_call(self, record: ToolCallRecord) -> tuple[int, ...]:
        """A call's record, new or changed (the view model makes a new record for each change)."""
        known = self._tools.get(record.id)
        if known is not None:
            self.entries[known].tool = record
            return (known,)
        self.end_streams()  # what the model says after its calls is a reply of its own
        self._tools[record.id] = self._add(ConversationEntry("tool", tool=record))
        return ()

    def open_reply(self) -> int:
        """The reply streaming, opened (empty) if none is: its deltas go there."""
        self.thinking = None
        if self.reply is None:
            self.reply = self._add(ConversationEntry("assistant"))
        return self.reply

    def reply_delta(self, text: str) -> None:
        self.entries[self.open_reply()].chunks.append(text)

    def open_thinking(self) -> int:
        if self.thinking is None:
            self.thinking = self._add(ConversationEntry("thinking"))
        return self.thinking

    def thinking_delta(self, text: str) -> None:
        self.entries[self.open_thinking()].chunks.append(text)

    def reply_done(self, text: str) -> None:
        """A reply entered the history: streamed, it is complete; not streamed (restored, or a
        provider that does not stream), its whole text is shown now."""
        if self.reply is None and text:
            self.thinking = None
            self._add(ConversationEntry("assistant", [text]))
        self.end_streams()

    def reply_discarded(self) -> tuple[int, ...]:
        """The stream failed: what it showed is set apart (never continued); a retry streams anew."""
        if self.reply is None:
            return ()
        index = self.reply
        self.entries[index].discarded = True
        self.reply = None
        return (index,)

    def sub_agent(self, event: "SubAgentEvent") -> tuple[int, ...]:
        known = self._subs.get(event.call_id)
        if known is None:  # its first event comes while the task call runs: the entry lands under it
            self.thinking = None
            known = self._subs[event.call_id] = self._add(ConversationEntry("sub", sub=SubAgentState(event.call_id)))
            changed: tuple[int, ...] = ()
        else:
            changed = (known,)
        sub = self.entries[known].sub
        assert sub is not None
        sub.apply(event)
        return changed

    def rewound(self, abandoned_turns: int) -> tuple[int, ...]:
        """The turns a rewind abandoned (its prompt and everything after it) stay, dimmed."""
        if abandoned_turns <= 0:
            return ()
        users = [index for index, entry in enumerate(self.entries) if entry.kind == "user" and not entry.abandoned]
        if not users:
            return ()
        first = users[-min(abandoned_turns, len(users))]
        changed = tuple(index for index in range(first, len(self.entries)) if not self.entries[index].abandoned)
        for index in changed:
            self.entries[index].abandoned = True
        return changed

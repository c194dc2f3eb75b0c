"""The conversation: user prompts, streamed replies, thinking, tool calls, engine lines.

A long session must stay fast, so only a window of items is mounted in the
DOM (``max_mounted`` plus some slack). Every item is kept as a small record;
widgets beyond the window are removed and re-created from their record when
the user scrolls back to them. What an earlier run recorded arrives as one
``Replayed`` message: folded into records first, then only the newest window is
mounted (a resumed session of 5,000 turns mounts what one of 50 does); so is this run's
catch-up when the dashboard attaches late.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TYPE_CHECKING, Literal

from textual.app import ComposeResult
from textual import events, on
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget

from widgets._literal import literal
from widgets.engine_line import EngineLine
from widgets.thinking_line import ThinkingLine
from app.kernel.describe import describe
from widgets.session_messages import (
    Deltas,
    DeltasPaused,
    EngineSaid,
    ReplyDiscarded,
    Replayed,
    Rewound,
    ReplyDone,
    SessionStarted,
    SubAgentUpdate,
    ToolCallsChanged,
    TurnEnded,
    UserSaid,
)
from widgets.tool_call_line import TOOL_STYLE_KEYS, ToolCallInfo, ToolCallLine
from widgets.user_prompt import UserPrompt
from widgets.sub_agent_line import SubAgentLine, SubAgentState

if TYPE_CHECKING:
    from widgets.assistant_message import AssistantMessage


def _assistant_message() -> "type[AssistantMessage]":
    # Markdown and markdown-it cost ~50 ms to import: loaded with the first reply
    # (or warmed up after the first frame), not before the dashboard is drawn.
    from widgets.assistant_message import AssistantMessage

    return AssistantMessage


ItemKind = Literal["user", "assistant", "thinking", "tool", "engine", "sub"]


@dataclass
class ConversationItem:
    """Everything needed to (re)create one conversation widget."""

    kind: ItemKind
    chunks: list[str] = field(default_factory=list)
    engine_kind: str = ""
    tool: ToolCallInfo | None = None
    sub: SubAgentState | None = None  # kind "sub": a task call's sub-agent, under the call
    widget: Widget | None = None
    discarded: bool = False  # kind "assistant": a failed stream's partial text, set apart from the retry
    abandoned: bool = False  # a turn a rewind went back before: out of the context, drawn dimmed

    @property
    def text(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


class Conversation(VerticalScroll, can_focus=True):
    """Scrollable list of conversation items with a bounded number of mounted widgets."""

    SESSION_MESSAGES = (SessionStarted, UserSaid, ReplyDone, ReplyDiscarded, ToolCallsChanged, EngineSaid,
                        SubAgentUpdate, TurnEnded, Replayed, Rewound)

    DEFAULT_CSS = """
    Conversation > .-abandoned { text-opacity: 45%; }
    """

    # Styles of the tool-call lines, resolved once here rather than per line.
    COMPONENT_CLASSES = {f"toolcall--{key}" for key in TOOL_STYLE_KEYS}

    # The scroll keys a container has anyway, listed in the footer while the conversation has focus.
    BINDINGS = [
        Binding("pageup", "page_up", "Scroll", group=Binding.Group("Scroll")),
        Binding("pagedown", "page_down", "Scroll", group=Binding.Group("Scroll")),
        Binding("home", "scroll_home", "Top/end", group=Binding.Group("Top/end")),
        Binding("end", "scroll_end", "Top/end", group=Binding.Group("Top/end")),
    ]

    def __init__(
        self,
        *,
        max_mounted: int = 200,
        slack: int = 50,
        load_batch: int = 50,
        transcript_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_mounted = max_mounted
        self.slack = slack
        self.load_batch = load_batch  # items re-created per scroll-back step
        self.transcript_path = transcript_path
        self.items: list[ConversationItem] = []
        self._start = 0  # mounted window is items[_start:_end]
        self._end = 0
        self._tools: dict[str, ConversationItem] = {}
        self._subs: dict[str, ConversationItem] = {}  # by the task call's id
        self._assistant: ConversationItem | None = None
        self._thinking: ConversationItem | None = None
        self._loading = False
        self._replaying = False  # folding a Replayed batch: items are recorded, mounted at its end
        self._tool_styles: dict[str, object] | None = None
        # "N earlier/newer items hidden" lines; shown by dropping their -empty class
        self._above = EngineLine("hidden", "", classes="conversation-edge -empty")
        self._below = EngineLine("hidden", "", classes="conversation-edge -empty")

    def tool_styles(self) -> dict[str, object]:
        if self._tool_styles is None:
            self._tool_styles = {key: self.get_component_rich_style(f"toolcall--{key}") for key in TOOL_STYLE_KEYS}
        return self._tool_styles

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._tool_styles = None

    def compose(self) -> ComposeResult:
        yield self._above
        yield self._below

    def on_mount(self) -> None:
        self.anchor()

    # ------------------------------------------------------------------ state

    @property
    def live(self) -> bool:
        """True when the newest item is mounted (new items appear at once)."""
        return self._end == len(self.items)

    @property
    def mounted_count(self) -> int:
        return self._end - self._start

    @property
    def hidden_above(self) -> int:
        return self._start

    # ------------------------------------------------------------- adding items

    def add_user(self, text: str) -> None:
        self.end_turn_streams()
        self._add(ConversationItem("user", [text]))

    def add_engine(self, kind: str, text: str) -> None:
        self._close_thinking()
        self._add(ConversationItem("engine", [text], engine_kind=kind))

    def add_tool(self, info: ToolCallInfo) -> None:
        self._close_assistant_sync()
        self._close_thinking()
        item = ConversationItem("tool", tool=info)
        self._tools[info.id] = item
        self._add(item)

    def update_tool(self, info: ToolCallInfo) -> None:
        item = self._tools.get(info.id)
        if item is None:
            self.add_tool(info)
            return
        item.tool = info
        if isinstance(item.widget, ToolCallLine):
            item.widget.update_info(info)

    def append_assistant(self, delta: str) -> None:
        self._close_thinking()
        item = self._assistant
        if item is None:
            item = self._assistant = ConversationItem("assistant")
            self._add(item)
        item.chunks.append(delta)
        if isinstance(item.widget, _assistant_message()):
            item.widget.append_text(delta)

    def note_typing(self) -> None:
        """The user is typing: a reply streaming meanwhile spaces its redraws for a moment."""
        item = self._assistant
        if item is not None and isinstance(item.widget, _assistant_message()):
            item.widget.note_typing()

    @property
    def streaming_assistant(self) -> bool:
        """True while an assistant message is receiving deltas."""
        return self._assistant is not None

    def add_assistant_text(self, text: str) -> None:
        """A complete assistant message (restored sessions, non-streaming providers)."""
        self._close_assistant_sync()
        self._close_thinking()
        self._add(ConversationItem("assistant", [text]))

    def append_thinking(self, delta: str) -> None:
        item = self._thinking
        if item is None:
            item = self._thinking = ConversationItem("thinking")
            self._add(item)
        item.chunks.append(delta)
        if isinstance(item.widget, ThinkingLine):
            item.widget.append(delta)

    async def end_assistant(self) -> None:
        """The assistant message is complete: flush its stream."""
        item, self._assistant = self._assistant, None
        self._thinking = None
        if item is not None and isinstance(item.widget, _assistant_message()):
            await item.widget.finish()

    def end_turn_streams(self) -> None:
        self._close_assistant_sync()
        self._thinking = None

    def _close_assistant_sync(self) -> None:
        # The widget's stream flushes itself; a new message starts on the next delta.
        item, self._assistant = self._assistant, None
        if item is not None and isinstance(item.widget, _assistant_message()):
            self.run_worker(item.widget.finish(), group="conversation-flush")

    def _close_thinking(self) -> None:
        self._thinking = None

    def _add(self, item: ConversationItem) -> None:
        if self._closing or self._pruning or not self.is_attached:
            # The dashboard is closing: messages the session posted before it was told
            # to stop are still handled while the widgets are removed, and mounting then
            # raised MountError (exit code 1 on about one quit in eight mid-reply).
            return
        was_live = self.live
        self.items.append(item)
        if self._replaying:  # mounted (the newest window only) once the whole batch is folded
            return
        full = self.mounted_count >= self.max_mounted + self.slack
        if was_live and full and self.max_scroll_y > 0 and not self.is_vertical_scroll_end:
            # The user is reading further up: trimming the top would pull the text
            # away under their eyes. Stop following; the newer items wait below.
            was_live = False
        if was_live:
            item.widget = self._make_widget(item)
            self.mount(item.widget, before=self._below)
            self._end = len(self.items)
            if self.mounted_count > self.max_mounted + self.slack:
                self._trim_top(self.mounted_count - self.max_mounted)
        self._update_edges()

    # ---------------------------------------------------------------- windowing

    def _make_widget(self, item: ConversationItem) -> Widget:
        widget = self._widget_for(item)
        if item.abandoned:
            widget.add_class("-abandoned")
        return widget

    def _widget_for(self, item: ConversationItem) -> Widget:
        if item.kind == "user":
            return UserPrompt(item.text)
        if item.kind == "assistant":
            return _assistant_message()(item.text, classes="-discarded" if item.discarded else "")
        if item.kind == "thinking":
            return ThinkingLine(item.text)
        if item.kind == "tool":
            assert item.tool is not None
            return ToolCallLine(item.tool)
        if item.kind == "sub":
            assert item.sub is not None
            return SubAgentLine(item.sub)
        return EngineLine(item.engine_kind, item.text)

    def _trim_top(self, count: int) -> int:
        """Unmount the oldest ``count`` mounted widgets; returns the height removed."""
        removed: list[Widget] = []
        height = 0
        for item in self.items[self._start : self._start + count]:
            if item.widget is not None:
                height += item.widget.outer_size.height
                removed.append(item.widget)
                item.widget = None
        self._start += count
        self._remove(removed)
        return height

    def _trim_bottom(self, count: int) -> None:
        removed: list[Widget] = []
        for item in self.items[self._end - count : self._end]:
            if item.widget is not None:
                removed.append(item.widget)
                item.widget = None
        self._end -= count
        self._remove(removed)

    def _remove(self, widgets: list[Widget]) -> None:
        """Unmount pruned items, their rendered lines dropped first: textual 8.2.8 keeps up to
        1,024 removed widgets' style caches alive in an ``lru_cache`` on a method
        (Textualize/textual#6665), and with them every strip they had rendered. ``refresh()``
        empties a widget's cache; only the small cache objects stay (measured on 1,500 pruned
        items: 1,624 strips alive instead of 4,816, 6.3 MB traced instead of 11.5 MB)."""
        if not widgets:
            return
        for widget in widgets:
            widget.refresh()
        self.remove_children(widgets)

    def _update_edges(self) -> None:
        if self._start:
            where = f"; full transcript at {self.transcript_path}" if self.transcript_path else ""
            self._above.update(
                literal(f"… {self._start} earlier items hidden — scroll up (or click) to load them{where}")
            )
        self._above.set_class(self._start == 0, "-empty")
        newer = len(self.items) - self._end
        if newer:
            self._below.update(literal(f"… {newer} newer items below — scroll down (or click) to jump to the end"))
        self._below.set_class(newer == 0, "-empty")

    async def load_earlier(self) -> None:
        """Re-create the batch of items just above the window (scroll-back)."""
        if self._loading or self._start == 0:
            return
        self._loading = True
        try:
            count = min(self.load_batch, self._start)
            first = self._start - count
            widgets = []
            for item in self.items[first : self._start]:
                item.widget = self._make_widget(item)
                widgets.append(item.widget)
            self._start = first
            await self.mount_all(widgets, after=self._above)
            self._update_edges()
            if self.mounted_count > self.max_mounted + self.slack:
                self._trim_bottom(self.mounted_count - self.max_mounted)
                self._update_edges()

            def keep_position() -> None:
                height = sum(w.outer_size.height for w in widgets)
                self.scroll_to(y=self.scroll_y + height, animate=False, immediate=True)

            self.call_after_refresh(keep_position)
        finally:
            self._loading = False

    async def load_later(self) -> None:
        """Re-create the batch of items just below the window."""
        if self._loading or self.live:
            return
        self._loading = True
        try:
            last = min(len(self.items), self._end + self.load_batch)
            widgets = []
            for item in self.items[self._end : last]:
                item.widget = self._make_widget(item)
                widgets.append(item.widget)
            self._end = last
            await self.mount_all(widgets, before=self._below)
            if self.mounted_count > self.max_mounted + self.slack:
                height = self._trim_top(self.mounted_count - self.max_mounted)
                self.scroll_to(y=max(0, self.scroll_y - height), animate=False, immediate=True)
            self._update_edges()
        finally:
            self._loading = False

    def show_latest_from_its_top(self) -> None:
        """Scroll the newest item into view from its first line (a /help taller than the view
        would otherwise show only its end); the view stops following until the next prompt."""
        widget = self.items[-1].widget if self.items else None

        def scroll() -> None:
            if widget is None or not widget.is_attached:
                return
            if widget.outer_size.height > self.scrollable_content_region.height:
                self.release_anchor()
                self.scroll_to_widget(widget, top=True, animate=False, immediate=True)

        self.call_after_refresh(scroll)

    async def jump_to_end(self) -> None:
        """Show the newest items (used when the user sends a prompt)."""
        if not self.live:
            self._trim_top(self.mounted_count)
            self._start = self._end = max(0, len(self.items) - self.max_mounted)
            widgets = []
            for item in self.items[self._start :]:
                item.widget = self._make_widget(item)
                widgets.append(item.widget)
            self._end = len(self.items)
            await self.mount_all(widgets, before=self._below)
            self._update_edges()
        self.anchor()

    async def _mount_newest_window(self) -> None:
        """After a replay: the newest ``max_mounted`` items mounted, in one go; the mounted items
        older than that unmounted (their records stay, for scrolling back)."""
        newest_start = max(self._start, len(self.items) - self.max_mounted)
        if newest_start > self._start:
            self._trim_top(min(newest_start, self._end) - self._start)
            self._start = newest_start
        widgets = []
        for item in self.items[max(self._end, newest_start):]:
            item.widget = self._make_widget(item)
            widgets.append(item.widget)
        self._end = len(self.items)
        if widgets:
            await self.mount_all(widgets, before=self._below)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._loading or not self.is_mounted:
            return
        if new_value <= 0 and self._start > 0 and new_value < old_value:
            self.call_later(self.load_earlier)
        elif new_value >= self.max_scroll_y and not self.live and new_value > old_value:
            self.call_later(self.load_later)

    def on_click(self, event: events.Click) -> None:
        if event.widget is self._above:
            self.call_later(self.load_earlier)
        elif event.widget is self._below:
            self.call_later(self.jump_to_end)

    # ------------------------------------------------------- session messages

    @on(SessionStarted)
    def _on_session(self, message: SessionStarted) -> None:
        info = message.event
        self.transcript_path = info.transcript_path
        # in full (the header cuts it on a narrow terminal): it is what --resume needs
        self.border_subtitle = literal(f"session {info.session_id}")
        if info.banner and not info.resumed:
            self.add_engine("info", info.banner)

    @on(UserSaid)
    def _on_user(self, message: UserSaid) -> None:
        self.add_user(message.event.text)

    @on(Deltas)
    def _on_deltas(self, batch: Deltas) -> None:
        text = batch.take()  # the bridge starts a new batch for the next delta
        if batch.kind == "text_delta":
            self.append_assistant(text)
        else:
            self.append_thinking(text)

    @on(DeltasPaused)
    def _on_deltas_paused(self, message: DeltasPaused) -> None:
        item = self._assistant
        if message.kind == "text_delta" and item is not None and isinstance(item.widget, _assistant_message()):
            item.widget.flush_now()
            item.widget.when_drawn(message.release)  # the other widgets' messages wait for that frame
        else:
            message.release()

    @on(ReplyDone)
    async def _on_reply(self, message: ReplyDone) -> None:
        if not self.streaming_assistant and message.event.text:
            self.add_assistant_text(message.event.text)  # restored, or a reply that was not streamed
        await self.end_assistant()

    @on(ReplyDiscarded)
    def _on_reply_discarded(self, _message: ReplyDiscarded) -> None:
        """The stream failed: what it showed is set apart (dimmed, never continued); a retry
        streams its reply anew into a reply of its own."""
        item = self._assistant
        if item is None:
            return
        item.discarded = True
        if item.widget is not None:
            item.widget.add_class("-discarded")
        self._close_assistant_sync()

    @on(ToolCallsChanged)
    def _on_tool_calls(self, message: ToolCallsChanged) -> None:
        for record in message.records:
            self.update_tool(record)

    @on(EngineSaid)
    def _on_engine_line(self, message: EngineSaid) -> None:
        line = describe(message.event)
        if line is not None:
            self.add_engine(line.kind, line.text)

    @on(SubAgentUpdate)
    def _on_sub_agent(self, message: SubAgentUpdate) -> None:
        item = self._subs.get(message.event.call_id)
        if item is None:  # its first event comes while the task call runs: the item lands under it
            item = self._subs[message.event.call_id] = ConversationItem("sub", sub=SubAgentState(message.event.call_id))
            self._close_thinking()
            self._add(item)
        assert item.sub is not None
        item.sub.apply(message.event)
        if isinstance(item.widget, SubAgentLine):
            item.widget.update_state()

    @on(Rewound)
    def _on_rewound(self, message: Rewound) -> None:
        """The turns a rewind abandoned (its message and every one after it) stay, dimmed."""
        event = message.event
        if not event.ok or event.abandoned_turns <= 0:
            return
        users = [i for i, item in enumerate(self.items) if item.kind == "user" and not item.abandoned]
        if not users:
            return
        first = users[-min(event.abandoned_turns, len(users))]
        for item in self.items[first:]:
            item.abandoned = True
            if item.widget is not None:
                item.widget.add_class("-abandoned")

    @on(TurnEnded)
    def _on_turn_end(self, _message: TurnEnded) -> None:
        self.end_turn_streams()

    @on(Replayed)
    async def _on_replayed(self, batch: Replayed) -> None:
        """An earlier run's events: each message handled as it would be alone, but only recorded;
        then the newest window is mounted at once. Mounting every item to trim it a moment later
        cost minutes on a resumed session of 2,000 turns (a layout per mount)."""
        was_live = self.live
        self._replaying = True
        try:
            for message in batch.messages:
                handler = _REPLAY_HANDLERS.get(type(message))
                if handler is not None:
                    outcome = handler(self, message)
                    if outcome is not None:
                        await outcome
        finally:
            self._replaying = False
        if was_live:  # else the user reads further up: the newer items wait below, as live ones do
            await self._mount_newest_window()
        self._update_edges()


# The handler of each session message, for the messages a Replayed batch carries.
_REPLAY_HANDLERS: "dict[type[Any], Callable[[Conversation, Any], Awaitable[None] | None]]" = {
    SessionStarted: Conversation._on_session,
    UserSaid: Conversation._on_user,
    ReplyDone: Conversation._on_reply,
    ReplyDiscarded: Conversation._on_reply_discarded,
    ToolCallsChanged: Conversation._on_tool_calls,
    EngineSaid: Conversation._on_engine_line,
    SubAgentUpdate: Conversation._on_sub_agent,
    TurnEnded: Conversation._on_turn_end,
    Rewound: Conversation._on_rewound,
    Deltas: Conversation._on_deltas,  # a reply still streaming when a dashboard attaches late
}

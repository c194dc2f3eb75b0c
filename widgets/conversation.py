"""The conversation: user prompts, streamed replies, thinking, tool calls, engine lines.

What it shows is the view model's (``app.surfaces.conversation_view.ConversationView``:
the entries and the rules that make them); each message is folded in there, then drawn.
The widget keeps only what drawing needs: which entries are mounted, and their widgets.
A long session must stay fast, so only a window of entries is mounted in the
DOM (``max_mounted`` plus some slack); widgets beyond the window are removed and
re-created from their entry when the user scrolls back to them. What an earlier run
recorded arrives as one ``Replayed`` message: folded into the entries first, then only
the newest window is mounted (a resumed session of 5,000 turns mounts what one of 50 does); so is this run's
catch-up when the dashboard attaches late.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TYPE_CHECKING

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
from widgets.sub_agent_line import SubAgentLine
from app.surfaces.conversation_view import ConversationEntry, ConversationView

if TYPE_CHECKING:
    from widgets.assistant_message import AssistantMessage


def _assistant_message() -> "type[AssistantMessage]":
    # Markdown and markdown-it cost ~50 ms to import: loaded with the first reply
    # (or warmed up after the first frame), not before the dashboard is drawn.
    from widgets.assistant_message import AssistantMessage

    return AssistantMessage


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
        records: ConversationView | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_mounted = max_mounted
        self.slack = slack
        self.load_batch = load_batch  # items re-created per scroll-back step
        self.transcript_path = transcript_path
        self._subtitle: str | None = None  # the border's "session ID", as last set
        # What the conversation shows (the view model's part of it): the widget keeps only which
        # entries are mounted, and their widgets.
        self.records = records if records is not None else ConversationView()
        self._widgets: dict[int, Widget] = {}  # entry index -> its widget, for the mounted window
        self._start = 0  # mounted window is entries[_start:_end]
        self._end = 0
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
        if not self.live:  # entries folded in before it was mounted: shown now
            self.call_later(self.jump_to_end)

    # ------------------------------------------------------------------ state

    @property
    def items(self) -> list[ConversationEntry]:
        """Everything the conversation shows, mounted or not, oldest first (the view model's entries)."""
        return self.records.entries

    def widget_of(self, index: int) -> Widget | None:
        """The widget drawing entry ``index``, if it is in the mounted window."""
        return self._widgets.get(index)

    @property
    def live(self) -> bool:
        """True when the newest item is mounted (new items appear at once)."""
        return self._end == len(self.records.entries)

    @property
    def mounted_count(self) -> int:
        return self._end - self._start

    @property
    def hidden_above(self) -> int:
        return self._start

    # ------------------------------------------------------------- adding items
    # Each folds into the records first, then draws what they say changed or was added.

    def add_user(self, text: str) -> None:
        reply, added = self.records.reply, len(self.records.entries)
        self.records.user(text)
        self._drawn(reply, added)

    def add_engine(self, kind: str, text: str) -> None:
        reply, added = self.records.reply, len(self.records.entries)
        self.records.line(kind, text)
        self._drawn(reply, added)

    def update_tool(self, info: ToolCallInfo) -> None:
        reply, added = self.records.reply, len(self.records.entries)
        for index in self.records.tool_call(info):
            widget = self._widgets.get(index)
            if isinstance(widget, ToolCallLine):
                widget.update_info(info)
        self._drawn(reply, added)

    add_tool = update_tool

    def append_assistant(self, delta: str) -> None:
        reply, added = self.records.reply, len(self.records.entries)
        index = self.records.open_reply()  # its widget is made empty: its text comes as a stream
        self._drawn(reply, added)
        self.records.reply_delta(delta)
        widget = self._widgets.get(index)
        if isinstance(widget, _assistant_message()):
            widget.append_text(delta)

    def note_typing(self) -> None:
        """The user is typing: a reply streaming meanwhile spaces its redraws for a moment."""
        widget = self._widgets.get(self.records.reply) if self.records.reply is not None else None
        if widget is not None and isinstance(widget, _assistant_message()):
            widget.note_typing()

    @property
    def streaming_assistant(self) -> bool:
        """True while an assistant message is receiving deltas."""
        return self.records.reply is not None

    def add_assistant_text(self, text: str) -> None:
        """A complete assistant message (restored sessions, non-streaming providers)."""
        self.end_turn_streams()
        reply, added = self.records.reply, len(self.records.entries)
        self.records.reply_done(text)
        self._drawn(reply, added)

    def append_thinking(self, delta: str) -> None:
        reply, added = self.records.reply, len(self.records.entries)
        index = self.records.open_thinking()
        self._drawn(reply, added)
        self.records.thinking_delta(delta)
        widget = self._widgets.get(index)
        if isinstance(widget, ThinkingLine):
            widget.append(delta)

    async def end_assistant(self) -> None:
        """The assistant message is complete: flush its stream."""
        reply = self.records.reply
        self.records.end_streams()
        widget = self._widgets.get(reply) if reply is not None else None
        if widget is not None and isinstance(widget, _assistant_message()):
            await widget.finish()

    def end_turn_streams(self) -> None:
        reply = self.records.reply
        self.records.end_streams()
        self._drawn(reply, len(self.records.entries))

    def _drawn(self, reply: int | None, added: int) -> None:
        """After a fold: the reply that was streaming, if the records closed it, flushes its
        stream; the entries added from index ``added`` on are shown."""
        if reply is not None and reply != self.records.reply:
            widget = self._widgets.get(reply)
            if widget is not None and isinstance(widget, _assistant_message()):
                # The widget's stream flushes itself; a new message starts on the next delta.
                self.run_worker(widget.finish(), group="conversation-flush")
        for index in range(added, len(self.records.entries)):
            self._show(index)

    def _show(self, index: int) -> None:
        """Mount the widget of entry ``index`` (just added) if the window follows the end."""
        if self._closing or self._pruning or not self.is_attached:
            # The dashboard is closing: messages the session posted before it was told
            # to stop are still handled while the widgets are removed, and mounting then
            # raised MountError (exit code 1 on about one quit in eight mid-reply).
            return
        if self._replaying:  # mounted (the newest window only) once the whole batch is folded
            return
        was_live = self._end == index
        full = self.mounted_count >= self.max_mounted + self.slack
        if was_live and full and self.max_scroll_y > 0 and not self.is_vertical_scroll_end:
            # The user is reading further up: trimming the top would pull the text
            # away under their eyes. Stop following; the newer items wait below.
            was_live = False
        if was_live:
            widget = self._widgets[index] = self._make_widget(index)
            self.mount(widget, before=self._below)
            self._end = index + 1
            if self.mounted_count > self.max_mounted + self.slack:
                self._trim_top(self.mounted_count - self.max_mounted)
        self._update_edges()

    def _redraw(self, index: int) -> None:
        """Entry ``index`` changed marks (set apart, abandoned): its widget, if mounted, shows them."""
        widget = self._widgets.get(index)
        if widget is None:
            return
        entry = self.records.entries[index]
        widget.set_class(entry.abandoned, "-abandoned")
        if entry.kind == "assistant":
            widget.set_class(entry.discarded, "-discarded")
        if isinstance(widget, SubAgentLine):
            widget.update_state()

    # ---------------------------------------------------------------- windowing

    def _make_widget(self, index: int) -> Widget:
        entry = self.records.entries[index]
        widget = self._widget_for(entry)
        if entry.abandoned:
            widget.add_class("-abandoned", update=False)  # styled as it mounts
        return widget

    def _widget_for(self, entry: ConversationEntry) -> Widget:
        if entry.kind == "user":
            return UserPrompt(entry.text)
        if entry.kind == "assistant":
            return _assistant_message()(entry.text, classes="-discarded" if entry.discarded else "")
        if entry.kind == "thinking":
            return ThinkingLine(entry.text)
        if entry.kind == "tool":
            assert entry.tool is not None
            return ToolCallLine(entry.tool)
        if entry.kind == "sub":
            assert entry.sub is not None
            return SubAgentLine(entry.sub)
        return EngineLine(entry.engine_kind, entry.text)

    def _make_widgets(self, first: int, last: int) -> list[Widget]:
        """The widgets of entries ``first`` to ``last`` (excluded), made and kept, to be mounted."""
        widgets = []
        for index in range(first, last):
            widget = self._widgets[index] = self._make_widget(index)
            widgets.append(widget)
        return widgets

    def _unmount(self, first: int, last: int) -> list[Widget]:
        return [widget for index in range(first, last) if (widget := self._widgets.pop(index, None)) is not None]

    def _trim_top(self, count: int) -> int:
        """Unmount the oldest ``count`` mounted widgets; returns the height removed."""
        removed = self._unmount(self._start, self._start + count)
        height = sum(widget.outer_size.height for widget in removed)
        self._start += count
        self._remove(removed)
        return height

    def _trim_bottom(self, count: int) -> None:
        removed = self._unmount(self._end - count, self._end)
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
            widgets = self._make_widgets(first, self._start)
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
            widgets = self._make_widgets(self._end, last)
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
        widget = self._widgets.get(len(self.items) - 1)
        if widget is None:
            return
        # Let go of the end now, not after the refresh: an anchored view scrolls to the end in
        # the layout that sizes the item, and a loaded machine then drew its end (a flaky
        # snapshot). Once it is sized, a short item is followed again.
        self.release_anchor()

        def scroll(refreshes_left: int = 20) -> None:
            if not widget.is_attached:
                return
            if not widget.outer_size.height and refreshes_left:
                # Not laid out yet: on a loaded machine the refresh came before the layout that
                # sizes it, and a size of 0 read as "short" anchored the view to the help's end.
                self.call_after_refresh(scroll, refreshes_left - 1)
                return
            if widget.outer_size.height > self.scrollable_content_region.height:
                self.scroll_to_widget(widget, top=True, animate=False, immediate=True)
            else:
                self.anchor()

        self.call_after_refresh(scroll)

    async def jump_to_end(self) -> None:
        """Show the newest items (used when the user sends a prompt)."""
        if not self.live:
            self._trim_top(self.mounted_count)
            self._start = self._end = max(0, len(self.items) - self.max_mounted)
            widgets = self._make_widgets(self._start, len(self.items))
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
        widgets = self._make_widgets(max(self._end, newest_start), len(self.items))
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
        subtitle = f"session {info.session_id}"
        if subtitle != self._subtitle:  # said again once attached: setting it redraws the conversation
            self._subtitle = subtitle
            self.border_subtitle = literal(subtitle)
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
        reply = self.records.reply
        widget = self._widgets.get(reply) if reply is not None else None
        if message.kind == "text_delta" and widget is not None and isinstance(widget, _assistant_message()):
            widget.flush_now()
            widget.when_drawn(message.release)  # the other widgets' messages wait for that frame
        else:
            message.release()

    @on(ReplyDone)
    async def _on_reply(self, message: ReplyDone) -> None:
        reply, added = self.records.reply, len(self.records.entries)
        self.records.reply_done(message.event.text)  # shown whole if it was not streamed (restored)
        self._drawn(None, added)
        widget = self._widgets.get(reply) if reply is not None else None
        if widget is not None and isinstance(widget, _assistant_message()):
            await widget.finish()  # its stream flushed before the next message is handled

    @on(ReplyDiscarded)
    def _on_reply_discarded(self, _message: ReplyDiscarded) -> None:
        """The stream failed: what it showed is set apart (dimmed, never continued); a retry
        streams its reply anew into a reply of its own."""
        reply = self.records.reply
        for index in self.records.reply_discarded():
            self._redraw(index)
        self._drawn(reply, len(self.records.entries))

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
        reply, added = self.records.reply, len(self.records.entries)
        for index in self.records.sub_agent(message.event):
            self._redraw(index)
        self._drawn(reply, added)

    @on(Rewound)
    def _on_rewound(self, message: Rewound) -> None:
        """The turns a rewind abandoned (its message and every one after it) stay, dimmed."""
        event = message.event
        if not event.ok:
            return
        for index in self.records.rewound(event.abandoned_turns):
            self._redraw(index)

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

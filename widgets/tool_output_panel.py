"""Tool output: the list of calls and, for the selected one, what the model saw.

``toggle_expand`` swaps the model's view for the full original output read
from the tool-results file. The file is read and split in a thread worker;
the lines are handed to the viewer on the event loop. Expanding only reads
the file: the model's context never changes.
"""

from __future__ import annotations

import textwrap
from typing import Any

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual import on, work
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import var
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from widgets._literal import literal, sanitize
from widgets._paths import shorten_path
from widgets.output_viewer import OutputViewer, prepare_lines
from widgets.session_messages import Replayed, ToolCallsChanged
from widgets.tool_call_line import ToolCallInfo
from widgets.tool_call_list import ToolCallList


# The status line's rows under the call list (its max-height in styles/tidegauge.tcss).
STATUS_ROWS = 2


class ShownToolCallList(ToolCallList):
    """The call list with its keys listed in the footer while it has focus."""

    BINDINGS = [
        Binding("up", "move(-1)", "Call", group=Binding.Group("Call")),
        Binding("down", "move(1)", "Call", group=Binding.Group("Call")),
        Binding("pageup", "move(-10)", "Page", group=Binding.Group("Page")),
        Binding("pagedown", "move(10)", "Page", group=Binding.Group("Page")),
        Binding("home", "first", "First/last", group=Binding.Group("First/last")),
        Binding("end", "last", "First/last", group=Binding.Group("First/last")),
    ]


@dataclass
class LoadedOutput:
    call_id: str
    path: str
    lines: list[str]
    width: int
    chars: int


class ToolOutputPanel(Vertical):
    """List of calls + status line + line-virtualized viewer, drawn from the view model's records."""

    SESSION_MESSAGES = (ToolCallsChanged, Replayed)

    # While a full output is open: its keys are the footer's (the status line keeps one row).
    BINDINGS = [
        Binding("ctrl+o", "close_full_output", "Close"),
        Binding("ctrl+f", "toggle_whole_path", "Path"),
    ]

    expanded = var(False, toggle_class="-expanded")
    loading = var(False, toggle_class="-loading")
    # ctrl+f: the open output's file path whole (it wraps) instead of cut from the left on one row
    whole_path = var(False, toggle_class="-whole-path")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: dict[str, ToolCallInfo] = {}  # the view model's records, as last handed over
        self.order: list[str] = []
        self.selected_id: str | None = None
        # The user picked the selection (keys or a click). Until then ctrl+o opens the newest
        # call whose output was cut.
        self.user_picked = False
        # New calls take the selection. Off while the user reads an older call; on again when
        # they go back to the newest, and when the full output viewer closes (it must never
        # leave the list stuck on an old call for the rest of the session).
        self.follow_new = True
        # ctrl+o opened a full output: moving the selection shows each call's full output
        # (or says it was not cut) until ctrl+o closes the view
        self.full_view = False
        self.loaded: LoadedOutput | None = None  # the full output on screen

    def compose(self) -> ComposeResult:
        yield ShownToolCallList(id="tool-list")
        yield Static(literal("no tool calls yet"), id="output-status")
        yield OutputViewer(id="output-viewer")

    @property
    def tool_list(self) -> ToolCallList:
        return self.query_one(ToolCallList)

    @property
    def viewer(self) -> OutputViewer:
        return self.query_one(OutputViewer)

    @property
    def status_line(self) -> Static:
        return self.query_one("#output-status", Static)

    # ---------------------------------------------------------------- updates

    @property
    def following(self) -> bool:
        """New calls are selected as they come (the user has not moved off the newest, nothing is open)."""
        return self.follow_new and not (self.expanded or self.loading or self.full_view)

    def add_call(self, info: ToolCallInfo) -> None:
        follow = self.following
        self.calls[info.id] = info
        self.order.append(info.id)
        self.tool_list.add_call(info)
        if follow:
            self.user_picked = False
            self.tool_list.cursor = len(self.order) - 1
            self._select(info.id)
        self._say_following()

    def _say_following(self) -> None:
        """The border says when the panel has stopped following new calls, and how to resume."""
        if self.following or self.selected_id not in self.calls:
            self.border_subtitle = ""
            return
        position = self.order.index(self.selected_id) + 1
        newer = len(self.order) - position
        self.border_subtitle = literal(f"call {position}/{len(self.order)} · not following new calls"
                                       if newer else f"call {position}/{len(self.order)} · new calls wait")

    def update_call(self, info: ToolCallInfo) -> None:
        if info.id not in self.calls:
            self.add_call(info)
            return
        self.calls[info.id] = info
        self.tool_list.update_call(info)
        if info.id == self.selected_id and not self.expanded:
            self._show_model_view(info.id)

    def clear(self) -> None:
        self.calls.clear()
        self.order.clear()
        self.selected_id = None
        self.user_picked = False
        self.follow_new = True
        self.full_view = False
        self.expanded = False
        self.border_subtitle = ""
        self.tool_list.clear()
        self.viewer.set_lines([], 0)
        self.status_line.update(literal("no tool calls yet"))

    @on(ToolCallsChanged)
    def _on_calls_changed(self, message: ToolCallsChanged) -> None:
        for record in message.records:
            self.update_call(record)

    @on(Replayed)
    def _on_replayed(self, batch: Replayed) -> None:
        """A resumed session's records (or a late attach's): folded in, then the list is set and the
        selection moved once, where one message per record left them. One by one, the list's
        updates were 3.6 s of a 5,000-turn resume."""
        records = [record for message in batch.messages if isinstance(message, ToolCallsChanged)
                   for record in message.records]
        if not records:
            return
        follow = self.following  # what each add_call would have found: the batch changes none of it
        added = False
        for record in records:
            if record.id not in self.calls:
                self.order.append(record.id)
                added = True
            self.calls[record.id] = record
        self.tool_list.set_calls([self.calls[call_id] for call_id in self.order])
        selected = self.selected_id
        if follow and added:  # the newest call took the selection, as the last add_call gave it
            self.user_picked = False
            self.tool_list.cursor = len(self.order) - 1
            self._select(self.order[-1])
        elif selected is not None and any(record.id == selected for record in records) and not self.expanded:
            self._show_model_view(selected)
        self._say_following()

    @on(ToolCallList.Highlighted)
    def _on_highlight(self, event: ToolCallList.Highlighted) -> None:
        if event.call_id != self.selected_id:
            self._pick(event.call_id)

    def select_call(self, call_id: str) -> None:
        """Select a call (from a click in the conversation)."""
        if call_id in self.calls:
            self.tool_list.cursor = self.tool_list.index_of(call_id)
            self._pick(call_id)

    def _pick(self, call_id: str) -> None:
        """The user chose a call. An open full output stays open: it shows the new call's
        (or says that call was not cut), never closes without a word."""
        self.user_picked = True
        self.follow_new = call_id == self.order[-1]
        self._select(call_id)
        if self.full_view:
            info = self.calls[call_id]
            if info.full_output_path:
                self._open(call_id, info.full_output_path)
            else:
                self.status_line.update(literal(f"{info.name}: nothing was cut, this is the whole output"
                                                " (the full output view closed; ctrl+o closes it for good)"))
        self._say_following()

    def _select(self, call_id: str) -> None:
        self.selected_id = call_id
        self.loaded = None
        self.expanded = False
        self.loading = False
        self.workers.cancel_group(self, "output-load")
        self._show_model_view(call_id)
        self._say_following()

    # ------------------------------------------------------------------ views

    def _show_model_view(self, call_id: str) -> None:
        info = self.calls[call_id]
        content = info.content if info.status != "running" and info.content is not None else ""
        self._say_model_view(info)
        # what the model saw is short: wrapped in the narrow panel, every character is in view
        self.viewer.set_text(content, wrap=True)

    def _say_model_view(self, info: ToolCallInfo) -> None:
        """The status row over what the model saw, in words that fit the row's width."""
        content = info.content
        if info.status == "running":
            status = f"{info.name}: waiting for approval" if info.waiting_approval else f"{info.name}: running…"
        elif content is None:
            status = f"{info.name}: output not available"
        elif info.truncated and info.full_output_path:
            shown = f"{len(content):,} of {info.original_chars:,}"
            status = self._fitted_status(
                f"showing {shown} characters (what the model saw) — ctrl+o to expand",
                f"the model saw {shown} chars · ctrl+o: all",
                f"{shown} chars · ctrl+o: all",
                after=f" · cut to {info.kept_chars:,} before sending" if info.cut_before_send else "")
        else:
            status = f"showing all {len(content):,} characters (what the model saw)"
            if info.cut_before_send:
                status += f" · cut to {info.kept_chars:,} before sending"
        self.status_line.update(literal(status))

    def _fitted_status(self, *forms: str, after: str = "") -> str:
        """The first of ``forms`` (longest first) that fits the status line's two rows: in the
        30-column panel at 80x24 the long one lost its last words, "ctrl+o to expand" with them."""
        width = self.status_line.size.width or self.size.width
        if width <= 0:
            return forms[0] + after
        for form in forms:
            if len(textwrap.wrap(form + after, width)) <= STATUS_ROWS:
                return form + after
        return forms[-1] + after

    def latest_cut_call(self) -> str | None:
        """The newest call whose output was cut (its full output is on disk)."""
        return next((cid for cid in reversed(self.order) if self.calls[cid].full_output_path), None)

    def toggle_expand(self) -> str:
        """ctrl+o: open the full output, or close it. Returns what happened.

        With a selection the user made, it is that call's; otherwise (the panel follows
        new calls) the newest call whose output was cut, which is what a reply's
        "ctrl+o expands it" is about.
        """
        if self.expanded or self.loading or self.full_view:
            self.full_view = False
            self.follow_new = True  # the next new call takes the selection again
            call_id = self.selected_id
            assert call_id is not None
            refocus = self.viewer.has_focus
            self.expanded = False
            self.loading = False
            self.workers.cancel_group(self, "output-load")
            self._show_model_view(call_id)
            self._say_following()
            if refocus:
                self.tool_list.focus()
            return "collapsed"
        if not self.user_picked:
            latest_cut = self.latest_cut_call()
            if latest_cut is not None and latest_cut != self.selected_id:
                self.tool_list.cursor = self.tool_list.index_of(latest_cut)
                self._select(latest_cut)
        call_id = self.selected_id
        if call_id is None:
            return "no tool call yet"
        info = self.calls[call_id]
        if not info.full_output_path:
            return "nothing was cut: this is the whole output"
        self.full_view = True
        self._open(call_id, info.full_output_path)
        return "expanding"

    def _say_loaded(self) -> None:
        """The open output's file on one row, cut from the left (ctrl+f: whole), and its size."""
        loaded = self.loaded
        if loaded is None or not self.expanded:
            return
        size = f" · {len(loaded.lines):,} lines, {loaded.chars:,} characters"
        if self.whole_path:
            self.status_line.update(literal(f"{loaded.path}{size}"))
            return
        room = max(8, self.status_line.size.width or self.size.width)
        if room - len(size) < 32:
            size = f" · {len(loaded.lines):,} lines"
        if room - len(size) < 24:
            size = ""  # the file's name comes first
        path = shorten_path(sanitize(loaded.path), room - len(size), home=False)
        self.status_line.update(Text(path + size, no_wrap=True, overflow="ellipsis", end=""))

    def on_resize(self) -> None:
        if self.expanded:
            self._say_loaded()
        elif self.selected_id in self.calls and not (self.loading or self.full_view):
            self._say_model_view(self.calls[self.selected_id])  # words that fit the new width

    def watch_whole_path(self, _whole: bool) -> None:
        self._say_loaded()

    def watch_expanded(self, expanded: bool) -> None:
        self.refresh_bindings()  # ctrl+o "Close" and ctrl+f come and go with the open output
        self.viewer.reading = expanded  # the full output's position row and search

    def watch_loading(self, _loading: bool) -> None:
        self.refresh_bindings()

    def action_toggle_whole_path(self) -> None:
        self.whole_path = not self.whole_path

    def action_close_full_output(self) -> None:
        self.toggle_expand()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # listed (and taken) only while a full output is open; otherwise ctrl+o is the App's
        if action in ("close_full_output", "toggle_whole_path"):
            return self.expanded or self.loading or self.full_view
        return True

    def _open(self, call_id: str, path: str) -> None:
        self.loading = True
        self.status_line.update(literal(f"loading {path} …"))
        self._load_full_output(call_id, path)

    @work(thread=True, exclusive=True, group="output-load", exit_on_error=False)
    def _load_full_output(self, call_id: str, path: str) -> LoadedOutput:
        # Runs in a thread: reading and splitting 15 MB must not block the UI.
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        lines, width = prepare_lines(text)
        return LoadedOutput(call_id, path, lines, width, len(text))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "output-load":
            return
        if event.state == WorkerState.SUCCESS:
            loaded = event.worker.result
            if not isinstance(loaded, LoadedOutput) or not self.loading or loaded.call_id != self.selected_id:
                return
            self.loading = False
            self.expanded = True
            self.loaded = loaded
            self.viewer.set_lines(loaded.lines, loaded.width)
            self._say_loaded()
            self.viewer.focus()
            self._say_following()
        elif event.state == WorkerState.ERROR and self.loading:
            self.loading = False
            self.status_line.update(literal(f"could not read the full output: {event.worker.error}"))

"""Tool output: the list of calls and, for the selected one, what the model saw.

``toggle_expand`` swaps the model's view for the full original output read
from the tool-results file. The file is read and split in a thread worker;
the lines are handed to the viewer on the event loop. Expanding only reads
the file: the model's context never changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import on, work
from textual.containers import Vertical
from textual.reactive import var
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from widgets._literal import literal
from widgets.output_viewer import OutputViewer, prepare_lines
from widgets.session_messages import ResultCut, ToolFinished, ToolStarted
from widgets.tool_call_line import ToolCallInfo, apply_cut, apply_result, info_from_start
from widgets.tool_call_list import ToolCallList


@dataclass
class LoadedOutput:
    call_id: str
    path: str
    lines: list[str]
    width: int
    chars: int


class ToolOutputPanel(Vertical):
    """List of calls + status line + line-virtualized viewer."""

    expanded = var(False, toggle_class="-expanded")
    loading = var(False, toggle_class="-loading")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: dict[str, ToolCallInfo] = {}
        self.contents: dict[str, str] = {}
        self.order: list[str] = []
        self.selected_id: str | None = None

    def compose(self):
        yield ToolCallList(id="tool-list")
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

    def add_call(self, info: ToolCallInfo) -> None:
        follow = self.selected_id is None or self.selected_id == (self.order[-1] if self.order else None)
        self.calls[info.id] = info
        self.order.append(info.id)
        self.tool_list.add_call(info)
        if follow:
            self.tool_list.cursor = len(self.order) - 1
            self._select(info.id)

    def update_call(self, info: ToolCallInfo, content: str | None = None) -> None:
        if info.id not in self.calls:
            self.add_call(info)
        self.calls[info.id] = info
        if content is not None:
            self.contents[info.id] = content
        self.tool_list.update_call(info)
        if info.id == self.selected_id and not self.expanded:
            self._show_model_view(info.id)

    def clear(self) -> None:
        self.calls.clear()
        self.contents.clear()
        self.order.clear()
        self.selected_id = None
        self.expanded = False
        self.tool_list.clear()
        self.viewer.set_lines([], 0)
        self.status_line.update(literal("no tool calls yet"))

    @on(ToolStarted)
    def _on_tool_start(self, message: ToolStarted) -> None:
        self.add_call(info_from_start(message.event))

    @on(ToolFinished)
    def _on_tool_result(self, message: ToolFinished) -> None:
        event = message.event
        info = self.calls.get(event.id) or ToolCallInfo(event.id, event.name, "")
        apply_result(info, event)
        self.update_call(info, event.content)

    @on(ResultCut)
    def _on_result_cut(self, message: ResultCut) -> None:
        info = self.calls.get(message.event.id)
        if info is not None:
            apply_cut(info, message.event)
            self.update_call(info)

    @on(ToolCallList.Highlighted)
    def _on_highlight(self, event: ToolCallList.Highlighted) -> None:
        if event.call_id != self.selected_id:
            self._select(event.call_id)

    def select_call(self, call_id: str) -> None:
        """Select a call (from a click in the conversation)."""
        if call_id in self.calls:
            self.tool_list.cursor = self.tool_list.index_of(call_id)
            self._select(call_id)

    def _select(self, call_id: str) -> None:
        self.selected_id = call_id
        self.expanded = False
        self.loading = False
        self._show_model_view(call_id)

    # ------------------------------------------------------------------ views

    def _show_model_view(self, call_id: str) -> None:
        info = self.calls[call_id]
        content = self.contents.get(call_id)
        if info.status == "running":
            status = f"{info.name}: running…"
            content = ""
        elif content is None:
            status = f"{info.name}: output not available"
            content = ""
        elif info.truncated and info.full_output_path:
            status = (
                f"showing {len(content):,} of {info.original_chars:,} characters"
                " (what the model saw) — ctrl+o to expand"
            )
        else:
            status = f"showing all {len(content):,} characters (what the model saw)"
        if info.cut_before_send:
            status += f" · cut to {info.kept_chars:,} before sending"
        self.status_line.update(literal(status))
        self.viewer.set_text(content)

    def toggle_expand(self) -> str:
        """ctrl+o: expand the selected call's full output, or collapse it. Returns what happened."""
        call_id = self.selected_id
        if call_id is None:
            return "no tool call selected"
        if self.expanded or self.loading:
            self.expanded = False
            self.loading = False
            self.workers.cancel_group(self, "output-load")
            self._show_model_view(call_id)
            return "collapsed"
        info = self.calls[call_id]
        if not info.full_output_path:
            return "nothing was cut: this is the whole output"
        self.loading = True
        self.status_line.update(literal(f"loading {info.full_output_path} …"))
        self._load_full_output(call_id, info.full_output_path)
        return "expanding"

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
            self.viewer.set_lines(loaded.lines, loaded.width)
            self.status_line.update(
                literal(
                    f"full output: {loaded.chars:,} characters, {len(loaded.lines):,} lines"
                    f" from {loaded.path} — ctrl+o to collapse"
                )
            )
        elif event.state == WorkerState.ERROR and self.loading:
            self.loading = False
            self.status_line.update(literal(f"could not read the full output: {event.worker.error}"))

"""The session's tool calls, one line each (status, size, duration, truncated)."""

from __future__ import annotations

from textual.widgets import OptionList
from textual.widgets.option_list import Option

from widgets.tool_call_line import ToolCallInfo, tool_call_text


class ToolCallList(OptionList):
    """Arrow keys move between calls; the highlighted call is shown below it."""

    COMPONENT_CLASSES = {
        "toolcall--running",
        "toolcall--ok",
        "toolcall--error",
        "toolcall--interrupted",
        "toolcall--name",
        "toolcall--dim",
        "toolcall--badge",
    }

    def __init__(self, **kwargs) -> None:
        super().__init__(markup=False, **kwargs)

    def _prompt(self, info: ToolCallInfo):
        styles = {
            key: self.get_component_rich_style(f"toolcall--{key}")
            for key in ("running", "ok", "error", "interrupted", "name", "dim", "badge")
        }
        return tool_call_text(info, styles, summary_width=40)

    def add_call(self, info: ToolCallInfo) -> None:
        self.add_option(Option(self._prompt(info), id=info.id))

    def update_call(self, info: ToolCallInfo) -> None:
        try:
            self.replace_option_prompt(info.id, self._prompt(info))
        except Exception:  # OptionDoesNotExist: a call we never saw start
            self.add_call(info)

    def has_call(self, call_id: str) -> bool:
        try:
            self.get_option(call_id)
        except Exception:
            return False
        return True

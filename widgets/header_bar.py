"""The header: provider and model, working directory, session, agent state, step."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive, var
from textual.widget import Widget

from widgets._literal import sanitize

STATE_LABELS = {
    "idle": "idle",
    "streaming": "streaming",
    "tool": "running tool",
    "compacting": "compacting",
    "waiting_approval": "waiting for approval",
    "retrying": "retrying",
    "interrupting": "interrupting",
}


class HeaderBar(Widget):
    """One line across the top. Its ``-busy``/``-paused`` classes follow the state."""

    COMPONENT_CLASSES = {
        "header--title",
        "header--provider",
        "header--dim",
        "header--state",
        "header--paused",
    }

    provider_label: reactive[str] = reactive("")
    cwd: reactive[str] = reactive("")
    session_id: reactive[str] = reactive("")
    state: reactive[str] = reactive("idle")
    detail: reactive[str] = reactive("")
    step: reactive[int] = reactive(0)
    max_steps: reactive[int] = reactive(0)
    tool_number: reactive[int] = reactive(0)
    breaker_paused = var(False, toggle_class="-paused")
    busy = var(False, toggle_class="-busy")

    def watch_state(self, state: str) -> None:
        self.busy = state != "idle"

    def watch_breaker_paused(self, _paused: bool) -> None:
        self.refresh()

    def render(self) -> Text:
        title = self.get_component_rich_style("header--title")
        provider = self.get_component_rich_style("header--provider")
        dim = self.get_component_rich_style("header--dim")
        state_style = self.get_component_rich_style("header--state")
        paused = self.get_component_rich_style("header--paused")

        state = STATE_LABELS.get(self.state, self.state)
        if self.state == "tool" and self.tool_number:
            state = f"running tool {self.tool_number}"
        if self.detail and self.state not in ("idle", "streaming"):
            state = f"{state}: {sanitize(self.detail)}"
        right = Text(no_wrap=True, end="")
        right.append(f" {state} ", state_style)
        if self.breaker_paused:
            right.append(" ")
            right.append(" auto-compact paused (breaker) ", paused)
        if self.max_steps:
            right.append(f"  step {self.step} of {self.max_steps} ", dim)

        left = Text(no_wrap=True, overflow="ellipsis", end="")
        left.append(" tidegauge ", title)
        left.append(" ")
        left.append(sanitize(self.provider_label), provider)
        left.append("  ")
        left.append(sanitize(self.cwd), dim)
        if self.session_id:
            left.append("  session ", dim)
            left.append(sanitize(self.session_id))

        width = self.size.width
        room = max(0, width - right.cell_len - 1)
        left.truncate(room, overflow="ellipsis", pad=True)
        text = Text(no_wrap=True, end="")
        text.append_text(left)
        text.append(" ")
        text.append_text(right)
        return text

"""A task call's sub-agent, folded under the call in the conversation.

While it runs: its step, its own small gauge (its context against its auto-compact
line and window) and the tools it called, latest last. When it finishes it folds to
one line; a click unfolds it again.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import var
from textual.widget import Widget

from app.kernel.describe import human_tokens
from app.surfaces.conversation_view import SubAgentState

from widgets._literal import sanitize

GAUGE_CELLS = 20
TOOLS_SHOWN = 6  # the latest calls; older ones are counted


def sub_agent_text(state: SubAgentState, unfolded: bool) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    done = state.status == "finished"
    text.append("  ↳ ", "dim")
    text.append("sub-agent", "bold")
    if state.description:
        text.append(f" {sanitize(state.description).splitlines()[0][:80]}")
    steps = f"step {state.step}/{state.max_steps}" if state.max_steps else f"step {state.step}"
    text.append(f"  {steps}", "dim")
    text.append(f"  {len(state.tools)} tool call{'' if len(state.tools) == 1 else 's'}", "dim")
    if done:
        text.append(f"  ✓ {state.stop_reason or 'finished'}", "green" if state.stop_reason == "end_turn" else "yellow")
    elif state.written_chars:
        text.append(f"  writing… {state.written_chars:,} chars", "italic")
    text.append("\n")
    text.append(gauge_text(state))
    if not unfolded:
        return text
    hidden = len(state.tools) - TOOLS_SHOWN
    if hidden > 0:
        text.append(f"\n      … {hidden} earlier", "dim")
    for tool, summary in state.tools[-TOOLS_SHOWN:]:
        text.append("\n      · ", "dim")
        text.append(sanitize(tool), "bold")
        args = sanitize(summary).replace("\n", " ")
        if args:
            text.append(f" {args[:70] + '…' if len(args) > 70 else args}", "dim")
    return text


def gauge_text(state: SubAgentState) -> Text:
    """``    context ▇▇▇▇░░░░ 12.3K / 150K (compacts at 120K)``: the sub-agent's own small gauge."""
    text = Text(no_wrap=True, end="")
    text.append("    context ", "dim")
    top = state.window or state.auto_compact_line
    if not top:
        text.append("—", "dim")
        return text
    share = min(1.0, state.context_tokens / top)
    filled = round(share * GAUGE_CELLS)
    near = state.auto_compact_line and state.context_tokens >= state.auto_compact_line * 0.8
    text.append("▇" * filled, "yellow" if near else "cyan")
    text.append("░" * (GAUGE_CELLS - filled), "dim")
    text.append(f" {human_tokens(state.context_tokens)} / {human_tokens(top)}")
    if state.auto_compact_line:
        text.append(f" (compacts at {human_tokens(state.auto_compact_line)})", "dim")
    return text


class SubAgentLine(Widget):
    """The sub-agent under its task call: unfolded while it runs, folded (click to toggle) after."""

    DEFAULT_CSS = """
    SubAgentLine { height: auto; color: $text-muted; }
    SubAgentLine:hover { background: $boost; }
    """

    unfolded: var[bool | None] = var(None)  # None: follow the state (unfolded while running)

    def __init__(self, state: SubAgentState, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state

    @property
    def shows_tools(self) -> bool:
        return self.unfolded if self.unfolded is not None else self.state.status != "finished"

    def update_state(self) -> None:
        self.refresh(layout=True)

    def watch_unfolded(self) -> None:
        self.refresh(layout=True)

    def render(self) -> Text:
        return sub_agent_text(self.state, self.shows_tools)

    def on_click(self) -> None:
        self.unfolded = not self.shows_tools

"""What the context holds, by part, and what the session has cost (compaction apart)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widget import Widget

from widgets.gauge_bar import human_tokens

if TYPE_CHECKING:  # app.events (pydantic models) is not needed to draw the first frame
    from app.events import ContextEvent

PART_LABELS = {
    "system": "system prompt",
    "memory": "memory files",
    "tools": "tool schemas",
    "user": "user",
    "assistant": "assistant",
    "tool_results": "tool results",
}


class ContextBreakdown(Widget):
    """Breakdown by part (estimated) plus cumulative tokens and cost."""

    COMPONENT_CLASSES = {"breakdown--bar", "breakdown--dim", "breakdown--figure", "breakdown--compaction"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.context: ContextEvent | None = None
        self.compaction_calls = 0
        self.compaction_input = 0
        self.compaction_output = 0

    def update_context(self, event: ContextEvent) -> None:
        self.context = event
        self.refresh()

    def add_compaction_usage(self, input_tokens: int, output_tokens: int) -> None:
        self.compaction_calls += 1
        self.compaction_input += input_tokens
        self.compaction_output += output_tokens
        self.refresh()

    def render(self) -> Text:
        style = self.get_component_rich_style
        bar, dim, figure, compaction = (
            style("breakdown--bar"),
            style("breakdown--dim"),
            style("breakdown--figure"),
            style("breakdown--compaction"),
        )
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append("by part (estimated)\n", dim)
        event = self.context
        breakdown = dict(event.breakdown) if event is not None else {}
        total = sum(breakdown.values()) or 1
        bar_width = max(4, self.size.width - 28)
        keys = list(PART_LABELS) + [k for k in breakdown if k not in PART_LABELS]
        for key in keys:
            tokens = breakdown.get(key, 0)
            label = PART_LABELS.get(key, key)
            cells = round(tokens / total * bar_width)
            text.append(f"{label:<14}", dim)
            text.append(f"{human_tokens(tokens):>7} ", figure)
            text.append(f"{tokens / total:>4.0%} ", dim)
            text.append("▇" * cells, bar)
            text.append("\n")
        if event is not None:
            text.append("tokens ", dim)
            text.append(
                f"in {human_tokens(event.cumulative_input)} (cached {human_tokens(event.cumulative_cached)})"
                f" · out {human_tokens(event.cumulative_output)}\n",
                figure,
            )
            text.append("cost ", dim)
            text.append(f"${event.cost_usd:.4f}", figure)
            text.append(f"  compaction ${event.compact_cost_usd:.4f}", compaction)
        else:
            text.append("tokens —\ncost —", dim)
        if self.compaction_calls:
            text.append(
                f"\ncompaction calls {self.compaction_calls}: in {human_tokens(self.compaction_input)}"
                f" · out {human_tokens(self.compaction_output)}",
                compaction,
            )
        return text

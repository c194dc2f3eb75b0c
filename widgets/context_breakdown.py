"""What the context holds, by part, and what the session has cost (compaction apart)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.widget import Widget

from app.kernel.describe import human_tokens


if TYPE_CHECKING:  # app.kernel.events (pydantic models) is not needed to draw the first frame
    from app.kernel.events import ContextEvent

PART_LABELS = {
    "system": "system prompt",
    "memory": "memory files",
    "tools": "tool schemas",
    "user": "user",
    "assistant": "assistant",
    "tool_results": "tool results",
}
# Parts that only some sessions have (a session memory, path-scoped rules): shown when present.
EXTRA_LABELS = {
    "session_memory": "session memory",
    "rules": "path rules",
}
LABEL_WIDTH = 14


def part_label(key: str) -> str:
    """What a breakdown key is called on screen; ``mcp:NAME`` is an MCP server's tool definitions."""
    label = PART_LABELS.get(key) or EXTRA_LABELS.get(key)
    if label is None and key.startswith("mcp:"):
        label = f"MCP {key[4:]}"
    label = label or key.replace("_", " ")
    return label if len(label) <= LABEL_WIDTH else label[: LABEL_WIDTH - 1] + "…"


def cached_share(cached: int, total_input: int) -> str:
    """``, 62%``: prompt caching's share of all input so far, after the cached figure."""
    return f", {cached / total_input:.0%}" if total_input > 0 else ""


class ContextBreakdown(Widget):
    """Breakdown by part (estimated) plus cumulative tokens and cost."""

    COMPONENT_CLASSES = {"breakdown--bar", "breakdown--dim", "breakdown--figure", "breakdown--compaction"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.context: ContextEvent | None = None
        self.compaction_calls = 0
        self.compaction_input = 0
        self.compaction_output = 0

    def update_context(self, event: ContextEvent) -> None:
        self.context = event
        self.refresh()

    def add_compaction_usage(self, input_tokens: int, output_tokens: int, calls: int = 1) -> None:
        """``calls`` compaction calls that used these tokens between them (a replay adds them up first)."""
        self.compaction_calls += calls
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
        # the fixed parts, then the session memory and rules, then one line per MCP server
        keys = (list(PART_LABELS) + [k for k in EXTRA_LABELS if k in breakdown]
                + sorted(k for k in breakdown if k not in PART_LABELS and k not in EXTRA_LABELS))
        for key in keys:
            tokens = breakdown.get(key, 0)
            label = part_label(key)
            cells = round(tokens / total * bar_width)
            text.append(f"{label:<{LABEL_WIDTH}}", dim)
            text.append(f"{human_tokens(tokens):>7} ", figure)
            text.append(f"{tokens / total:>4.0%} ", dim)
            text.append("▇" * cells, bar)
            text.append("\n")
        if event is not None:
            tokens_row = Text(no_wrap=True, end="")
            tokens_row.append("tokens ", dim)
            tokens_row.append(
                f"in {human_tokens(event.cumulative_input)} (cached {human_tokens(event.cumulative_cached)}"
                f"{cached_share(event.cumulative_cached, event.cumulative_input)})"
                f" · out {human_tokens(event.cumulative_output)}"
                f"{f' (reasoning {human_tokens(event.cumulative_reasoning)})' if event.cumulative_reasoning else ''}",
                figure,
            )
            cost_row = Text(no_wrap=True, end="")
            cost_row.append("cost ", dim)
            cost_row.append(f"${event.cost_usd:.4f}", figure)
            cost_row.append(f"  compaction ${event.compact_cost_usd:.4f}", compaction)
            rows = 1 + len(keys) + 2 + bool(event.tool_tokens_saved) + bool(self.compaction_calls)
            text.append_text(tokens_row)
            # One row short (a session memory's part, at 220x60): the cost goes beside the
            # tokens where it fits, rather than under the panel's edge.
            beside = rows > self.size.height and tokens_row.cell_len + 3 + cost_row.cell_len <= self.size.width
            text.append(" · " if beside else "\n", dim)
            if event.tool_tokens_saved:
                text.append("deferred tool definitions save ", dim)
                text.append(f"~{human_tokens(event.tool_tokens_saved)} tokens\n", figure)
            text.append_text(cost_row)
        else:
            text.append("tokens —\ncost —", dim)
        if self.compaction_calls:
            text.append(
                f"\ncompaction calls {self.compaction_calls}: in {human_tokens(self.compaction_input)}"
                f" · out {human_tokens(self.compaction_output)}",
                compaction,
            )
        return text

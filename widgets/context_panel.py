"""The context region: gauge bar on top, history chart and breakdown under it.

On a short terminal the chart and breakdown fold away (class ``-folded``) and only
the gauge stays, so the conversation keeps its rows; the App decides when.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from textual.app import ComposeResult
from textual import on
from textual.containers import Horizontal, Vertical
from textual.reactive import var

from app.kernel.describe import human_tokens
from widgets.context_breakdown import ContextBreakdown
from widgets.context_history import ContextHistory, HistoryPoint, PointKind
from widgets.gauge_bar import LEVEL_CLASSES, GaugeBar
from widgets.session_messages import ChartPoint, ContextChanged, Replayed, UsageRecorded, WhatIfReady

if TYPE_CHECKING:  # app.kernel.events (pydantic models) is not needed to draw the first frame
    from app.kernel.events import ContextEvent, UsageEvent


class ContextPanel(Vertical):
    """Everything about the context window; its level class colours the border."""

    SESSION_MESSAGES = (ContextChanged, ChartPoint, UsageRecorded, Replayed, WhatIfReady)

    folded = var(False, toggle_class="-folded")
    fold_key = "ctrl+g"  # shown in the border when folded (the App binds it)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.last_context: ContextEvent | None = None
        # The chart and breakdown exist from the start, whether or not they are on screen: what the
        # session says reaches them either way.
        self.history = ContextHistory(id="context-history")
        self.breakdown = ContextBreakdown(id="context-breakdown")
        self._lower = Horizontal(self.history, self.breakdown, id="context-lower")

    def compose(self) -> ComposeResult:
        yield GaugeBar(id="gauge-bar")
        # Folded, they are hidden: they mount after the first frame (mounting and styling them
        # was 14M instructions of it), where they change nothing on screen until unfolded.
        if not self.folded:
            yield self._lower

    def on_mount(self) -> None:
        if self._lower.parent is None:
            self.call_after_refresh(self._mount_lower)

    def _mount_lower(self) -> None:
        if self._lower.parent is None and self.is_attached:
            self.mount(self._lower)

    def update_context(self, event: ContextEvent) -> None:
        if event == self.last_context:
            # The same figures again (a session says its context once attached, after the
            # snapshot's): the breakdown and the panel's border would be drawn again for nothing.
            return
        self.last_context = event
        self.query_one(GaugeBar).context = event
        th = event.thresholds
        self.history.set_lines(th.warning_line, th.auto_compact_line, th.blocking_line)
        self.breakdown.update_context(event)
        # set, not removed and added again: each class change restyles the panel and everything in
        # it, and a context event comes with every step and at the end of every turn
        for name in LEVEL_CLASSES:
            self.set_class(name == f"-{event.level}", name)
        # the window is secondary to the auto-compact line the gauge measures against: it is said here
        self.border_title = f"context · window {human_tokens(th.window)}"

    def watch_folded(self, folded: bool) -> None:
        self.border_subtitle = f"{self.fold_key} shows the chart and breakdown" if folded else ""
        if not folded and self.is_mounted:
            self._mount_lower()

    def add_point(self, tokens: int, kind: PointKind = "call") -> None:
        self.history.add_point(tokens, kind)

    def add_compaction_usage(self, input_tokens: int, output_tokens: int) -> None:
        self.breakdown.add_compaction_usage(input_tokens, output_tokens)

    def clear_history(self) -> None:
        self.history.clear()

    # ------------------------------------------------------- session messages

    @on(ContextChanged)
    def _on_context(self, message: ContextChanged) -> None:
        self.update_context(message.event)

    @on(ChartPoint)
    def _on_point(self, message: ChartPoint) -> None:
        self.add_point(message.event.tokens, message.event.kind)

    @on(WhatIfReady)
    def _on_whatif(self, message: WhatIfReady) -> None:
        """This session's curve under another policy, over the recorded bars (a refusal draws nothing)."""
        event = message.event
        if event.reason is None and event.points:
            fraction = event.auto_compact_line / event.window if event.window else 0
            self.history.set_overlay(
                event.points, f"what-if {human_tokens(event.window)} @{fraction:.0%}")

    @on(UsageRecorded)
    def _on_usage(self, message: UsageRecorded) -> None:
        usage = message.event
        if usage.agent == "compact":  # compaction's own cost, shown apart
            self.add_compaction_usage(*_compaction_tokens(usage))

    @on(Replayed)
    def _on_replayed(self, batch: Replayed) -> None:
        """A resumed session's context messages in one go: the last context event is the gauge's
        and the headline's, the chart points go in at once, the compaction calls are added up;
        each part draws once. One by one it was ~6 messages, and as many redraws, a turn."""
        last_context: ContextEvent | None = None
        points: list[HistoryPoint] = []
        compaction_calls = compaction_input = compaction_output = 0
        for message in batch.messages:
            if isinstance(message, ContextChanged):
                last_context = message.event
            elif isinstance(message, ChartPoint):
                points.append(HistoryPoint(message.event.tokens, message.event.kind))
            elif isinstance(message, UsageRecorded) and message.event.agent == "compact":
                input_tokens, output_tokens = _compaction_tokens(message.event)
                compaction_calls += 1
                compaction_input += input_tokens
                compaction_output += output_tokens
        if last_context is not None:
            self.update_context(last_context)
        self.history.add_points(points)
        if compaction_calls:
            self.breakdown.add_compaction_usage(compaction_input, compaction_output,
                                                                  calls=compaction_calls)


def _compaction_tokens(usage: UsageEvent) -> tuple[int, int]:
    """A compaction call's input (cached and cache writes included) and output tokens."""
    return ((usage.input_tokens or 0) + (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0),
            usage.output_tokens or 0)

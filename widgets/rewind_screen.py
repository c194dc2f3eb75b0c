"""Rewind (Esc Esc, /rewind): your earlier messages, newest first, each with its turn and the context
just before it; under the list, the plan the highlighted one runs (tokens before → after, the turns
it abandons, the files changed since and which of them changed since by something else).

Dismissed with ``(plan_id, files, overwrite_changed)`` or None (escape): enter takes the
conversation back, f the conversation and the files (those changed since by something else are
left as they are), o the files too, overwriting those. The App sends ``Rewind(plan_id, ...)``:
the plan shown is the plan that runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from app.kernel.describe import human_tokens, rewind_plan_text, rewind_point_row
from widgets._literal import literal
from widgets.key_footer import KeyFooter

if TYPE_CHECKING:
    from app.kernel.events import RewindPoint, RewindPointsEvent

RewindAnswer = tuple[str, bool, bool]  # plan id, files, overwrite files changed since


class RewindScreen(ModalScreen["RewindAnswer | None"]):
    DEFAULT_CSS = """
    RewindScreen { align: center middle; }
    RewindScreen #rewind-dialog { width: 90%; max-width: 140; height: auto; max-height: 90%; }
    RewindScreen #rewind-list { height: auto; max-height: 14; }
    RewindScreen #rewind-plan { height: auto; margin-top: 1; }
    """

    BINDINGS = [
        Binding("enter", "choose(False, False)", "Conversation", show=True, priority=True),
        Binding("f", "choose(True, False)", "Conversation + files"),
        Binding("o", "choose(True, True)", "Files, overwrite changed"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, event: RewindPointsEvent, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.event = event

    def compose(self) -> ComposeResult:
        with Vertical(id="rewind-dialog", classes="dialog"):
            yield Static(literal(f"Rewind to just before one of your messages (context now "
                                 f"~{human_tokens(self.event.tokens_before)} tokens)"), classes="dialog-question")
            yield OptionList(*[Option(literal(rewind_point_row(p, 200)), id=p.plan_id) for p in self.event.points],
                             id="rewind-list")
            yield Static("", id="rewind-plan", classes="dialog-detail")
        yield KeyFooter({"choose": 1, "cancel": 2}, id="rewind-footer")

    def on_mount(self) -> None:
        options = self.query_one("#rewind-list", OptionList)
        options.highlighted = 0
        options.focus()
        self._show_plan()

    @property
    def highlighted(self) -> RewindPoint | None:
        index = self.query_one("#rewind-list", OptionList).highlighted
        return self.event.points[index] if index is not None and 0 <= index < len(self.event.points) else None

    @on(OptionList.OptionHighlighted)
    def _moved(self, _event: OptionList.OptionHighlighted) -> None:
        self._show_plan()

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_choose(False, False)

    def _show_plan(self) -> None:
        point = self.highlighted
        text = "" if point is None else rewind_plan_text(self.event.tokens_before, point,
                                                         self.event.next_request_cost_before_usd)
        self.query_one("#rewind-plan", Static).update(literal(text))

    def action_choose(self, files: bool, overwrite: bool) -> None:
        point = self.highlighted
        if point is not None:
            self.dismiss((point.plan_id, files, overwrite))

    def action_cancel(self) -> None:
        self.dismiss(None)

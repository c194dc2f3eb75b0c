"""A yes/no question (before a reset, a compaction, a restore), with what it will do under it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from app.kernel.describe import evict_question, forecast_text
from widgets._literal import literal
from widgets.key_footer import KeyFooter

if TYPE_CHECKING:
    from app.kernel.events import ForecastEvent


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True (yes) or False (no / escape). ``detail``: a second block under the question."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    # Which button has the focus (enter presses it): "no" for what cannot be undone.
    default_answer: Literal["yes", "no"] = "no"

    def __init__(self, question: str, detail: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Static(literal(self.question), classes="dialog-question")
            if self.detail is not None:
                yield Static(literal(self.detail), id="confirm-detail", classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")
        # this dialog's keys (not the main screen's ctrl+s, ctrl+o… that do nothing while it is open)
        yield KeyFooter({"answer": 1, "quit": 3}, drawn_last=("quit",), id="confirm-footer")

    def on_mount(self) -> None:
        self.query_one(f"#{self.default_answer}", Button).focus()

    def set_detail(self, detail: str) -> None:
        self.detail = detail
        if self.is_mounted:
            self.query_one("#confirm-detail", Static).update(literal(detail))

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


FORECAST_PENDING = "working out what it frees and costs…"


class ForecastConfirmScreen(ConfirmScreen):
    """Compact or reset? With the session's plan (``ForecastEvent``): what goes and what stays,
    tokens freed, prompt-cache tokens invalidated, next request's cost before/after, whether the
    model is called. Yes runs that plan (the dashboard sends its id)."""

    def __init__(self, kind: Literal["compact", "reset", "evict"], focus: str | None = None,
                 forecast: ForecastEvent | None = None, **kwargs: Any) -> None:
        if kind == "reset":
            question = "Reset the conversation? The model forgets it; the transcript stays on disk."
        elif kind == "evict":
            question = evict_question(forecast) if forecast is not None else "Take this result out of the context?"
        else:
            question = f"Compact the conversation now{f' (focus: {focus})' if focus else ''}?"
        super().__init__(question, detail=forecast_text(forecast) if forecast is not None else FORECAST_PENDING,
                         **kwargs)
        self.kind = kind
        self.focus_text = focus
        # enter compacts or evicts (nothing is lost: the transcript and the saved output keep it all);
        # a reset keeps "no" as the default
        self.default_answer = "no" if kind == "reset" else "yes"
        self.forecast: ForecastEvent | None = forecast

    def show_forecast(self, event: "ForecastEvent") -> None:
        self.forecast = event
        self.set_detail(forecast_text(event))

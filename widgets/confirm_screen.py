"""A yes/no question (used before reset)."""

from __future__ import annotations

from textual import on
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from widgets._literal import literal


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True (yes) or False (no / escape)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.question = question

    def compose(self):
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Static(literal(self.question), classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

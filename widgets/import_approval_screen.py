"""Approval of a memory import (or rule file) from outside the repository: approve / decline.

Asked once per project (the session remembers the answer): a repository's AGENTS.md must
not send a file from elsewhere on the disk to the provider without the user saying so.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from widgets._literal import literal


class ImportApprovalScreen(ModalScreen[bool]):
    """Dismisses with True (approve) or False (decline, escape)."""

    BINDINGS = [
        Binding("a", "answer(True)", "Approve"),
        Binding("d,escape", "answer(False)", "Decline"),
    ]

    def __init__(self, path: str, importer: str, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.importer = importer
        self.reason = reason

    def compose(self) -> ComposeResult:
        with Vertical(id="import-approval-dialog", classes="dialog"):
            yield Static(literal(f"Import {self.path} into the memory files?"), classes="dialog-question")
            yield Static(literal(f"Named in {self.importer}; it is {self.reason}. Approved, its text goes to the "
                                 "model with every request. The answer is remembered for this project."),
                         id="import-approval-detail", classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Approve (a)", id="approve", variant="warning")
                yield Button("Decline (d)", id="decline", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#decline", Button).focus()  # enter declines: the safe side

    def action_answer(self, approve: bool) -> None:
        self.dismiss(approve)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "approve")

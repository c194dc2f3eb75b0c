"""Pick a session to resume (``--resume`` without an id, ``/resume``): a list, enter opens, escape cancels."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from widgets._literal import literal


class SessionPicker(ModalScreen["str | None"]):
    """Dismisses with the chosen session's id, or None (escape).

    ``rows``: (session id, its line) newest first, the lines worded by ``app.kernel.describe.session_row``;
    a title is the user's own first prompt, so it is shown literally (no markup, no escapes).
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    SessionPicker { align: center middle; }
    SessionPicker #session-picker { width: 90%; max-width: 140; height: auto; max-height: 80%; }
    SessionPicker OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, rows: list[tuple[str, str]], title: str = "Resume a session", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows = rows
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="session-picker", classes="dialog"):
            if self.rows:
                yield Static(literal(f"{self.title_text}: enter opens, escape cancels"), classes="dialog-question")
                yield OptionList(*(Option(literal(line), id=session_id) for session_id, line in self.rows))
            else:
                yield Static(literal("No session with a prompt in this directory yet (escape closes this)."),
                             classes="dialog-question")

    def on_mount(self) -> None:
        if self.rows:
            self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)

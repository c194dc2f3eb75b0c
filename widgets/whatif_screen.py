"""Asks for the policy a what-if overlays on the context chart: a window and an auto-compact line.

Dismissed with ``(window, auto_compact_fraction)``, or None (escape). A figure that cannot be
used is said on one line under the fields and the dialog stays open with what was typed.
The session checks the figures again: this only spares the user a round trip.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from widgets._literal import literal

QUESTION = "What-if: replay this session under another policy and overlay its curve on the chart"


def parse_policy(window_text: str, fraction_text: str) -> tuple[int, float] | str:
    """The figures, or what is wrong with them (one line)."""
    try:
        window = int(window_text.strip().replace(",", "").replace("_", ""))
    except ValueError:
        return f"window: {window_text.strip()!r} is not a whole number of tokens"
    if window <= 0:
        return f"window: {window} must be more than 0"
    try:
        fraction = float(fraction_text.strip())
    except ValueError:
        return f"auto-compact: {fraction_text.strip()!r} is not a number (a fraction of the window, e.g. 0.6)"
    if not 0 < fraction <= 1:
        return f"auto-compact: {fraction:g} is outside 0-1 (a fraction of the window, e.g. 0.6)"
    return window, fraction


class WhatIfScreen(ModalScreen["tuple[int, float] | None"]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, window: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.window = window

    def compose(self) -> ComposeResult:
        with Vertical(id="whatif-dialog", classes="dialog"):
            yield Static(literal(QUESTION), classes="dialog-question")
            yield Input(value=str(self.window) if self.window else "", placeholder="window in tokens, e.g. 100000",
                        id="whatif-window")
            yield Input(value="0.6", placeholder="auto-compact as a fraction of the window, e.g. 0.6",
                        id="whatif-auto-compact")
            yield Static("", id="whatif-problem", classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Replay (enter)", id="replay", variant="primary")
                yield Button("Cancel (escape)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#whatif-window", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    def _submitted(self, _event: Input.Submitted) -> None:
        self._replay()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self._replay()

    def _replay(self) -> None:
        answer = parse_policy(self.query_one("#whatif-window", Input).value,
                              self.query_one("#whatif-auto-compact", Input).value)
        if isinstance(answer, str):
            self.query_one("#whatif-problem", Static).update(literal(answer))
            return
        self.dismiss(answer)

"""Approval of a tool call that changes things: yes / always for this session / no."""

from __future__ import annotations

import json
from typing import Any, Literal

from textual.app import ComposeResult
from textual import on
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static

from widgets._literal import literal

Approval = Literal["yes", "always", "no"]
# What the modal dismisses with: an approval, or "interrupt" (escape stops the whole turn,
# as escape does everywhere else in the dashboard).
ApprovalAnswer = Literal["yes", "always", "no", "interrupt"]


def describe_call(name: str, tool_input: dict[str, Any]) -> str:
    """The call as the user should read it before approving."""
    if name == "run_bash" and "command" in tool_input:
        return f"$ {tool_input['command']}"
    if name == "write_file":
        content = str(tool_input.get("content", ""))
        return f"write {tool_input.get('path', '?')} ({len(content):,} characters)\n\n{content[:2000]}"
    if name == "edit_file":
        return (
            f"edit {tool_input.get('path', '?')}\n\n--- old\n{str(tool_input.get('old', ''))[:1000]}"
            f"\n+++ new\n{str(tool_input.get('new', ''))[:1000]}"
        )
    return json.dumps(tool_input, indent=2, ensure_ascii=False)[:3000]


class ApprovalScreen(ModalScreen[ApprovalAnswer]):
    """Dismisses with "yes", "always", "no", or "interrupt" (escape)."""

    BINDINGS = [
        Binding("y", "answer('yes')", "Yes"),
        Binding("a", "answer('always')", "Always (this session)"),
        Binding("n", "answer('no')", "No"),
        Binding("escape", "answer('interrupt')", "Interrupt the turn"),
    ]

    def __init__(self, name: str, tool_input: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tool_name = name
        self.tool_input = tool_input

    def compose(self) -> ComposeResult:
        with Vertical(id="approval-dialog", classes="dialog"):
            yield Static(literal(f"Allow {self.tool_name}?"), classes="dialog-question")
            with VerticalScroll(classes="dialog-body"):
                yield Static(literal(describe_call(self.tool_name, self.tool_input)), id="approval-call")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Yes (y)", id="yes", variant="success")
                yield Button(literal(f"Always allow {self.tool_name} (a)"), id="always", variant="warning")
                yield Button("No (n)", id="no", variant="error")
        yield Footer(compact=True)  # y / a / n / escape, as everywhere else in the footer

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def action_answer(self, answer: ApprovalAnswer) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)  # type: ignore[arg-type]

"""Approval of a tool call: yes / always this exact command / always commands starting with
its first word(s) / always this tool / no, and whether an "always" is saved for the project."""

from __future__ import annotations

import json
from typing import Any, Literal

from textual.app import ComposeResult
from textual import on
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Footer, Static

from widgets._literal import literal

# What the modal dismisses with: (decision, save the "always" rule for the project), or
# "interrupt" (escape stops the whole turn, as escape does everywhere else in the dashboard).
ApprovalAnswer = tuple[str, bool] | Literal["interrupt"]
# The key of each answer (the words come from app.kernel.describe.approval_choices).
ANSWER_KEYS: dict[str, str] = {"yes": "y", "always_exact": "e", "always_prefix": "p", "always": "a", "no": "n"}


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
    """Dismisses with (decision, save) or "interrupt" (escape). ``choices``: (decision, words)
    in order, as ``app.kernel.describe.approval_choices`` gives them; yes / always / no without."""

    DEFAULT_CSS = """
    #approval-choices { height: auto; }
    #approval-choices Button { width: auto; min-width: 0; margin: 0 0 0 2; }
    #approval-choices Checkbox { margin: 1 0 0 2; }
    """

    BINDINGS = [
        Binding("y", "answer('yes')", "Yes"),
        Binding("e", "answer('always_exact')", "Always this command", show=False),
        Binding("p", "answer('always_prefix')", "Always this prefix", show=False),
        Binding("a", "answer('always')", "Always this tool"),
        Binding("n", "answer('no')", "No"),
        Binding("s", "toggle_save", "Save for the project"),
        Binding("escape", "answer('interrupt')", "Interrupt the turn"),
    ]

    def __init__(self, name: str, tool_input: dict[str, Any], choices: list[tuple[str, str]] | None = None,
                 question: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tool_name = name
        # app.kernel.describe.approval_question: a command leaving the sandbox says so, with its reason
        self.question = question or f"Allow {name}?"
        self.tool_input = tool_input
        self.choices = choices or [("yes", "Yes"), ("always", f"Always allow {name}"), ("no", "No")]
        self.offered = {decision for decision, _ in self.choices}

    def compose(self) -> ComposeResult:
        with Vertical(id="approval-dialog", classes="dialog"):
            yield Static(literal(self.question), classes="dialog-question")
            with VerticalScroll(classes="dialog-body"):
                yield Static(literal(describe_call(self.tool_name, self.tool_input)), id="approval-call")
            # one line per answer: five full-size buttons would not fit a small terminal
            with Vertical(id="approval-choices"):
                for decision, words in self.choices:
                    variant: Literal["success", "error", "warning"] = (
                        "success" if decision == "yes" else "error" if decision == "no" else "warning")
                    yield Button(literal(f"{words} ({ANSWER_KEYS.get(decision, '?')})"), id=decision,
                                 variant=variant, compact=True)
                yield Checkbox("Save an \"always\" for this project (s)", id="approval-save", compact=True)
        yield Footer(compact=True)  # the keys, as everywhere else in the footer

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    @property
    def save(self) -> bool:
        return self.query_one("#approval-save", Checkbox).value

    def action_toggle_save(self) -> None:
        self.query_one("#approval-save", Checkbox).toggle()

    def action_answer(self, answer: str) -> None:
        if answer == "interrupt":
            self.dismiss("interrupt")
        elif answer in self.offered:  # a key whose choice this call does not offer does nothing
            self.dismiss((answer, self.save))

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id or "no")

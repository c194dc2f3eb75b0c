"""An MCP server's form (elicitation): fields from its schema, accept / decline / cancel.

The server's words arrive sanitized and bounded (app/mcp/client_features.py) and are drawn
literally. The form says, above everything else, which server gets the answer: a server
may ask for anything, an API key too, and nothing here can tell it from a harmless question.
Each field is checked by its own rule (``ElicitationField.value_from``, the one the session
applies again) and a bad one shows one line under it; nothing is sent until all are fine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Select, SelectionList, Static

from widgets._literal import literal

if TYPE_CHECKING:
    from app.kernel.events import ElicitationField

# What the modal dismisses with: (action, field name -> what the user gave). Text fields give
# their text (the session types it as the schema says), a boolean a bool, a choice its value,
# a multi-select the list of values chosen.
ElicitationAnswer = tuple[Literal["accept", "decline", "cancel"], dict[str, object]]


class ElicitationScreen(ModalScreen[ElicitationAnswer]):
    """Dismisses with ("accept", values) once every field is valid, ("decline", {}) or
    ("cancel", {}) (escape)."""

    DEFAULT_CSS = """
    ElicitationScreen .elicitation-field { height: auto; margin-bottom: 1; }
    ElicitationScreen .elicitation-label { text-style: bold; }
    ElicitationScreen .elicitation-description { color: $text-muted; }
    ElicitationScreen .elicitation-error { color: $error; height: auto; }
    ElicitationScreen #elicitation-recipient { color: $warning; margin-bottom: 1; }
    ElicitationScreen #elicitation-fields { height: auto; max-height: 40vh; }
    """

    BINDINGS = [
        Binding("ctrl+s", "answer('accept')", "Send", priority=True),
        Binding("ctrl+d", "answer('decline')", "Decline", priority=True),  # over the inputs' delete-right
        Binding("escape", "answer('cancel')", "Cancel"),
    ]

    def __init__(self, server: str, message: str, fields: list[ElicitationField], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server = server
        self.message = message
        self.fields = fields

    def compose(self) -> ComposeResult:
        with Vertical(id="elicitation-dialog", classes="dialog"):
            yield Static(literal(f"MCP server {self.server} asks:"), classes="dialog-question")
            yield Static(literal(self.message), id="elicitation-message")
            yield Static(literal(f"Your answer goes to the MCP server {self.server!r} only (not to the model). "
                                 "Do not enter a key or password unless you trust that server with it."),
                         id="elicitation-recipient")
            with VerticalScroll(id="elicitation-fields"):
                for index, form_field in enumerate(self.fields):
                    with Vertical(classes="elicitation-field"):
                        required = " *" if form_field.required else ""
                        yield Static(literal(f"{form_field.title or form_field.name}{required}"),
                                     classes="elicitation-label")
                        if form_field.description:
                            yield Static(literal(form_field.description), classes="elicitation-description")
                        yield self._input(index, form_field)
                        yield Static("", id=f"field-{index}-error", classes="elicitation-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Send (ctrl+s)", id="accept", variant="warning")
                yield Button("Decline (ctrl+d)", id="decline", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    @staticmethod
    def _input(index: int, form_field: ElicitationField) -> Input | Checkbox | Select[str] | SelectionList[str]:
        widget_id = f"field-{index}"
        if form_field.kind == "multi_enum":  # space toggles a choice
            chosen = form_field.default if isinstance(form_field.default, list) else []
            return SelectionList[str](*((literal(label), value, value in chosen)
                                        for label, value in zip(form_field.option_labels, form_field.options)),
                                      id=widget_id, compact=True)
        if form_field.kind == "boolean":
            return Checkbox(literal(form_field.title or form_field.name), value=form_field.default is True,
                            id=widget_id, compact=True)
        if form_field.kind == "enum":
            options = [(literal(label), value) for label, value in zip(form_field.option_labels, form_field.options)]
            default = form_field.default if isinstance(form_field.default, str) else Select.NULL
            return Select(options, value=default, allow_blank=not form_field.required or default is Select.NULL,
                          id=widget_id, compact=True)
        default = "" if form_field.default is None else str(form_field.default)
        kind: Literal["text", "integer", "number"] = "text" if form_field.kind == "string" else form_field.kind
        return Input(default, id=widget_id, type=kind, valid_empty=True, compact=True,
                     max_length=form_field.max_length or 0)

    def on_mount(self) -> None:
        if self.fields:
            self.query_one("#field-0").focus()
        else:
            self.query_one("#decline", Button).focus()

    def values(self) -> dict[str, object]:
        """What the user gave, by field name (a blank choice as None)."""
        given: dict[str, object] = {}
        for index, form_field in enumerate(self.fields):
            widget = self.query_one(f"#field-{index}")
            if isinstance(widget, Select):
                given[form_field.name] = None if widget.value is Select.NULL else widget.value
            elif isinstance(widget, SelectionList):
                given[form_field.name] = list(widget.selected)
            elif isinstance(widget, (Input, Checkbox)):
                given[form_field.name] = widget.value
        return given

    def errors(self) -> dict[str, str]:
        """Field name -> its one-line error; every field's error line is updated."""
        found: dict[str, str] = {}
        given = self.values()
        for index, form_field in enumerate(self.fields):
            try:
                form_field.value_from(given[form_field.name])
                error = ""
            except ValueError as bad:
                error = str(bad)
                found[form_field.name] = error
            self.query_one(f"#field-{index}-error", Static).update(literal(error))
        return found

    def action_answer(self, action: Literal["accept", "decline", "cancel"]) -> None:
        if action != "accept":
            self.dismiss((action, {}))
        elif not self.errors():
            self.dismiss(("accept", self.values()))

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id in ("accept", "decline", "cancel"):
            self.action_answer(event.button.id)  # type: ignore[arg-type]

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_answer("accept")

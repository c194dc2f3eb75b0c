"""The prompt box: Enter sends; slash commands complete (right arrow accepts)."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import Reactive
from textual.suggester import SuggestFromList
from textual.widgets import Input

from widgets._literal import literal
from widgets._one_shot import OneShot
from widgets.session_messages import McpPromptsOffered

SLASH_COMMANDS: dict[str, str] = {
    "/compact": "summarise the conversation now (/compact FOCUS adds a focus)",
    "/reset": "clear the conversation (asks first)",
    "/usage": "tokens and cost so far",
    "/context": "what the context holds, by part",
    "/permissions": "the permission rules in force, and where each came from",
    "/inspect": "the last request as sent, part by part, and its diff (ctrl+n)",
    "/rewind": "back to just before one of your messages, with or without the files (escape escape)",
    "/resume": "open another session of this directory (a list: enter opens)",
    "/mcp": "the MCP servers: state, tools, schema tokens, auth; reconnect, login, logout",
    "/help": "commands and keys",
}


class PromptBox(Input):
    """Single-line prompt with slash-command completion and a history (up/down).

    An MCP server's prompts complete too (``/mcp__SERVER__PROMPT``), each with its description and
    its arguments (``name*``: required), as the session offers them."""

    SESSION_MESSAGES = (McpPromptsOffered,)

    BINDINGS = [
        Binding("up", "history(-1)", "History", group=Binding.Group("History")),
        Binding("down", "history(1)", "History", group=Binding.Group("History")),
        # a one-line input has nothing to page through: page keys scroll the conversation
        Binding("pageup", "app.scroll_conversation(-1)", "Scroll", group=Binding.Group("Scroll")),
        Binding("pagedown", "app.scroll_conversation(1)", "Scroll", group=Binding.Group("Scroll")),
    ]

    # The placeholder that fits the box, longest first: cut, it lost its ")" when the full output
    # viewer narrowed the box at 80 columns.
    PLACEHOLDERS = ("Ask tidegauge… (/help for commands)", "Ask tidegauge… (/help)", "Ask… (/help)", "")

    # A key changes the text's scrollable width; the box's own size is set by its CSS, so that takes a
    # repaint of the box, not a layout of the whole screen (Textual's default for a widget: a reflow of
    # every widget on each key, about a third of the frame that echoes it).
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def __init__(self, *, cursor_blink: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("placeholder", self.PLACEHOLDERS[0])
        # typing elsewhere moves focus here with the first key: selecting on focus would let
        # the second key replace the first
        kwargs.setdefault("select_on_focus", False)
        super().__init__(
            suggester=SuggestFromList(list(SLASH_COMMANDS), case_sensitive=False),
            **kwargs,
        )
        self.cursor_blink = cursor_blink
        self._commands: dict[str, str] = dict(SLASH_COMMANDS)
        self._history: list[str] = []
        self._history_index = 0

    def on_resize(self) -> None:
        if self.placeholder not in self.PLACEHOLDERS:
            return  # one given by the caller stays
        room = self.content_region.width - 1  # the cursor's cell
        self.placeholder = next(words for words in self.PLACEHOLDERS if len(words) <= room)

    @on(McpPromptsOffered)
    def _on_mcp_prompts(self, message: McpPromptsOffered) -> None:
        for prompt in message.event.prompts:
            arguments = " ".join(f"{name}*" if name in prompt.required else name for name in prompt.arguments)
            about = " · ".join(part for part in (arguments and f"({arguments})", prompt.description) if part)
            self._commands.setdefault(prompt.command, about or "an MCP prompt")
        self.suggester = SuggestFromList(list(self._commands), case_sensitive=False)
        self.watch_value(self.value)  # a command typed while the servers started is known now

    def remember(self, text: str) -> None:
        if text and (not self._history or self._history[-1] != text):
            self._history.append(text)
        self._history_index = len(self._history)

    def action_history(self, direction: int) -> None:
        if not self._history:
            return
        index = max(0, min(len(self._history), self._history_index + direction))
        self._history_index = index
        self.value = self._history[index] if index < len(self._history) else ""
        self.cursor_position = len(self.value)

    def say_briefly(self, words: str, seconds: float) -> None:
        """``words`` under the prompt for ``seconds`` (what a key did, or what pressing it again does)."""
        self.border_subtitle = literal(words)
        said = self.border_subtitle

        def forget() -> None:
            if self.border_subtitle == said:
                self.watch_value(self.value)

        OneShot(self, seconds, forget)

    def watch_value(self, value: str) -> None:
        # The text changed (a key, as a rule): its echo is drawn without waiting for the frame timer.
        draw_at_once = getattr(self.screen, "draw_at_once", None) if self.is_mounted else None
        if draw_at_once is not None:
            draw_at_once(self)
        if value.startswith("/"):
            word = value.split(" ", 1)[0].lower()
            matches = [f"{name} — {about}" for name, about in self._commands.items() if name.lower().startswith(word)]
            hint = "  ·  ".join(matches[:2]) if matches else "unknown command — /help lists them"
            self.border_subtitle = literal(hint)
        else:
            self.border_subtitle = ""

"""/mcp: the session's MCP servers, one entry each, with reconnect, login and logout.

Each entry is drawn from the view model's last ``McpStatusEvent`` (the rows of ``tidegauge mcp
list``, from the session's own servers): its state (starting, ready, failed with the reason,
stopped), transport, what it offers, its schema tokens and whether they are deferred, its auth.
A key on the selected server posts ``McpScreen.ActionAsked``; the App turns it into a
``ManageMcpServer`` command and the session does the work, answering with new rows (``show``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.padding import Padding
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from app.kernel.describe import mcp_row_lines
from widgets._literal import literal, sanitize
from widgets.key_footer import KeyFooter

if TYPE_CHECKING:
    from app.kernel.events import McpServerRow, McpStatusEvent

TITLE = "MCP servers"
# How each state is drawn: what works is quiet, what does not stands out.
STATE_STYLE = {"ready": "green", "failed": "bold red", "starting": "yellow", "stopped": "dim", "disabled": "dim"}


def entry_text(row: "McpServerRow") -> Group:
    """A server's entry (``describe.mcp_row_lines``): name and state first, its figures and auth under
    it, a failure's reason last and in red; the lines under the first indented, wrapped lines too."""
    _first, *rest = mcp_row_lines(row)
    first = Text(no_wrap=False)
    first.append(sanitize(row.name), style="bold")
    first.append("  ")
    first.append(sanitize(row.state + (f" ({row.busy})" if row.busy else "")), style=STATE_STYLE.get(row.state, ""))
    first.append(sanitize(f"  {row.transport} {row.target}".rstrip()))
    under = Text(no_wrap=False)
    for index, line in enumerate(rest):
        if index:
            under.append("\n")
        under.append(line.strip(), style="red" if row.reason and index == len(rest) - 1 else "")
    return Group(first, Padding(under, (0, 0, 0, 2)))


class McpScreen(ModalScreen[None]):
    """The servers as the session last said; r reconnects, l logs in, o logs out, escape closes."""

    DEFAULT_CSS = """
    McpScreen { align: center middle; background: $background 60%; }
    McpScreen > #mcp-dialog {
        width: 100%; max-width: 120; height: auto; max-height: 100%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    McpScreen #mcp-title { text-style: bold; height: auto; }
    McpScreen #mcp-note { height: auto; color: $text-muted; }
    /* the list scrolls inside the dialog, which stays on screen with its note at 80x24 */
    McpScreen OptionList, McpScreen OptionList:focus { height: auto; max-height: 70vh; border: none; padding: 0; }
    """

    BINDINGS = [
        Binding("r", "act('reconnect')", "Reconnect"),
        Binding("l", "act('login')", "Login"),
        Binding("o", "act('logout')", "Logout"),
        Binding("escape,q", "close", "Close"),
    ]

    class ActionAsked(Message):
        """The user asked for ``action`` ("reconnect", "login", "logout") on ``server``."""

        def __init__(self, action: str, server: str) -> None:
            super().__init__()
            self.action = action
            self.server = server

    def __init__(self, status: "McpStatusEvent | None" = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.status = status

    def compose(self) -> ComposeResult:
        with Vertical(id="mcp-dialog"):
            yield Static(TITLE, id="mcp-title")
            yield OptionList(id="mcp-servers")
            yield Static("", id="mcp-note")
        yield KeyFooter({"act": 1, "close": 2}, id="mcp-footer")

    def on_mount(self) -> None:
        self.show(self.status)
        self.query_one(OptionList).focus()

    @property
    def rows(self) -> "list[McpServerRow]":
        return list(self.status.servers) if self.status is not None else []

    @property
    def selected(self) -> str | None:
        """The server the cursor is on."""
        try:
            highlighted = self.query_one(OptionList).highlighted
        except NoMatches:
            return None
        rows = self.rows
        return rows[highlighted].name if highlighted is not None and highlighted < len(rows) else None

    def show(self, status: "McpStatusEvent | None") -> None:
        """Draw ``status`` (the session's latest rows), the cursor kept on the server it was on."""
        try:
            options = self.query_one(OptionList)
        except NoMatches:  # not composed yet (on_mount draws it), or already closing
            self.status = status
            return
        keep = self.selected if self.status is not None else None
        self.status = status
        options.clear_options()
        rows = self.rows
        options.add_options([Option(entry_text(row), id=f"mcp-{index}") for index, row in enumerate(rows)])
        if rows:
            names = [row.name for row in rows]
            options.highlighted = names.index(keep) if keep in names else 0
        if status is None:
            note = "asking the session…"
        elif not rows:
            note = status.note or "no MCP servers in [mcp_servers] of config.toml"
        else:
            note = status.note
        self.query_one("#mcp-note", Static).update(literal(note))

    def say(self, text: str) -> None:
        """One line under the list until the next rows (a login's consent address, how it ended)."""
        try:
            self.query_one("#mcp-note", Static).update(literal(text))
        except NoMatches:  # not composed yet, or closing
            pass

    def action_act(self, action: str) -> None:
        server = self.selected
        if server is not None:
            self.post_message(self.ActionAsked(action, server))

    def action_close(self) -> None:
        self.dismiss(None)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        """Enter on a server reconnects it (what a stuck server needs most)."""
        event.stop()
        self.action_act("reconnect")

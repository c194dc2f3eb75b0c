"""The header: provider and model, the project directory, the session's short id, agent state, step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.reactive import reactive, var
from textual.widget import Widget

from app.kernel.describe import SANDBOX_BADGES, STATE_WORDS, state_text
from app.kernel.session_states import is_busy
from widgets._literal import sanitize
from widgets._paths import shorten_path
from widgets.session_messages import BreakerChanged, SessionStarted, StateChanged

if TYPE_CHECKING:
    from app.kernel.events import StateEvent


# The provider label's cells kept when the project's name takes the rest ("demo (s…").
LABEL_MIN = 8


def short_session_id(session_id: str) -> str:
    """The id's random part ("996b" of "20261202-062137-996b"): what tells it apart from the
    day's other sessions (the conversation's border shows the whole id)."""
    return session_id.rsplit("-", 1)[-1] if session_id else ""


class HeaderBar(Widget):
    """One line across the top. Its ``-busy``/``-paused`` classes follow the state."""

    SESSION_MESSAGES = (SessionStarted, StateChanged, BreakerChanged)

    COMPONENT_CLASSES = {
        "header--title",
        "header--provider",
        "header--dim",
        "header--state",
        "header--paused",
    }

    provider_label: reactive[str] = reactive("")
    cwd: reactive[str] = reactive("")
    session_id: reactive[str] = reactive("")
    state: reactive[str] = reactive("idle")  # the session's state; "starting" until it exists
    step: reactive[int] = reactive(0)
    max_steps: reactive[int] = reactive(0)
    sandbox: reactive[str] = reactive("")  # how commands run ("": not said, an older session)
    breaker_paused = var(False, toggle_class="-paused")
    busy = var(False, toggle_class="-busy")  # drawn only: the App asks the view model

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state_event: "StateEvent | None" = None

    def watch_state(self, state: str) -> None:
        self.busy = is_busy(state)

    @on(SessionStarted)
    def _on_session(self, message: SessionStarted) -> None:
        info = message.event
        self.provider_label = info.provider_label
        # the directory tidegauge was started in (the demo works in a scratch copy of its own)
        self.cwd = info.started_in or info.workspace
        self.session_id = info.session_id
        self.max_steps = info.max_steps
        self.sandbox = info.sandbox or ""

    @on(StateChanged)
    def _on_state(self, message: StateChanged) -> None:
        event = message.event
        self.state_event = event
        with self.app.batch_update():
            self.state = event.state
            self.step = event.step
            self.max_steps = event.max_steps
            self.refresh()

    @on(BreakerChanged)
    def _on_breaker(self, message: BreakerChanged) -> None:
        self.breaker_paused = message.event.paused

    def state_text(self) -> str:
        """The state in describe's words (the same as every other surface's)."""
        if self.state_event is None or self.state == "starting":
            return STATE_WORDS.get(self.state, self.state)
        return sanitize(state_text(self.state_event))

    def watch_breaker_paused(self, _paused: bool) -> None:
        self.refresh()

    def render(self) -> Text:
        title = self.get_component_rich_style("header--title")
        provider = self.get_component_rich_style("header--provider")
        dim = self.get_component_rich_style("header--dim")
        state_style = self.get_component_rich_style("header--state")
        paused = self.get_component_rich_style("header--paused")

        state = self.state_text()
        right = Text(no_wrap=True, end="")
        right.append(f" {state} ", state_style)
        if self.breaker_paused:
            right.append(" ")
            right.append(" auto-compact paused (breaker) ", paused)
        steps = f"  step {self.step} of {self.max_steps} " if self.max_steps else ""
        badge = f"  {SANDBOX_BADGES.get(self.sandbox, self.sandbox)}" if self.sandbox else ""
        width = self.size.width
        cwd = sanitize(self.cwd)
        # Whether commands are sandboxed, where the row has room for it beside the whole project path:
        # the project and the session are what the row must name first.
        whole = (cell_len(" tidegauge  ") + cell_len(sanitize(self.provider_label)) + 2 + cell_len(cwd)
                 + cell_len(f"  session {short_session_id(self.session_id)}") + right.cell_len + len(steps) + 1)
        if badge and whole + len(badge) <= width:
            right.append(badge, dim)
        session = Text(no_wrap=True, end="")
        short_id = short_session_id(self.session_id)
        if short_id:
            session.append("  session ", dim)
            session.append(sanitize(short_id))
        left = Text(no_wrap=True, overflow="ellipsis", end="")
        left.append(" tidegauge ", title)
        left.append(" ")
        label = Text(sanitize(self.provider_label), provider, no_wrap=True, end="")
        # a long state ("waiting for approval: run_bash") at 80 columns left the provider "demo …":
        # the step count goes first (the conversation shows the steps)
        if steps and width - right.cell_len - len(steps) - 1 - left.cell_len - session.cell_len >= min(
                label.cell_len, LABEL_MIN + 6):
            right.append(steps, dim)
        room = max(0, width - right.cell_len - 1)
        # The project's own name ("…/my-project") before the label's tail: at 80 columns the
        # whole label left "…-project" or nothing; the label keeps its first cells.
        project = cell_len(shorten_path(cwd, cell_len(cwd.rstrip("/").rsplit("/", 1)[-1]) + 2)) + 2 if cwd else 0
        label_room = room - left.cell_len - session.cell_len - project
        if label.cell_len > label_room and label_room < LABEL_MIN:  # no room for both: the label
            label_room = room - left.cell_len - session.cell_len
        if label.cell_len > label_room:  # the session stays whole
            label.truncate(max(1, label_room), overflow="ellipsis")
        left.append_text(label)
        if cwd:
            # the project's path gets the room left, cut from the left: its last parts name it
            path_room = room - left.cell_len - session.cell_len - 2
            if path_room >= 8:
                left.append("  ")
                left.append(shorten_path(cwd, path_room), dim)
        left.append_text(session)
        left.truncate(room, overflow="ellipsis", pad=True)
        text = Text(no_wrap=True, end="")
        text.append_text(left)
        text.append(" ")
        text.append_text(right)
        return text

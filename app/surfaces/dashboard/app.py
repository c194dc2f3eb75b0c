"""The full-screen dashboard: a thin surface over a session.

The App lays out the widgets, turns keys and prompts into session commands
(``SessionSurface.submit``) and answers approval requests. Everything it draws
reaches the widgets as messages from ``SessionBridge``; each widget handles
its own (``@on``). The session runs in a process of its own (see ``launch``;
tests run it on a thread), so the agent never waits for a frame, and events
arrive on another thread: the widgets are only touched on the UI loop.
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

from textual import events, messages, on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input
from textual.worker import Worker, WorkerState

import styles
from app.surfaces.dashboard.cropped_compositor import CroppedCompositor
from app.surfaces.dashboard.kept_stylesheet import KeptStylesheet, shared_rules
from widgets.context_panel import ContextPanel
from widgets.conversation import Conversation
from widgets.header_bar import HeaderBar
from widgets.key_footer import KeyFooter
from widgets.prompt_box import SLASH_COMMANDS, PromptBox
from widgets.session_messages import (
    ApprovalRequested,
    ApprovalResolved,
    ElicitationSaid,
    EngineSaid,
    ForecastReady,
    McpAuthSaid,
    McpStatusReady,
    MemoryImportSaid,
    RequestRecorded,
    RestorePreviewReady,
    RewindPointsReady,
    Rewound,
    SessionStarted,
    StateChanged,
)
from widgets.tool_call_line import ToolCallLine
from widgets.tool_call_list import RESTORE_KEY, ToolCallList
from widgets.tool_output_panel import ToolOutputPanel


class _ImportedOnFirstUse:
    """A module imported when one of its names is first used. The commands are ~20 frozen
    dataclasses, and building a dataclass compiles its methods: importing them cost as much as
    a tenth of ``import textual.app``, on the first frame's path though no key press has
    happened yet. The session-build thread imports them after the first frame (the session
    needs them too), so a key press rarely pays for it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        import importlib  # the point of this class: the import happens here, at first use

        return getattr(importlib.import_module(self._name), attribute)


if TYPE_CHECKING:
    from textual.driver import Driver
    from app.kernel import commands
    from app.kernel.commands import Command
    from app.kernel.events import RequestRecordedEvent
    from app.kernel.request_store import StoredRequests
    from app.surfaces.dashboard.bridge import SessionBridge
    from app.surfaces.view_model import DashboardView, InspectorPage
    from app.kernel.protocol import SessionSurface
else:
    commands = _ImportedOnFirstUse("app.kernel.commands")

CSS_FILE = Path(styles.__file__).parent / "tidegauge.tcss"

# /help's keys: (key, what it does), in the order a newcomer needs them.
HELP_KEYS: list[tuple[str, str]] = [
    ("enter", "send"),
    ("↑/↓", "prompt history"),
    ("tab", "next region"),
    ("shift+tab", "previous region"),
    ("PgUp/PgDn", "scroll the conversation (or the focused list/output)"),
    ("Home/End", "first/last tool call, top/end of an output"),
    ("ctrl+o", "open/close the full output of the selected call (nothing selected: the latest cut output)"),
    ("ctrl+f", "in the full output: its file's whole path"),
    ("ctrl+g", "show/hide the context chart and breakdown"),
    ("ctrl+n", "inspect the last request as sent (d in it: the diff)"),
    ("ctrl+s", "compact (asks first)"),
    ("ctrl+r", "reset (asks first)"),
    (RESTORE_KEY, "in the tool list: restore a cleared result (asks first)"),
    ("d", "in the tool list: take a result out of the context (asks first; ctrl+t restores it)"),
    ("p", "in the tool list: pin a result (clearing and compaction keep it verbatim), again: unpin"),
    ("/ n N", "in the full output: search (as in less), next match, previous match"),
    ("escape", "interrupt the running turn"),
    ("escape escape", "when idle: rewind to before one of your messages (/rewind)"),
    ("ctrl+c", "interrupt the running turn, else clear the prompt; twice quits"),
    ("ctrl+p", "command palette"),
    ("ctrl+q", "quit"),
    ("approval", "y yes · a always this tool · e always this exact command (or file) · "
                 "p always this prefix (or folder) · n no · escape interrupts the turn; s saves an always "
                 "for the project"),
]
HELP_KEY_COLUMN_MAX = 14  # /help's name column, at most
# At least this many columns for /help to set its keys two to a row.
HELP_TWO_COLUMNS_FROM = 100


def _help_rows(entries: list[tuple[str, str]], width: int, *, two_columns: bool) -> list[str]:
    """``entries`` as rows of "  key  what it does", the words wrapped under their column."""
    # Only the help screen wraps text: textwrap stays off the first frame's path.
    import textwrap

    # a long name (an MCP server's prompt) gets a row of its own rather than a column as wide
    key_width = min(HELP_KEY_COLUMN_MAX, max(len(key) for key, _ in entries))
    indent = " " * (2 + key_width + 2)
    words_width = max(16, width - len(indent))
    cells = [textwrap.wrap(about, words_width) or [""] for _, about in entries]
    rows: list[str] = []
    half = width // 2
    index = 0
    while index < len(entries):
        key, lines = entries[index][0], cells[index]
        if len(key) > key_width:
            rows.append(f"  {key}")
            rows.extend(indent + line for line in lines)
            index += 1
            continue
        first = f"  {key:<{key_width}}  {lines[0]}"
        if two_columns and len(lines) == 1 and index + 1 < len(entries) and len(cells[index + 1]) == 1:
            second = f"{entries[index + 1][0]:<{key_width}}  {cells[index + 1][0]}"
            if len(first) < half - 1 and half + len(second) <= width:
                rows.append(f"{first:<{half}}{second}")
                index += 2
                continue
        rows.append(first)
        rows.extend(indent + line for line in lines[1:])
        index += 1
    return rows


def help_text(width: int = 80) -> str:
    """/help laid out for ``width`` columns: one entry per row, two to a row for keys when wide."""
    return "\n".join([
        "commands:",
        *_help_rows(list(SLASH_COMMANDS.items()), width, two_columns=False),
        "keys (the footer shows those that fit):",
        *_help_rows(HELP_KEYS, width, two_columns=width >= HELP_TWO_COLUMNS_FROM),
        "typing anywhere goes to the prompt",
    ])


def __getattr__(name: str) -> str:
    # HELP_TEXT: /help's words, whatever the width (tests read them). Laid out when asked for: at
    # import it cost 4M instructions of the first frame, which shows no help.
    if name == "HELP_TEXT":
        return help_text(HELP_TWO_COLUMNS_FROM)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# A second ctrl+c within this many seconds quits (Claude Code's and Codex's double press).
QUIT_WINDOW_S = 1.0
# Esc Esc (idle): the second escape within this many seconds opens the rewind list.
REWIND_WINDOW_S = 0.8

# What the footer keeps when its keys do not all fit, most important first (by action; a
# region's keys not named here come after these, before the last four).
FOOTER_RANKS: dict[str, int] = {
    "interrupt": 1,
    "toggle_output": 2, "close_full_output": 2,
    "quit": 3,
    "toggle_whole_path": 4,
    "page_output": 5,  # the open output's own keys: its help, ahead of the App's others
    "output_edge": 6,
    "compact": 7,
    "reset": 8,
    "toggle_context_details": 9,
    "move": 10,
    "restore": 11,
    "evict": 11, "pin": 11,
    "focus_next": 12,
    "inspect": 13,  # after tab: at 80 columns the footer keeps the keys it had, /help names ctrl+n
    "page_up": 110, "page_down": 110, "scroll_home": 111, "scroll_end": 111, "first": 111, "last": 111,
    "history": 112,
    "scroll_conversation": 113,
    "focus_previous": 114,
}

# The context panel's chart and breakdown fold away when, with them, the conversation
# would have fewer rows than this (header, footer, prompt and borders counted).
CONVERSATION_MIN_ROWS = 12
CHROME_ROWS = 1 + 1 + 3 + 2  # header, footer, prompt box, the conversation's border
CONTEXT_PANEL_ROWS = 15  # unfolded, as styles/tidegauge.tcss sets it


def context_details_fit(terminal_height: int) -> bool:
    """Whether the chart and breakdown fit with the conversation keeping its minimum rows."""
    return terminal_height - CHROME_ROWS - CONTEXT_PANEL_ROWS >= CONVERSATION_MIN_ROWS


def late_still_fires(timer: Timer) -> Timer:
    """``timer`` (one-shot) calls back however late its task first looks at the clock, instead of
    skipping its only tick (why Textual's would: ``widgets/_one_shot.py``, the widgets' own waits).

    Textual's own timers on the App and the screen are mended here: the App's 1/120 s resize
    debounce, lost, stays set and no later resize reaches the screen. ``_skip`` is Textual's
    (pinned in pyproject.toml); ``tests/test_tui_flows.py`` resizes a preempted dashboard and
    fails if this stops working."""
    timer._skip = False
    return timer


class MainScreen(Screen[None]):
    """The dashboard's screen: tab is listed in the footer (shift+tab in /help)."""

    # Textual would focus the first focusable widget (the conversation) as the screen composes,
    # and the App then the prompt: two focus changes, each restyling the regions around them,
    # before the first frame.
    AUTO_FOCUS = "#prompt"

    BINDINGS = [
        Binding("tab", "app.focus_next", "Region"),
        # in /help; the footer's room goes to keys that do something new
        Binding("shift+tab", "app.focus_previous", "Previous region", show=False),
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A frame renders only the widgets it changes (a key's echo: the prompt, not the screen).
        self._compositor = CroppedCompositor()
        self._draw_at_once: Widget | None = None
        self._resumed = False

    def set_timer(self, delay: float, callback: Any = None, *, name: str | None = None, pause: bool = False) -> Timer:
        return late_still_fires(super().set_timer(delay, callback, name=name, pause=pause))

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        # The first resume comes as the screen's widgets have just mounted, each styled as it
        # mounted: Textual would style them all again (every widget and each of its component
        # classes), 33M instructions of the first frame, for the same styles
        # (tests/test_dashboard_first_frame.py). Later resumes (a dialog closed) restyle as usual.
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False

    def _reset_focus(self, widget: Widget, avoiding: list[Widget] | None = None) -> None:
        # At exit Textual prunes the screen, and moving the focus off the prompt first blurred it:
        # the prompt validated itself and was restyled twice, for a screen nobody sees again.
        # Textual's own hook (private): should it be renamed, test_dashboard_first_frame's exit
        # test fails rather than this going unused.
        if not self.app.is_running:
            return
        super()._reset_focus(widget, avoiding)

    def draw_at_once(self, widget: Widget) -> None:
        """Draw ``widget``'s next change in a frame of its own as soon as it reaches the screen.

        Textual draws on a 60 Hz timer: while a reply streams there is a frame every tick or two,
        so a key's echo waited up to a tick (16.7 ms) for the next one, and then for the layout and
        the lines of the reply that frame drew too (benchmark 3c). The frame drawn here holds
        ``widget`` alone, at the place the last layout gave it (the prompt's size and place are set
        by the CSS, not by what streams); the rest waits for the timer's next tick as before. Keys
        come at a typist's pace, so the frames this adds are few."""
        self._draw_at_once = widget

    async def _on_update(self, message: messages.Update) -> None:
        await super()._on_update(message)  # marks the widget dirty (and stops Screen's handler)
        widget = message.widget
        if widget is not self._draw_at_once or not isinstance(widget, Widget):
            return
        self._draw_at_once = None
        if not self.is_current or self.app._batch_count or widget not in self._dirty_widgets:
            return
        others = self._dirty_widgets - {widget}  # drawn on the timer's tick, as they were to be
        self._compositor.update_widgets({widget})
        self._compositor_refresh()  # (forgets every dirty widget: the others are put back)
        self._dirty_widgets.update(others)

    def on_resize(self, _event: events.Resize) -> None:
        fold = getattr(self.app, "_fold_context_details", None)
        if fold is not None and self.is_mounted:
            fold()


# Garbage collection while the dashboard runs. A full collection walks every live
# object: with what start-up built (modules, the agent, the first widgets; ~100K
# objects) it took 50-150 ms, a visible hitch in a stream, several times a second:
# Python collects its youngest generation every 700 allocations, and a streaming
# dashboard allocates fast (strips, blocks, messages), so objects that live a few
# frames were promoted early. Start-up's objects are frozen out of collections after
# the first frame (unfrozen on exit), and a larger young generation lets short-lived
# objects die young. Measured on 20,000 streamed deltas: ~20% faster, and the time
# grows linearly with the length again. (Too large a young generation makes each
# young collection itself a long pause.)
GC_YOUNG_THRESHOLD = 5_000


def _freeze_what_start_up_built() -> None:
    # The young generations only: the first frame's garbage is young, and the old generation is
    # what was alive before the dashboard started (in `tidegauge` what start-up froze moments
    # earlier, nearly nothing; in a process that ran dashboards before, such as the web server
    # or a test run, all of that process's heap, unfrozen when the last dashboard closed). A full
    # collection walked it all again on every dashboard's first frame, 0.1-0.3 s in a large
    # process; garbage left in it is frozen with the rest until this dashboard's exit unfreezes it.
    gc.collect(1)
    gc.freeze()


class TidegaugeApp(App[int]):
    """Conversation, tool output and the live context gauge around one session."""

    CSS_PATH = str(CSS_FILE)
    TITLE = "tidegauge"
    SESSION_MESSAGES = (ApprovalRequested, ApprovalResolved, MemoryImportSaid, ForecastReady, StateChanged,
                        RestorePreviewReady, ElicitationSaid, SessionStarted, EngineSaid, RequestRecorded,
                        RewindPointsReady, Rewound, McpStatusReady, McpAuthSaid)
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("pageup", "scroll_conversation(-1)", "Scroll", group=Binding.Group("Scroll")),
        Binding("pagedown", "scroll_conversation(1)", "Scroll", group=Binding.Group("Scroll")),
        Binding("ctrl+o", "toggle_output", "Output"),
        Binding("ctrl+g", "toggle_context_details", "Chart"),
        Binding("ctrl+n", "inspect", "Inspect"),
        Binding("ctrl+s", "compact", "Compact"),
        Binding("ctrl+r", "reset", "Reset"),
        Binding("escape", "interrupt", "Interrupt"),
        # Idle, escape does nothing else: twice opens the rewind list (as Claude Code and Codex do).
        Binding("escape", "rewind_escape", "Rewind", show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        # As in Claude Code and Codex: interrupt a running turn, else clear the prompt; a second
        # ctrl+c within QUIT_WINDOW_S quits. Priority: the prompt's own ctrl+c (copy) is kept for a
        # selection only, and Textual's "press ctrl+q to quit" note never covers the gauge.
        Binding("ctrl+c", "interrupt_clear_or_quit", "Interrupt / clear / quit", show=False, priority=True),
    ]

    def __init__(
        self,
        session: "SessionSurface | None" = None,
        *,
        session_factory: "Callable[[], SessionSurface] | None" = None,
        max_mounted: int = 200,
        cursor_blink: bool = True,
        resume_factory: "Callable[[str], SessionSurface] | None" = None,
        list_sessions: "Callable[[], list[tuple[str, str]]] | None" = None,
        pick_session: bool = False,
    ) -> None:
        """``list_sessions``: (id, line) of the sessions one may resume (the picker's list);
        ``pick_session`` (with ``resume_factory``): the picker first, then the chosen session
        is built (``--resume`` without an id)."""
        super().__init__()
        # The CSS an earlier start parsed is not parsed again (kept_stylesheet.py); before the App reads any.
        self.stylesheet = KeptStylesheet.replacing(self.stylesheet, shared_rules())
        if session is None and session_factory is None and not (pick_session and resume_factory):
            raise ValueError("TidegaugeApp needs a session or a session_factory")
        self._resume_factory = resume_factory
        self._list_sessions = list_sessions
        self._pick_session = pick_session
        # /resume's choice: the dashboard closes and is opened again on that session
        self.resume_request: str | None = None
        self.session: SessionSurface | None = None
        self._given_session = session
        self._session_factory = session_factory
        self._max_mounted = max_mounted
        self._cursor_blink = cursor_blink
        self._waiting: list[Command] = []  # commands given before the session exists
        self._last_request: RequestRecordedEvent | None = None  # what the inspector opens on
        # The session's request store, read as requests are kept, and the page of the last one.
        self._inspector_lock = threading.Lock()
        self._inspector_store: StoredRequests | None = None
        self._inspector_ready: tuple[tuple[str, int], InspectorPage] | None = None
        self._approval_screens: dict[str, Any] = {}
        # ctrl+s / ctrl+r waiting for the session's plan, by kind: the dialog opens when it comes
        self._awaiting_plan: dict[str, Callable[[bool | None, str | None], None]] = {}
        self._last_escape: float | None = None  # an idle escape: a second one soon after rewinds
        self._awaiting_rewind = False  # the list was asked for here (not an earlier run's answer)
        self.startup_error: BaseException | None = None  # building the session failed (the app exits 2)
        self.exit_note: str | None = None  # one line said on stderr once the dashboard has closed
        self._listed_busy = False  # what the footer's bindings were last refreshed for
        self._unsubscribe_bridge: Callable[[], None] | None = None
        self.bridge: SessionBridge | None = None
        # The session as the dashboard shows it: the bridge folds each event in once. Built when
        # first asked for (``view``): its module imports the events (pydantic), which the first frame needs not.
        self._view: DashboardView | None = None
        self._session_stopped = False
        self.quitting = False  # exit() was called: the terminal driver need not wait for input
        # ctrl+g's choice: None follows the terminal's height, True/False is the user's and stays
        self._context_details: bool | None = None
        # Server-side compaction as the session last said: None where the provider has none
        self._server_compaction_on: bool | None = None
        # The clock ctrl+c's quit window is measured with (a test may give its own).
        self.clock: Callable[[], float] = time.monotonic
        self._last_ctrl_c: float | None = None

    # ------------------------------------------------------------------ layout

    def get_default_screen(self) -> Screen[Any]:
        return MainScreen(id="_default")

    def compose(self) -> Iterable[Any]:
        yield HeaderBar(id="header")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield Conversation(id="conversation", max_mounted=self._max_mounted)
                yield PromptBox(id="prompt", cursor_blink=self._cursor_blink)
            yield ToolOutputPanel(id="tool-panel")
        context_panel = ContextPanel(id="context-panel")
        # Folded or not from the start: a class changed once mounted restyles the panel and all in it.
        context_panel.folded = not self._context_details_shown()
        yield context_panel
        yield KeyFooter(FOOTER_RANKS, drawn_last=("quit",), id="footer")

    # The main widgets are looked up on the main screen, once: while a modal is
    # open, App.query_one would search the modal and find nothing.
    def _main(self, widget_type: type[Any]) -> Any:
        cache = self.__dict__.setdefault("_main_widgets", {})
        if widget_type not in cache:
            cache[widget_type] = self.screen_stack[0].query_one(widget_type)
        return cache[widget_type]

    @property
    def conversation(self) -> Conversation:
        return self._main(Conversation)  # type: ignore[no-any-return]

    @property
    def tool_panel(self) -> ToolOutputPanel:
        return self._main(ToolOutputPanel)  # type: ignore[no-any-return]

    @property
    def context_panel(self) -> ContextPanel:
        return self._main(ContextPanel)  # type: ignore[no-any-return]

    @property
    def header(self) -> HeaderBar:
        return self._main(HeaderBar)  # type: ignore[no-any-return]

    @property
    def prompt_box(self) -> PromptBox:
        return self._main(PromptBox)  # type: ignore[no-any-return]

    @property
    def view(self) -> "DashboardView":
        if self._view is None:
            from app.surfaces.view_model import DashboardView  # the events' models: after the first frame

            # The conversation's entries are the view model's: the conversation widget folds its
            # messages into them as it draws (it exists before the first frame; the view model after).
            self._view = DashboardView(conversation=self.conversation.records)
        return self._view

    @property
    def busy(self) -> bool:
        """The session is running a command (as its last state event says)."""
        return self._view is not None and self._view.busy  # no view yet: no event said it is busy

    @property
    def ready(self) -> bool:
        """The session exists (it is built after the first frame when given as a factory)."""
        return self.session is not None

    def on_mount(self) -> None:
        self._gc_thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *self._gc_thresholds[1:])
        self.conversation.border_title = "conversation"
        self.tool_panel.border_title = "tool output"
        self.context_panel.border_title = "context"
        self._fold_context_details()
        self.prompt_box.focus()
        if self._given_session is not None:
            self._follow_session(self._given_session)
        elif self._pick_session and self._resume_factory is not None:
            self.header.provider_label = "pick a session…"
            self._open_picker(self._resume_chosen_at_start)
        else:
            # Paint first: building the session (imports, the session on disk, the token
            # encoder) happens in a thread after the first frame. Prompts typed meanwhile wait.
            self.header.state = "starting"
            self.header.provider_label = "starting…"
            self.call_after_refresh(self._build_session)

    def _open_picker(self, chosen: "Callable[[str | None], None]") -> None:
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.session_picker import SessionPicker

        rows = self._list_sessions() if self._list_sessions is not None else []
        self.push_screen(SessionPicker(rows), chosen)

    def _resume_chosen_at_start(self, session_id: str | None) -> None:
        """--resume without an id: the chosen session is built as a new one would be; escape quits."""
        if session_id is None or self._resume_factory is None:
            self.exit_note = "no session resumed (tidegauge --resume ID opens one; `tidegauge sessions` lists them)"
            self.exit(return_code=0)
            return
        resume_factory = self._resume_factory
        self._session_factory = lambda: resume_factory(session_id)
        self.header.state = "starting"
        self.header.provider_label = "starting…"
        self.call_after_refresh(self._build_session)

    def _resume_chosen(self, session_id: str | None) -> None:
        """/resume: another session is opened in a fresh dashboard (this one closes first)."""
        if session_id is None:
            return
        if self.session is not None and session_id == self.session.snapshot().info.session_id:
            self.conversation.add_engine("info", f"session {session_id} is the one open")
            return
        self.resume_request = session_id
        self.exit(return_code=0)

    @work(thread=True, exclusive=True, group="session-build", exit_on_error=False)
    def _build_session(self) -> "SessionSurface":
        assert self._session_factory is not None
        session = self._session_factory()
        session.snapshot()  # its first context figures load the token encoder: here, off the UI loop
        import widgets.assistant_message  # noqa: F401  the first reply's Markdown, imported here too
        import app.kernel.commands  # noqa: F401  what a key press submits (deferred off the first frame)

        return session

    @on(Worker.StateChanged)
    def _on_worker(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "session-build":
            return
        if event.state == WorkerState.SUCCESS:
            session = event.worker.result
            assert session is not None  # a successful build returns the session
            self._follow_session(session)
        elif event.state in (WorkerState.ERROR, WorkerState.CANCELLED):
            self.startup_error = event.worker.error or RuntimeError("the session could not be built")
            self.exit(return_code=2)

    # Not ``_attach``: that name is Textual's own (MessagePump._attach), as ``batch`` was Widget's.
    def _follow_session(self, session: "SessionSurface") -> None:
        """Draw the session as it stands, then follow its events."""
        # The session's vocabulary (the events' pydantic models) is imported here, after the first frame.
        from app.surfaces.dashboard.bridge import SessionBridge
        from app.surfaces.view_model import catch_up

        bridge = SessionBridge(
            targets=[self.header, self.conversation, self.tool_panel, self.context_panel, self.prompt_box, self],
            deltas_target=self.conversation,
            view=self.view,
        )
        self.bridge = bridge
        # The envelope's and the Protocol's modules load with the session, after the first frame.
        from app.kernel.envelope import outside_log
        from app.kernel.protocol import HeldListener

        held = HeldListener(bridge)  # the events after the snapshot wait until it is drawn
        snapshot, self._unsubscribe_bridge = session.attach(held)
        bridge.replay([outside_log(event) for event in (snapshot.info, *snapshot.restored)])
        # This run's so far (start-up warnings, repairs, servers that failed, the conversation), with
        # what is still in force however long ago it was said (a queued prompt, an open approval).
        bridge.replay(catch_up(snapshot), restored=False)  # the conversation mounts its newest window only
        bridge.replay([outside_log(snapshot.context), outside_log(snapshot.state)])
        held.release()
        self.session = session
        waiting, self._waiting = self._waiting, []
        for command in waiting:
            session.submit(command)
        self.call_after_refresh(_freeze_what_start_up_built)  # start-up is over

    def exit(self, result: int | None = None, return_code: int = 0, message: Any = None) -> None:
        """Stop drawing the session and tell it to stop, then let Textual close.

        Textual's shutdown first waits for its input thread (up to ~0.2 s here), then
        removes the widgets: events the session kept sending meanwhile reached a
        conversation being removed ("MountError: Can't mount widget(s) before
        Conversation is mounted", exit code 1, on some quits). Stopping the session
        here also lets it wind down while Textual closes instead of after.
        """
        self.quitting = True
        if self._unsubscribe_bridge is not None:
            self._unsubscribe_bridge()
            self._unsubscribe_bridge = None
        self._stop_session()
        super().exit(result, return_code, message)

    def set_timer(self, delay: float, callback: Any = None, *, name: str | None = None, pause: bool = False) -> Timer:
        return late_still_fires(super().set_timer(delay, callback, name=name, pause=pause))

    def get_driver_class(self) -> "type[Driver]":
        """Textual's own driver, except on a Linux terminal: the one that quits without
        waiting ~0.2 s for its input thread (see terminal_driver)."""
        driver_class = super().get_driver_class()
        # Textual's Linux driver and ours load only on a Linux terminal, when the App starts.
        from textual.drivers.linux_driver import LinuxDriver

        if driver_class is LinuxDriver:
            # Ours only on a Linux terminal.
            from app.surfaces.dashboard.terminal_driver import QuickQuitDriver

            return QuickQuitDriver
        return driver_class

    def _stop_session(self) -> None:
        """Once: the session's loop closes soon after, and a command submitted to a closed
        loop raises ("Event loop is closed")."""
        if self.session is not None and not self._session_stopped:
            self._session_stopped = True
            self.session.submit(commands.Shutdown(now=True))

    async def on_unmount(self) -> None:
        if hasattr(self, "_gc_thresholds"):
            gc.set_threshold(*self._gc_thresholds)
        gc.unfreeze()
        self._stop_session()

    # ------------------------------------------------------------------ commands

    def submit(self, command: "Command") -> None:
        """To the session; before it exists, the command waits and a line says so."""
        if self.session is not None:
            self.session.submit(command)
            return
        self._waiting.append(command)
        # Only a command given before the session exists comes here: events (pydantic) stay off the first frame's path.
        from app.kernel.describe import describe
        from app.kernel.events import CommandQueuedEvent

        kind: Literal["prompt", "compact", "reset"] = (
            "prompt" if isinstance(command, commands.UserInput) else "compact" if isinstance(command, commands.Compact) else "reset")
        text = command.text if isinstance(command, commands.UserInput) else ""
        line = describe(CommandQueuedEvent(command=kind, position=len(self._waiting), waiting_for="start", text=text))
        if line is not None:
            self.conversation.add_engine(line.kind, line.text)

    # ------------------------------------------------------------------ approvals

    @on(ApprovalRequested)
    async def _on_approval_request(self, message: ApprovalRequested) -> None:
        request = message.event
        from widgets.approval_screen import ApprovalScreen  # modals: imported when first shown

        from app.kernel.describe import approval_choices, approval_question

        def answered(answer: "tuple[str, bool] | str | None") -> None:
            self._approval_screens.pop(request.request_id, None)
            if answer == "interrupt":  # escape in the modal stops the turn, as everywhere else
                self.submit(commands.Interrupt())
            elif isinstance(answer, tuple):
                decision, save = answer
                self.submit(commands.Approve(request.request_id, decision, save))  # type: ignore[arg-type]
            else:  # answered elsewhere, or gone
                self.submit(commands.Approve(request.request_id, "no"))

        screen = ApprovalScreen(request.name, dict(request.input), approval_choices(request),
                                question=approval_question(request))
        self._approval_screens[request.request_id] = screen
        await self.push_screen(screen, callback=answered)

    @on(ApprovalResolved)
    def _on_approval_resolved(self, message: ApprovalResolved) -> None:
        """Answered elsewhere or interrupted: the modal goes."""
        screen = self._approval_screens.pop(message.event.request_id, None)
        if screen is not None and screen.is_attached and self.screen is screen:
            screen.dismiss(None)

    @on(MemoryImportSaid)
    async def _on_memory_import(self, message: MemoryImportSaid) -> None:
        """A file outside the repository the session asks about: approve or decline, once."""
        said = message.event
        if said.action != "ask" or message.restored:  # an earlier run's question is not asked again
            return
        from widgets.import_approval_screen import ImportApprovalScreen  # modals: imported when first shown

        def answered(approve: bool | None) -> None:
            self.submit(commands.ApproveImport(said.path, bool(approve)))

        await self.push_screen(ImportApprovalScreen(said.path, said.importer, said.reason), callback=answered)

    @on(ElicitationSaid)
    async def _on_elicitation(self, message: ElicitationSaid) -> None:
        """An MCP server's form: shown until answered here, closed when it ends elsewhere
        (the server's call cancelled, an interrupt). Kept with the approval modals, by request id."""
        said = message.event
        from app.kernel.events import ElicitationResolvedEvent  # loaded by now: the session sent this

        if isinstance(said, ElicitationResolvedEvent):
            screen = self._approval_screens.pop(said.request_id, None)
            if screen is not None and screen.is_attached and self.screen is screen:
                screen.dismiss(None)
            return
        if message.restored:  # an earlier run's form: its server is long gone
            return
        from widgets.elicitation_screen import ElicitationScreen  # modals: imported when first shown

        def answered(answer: "tuple[str, dict[str, object]] | None") -> None:
            if self._approval_screens.pop(said.request_id, None) is None:
                return  # it ended elsewhere: the session has its answer already
            action, values = answer if answer is not None else ("cancel", {})
            self.submit(commands.AnswerElicitation(said.request_id, action, values))  # type: ignore[arg-type]

        screen = ElicitationScreen(said.server, said.message, list(said.fields))
        self._approval_screens[said.request_id] = screen
        await self.push_screen(screen, callback=answered)

    # ------------------------------------------------------------------ input

    def on_key(self, event: events.Key) -> None:
        """A printable key typed outside the prompt goes to the prompt (and focus with it),
        as in the agents people already use: typing is never lost to the region in focus."""
        if not event.is_printable or event.character is None or self.screen is not self.screen_stack[0]:
            return
        if isinstance(self.focused, Input):  # the prompt (or another text field) has it already
            return
        takes_key = getattr(self.focused, "takes_key", None)
        if takes_key is not None and takes_key(event.character):  # the output's search (/, n, N)
            return
        # Even a key the focused region binds: a region binds no printable key (restore is ctrl+t),
        # and a letter taken from a sentence is a sentence lost.
        event.stop()
        event.prevent_default()
        prompt = self.prompt_box
        prompt.focus()
        prompt.insert_text_at_cursor(event.character)

    @on(Input.Changed, "#prompt")
    def _on_typing(self, _event: Input.Changed) -> None:
        # A reply streaming meanwhile is redrawn less often for a moment, so a key's echo
        # seldom waits behind one of its frames (benchmark 3c).
        self.conversation.note_typing()

    @on(Input.Submitted, "#prompt")
    async def _on_prompt(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        prompt = self.prompt_box
        prompt.value = ""
        if not text:
            return
        prompt.remember(text)
        # whatever was sent, the user looks at the end of the conversation for its answer
        await self.conversation.jump_to_end()
        if text.startswith("/") and not text.startswith(commands.MCP_PROMPT_PREFIX):
            self._slash_command(text)
            return
        # /mcp__SERVER__PROMPT runs a server's prompt: the session checks it and says what was wrong
        self.submit(commands.UserInput(text))

    def _slash_command(self, text: str) -> None:
        command, _, rest = text.partition(" ")
        command = command.lower()
        rest = rest.strip()
        if command == "/compact":
            self.action_compact(rest or None)
        elif command == "/reset":
            self.action_reset()
        elif command in ("/usage", "/context", "/permissions"):
            if self.session is None:
                self.conversation.add_engine("info", "the agent is still starting: try again in a moment")
            else:
                self.session.submit(commands.Report(command.removeprefix("/")))  # type: ignore[arg-type]
        elif command == "/inspect":
            self.action_inspect()
        elif command == "/rewind":
            self.action_rewind()
        elif command == "/mcp":
            self.action_mcp()
        elif command == "/resume":
            if self._list_sessions is None:
                self.conversation.add_engine("info", "/resume: quit and run tidegauge --resume (tidegauge sessions lists them)")
            else:
                self._open_picker(self._resume_chosen)
        elif command == "/help":
            # laid out for the conversation's width now (an engine line's padding counted)
            self.conversation.add_engine("info", help_text(max(24, self.conversation.content_region.width - 2)))
            self.conversation.show_latest_from_its_top()
        else:
            self.conversation.add_engine("warning", f"unknown command {command} — /help lists them")

    @on(ToolCallList.RestoreAsked)
    def _on_restore_asked(self, message: ToolCallList.RestoreAsked) -> None:
        """Ask the session what restoring the call's cleared result costs; the dialog follows."""
        self.submit(commands.PreviewRestore(message.call_id))

    @on(ToolCallList.EvictAsked)
    def _on_evict_asked(self, message: ToolCallList.EvictAsked) -> None:
        """Ask the session what taking the result out frees; the dialog follows, and yes runs that plan."""
        if self.session is None:
            self.conversation.add_engine("info", "the agent is still starting: try again in a moment")
            return

        def confirmed(answer: bool | None, plan_id: str | None) -> None:
            if not answer:
                self.conversation.add_engine("info", "eviction cancelled")
                return
            self.submit(commands.EvictResult(message.call_id, plan_id=plan_id))

        self._confirm_with_forecast("evict", None, confirmed, call_id=message.call_id)

    @on(ToolCallList.PinAsked)
    def _on_pin_asked(self, message: ToolCallList.PinAsked) -> None:
        """Pin or unpin at once: nothing sent changes, and the line that follows says what it keeps."""
        self.submit(commands.PinResult(message.call_id, pin=message.pin))

    @on(RestorePreviewReady)
    def _on_restore_preview(self, message: RestorePreviewReady) -> None:
        preview = message.event
        if preview.reason or message.restored:
            return  # a refusal is an engine line in the conversation
        from widgets.confirm_screen import ConfirmScreen  # modals: imported when first shown

        from app.kernel.describe import restore_question

        def confirmed(answer: bool | None) -> None:
            if answer:
                self.submit(commands.RestoreResult(preview.call_id, plan_id=preview.plan_id or None))

        self.push_screen(ConfirmScreen(restore_question(preview)), callback=confirmed)

    @on(ToolCallLine.Selected)
    def _on_tool_line_selected(self, event: ToolCallLine.Selected) -> None:
        self.tool_panel.select_call(event.call_id)

    # ---------------------------------------------------------------- actions

    def action_compact(self, focus: str | None = None) -> None:
        """Compact the conversation into a summary, after a confirmation showing the plan that will run."""
        if self.session is None:  # nothing to forecast yet: it waits for the session, as before
            self.submit(commands.Compact(focus))
            return

        def confirmed(answer: bool | None, plan_id: str | None) -> None:
            if not answer:
                self.conversation.add_engine("info", "compaction cancelled")
                return
            self.submit(commands.Compact(focus, plan_id=plan_id))  # runs the plan shown, not a fresh guess

        self._confirm_with_forecast("compact", focus, confirmed)

    def action_reset(self) -> None:
        """Reset the conversation after a yes/no confirmation (with what it frees and costs)."""

        def confirmed(answer: bool | None, _plan_id: str | None) -> None:
            if not answer:
                self.conversation.add_engine("info", "reset cancelled")
                return
            self.submit(commands.Reset(plan_id=_plan_id))  # runs the plan shown, not a fresh guess

        self._confirm_with_forecast("reset", None, confirmed)

    def _confirm_with_forecast(self, kind: str, focus: str | None,
                               confirmed: Callable[[bool | None, str | None], None],
                               call_id: str | None = None) -> None:
        """Ask the session for its plan; the dialog opens with it (``_on_forecast``), or, when the
        plan does nothing, one line says so and no dialog opens. The session answers a preview at
        once, busy or not."""
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.confirm_screen import ForecastConfirmScreen

        if self.session is None:
            screen = ForecastConfirmScreen(kind)  # type: ignore[arg-type]
            self.push_screen(screen, callback=lambda answer: confirmed(answer, None))
            screen.set_detail("the agent is still starting: no figures yet")
            return
        self._awaiting_plan[kind] = confirmed  # a second ctrl+s before the answer asks once
        self.session.submit(commands.Preview(kind, focus, call_id))  # type: ignore[arg-type]

    @on(ForecastReady)
    def _on_forecast(self, message: ForecastReady) -> None:
        # A modal screen loads when it opens, off the first frame's path.
        from app.kernel.describe import forecast_text
        from widgets.confirm_screen import ForecastConfirmScreen

        event = message.event
        confirmed = self._awaiting_plan.pop(event.kind, None)
        if confirmed is None or any(isinstance(s, ForecastConfirmScreen) for s in self.screen_stack):
            return  # not asked for here, or a dialog is already open
        if event.action == "nothing":
            self.conversation.add_engine("info", forecast_text(event))
            return
        screen = ForecastConfirmScreen(event.kind, event.focus, forecast=event)
        self.push_screen(screen, callback=lambda answer: confirmed(answer, event.plan_id))

    def action_toggle_output(self) -> None:
        """Open or close the full output of the selected call (none selected: the latest cut one)."""
        result = self.tool_panel.toggle_expand()
        if result not in ("expanding", "collapsed"):
            self.notify(result, timeout=3)

    def action_toggle_context_details(self) -> None:
        """Show or hide the context chart and breakdown (they fold away on a short terminal)."""
        self._context_details = self.context_panel.folded
        self._fold_context_details()

    def _context_details_shown(self) -> bool:
        show = self._context_details
        return context_details_fit(self.size.height) if show is None else show

    def _fold_context_details(self) -> None:
        self.context_panel.folded = not self._context_details_shown()

    def action_scroll_conversation(self, direction: int) -> None:
        """Page keys from the prompt scroll the conversation."""
        conversation = self.conversation
        if direction < 0:
            conversation.scroll_page_up(animate=False)
        else:
            conversation.scroll_page_down(animate=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "rewind_escape":
            try:
                return not self.busy  # busy, escape interrupts
            except NoMatches:
                return False
        if action == "interrupt":
            try:
                return True if self.busy else False  # nothing to interrupt: escape is not offered
            except NoMatches:  # before the widgets exist
                return False
        return True

    @on(StateChanged)
    def _on_state(self, _message: StateChanged) -> None:
        # Escape (interrupt) is listed only while a turn runs. Only when that changes: every
        # refresh rebuilds the footer (~17 ms), and a turn sends a state event per step,
        # tool and stream (126 in the demo's summary: 2.2 s of the UI's time, benchmark 8).
        busy = self.busy
        if busy != self._listed_busy:
            self._listed_busy = busy
            if self.screen_stack:  # (a state handled while the App closes has no footer left to redraw)
                self.refresh_bindings()

    def action_interrupt(self) -> None:
        """Interrupt the running turn."""
        if self.busy:
            self.submit(commands.Interrupt())

    def action_rewind_escape(self) -> None:
        """An idle escape: the second within REWIND_WINDOW_S opens the rewind list."""
        now = self.clock()
        if self._last_escape is not None and now - self._last_escape <= REWIND_WINDOW_S:
            self._last_escape = None
            self.action_rewind()
            return
        self._last_escape = now
        self.prompt_box.say_briefly("escape again: rewind", REWIND_WINDOW_S)

    def action_rewind(self) -> None:
        """Ask the session for the messages it can go back to; the list opens with their plans."""
        if self.session is None:
            self.conversation.add_engine("info", "the agent is still starting: try again in a moment")
            return
        if self.busy:
            self.conversation.add_engine("info", "rewind: the agent is busy; escape interrupts the turn, then rewind")
            return
        self._awaiting_rewind = True
        self.session.submit(commands.PreviewRewind())

    @on(RewindPointsReady)
    def _on_rewind_points(self, message: RewindPointsReady) -> None:
        from widgets.rewind_screen import RewindAnswer, RewindScreen  # modals: imported when first shown

        event = message.event
        if message.restored or not self._awaiting_rewind or event.reason or not event.points:
            return  # an earlier run's list, or nothing to go back to (the conversation says so)
        self._awaiting_rewind = False
        if any(isinstance(s, RewindScreen) for s in self.screen_stack):
            return

        def chosen(answer: "RewindAnswer | None") -> None:
            if answer is not None:
                plan_id, files, overwrite = answer
                self.submit(commands.Rewind(plan_id, files=files, overwrite_changed=overwrite))  # the plan shown

        self.push_screen(RewindScreen(event), callback=chosen)

    @on(Rewound)
    def _on_rewound(self, message: Rewound) -> None:
        """The message rewound to goes back in the prompt, for editing."""
        event = message.event
        if message.restored or not event.ok:
            return
        prompt = self.prompt_box
        prompt.value = event.text
        prompt.cursor_position = len(event.text)
        prompt.focus()

    def action_interrupt_clear_or_quit(self) -> None:
        """ctrl+c: copy the prompt's selection if it has one; else a second ctrl+c within
        QUIT_WINDOW_S quits; else interrupt the running turn, or clear what the prompt holds."""
        prompt = self.prompt_box
        if prompt.selected_text:
            prompt.action_copy()
            return
        now = self.clock()
        if self._last_ctrl_c is not None and now - self._last_ctrl_c <= QUIT_WINDOW_S:
            self._last_ctrl_c = None
            self.exit(return_code=0)
            return
        self._last_ctrl_c = now
        if self.busy:
            self.submit(commands.Interrupt())
        elif prompt.value:
            prompt.value = ""
        prompt.say_briefly("ctrl+c again quits", QUIT_WINDOW_S)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Compact now", "Summarise the conversation (ctrl+s)", self.action_compact)
        yield SystemCommand("Reset conversation", "Clear the conversation after asking (ctrl+r)", self.action_reset)
        yield SystemCommand("Rewind…", "Back to just before one of your messages, with or without the files "
                            "(escape escape, /rewind)", self.action_rewind)
        # Each toggle is named by what it will do now, so the entry states the state it changes.
        panel = self.tool_panel
        if panel.expanded or panel.loading or panel.full_view:
            yield SystemCommand("Close the full output", "Back to the tool list (ctrl+o)", self.action_toggle_output)
        else:
            yield SystemCommand("Open the full output", "Of the selected call, else the latest cut one (ctrl+o)",
                                self.action_toggle_output)
        if self.busy:  # offered only while a turn runs: idle, there is nothing to stop
            yield SystemCommand("Interrupt", "Stop the running turn (escape, ctrl+c)", self.action_interrupt)
        shown = not self.context_panel.folded
        yield SystemCommand(f"{'Hide' if shown else 'Show'} context chart and breakdown",
                            f"They are {'shown' if shown else 'hidden'} now; the history chart and the breakdown "
                            "by part (ctrl+g)", self.action_toggle_context_details)
        # Not named "servers": typing "server" finds the server-side compaction switch first
        yield SystemCommand("MCP: state, reconnect, login, logout",
                            "Each MCP server's state, tools, schema tokens and auth (typed: /mcp)", self.action_mcp)
        yield SystemCommand("What-if: overlay policy…", "Replay this session under another window and auto-compact"
                            " line; the chart overlays the curve", self.action_whatif)
        # One toggle that says the state it is in, offered only where the provider can compact
        # on its server (Responses, Anthropic): the session's info says which, its events the state.
        on = self._server_compaction_on
        if on is not None:
            yield SystemCommand(
                f"Server-side compaction: {'on' if on else 'off'} (turn {'off' if on else 'on'})",
                "tidegauge compacts again, auditably, as usual" if on else
                "the provider compacts at the auto-compact line; tidegauge's own auto-compaction stands down",
                lambda: self._switch_server_compaction(not on))

    @on(RequestRecorded)
    def _on_request_recorded(self, message: RequestRecorded) -> None:
        self._last_request = message.event
        if not message.restored:  # an earlier run's requests: read when the inspector opens
            self._prepare_inspector(message.event)

    @work(thread=True, group="inspector", exit_on_error=False)
    def _prepare_inspector(self, recorded: "RequestRecordedEvent") -> None:
        """The inspector's page for the request just kept, made off the UI loop (only what was
        appended to the store is read), so ctrl+n shows it at once."""
        try:
            self._inspector_page_for(recorded)
        except OSError:
            pass  # said when the inspector is opened

    def _inspector_page_for(self, recorded: "RequestRecordedEvent") -> "InspectorPage":
        # The inspector's store and page load when it opens, off the first frame's path.
        from pathlib import Path

        from app.kernel.request_store import StoredRequests
        from app.surfaces.inspect_output import inspector_page

        with self._inspector_lock:
            key = (recorded.store, recorded.request)
            ready = self._inspector_ready
            if ready is not None and ready[0] == key:
                return ready[1]
            folder = Path(recorded.store)
            stored = self._inspector_store
            if stored is None or stored.folder != folder:
                stored = self._inspector_store = StoredRequests(folder)
            stored.refresh()
            if stored.count == 0:
                raise OSError(f"no request kept in {folder}")
            page = inspector_page(folder.parent.name, stored, min(recorded.request, stored.count))
            self._inspector_ready = (key, page)
            return page

    def action_inspect(self) -> None:
        """The last request as sent, part by part, with its diff: read from the session's store."""
        recorded = self._last_request
        if recorded is None:
            self.conversation.add_engine("info", "no request sent yet: the inspector shows the last one")
            return
        from widgets.request_inspector import RequestInspectorScreen  # modals: imported when first shown

        try:
            page = self._inspector_page_for(recorded)
        except OSError as err:
            self.conversation.add_engine("warning", f"the inspector cannot read the session's requests: {err}")
            return
        self.push_screen(RequestInspectorScreen(page))

    @on(SessionStarted)
    def _on_session_started(self, message: SessionStarted) -> None:
        self._server_compaction_on = message.event.server_compaction

    @on(EngineSaid)
    def _on_engine_said(self, message: EngineSaid) -> None:
        event = message.event
        from app.kernel.events import McpServerEvent, ServerCompactionEvent  # loaded by now: the session sent this

        if isinstance(event, ServerCompactionEvent) and self._server_compaction_on is not None:
            self._server_compaction_on = event.on  # the state now, switched or refused
        elif isinstance(event, McpServerEvent) and self.session is not None and not message.restored:
            self._refresh_mcp_view()

    def action_whatif(self) -> None:
        """Ask for a window and an auto-compact fraction; the session replays its transcript with them."""
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.whatif_screen import WhatIfScreen

        def chosen(answer: tuple[int, float] | None) -> None:
            if answer is not None:
                self.submit(commands.WhatIf(window=answer[0], auto_compact=answer[1]))

        last = self.query_one(ContextPanel).last_context
        self.push_screen(WhatIfScreen(last.thresholds.window if last is not None else None), chosen)

    def _switch_server_compaction(self, on: bool) -> None:
        if self.session is None:
            self.conversation.add_engine("info", "the agent is still starting: try again in a moment")
        else:
            self.session.submit(commands.ServerCompaction(on))

    # ------------------------------------------------------------------ /mcp and re-authorization

    def action_mcp(self) -> None:
        """The MCP servers as the session last said, asked again: the view redraws when it answers."""
        from widgets.mcp_screen import McpScreen  # modals: imported when first shown

        if not any(isinstance(screen, McpScreen) for screen in self.screen_stack):
            self.push_screen(McpScreen(self.view.mcp_status))
        if self.session is None:
            self.conversation.add_engine("info", "the agent is still starting: try /mcp again in a moment")
            return
        self.session.submit(commands.ManageMcpServer("status"))

    def _refresh_mcp_view(self) -> None:
        """A server started, failed or stopped while /mcp is open: its rows are asked for again."""
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.mcp_screen import McpScreen

        if self.session is not None and any(isinstance(screen, McpScreen) for screen in self.screen_stack):
            self.session.submit(commands.ManageMcpServer("status"))

    def _tell_mcp_view(self, said: Any) -> None:
        """A login's progress under /mcp's list too (the consent address above all): the view covers
        the conversation that says it."""
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.mcp_screen import McpScreen

        from app.kernel.describe import describe

        line = describe(said)
        for screen in self.screen_stack:
            if isinstance(screen, McpScreen) and line is not None:
                screen.say(line.text)

    @on(McpStatusReady)
    def _on_mcp_status(self, _message: McpStatusReady) -> None:
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.mcp_screen import McpScreen

        for screen in self.screen_stack:
            if isinstance(screen, McpScreen):
                screen.show(self.view.mcp_status)

    def on_mcp_screen_action_asked(self, message: Any) -> None:
        """A key in the /mcp view: the session does the work (``ManageMcpServer``)."""
        self.submit(commands.ManageMcpServer(message.action, message.server))

    @on(McpAuthSaid)
    async def _on_mcp_auth(self, message: McpAuthSaid) -> None:
        """A tool call refused for want of scope: log in again now? Yes runs the login (the browser
        opens) and the call is sent again; no gives the call its refusal."""
        said = message.event
        if message.restored:
            return
        if said.status != "offer":
            self._tell_mcp_view(said)
            return
        # A modal screen loads when it opens, off the first frame's path.
        from widgets.confirm_screen import ConfirmScreen

        from app.kernel.describe import reauthorize_question

        def answered(answer: bool | None) -> None:
            if self._approval_screens.pop(said.request_id, None) is not None:
                self.submit(commands.Approve(said.request_id, "yes" if answer else "no"))

        screen = ConfirmScreen(reauthorize_question(said))
        screen.default_answer = "yes"
        self._approval_screens[said.request_id] = screen
        await self.push_screen(screen, callback=answered)

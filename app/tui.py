"""The full-screen dashboard (the only module in app/ that imports textual).

The agent runs in a Textual worker on the app's event loop. It reaches the
widgets only through messages: ``agent.emit`` posts an ``AgentEventMessage``
and the handlers below update the widgets. Approval of tools that change
things is a modal whose answer comes back to the worker through a Future.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

from textual import on, work
from textual._styles_cache import StylesCache
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input
from textual.worker import Worker, WorkerState

import styles
from widgets.context_panel import ContextPanel
from widgets.conversation import Conversation
from widgets.gauge_bar import human_tokens
from widgets.header_bar import HeaderBar
from widgets.prompt_box import SLASH_COMMANDS, PromptBox
from widgets.tool_call_line import ToolCallInfo, ToolCallLine
from widgets.tool_output_panel import ToolOutputPanel

if TYPE_CHECKING:  # the agent core never imports textual; we only need its shape
    from app import events as ev
    from app.agent import Agent
    from app.config import Settings
    from app.messages import ToolUseBlock

Approval = Literal["yes", "always", "no"]
ApprovalAnswer = Literal["yes", "always", "no", "interrupt"]  # what the approval modal dismisses with
CSS_FILE = Path(styles.__file__).parent / "tidegauge.tcss"

HELP_TEXT = "\n".join(
    [
        "commands:",
        *(f"  {name:<9} {about}" for name, about in SLASH_COMMANDS.items()),
        "keys:",
        "  ctrl+s   compact now          ctrl+r   reset (asks first)",
        "  ctrl+o   expand/collapse the selected tool output",
        "  escape   interrupt the running turn    ctrl+q   quit",
        "  tab      next region          ↑/↓      move in the tool list, prompt history",
    ]
)


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
    gc.collect()
    gc.freeze()


def _release_styles_of_removed_widgets() -> None:
    """textual 8.2.8 (Textualize/textual#6665): ``StylesCache.get_inner_outer`` is an
    ``lru_cache`` on a method, so it keeps up to 1,024 removed widgets' render caches
    (and their strips) alive. The dashboard removes widgets all the time (pruned
    conversation items, parked reply segments), so the cache is emptied now and then.
    """
    cached = getattr(StylesCache, "get_inner_outer", None)
    clear = getattr(cached, "cache_clear", None)
    if clear is not None:
        clear()


@dataclass
class AgentEventMessage(Message):
    """One engine event, on its way from the agent's worker to the widgets."""

    event: Any  # app.events.Event


class DeltaBatch(Message):
    """Text (or thinking) deltas that arrived in a row, on their way to the conversation."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.texts: list[str] = []


@dataclass
class _Action:
    kind: Literal["prompt", "compact", "reset"]
    arg: str | None = None


class TidegaugeApp(App[int]):
    """Conversation, tool output and the live context gauge around one Agent."""

    CSS_PATH = str(CSS_FILE)
    TITLE = "tidegauge"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("ctrl+s", "compact", "Compact"),
        Binding("ctrl+r", "reset", "Reset"),
        Binding("ctrl+o", "toggle_output", "Expand output"),
        Binding("escape", "interrupt", "Interrupt"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        agent: "Agent | None" = None,
        *,
        agent_factory: "Callable[[], Agent] | None" = None,
        auto_approve: bool = False,
        cwd_display: str | None = None,
        session_display: str | None = None,
        transcript_path: str | None = None,
        max_mounted: int = 200,
        cursor_blink: bool = True,
    ) -> None:
        super().__init__()
        if agent is None and agent_factory is None:
            raise ValueError("TidegaugeApp needs an agent or an agent_factory")
        self._agent: Agent | None = agent
        self._agent_factory = agent_factory
        self.auto_approve = auto_approve
        self._cwd_display = cwd_display
        self._session_display = session_display
        self._transcript_path = transcript_path
        self._max_mounted = max_mounted
        self._cursor_blink = cursor_blink
        self._queue: list[_Action] = []
        self._agent_worker: Worker | None = None
        self._always_allowed: set[str] = set()
        self._last_context: ev.ContextEvent | None = None
        self._tool_calls: dict[str, ToolCallInfo] = {}
        self._tools_this_turn = 0
        self._echoed_prompt: str | None = None
        self._loop_thread = threading.get_ident()
        self._typed_line_drawn = False
        self._delta_batch: DeltaBatch | None = None  # the batch still taking deltas
        self._prune_point_pending = False
        self.startup_error: BaseException | None = None  # building the agent failed (the app exits 2)

    # ------------------------------------------------------------------ layout

    def compose(self):
        yield HeaderBar(id="header")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield Conversation(
                    id="conversation",
                    max_mounted=self._max_mounted,
                    transcript_path=self._transcript_path,
                )
                yield PromptBox(id="prompt", cursor_blink=self._cursor_blink)
            yield ToolOutputPanel(id="tool-panel")
        yield ContextPanel(id="context-panel")
        yield Footer()

    @property
    def agent(self) -> "Agent":
        assert self._agent is not None
        return self._agent

    # The main widgets are looked up on the main screen, once: while a modal is
    # open, App.query_one would search the modal and find nothing.
    def _main(self, widget_type):
        cache = self.__dict__.setdefault("_main_widgets", {})
        if widget_type not in cache:
            cache[widget_type] = self.screen_stack[0].query_one(widget_type)
        return cache[widget_type]

    @property
    def conversation(self) -> Conversation:
        return self._main(Conversation)

    @property
    def tool_panel(self) -> ToolOutputPanel:
        return self._main(ToolOutputPanel)

    @property
    def context_panel(self) -> ContextPanel:
        return self._main(ContextPanel)

    @property
    def header(self) -> HeaderBar:
        return self._main(HeaderBar)

    @property
    def prompt_box(self) -> PromptBox:
        return self._main(PromptBox)

    @property
    def ready(self) -> bool:
        """The agent exists (it is built after the first frame when given as a factory)."""
        return self._agent is not None

    @property
    def busy(self) -> bool:
        return self._agent_worker is not None and not self._agent_worker.is_finished

    def on_mount(self) -> None:
        self._loop_thread = threading.get_ident()
        self._gc_thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *self._gc_thresholds[1:])
        self.set_interval(2.0, _release_styles_of_removed_widgets)
        self.conversation.border_title = "conversation"
        self.tool_panel.border_title = "tool output"
        self.context_panel.border_title = "context"
        self.prompt_box.focus()
        if self._agent is not None:
            self._attach_agent(self._agent, self._agent.context_event())
        else:
            # Paint first: building the agent (imports, the session on disk) and its first
            # context figures (the token encoder, ~250 ms) happen in a thread after the
            # first frame. Prompts typed meanwhile are queued.
            self.header.state = "starting"
            self.header.provider_label = "starting…"
            self.call_after_refresh(self._build_agent)

    @work(thread=True, exclusive=True, group="agent-build", exit_on_error=False)
    def _build_agent(self) -> "tuple[Agent, ev.ContextEvent]":
        assert self._agent_factory is not None
        agent = self._agent_factory()
        first_context = agent.context_event()  # loads the token encoder, off the event loop
        import widgets.assistant_message  # noqa: F401  the first reply's Markdown, imported here too

        return agent, first_context

    def _agent_built(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.SUCCESS:
            agent, first_context = event.worker.result
            self._agent = agent
            self.header.state = "idle"
            self._attach_agent(agent, first_context)
            if self._queue and not self.busy:
                self._agent_worker = self._run_action(self._queue.pop(0))
        elif event.state in (WorkerState.ERROR, WorkerState.CANCELLED):
            self.startup_error = event.worker.error or RuntimeError("the agent could not be built")
            self.exit(return_code=2)

    def _attach_agent(self, agent: "Agent", first_context: "ev.ContextEvent") -> None:
        agent.emit = self._emit
        if not self.auto_approve:
            agent.approver = self._approve
        if self._transcript_path is None:
            path = getattr(agent, "transcript_path", None) or getattr(agent, "session_dir", None)
            if path is not None:
                self.conversation.transcript_path = str(path)
        header = self.header
        header.provider_label = agent.provider_label
        header.cwd = self._cwd_display if self._cwd_display is not None else str(agent.workspace)
        header.session_id = self._session_display if self._session_display is not None else agent.session_id
        header.max_steps = agent.max_steps
        for event in agent.restored_events():
            self._restore(event)
        self._apply(first_context)
        if agent.is_demo:
            self.conversation.add_engine(
                "info",
                "demo (scripted model): no API key is configured, so a scripted model drives real tools. "
                "Try: find errors in app.log · summarize the project · flood",
            )
        self.call_after_refresh(_freeze_what_start_up_built)  # start-up is over

    async def on_unmount(self) -> None:
        _release_styles_of_removed_widgets()  # ours, all removed now
        if hasattr(self, "_gc_thresholds"):
            gc.set_threshold(*self._gc_thresholds)
        gc.unfreeze()
        if self._agent is not None:
            try:
                await self._agent.aclose()
            except Exception:  # closing must never turn a clean quit into a traceback
                pass

    # ------------------------------------------------------------ agent → UI

    def _emit(self, event: Any) -> None:
        """agent.emit: turn an engine event into a message (safe from any thread)."""
        if threading.get_ident() != self._loop_thread:
            self.call_from_thread(self._emit, event)
            return
        kind = event.type
        if kind in ("text_delta", "thinking_delta"):
            # Deltas of one kind in a row share one message: a fast stream costs a list
            # append per delta, not a message dispatch (the widgets batch their own work).
            batch = self._delta_batch
            if batch is None or batch.kind != kind:
                batch = self._delta_batch = DeltaBatch(kind)
                self.post_message(batch)
            batch.texts.append(event.text)
            return
        self._delta_batch = None  # sealed: deltas after this event come after it on screen
        self.post_message(AgentEventMessage(event))

    def on_delta_batch(self, batch: DeltaBatch) -> None:
        if self._delta_batch is batch:
            self._delta_batch = None  # handled: the next delta starts a new batch
        text = "".join(batch.texts)
        if batch.kind == "text_delta":
            self.conversation.append_assistant(text)
        else:
            self.conversation.append_thinking(text)

    async def on_agent_event_message(self, message: AgentEventMessage) -> None:
        await self._apply_async(message.event)

    # Events arrive once the agent exists: app.events (pydantic models) is imported
    # then, after the first frame, not with this module.

    def _restore(self, event: Any) -> None:
        """Replay a resumed session's events (no streaming)."""
        from app import events as ev
        if isinstance(event, (ev.TextDeltaEvent, ev.ThinkingDeltaEvent, ev.StateEvent)):
            return
        if isinstance(event, ev.UserMessageEvent):
            self.conversation.add_user(event.text)
            return
        if isinstance(event, ev.AssistantMessageEvent):
            if event.text:
                self.conversation.add_assistant_text(event.text)
            return
        self._apply(event)

    async def _apply_async(self, event: Any) -> None:
        from app import events as ev
        conversation = self.conversation
        if isinstance(event, ev.AssistantMessageEvent):  # (deltas come as DeltaBatch messages)
            if not conversation.streaming_assistant and event.text:
                conversation.add_assistant_text(event.text)
            await conversation.end_assistant()
        else:
            self._apply(event)

    def _apply(self, event: Any) -> None:
        from app import events as ev
        # The engine follows some typed events with a NoticeEvent saying the same thing;
        # the typed event already drew its styled line, so that notice is skipped.
        follows_typed, self._typed_line_drawn = self._typed_line_drawn, False
        if isinstance(event, ev.NoticeEvent) and follows_typed:
            return
        if isinstance(event, (ev.CompactionEvent, ev.ResultCutEvent)):
            self._typed_line_drawn = True
        self._apply_event(event)

    def _apply_event(self, event: Any) -> None:  # noqa: C901 - one branch per event type
        from app import events as ev
        conversation, panel, header = self.conversation, self.tool_panel, self.header
        if isinstance(event, ev.UserMessageEvent):
            if self._echoed_prompt is not None and event.text == self._echoed_prompt:
                self._echoed_prompt = None  # already shown when the user pressed Enter
            else:
                conversation.add_user(event.text)
        elif isinstance(event, ev.ToolStartEvent):
            self._tools_this_turn += 1
            header.tool_number = self._tools_this_turn
            info = ToolCallInfo(id=event.id, name=event.name, summary=event.summary)
            self._tool_calls[event.id] = info
            conversation.add_tool(info)
            panel.add_call(info)
        elif isinstance(event, ev.ToolResultEvent):
            info = self._tool_calls.get(event.id) or ToolCallInfo(id=event.id, name=event.name, summary="")
            info.status = "error" if event.is_error else "ok"
            if event.is_error and "interrupted" in event.content[:200].lower():
                info.status = "interrupted"
            info.truncated = event.truncated
            info.original_chars = event.original_chars
            info.kept_chars = event.kept_chars
            info.duration_ms = event.duration_ms
            info.full_output_path = event.full_output_path
            self._tool_calls[event.id] = info
            conversation.update_tool(info)
            panel.update_call(info, event.content)
        elif isinstance(event, ev.ResultCutEvent):
            info = self._tool_calls.get(event.id)
            if info is not None:
                info.cut_before_send = True
                info.truncated = True
                info.kept_chars = event.kept_chars
                info.full_output_path = event.full_output_path or info.full_output_path
                conversation.update_tool(info)
                panel.update_call(info)
            conversation.add_engine(
                "cut",
                f"result of {event.name} cut before sending: {event.original_chars:,} → {event.kept_chars:,}"
                f" characters (it alone would cross the blocking line); full output at {event.full_output_path}",
            )
        elif isinstance(event, ev.UsageEvent):
            if event.agent == "compact":
                self.context_panel.add_compaction_usage(
                    (event.input_tokens or 0) + (event.cache_read_tokens or 0) + (event.cache_write_tokens or 0),
                    event.output_tokens or 0,
                )
            else:
                tokens = event.context_tokens
                if tokens is None and self._last_context is not None:
                    tokens = self._last_context.projected_tokens
                self.context_panel.add_point(tokens or 0, "call")
        elif isinstance(event, ev.ContextEvent):
            self._last_context = event
            self.context_panel.update_context(event)
            if self._prune_point_pending:  # the drop of a micro-compaction, as measured after it
                self._prune_point_pending = False
                self.context_panel.add_point(event.projected_tokens, "prune")
        elif isinstance(event, ev.CompactionEvent):
            self._apply_compaction(event)
        elif isinstance(event, ev.ResetEvent):
            self._prune_point_pending = True  # the drop, as the ContextEvent after the reset measures it
        elif isinstance(event, ev.MicroCompactionEvent):
            why = "an hour since the last reply" if event.trigger == "time" else "context crossed the warning line"
            conversation.add_engine(
                "micro",
                f"micro-compaction ({why}): cleared {event.results_cleared} old tool results,"
                f" freed ~{human_tokens(event.tokens_freed)} tokens (full outputs stay on disk)",
            )
            self._prune_point_pending = True
        elif isinstance(event, ev.WarningCrossedEvent):
            conversation.add_engine(
                "warning",
                f"context crossed the warning line: ~{human_tokens(event.projected_tokens)}"
                f" ≥ {human_tokens(event.warning_line)}",
            )
        elif isinstance(event, ev.BreakerEvent):
            header.breaker_paused = event.paused
            if event.paused:
                conversation.add_engine(
                    "breaker",
                    f"auto-compaction paused after {event.failures} failures in a row (circuit breaker);"
                    " one trial after the cooldown, ctrl+s always runs",
                )
            else:
                conversation.add_engine("info", "auto-compaction resumed")
        elif isinstance(event, ev.RetryEvent):
            conversation.add_engine(
                "retry",
                f"retrying in {event.delay_s:.1f}s (attempt {event.attempt} of {event.max_attempts}): {event.reason}",
            )
        elif isinstance(event, ev.StateEvent):
            if event.state == "idle" or header.state == "idle":
                self._tools_this_turn = 0 if event.state == "idle" else self._tools_this_turn
            header.state = event.state
            header.detail = event.detail
            header.step = event.step
            header.max_steps = event.max_steps
        elif isinstance(event, ev.NoticeEvent):
            kind = event.level
            if "breaker" in event.text or "auto-compaction paused" in event.text:
                kind = "breaker"
            elif event.text.startswith("interrupted by the user"):
                kind = "interrupted"
            conversation.add_engine(kind, event.text)
        elif isinstance(event, ev.ErrorEvent):
            conversation.add_engine("error", event.message)
        elif isinstance(event, ev.ResultEvent):
            conversation.end_turn_streams()
            if event.stop_reason == "interrupted" and not self._interrupt_shown():
                conversation.add_engine("interrupted", "interrupted by the user")
            elif event.stop_reason == "max_steps":
                conversation.add_engine("warning", f"step limit reached ({event.steps} steps)")

    def _interrupt_shown(self) -> bool:
        """Did the agent already say so (its notice comes before the result)?"""
        items = self.conversation.items
        return bool(items) and items[-1].kind == "engine" and items[-1].engine_kind == "interrupted"

    def _apply_compaction(self, event: ev.CompactionEvent) -> None:
        conversation = self.conversation
        if not event.ok:
            conversation.add_engine(
                "compaction-failed",
                f"compaction ({event.trigger}) failed: {event.reason or 'unknown reason'} — history unchanged",
            )
            return
        if event.trigger == "reactive":
            conversation.add_engine(
                "overflow",
                f"overflow recovery: the request was too long; dropped the oldest rounds,"
                f" {event.messages_before} → {event.messages_after} messages,"
                f" ~{human_tokens(event.tokens_before)} → ~{human_tokens(event.tokens_after)} tokens",
            )
        else:
            label = {"auto": "auto", "manual": "manual", "fallback": "fallback (extractive)"}[event.trigger]
            conversation.add_engine(
                "compaction",
                f"context compacted: {event.messages_before} messages → 1 summary"
                f" ({label}, ~{human_tokens(event.tokens_before)} → ~{human_tokens(event.tokens_after)} tokens)",
            )
        self.context_panel.add_point(event.tokens_after, "compaction")

    # ---------------------------------------------------------------- running

    def _start(self, action: _Action) -> None:
        what = "prompt" if action.kind == "prompt" else action.kind
        if not self.ready:
            self._queue.append(action)
            self.notify(f"queued: the {what} runs as soon as the agent is ready", timeout=4)
            return
        if self.busy:
            self._queue.append(action)
            self.notify(f"queued: the {what} runs when the current turn ends (escape interrupts)", timeout=4)
            return
        self._agent_worker = self._run_action(action)

    @work(exclusive=True, group="agent", exit_on_error=False)
    async def _run_action(self, action: _Action) -> None:
        agent = self.agent
        if action.kind == "prompt":
            self._tools_this_turn = 0
            await agent.run_turn(action.arg or "")
        elif action.kind == "compact":
            await agent.compact(action.arg)
        elif action.kind == "reset":
            agent.reset()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "agent-build":
            self._agent_built(event)
            return
        if event.worker is not self._agent_worker:
            return
        if event.state not in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            return
        self._agent_worker = None
        conversation = self.conversation
        conversation.end_turn_streams()
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            conversation.add_engine("error", f"{type(error).__name__}: {error}")
        self.header.state = "idle"
        self.header.detail = ""
        if self._queue:
            self._agent_worker = self._run_action(self._queue.pop(0))

    async def _approve(self, block: "ToolUseBlock") -> Approval:
        """agent.approver: ask in a modal; the answer comes back through a Future.

        Escape in the modal interrupts the turn (the worker is cancelled and the
        cancellation lands while we wait here), as escape does on the main screen.
        """
        if block.name in self._always_allowed:
            return "yes"
        future: asyncio.Future[ApprovalAnswer] = asyncio.get_running_loop().create_future()

        def answered(result: ApprovalAnswer | None) -> None:
            if not future.done():
                future.set_result(result or "no")

        from widgets.approval_screen import ApprovalScreen  # modals: imported when first shown

        screen = ApprovalScreen(block.name, dict(block.input))
        previous_state = self.header.state
        self.header.state = "waiting_approval"
        await self.push_screen(screen, callback=answered)
        try:
            answer = await future
            if answer == "interrupt":
                self.action_interrupt()  # cancels this worker: the next await raises CancelledError
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            if screen.is_attached and self.screen is screen:
                screen.dismiss("no")
            raise
        finally:
            if self.header.state == "waiting_approval":
                self.header.state = previous_state if previous_state != "waiting_approval" else "tool"
        if answer == "always":
            self._always_allowed.add(block.name)
        return answer  # type: ignore[return-value]  "interrupt" never gets here

    # ------------------------------------------------------------------ input

    @on(Input.Submitted, "#prompt")
    async def _on_prompt(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        prompt = self.prompt_box
        prompt.value = ""
        if not text:
            return
        prompt.remember(text)
        if text.startswith("/"):
            self._slash_command(text)
            return
        await self.conversation.jump_to_end()
        self.conversation.add_user(text)
        self._echoed_prompt = text
        self._start(_Action("prompt", text))

    def _slash_command(self, text: str) -> None:
        command, _, rest = text.partition(" ")
        command = command.lower()
        rest = rest.strip()
        if command == "/compact":
            self._start(_Action("compact", rest or None))
        elif command == "/reset":
            self.action_reset()
        elif command in ("/usage", "/context") and not self.ready:
            self.conversation.add_engine("info", "the agent is still starting: try again in a moment")
        elif command == "/usage":
            self.conversation.add_engine("info", self.agent.usage_report())
        elif command == "/context":
            self.conversation.add_engine("info", self.agent.context_report())
        elif command == "/help":
            self.conversation.add_engine("info", HELP_TEXT)
        else:
            self.conversation.add_engine("warning", f"unknown command {command} — /help lists them")

    @on(ToolCallLine.Selected)
    def _on_tool_line_selected(self, event: ToolCallLine.Selected) -> None:
        self.tool_panel.select_call(event.call_id)

    # ---------------------------------------------------------------- actions

    def action_compact(self) -> None:
        """Compact the conversation into a summary now."""
        self._start(_Action("compact", None))

    def action_reset(self) -> None:
        """Reset the conversation after a yes/no confirmation."""

        def confirmed(answer: bool | None) -> None:
            if not answer:
                self.conversation.add_engine("info", "reset cancelled")
                return
            if not self.ready or self.busy:  # the reset replaces whatever was queued
                self._queue.clear()
                self._queue.append(_Action("reset"))
                if self._agent_worker is not None and self.busy:
                    self._agent_worker.cancel()
            else:
                self._agent_worker = self._run_action(_Action("reset"))

        from widgets.confirm_screen import ConfirmScreen

        self.push_screen(
            ConfirmScreen("Reset the conversation? The model forgets it; the transcript stays on disk."),
            callback=confirmed,
        )

    def action_toggle_output(self) -> None:
        """Expand or collapse the selected tool output."""
        result = self.tool_panel.toggle_expand()
        if result not in ("expanding", "collapsed"):
            self.notify(result, timeout=3)

    def action_interrupt(self) -> None:
        """Interrupt the running turn."""
        if not self.busy:
            return
        self._queue.clear()
        self.header.state = "interrupting"
        assert self._agent_worker is not None
        self._agent_worker.cancel()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Compact now", "Summarise the conversation (ctrl+s)", self.action_compact)
        yield SystemCommand("Reset conversation", "Clear the conversation after asking (ctrl+r)", self.action_reset)
        yield SystemCommand("Expand / collapse tool output", "Full output of the selected call (ctrl+o)", self.action_toggle_output)
        yield SystemCommand("Interrupt", "Stop the running turn (escape)", self.action_interrupt)


def run_dashboard(load_settings: "Callable[[], Settings]", resume: str | None = None,
                  continue_latest: bool = False) -> int:
    """Open the dashboard (the CLI calls this when there is no -p). Returns the exit code.

    A new session paints first: the settings (pydantic and pydantic-settings take
    ~150 ms to import here), the agent and its first context figures are all
    loaded in a thread after the first frame (see ``TidegaugeApp.on_mount``); a
    bad setting or a missing key then closes the dashboard with one line on
    stderr. Resuming a session builds first, so a bad session id is one line on
    stderr without the screen opening.
    """
    import sys

    def build(settings: "Settings") -> "Agent":
        from app.runtime import build_agent

        return build_agent(settings, resume=resume, continue_latest=continue_latest)

    if resume or continue_latest:
        try:
            settings = load_settings()
            agent = build(settings)
        except Exception as error:  # a bad setting or session id: one line, no traceback
            print(f"tidegauge: {error}", file=sys.stderr)
            return 2
        app = TidegaugeApp(agent, auto_approve=bool(settings.yes))
    else:
        # --yes needs no flag here: the agent's own options skip the approver.
        app = TidegaugeApp(agent_factory=lambda: build(load_settings()))
    app.run()
    if app.startup_error is not None:
        print(f"tidegauge: {app.startup_error}", file=sys.stderr)
        return 2
    return app.return_code or 0

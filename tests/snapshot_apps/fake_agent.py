"""The dashboard tests' session: the real one, with a scripted model.

``FakeSession`` is ``app.session.agent_session.AgentSession`` as ``build_session`` wires it for the
demo (engine, agent, tools, permissions, transcript), its provider swapped for ``ScriptedProvider``,
which plays a test's script. So the queue, interrupts, resets, plans and their forecasts, and the
figures of the gauge are the real core's. Steps of a turn: ``Text`` (a reply streamed in deltas),
``Gate`` (wait until the test opens it: keeps a turn running), ``Ask`` (a tool call: the real agent
asks for approval where its rules say to, then runs the real tool) and events (said through the
agent's emit as they come: what the script says happened beside the model).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from app.agent.server_context import switch_server_compaction
from app.context.compaction import is_summary_message
from app.context.engine import EngineConfig
from app.context.thresholds import compute_thresholds
from app.context.thresholds import level as context_level
from app.context.tokens import count_tokens
from app.demo.provider import DemoProvider
from app.kernel import commands as cmd
from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope
from app.kernel.messages import Message, TextBlock, ToolUseBlock
from app.kernel.protocol import Listener, SessionSnapshot
from app.kernel.usage import Usage
from app.providers.base import (Completed, ModelRequest, StreamEvent, TextDelta, ToolCallDelta, ToolCallStart,
                                UsageUpdate)
from app.session.agent_session import replayable
from app.wiring.config import load_settings
from app.wiring.runtime import build_session


def thresholds(window: int = 200_000, budget: int = 150_000) -> ev.ThresholdsModel:
    """The lines the engine draws for this window and budget (its own arithmetic, its default
    compaction output), so what the dashboard is tested with is what it will be shown."""
    return compute_thresholds(window, budget, EngineConfig.compact_max_output)


def context(exact: int | None, estimated: int = 0, *, window: int = 200_000, budget: int = 150_000,
            turns: int | None = None, cost: float = 0.0, compact_cost: float = 0.0,
            calls: tuple[int, int] | None = None) -> ev.ContextEvent:
    """``turns``: model calls to compact, a range of one figure (``calls``: fewest, most)."""
    th = thresholds(window, budget)
    projected = (exact or 0) + estimated
    level = context_level(projected, th)
    parts = {"system": 1_800, "memory": 600, "tools": 2_400}
    rest = max(0, projected - sum(parts.values()))
    parts.update(user=rest // 10, assistant=rest // 5, tool_results=rest - rest // 10 - rest // 5)
    return ev.ContextEvent(
        exact_tokens=exact, estimated_tokens=estimated, projected_tokens=projected, thresholds=th,
        breakdown=parts, level=level, turns_to_compact=turns,
        calls_to_compact_fewest=calls[0] if calls else turns, calls_to_compact_most=calls[1] if calls else turns,
        cumulative_input=projected * 3,
        cumulative_cached=projected * 2, cumulative_output=projected // 20, cost_usd=cost,
        compact_cost_usd=compact_cost,
    )


@dataclass
class Gate:
    """A step that waits until the test calls ``open()``."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def open(self) -> None:
        self.event.set()


@dataclass
class Ask:
    """Ask the approver about a mutating tool call, as the real agent does."""

    name: str
    input: dict[str, Any]
    id: str = "call-ask"


@dataclass
class Text:
    """Stream ``text`` as deltas of ``size`` characters."""

    text: str
    size: int = 7


Step = Any  # an Event, Gate, Ask or Text

# What a compaction's summary call answers (the request the engine sends with tool_choice "none").
SUMMARY = "Summary of the conversation so far: the user asked for the work above; it is done."
# The window and budget the scripted sessions run with (the lines ``thresholds()`` draws by default).
WINDOW, BUDGET = 200_000, 150_000

_DATA_DIR: Path | None = None


def _data_dir() -> Path:
    """One data directory per test process: the demo's 15 MB log is written once into its cache
    and linked into each session's workspace, as for a user who opens the demo again. Its name
    is the same number of tokens every run (ten digits: the process id and a count), for the
    system prompt names the folder and the gauge's figures count it."""
    global _DATA_DIR
    if _DATA_DIR is None:
        for attempt in range(1_000):
            candidate = Path(tempfile.gettempdir()) / f"tidegauge-fake-session-{os.getpid() % 10_000_000:07d}{attempt:03d}"
            try:
                candidate.mkdir(mode=0o700)
            except FileExistsError:
                continue
            _DATA_DIR = candidate
            break
        else:
            raise RuntimeError("no free data directory for the fake session under " + tempfile.gettempdir())
        atexit.register(shutil.rmtree, _DATA_DIR, True)
    return _DATA_DIR


_SESSIONS_MADE = itertools.count(1)


@contextlib.contextmanager
def _numbered_session_ids() -> Iterator[None]:
    """New sessions named by the clock and a count instead of four random hex digits. The demo's
    workspace is a folder of its session, the system prompt names it, and the gauge counts those
    tokens: "c1a3" and "0017" can tokenize to different lengths, four digits always to two."""
    from app.session import store

    made = store.new_session_id

    def numbered(now: float | None = None) -> str:
        return f"{made(now).rsplit('-', 1)[0]}-{next(_SESSIONS_MADE) % 10_000:04d}"

    store.new_session_id = numbered
    try:
        yield
    finally:
        store.new_session_id = made


class ScriptedProvider(DemoProvider):
    """The demo's scripted model (its server-side token counts and cached prefix), playing a
    test's script instead of the demo's scenarios. A prompt starts its script; each model call
    plays steps until an ``Ask`` (a tool call: the real agent runs it, asking first as it would)
    or the end. ``Text`` streams deltas, ``Gate`` waits for the test, and an event step is
    said through the agent's own emit (what the script says the turn did beside the model)."""

    name = "scripted"

    def __init__(self, turns: dict[str, list[Step]], default: list[Step], label: str,
                 server_compaction: bool = False) -> None:
        super().__init__(model="scripted-model", speed=0, window=WINDOW)
        self.server_side = server_compaction  # declares a server that compacts (as anthropic's does)
        self.compact_threshold: int | None = None
        self.turns = turns
        self.default = default
        self.label = label
        self._steps: list[Step] = []
        self.say: Callable[[Any], None] = lambda event: None  # the agent's emit, once it exists

    def server_context(self) -> "ScriptedProvider | None":  # type: ignore[override]
        return self if self.server_side else None

    def set_compaction(self, threshold: int | None) -> int | None:
        self.compact_threshold = threshold
        return threshold

    def set_editing(self, editing: Any) -> bool:
        return False  # no context editing on this server

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        segments = self._segments(request)
        usage = self._usage(segments, 0)
        yield UsageUpdate(usage)
        if request.tool_choice == "none":  # the compaction's summary
            yield TextDelta(SUMMARY)
            self._previous_prefix = segments
            yield Completed(message=Message.assistant_text(SUMMARY), usage=_with_output(usage, SUMMARY),
                            stop_reason="end_turn")
            return
        last = request.messages[-1] if request.messages else None
        typed = [b.text for b in last.content if isinstance(b, TextBlock)] if last and last.role == "user" else []
        # a prompt (after an interrupted call it shares a message with that call's result); a summary
        # the engine made mid-turn continues the turn's script, one made before a prompt starts one
        if typed and not (self._steps and last is not None and is_summary_message(last)):
            self._steps = list(self.turns.get(typed[-1], self.default))
        said: list[str] = []
        content: list[Any] = []
        while self._steps:
            step = self._steps.pop(0)
            if isinstance(step, Gate):
                step.reached.set()
                await step.event.wait()
            elif isinstance(step, Text):
                for i in range(0, len(step.text), step.size):
                    yield TextDelta(step.text[i:i + step.size])
                    await asyncio.sleep(0)
                said.append(step.text)
            elif isinstance(step, Ask):
                content.append(ToolUseBlock(id=step.id, name=step.name, input=step.input))
                yield ToolCallStart(index=0, id=step.id, name=step.name)
                yield ToolCallDelta(index=0, partial_json=json.dumps(step.input))
                break
            else:
                self.say(step)
                await asyncio.sleep(0)
        if said:
            content.insert(0, TextBlock(text="".join(said)))
        self._previous_prefix = segments
        yield Completed(message=Message(role="assistant", content=content),
                        usage=_with_output(usage, "".join(said)),
                        stop_reason="tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn")


def _with_output(usage: Usage, text: str) -> Usage:
    return Usage(input_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=0,
                 output_tokens=count_tokens(text))


class FakeSession:
    """The real session (``app.wiring.runtime.build_session``: the demo's wiring, its engine,
    agent, tools, permissions and transcript) with ``ScriptedProvider`` as its model: the only
    difference from what ``tidegauge --provider demo`` runs. It runs on the loop of the first
    ``submit``/``attach``, as a dashboard on one thread runs it.

    What the tests read of it (``calls``, ``answers``, ``history``) is derived from the real
    session's events and history, never kept beside them.
    """

    def __init__(self, turns: dict[str, list[Step]] | None = None, *, default: list[Step] | None = None,
                 start_context: ev.ContextEvent | None = None, restored: list[Any] | None = None,
                 provider_label: str = "fake · scripted-model", banner: str | None = None,
                 approvals: bool = True, server_compaction: bool | None = None) -> None:
        settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(_data_dir()),
                                  "window": WINDOW, "budget": BUDGET, "memory_update_tokens": 0,
                                  "sandbox": "off"})
        with _numbered_session_ids():
            self.session = build_session(settings, approvals=approvals, cwd=_data_dir())
        agent = self.session.agent
        self.provider = ScriptedProvider(turns or {}, default or [Text("Hello! I am a scripted agent.")],
                                         provider_label, server_compaction=server_compaction is not None)
        self.provider.say = agent.emit
        agent.provider = self.provider  # the one part swapped: the model
        # Each tool call takes 3 ms by this clock, on a busy machine or not: the tool list draws it.
        ticks = itertools.count(0, 0.0015)
        agent.tool_clock = lambda: next(ticks)
        self.session.info = self.session.info.model_copy(update={
            "provider_label": provider_label, "model": self.provider.model, "banner": banner,
            "server_compaction": server_compaction})
        if server_compaction:  # on from the start, as build_session switches a provider that has it
            switch_server_compaction(self.provider, agent.engine, True)
        if restored:
            self.session.restored = replayable(restored)
        if start_context is not None:
            _start_at(agent.engine, start_context.projected_tokens)
        self.max_steps = agent.max_steps
        self.submitted: list[cmd.Command] = []
        self._by_id: dict[int, cmd.Command] = {}
        self.calls: list[tuple[str, Any]] = []  # the work done: run_turn, compact, reset, restore, evict, pin, rewind
        self.answers: list[str] = []  # each scripted tool call's answer: asked, or allowed or refused by the rules
        self._asked: dict[str, str] = {}  # approval request id -> tool call id
        self._decided: dict[str, str] = {}  # tool call id -> the user's answer
        self.closed = False
        self._run: asyncio.Task[None] | None = None
        self._submitting: cmd.Command | None = None
        self.session.subscribe(self._note)

    # --- the SessionSurface Protocol: the real session's ---

    def submit(self, command: cmd.Command) -> int:
        self._start()
        self.submitted.append(command)
        if isinstance(command, cmd.Shutdown):
            self.closed = True
        # A question is answered inside submit, before its id is returned: its events name this command.
        self._submitting = command
        try:
            command_id = self.session.submit(command)
        finally:
            self._submitting = None
        self._by_id[command_id] = command
        return command_id

    def attach(self, listener: Listener) -> tuple[SessionSnapshot, Callable[[], None]]:
        self._start()
        return self.session.attach(listener)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self.session.subscribe(listener)

    def snapshot(self) -> SessionSnapshot:
        return self.session.snapshot()

    @property
    def pending(self) -> int:
        return self.session.pending

    @property
    def busy(self) -> bool:
        return self.session.busy

    def _start(self) -> None:
        """Run the session on the caller's loop (none running: it waits, as a session not yet run does)."""
        if self._run is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._run = loop.create_task(self.session.run())

    # --- what the tests read ---

    def _note(self, envelope: EventEnvelope) -> None:
        event = envelope.event
        command = (self._by_id.get(envelope.command_id, self._submitting) if envelope.command_id is not None
                   else None)
        if isinstance(event, ev.UserMessageEvent):
            self.calls.append(("run_turn", event.text))
        elif isinstance(event, ev.CompactionEvent) and isinstance(command, cmd.Compact):
            self.calls.append(("compact", command.focus))
        elif isinstance(event, ev.ResetEvent):
            self.calls.append(("reset", None))
        elif isinstance(event, ev.RestoreEvent) and event.by == "user":
            self.calls.append(("restore", event.id))
        elif isinstance(event, ev.EvictEvent) and not event.reason:
            self.calls.append(("evict", event.id))
        elif isinstance(event, ev.PinEvent) and not event.reason:
            self.calls.append(("pin", event.id))
        elif isinstance(event, ev.RewindEvent) and event.ok:
            self.calls.append(("rewind", (event.turn, bool(getattr(command, "files", False)))))
        elif isinstance(event, ev.ApprovalRequestEvent):
            self._asked[event.request_id] = event.tool_id
        elif isinstance(event, ev.ApprovalResolvedEvent):
            self._decided[self._asked.get(event.request_id, "")] = event.decision
        elif isinstance(event, ev.ToolResultEvent) and envelope.command_id is not None:
            decided = self._decided.pop(event.id, None)
            if decided != "interrupted":  # the turn stopped while asking: nobody answered
                self.answers.append(decided or ("no" if event.refused else "yes"))

    @property
    def history(self) -> list[str]:
        """The live history as the model sees it: each message's text (a tool result: its content)."""
        return [message.text or " ".join(str(b.content)[:40] for b in message.tool_results)
                for message in self.session.agent.history]

    @property
    def info(self) -> ev.SessionInfoEvent:
        return self.session.info

    @info.setter
    def info(self, info: ev.SessionInfoEvent) -> None:
        """What the session says of itself when it starts (a test names another folder or label)."""
        self.session.info = info

    def named_the_same_every_run(self) -> "FakeSession":
        """The session's id and folder as fixed words: a snapshot draws them, and the real ones
        are the clock's and a temporary directory's. Its transcript stays where it is written;
        outputs it saves (an evicted result, named in the conversation) go to the snapshots'
        shared folder, where every run writes the same file for the same call."""
        shared = Path(tempfile.gettempdir()) / "tidegauge-snapshots" / "tool-results"
        shared.mkdir(parents=True, exist_ok=True)
        self.session.agent.engine.tool_results_dir = shared
        self.session.info = self.session.info.model_copy(update={
            "session_id": "20260101-000000-fixed", "workspace": "/home/user/project",
            "started_in": "/home/user/project"})
        return self

    @property
    def server_compaction(self) -> bool:
        return self.session.agent.engine.config.server_compaction

    @property
    def evicted(self) -> list[str]:
        return list(self.session.agent.engine.marked_results()[0])

    @property
    def pinned(self) -> list[str]:
        return list(self.session.agent.engine.marked_results()[1])

    def emit(self, event: Any) -> None:
        """Say ``event`` through the session's stream, as nobody's command (a test drawing the widgets)."""
        self.session.agent.emit(event)

    def context_event(self) -> ev.ContextEvent:
        return self.session.agent.context_event()

    async def idle(self) -> None:
        """Until every submitted command has run."""
        while self.session.pending:
            await asyncio.sleep(0.005)  # polls the condition above


def _start_at(engine: Any, tokens: int) -> None:
    """A conversation of two exchanges whose text makes the request about ``tokens`` long: the
    gauge, the plans, a compaction and the scripted server's usage all count it as it is."""
    fixed = engine.projection().projected_tokens
    lines = ["Look at the project.", "I read its files.", "Now the tests.", "The tests pass."]
    # " the" is one token; each message carries a quarter of what the fixed part leaves
    filler = " the" * max(0, (tokens - fixed) // 4 - 12)
    history = [Message.typed_by_user(lines[0] + filler), Message.assistant_text(lines[1] + filler),
               Message.typed_by_user(lines[2] + filler), Message.assistant_text(lines[3] + filler)]
    engine.load_history(history)


def clearing_session(**kwargs: Any) -> FakeSession:
    """A session whose prompt "read" reads README.md (call-1) and CHANGELOG.md (call-2) for real;
    its conversation starts over the warning line, and its engine clears old results to keep only
    the last ~400 tokens of them, so before the reply's request the real engine clears call-1's
    result (a real clearing, restorable with ctrl+t) and keeps call-2's."""
    session = FakeSession({"read": [Ask("read_file", {"path": "README.md"}, id="call-1"),
                                    Ask("read_file", {"path": "CHANGELOG.md"}, id="call-2"), Text("Read both.")]},
                          start_context=context(132_000), **kwargs)
    config = session.session.agent.engine.config
    config.micro_keep_tokens, config.micro_min_free = 400, 300
    return session


@functools.lru_cache(maxsize=2)
def big_log(lines: int = 300_000) -> str:
    """The seed's app.log: INFO lines, an ERROR last (about 15 MB for 300,000 lines).

    Kept once built: a str cannot change, and building the 15 MB one was a tenth of the CPU of
    the test files that write it for several tests. Line i is its time (i % 3600 seconds past 11:00),
    its number and i % 97 ms: the 3,600 heads and 97 tails are formatted once and joined in C
    (0.1 instead of 0.5 CPU-s for the 300,000 lines; the same text)."""
    heads = [f"2026-10-18 11:{minute:02d}:{second:02d} INFO request " for minute in range(60) for second in range(60)]
    tails = [f" handled in {ms} ms\n" for ms in range(97)]
    count = max(0, lines - 1)
    body = "".join(map("".join, zip(itertools.islice(itertools.cycle(heads), count), map(str, range(count)),
                                    itertools.islice(itertools.cycle(tails), count))))
    return body + "2026-10-18 12:00:01 ERROR database connection refused\n"


def truncated_view(text: str, limit: int = 40_000, path: str = "") -> str:
    """Head 40% + notice + tail 40%, like the registry."""
    head, tail = text[: int(limit * 0.4)], text[-int(limit * 0.4):]
    notice = (f"\n\n[... output truncated: {len(text):,} characters in total, "
              f"{len(text) - len(head) - len(tail):,} left out. Full output: {path}. "
              "Narrow it with grep, head/tail or read_file with offset/limit ...]\n\n")
    return head + notice + tail


@functools.lru_cache(maxsize=8)
def _cut_output(path: str, file_id: tuple[int, int, int] | None) -> tuple[int, str]:
    """The full output's length and its cut view, for one version of the file (``file_id``: its
    inode, size and mtime; None when it is missing). A module's tests script the same 17 MB log
    several times: reading and decoding it is ~25 ms each, the same answer every time."""
    full = Path(path).read_text() if file_id is not None else "x" * 100
    return len(full), truncated_view(full, path=path)


def session_steps(full_output_path: str, hostile: str = "") -> list[Step]:
    """A task whose context climbs past the warning line into an auto-compaction."""
    try:
        stat = os.stat(full_output_path)
        file_id: tuple[int, int, int] | None = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    except FileNotFoundError:
        file_id = None
    full_chars, view = _cut_output(full_output_path, file_id)
    steps: list[Step] = [
        ev.StateEvent(state="streaming", step=1, max_steps=50),
        Text("Let me look at the log first."),
        ev.UsageEvent(input_tokens=900, cache_read_tokens=4_000, cache_write_tokens=0, output_tokens=60,
                      context_tokens=4_960),
        ev.ToolStartEvent(id="call-1", name="run_bash", input={"command": "cat app.log"}, summary="cat app.log"),
        ev.StateEvent(state="tool", step=1, max_steps=50, detail="run_bash (1/1)"),
        ev.ToolResultEvent(id="call-1", name="run_bash", is_error=False, truncated=True,
                           original_chars=full_chars, kept_chars=len(view), full_output_path=full_output_path,
                           duration_ms=412.0, content=view),
        context(4_960, 11_200, turns=9, calls=(7, 11), cost=0.012),
        ev.ThinkingDeltaEvent(text="The tail shows an ERROR line; grep for the others."),
        Text("The tail ends with an **ERROR**. Let me grep for every error line."),
        ev.UsageEvent(input_tokens=1_200, cache_read_tokens=14_000, cache_write_tokens=1_000, output_tokens=80,
                      context_tokens=16_280),
        ev.ToolStartEvent(id="call-2", name="run_bash", input={"command": "grep -n ERROR app.log"},
                          summary="grep -n ERROR app.log"),
        ev.ToolResultEvent(id="call-2", name="run_bash", is_error=False, truncated=False, original_chars=58,
                           kept_chars=58, duration_ms=95.0,
                           content="300000:2026-10-18 12:00:01 ERROR database connection refused\n"),
        context(16_280, 40, turns=8, cost=0.021),
    ]
    tokens = 16_280
    for i in range(3, 12):
        tokens += 14_000
        steps += [
            ev.ToolStartEvent(id=f"call-{i}", name="read_file", input={"path": f"src/module_{i}.py"},
                              summary=f"src/module_{i}.py"),
            ev.ToolResultEvent(id=f"call-{i}", name="read_file", is_error=False, truncated=False,
                               original_chars=52_000, kept_chars=52_000, duration_ms=3.0,
                               content=hostile if i == 3 and hostile else f"     1\tdef handler_{i}():\n     2\t    return {i}\n"),
            ev.UsageEvent(input_tokens=1_000, cache_read_tokens=tokens - 1_100, cache_write_tokens=0,
                          output_tokens=100, context_tokens=tokens),
            context(tokens, 0, turns=max(0, (150_000 - tokens) // 14_000), cost=0.02 * i),
        ]
        if tokens >= 130_000 and not any(isinstance(s, ev.WarningCrossedEvent) for s in steps):
            steps.append(ev.WarningCrossedEvent(projected_tokens=tokens, warning_line=130_000))
    return steps

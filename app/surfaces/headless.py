"""Headless mode: one task, no dashboard. Text or stream-json on stdout.

Both printers are subscribers of the session's event stream, like the
dashboard; the words of text mode come from ``app.kernel.describe``. They
subscribe before the session runs, so they get every event from its first and
need no snapshot (the dashboard, which opens on a running session, attaches).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import TYPE_CHECKING, BinaryIO, Callable, Protocol, TextIO

from app.kernel.commands import Interrupt, Shutdown, UserInput
from app.kernel.describe import LineKind, denials_text, describe, legacy_notice, tool_result_text, tool_start_text
from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope
from app.kernel.events import Event, ResultEvent, SessionRepairedEvent
from app.kernel.redact import redact, redact_obj
from app.kernel.sanitize import sanitize_for_display, scrub_surrogates_obj

if TYPE_CHECKING:
    from app.kernel.events import SessionInfoEvent
    from app.kernel.protocol import SessionSurface

    class RunnableSession(SessionSurface, Protocol):
        """What headless mode is handed (built by the CLI, never here): a surface's four calls,
        running it in this thread until it stops, and what it is (its id, for "resume with")."""

        @property
        def info(self) -> SessionInfoEvent: ...

        async def run(self) -> None: ...

UNBRACKETED_KINDS: frozenset[LineKind] = frozenset({"error", "info"})

EXIT_CODES = {"end_turn": 0, "error": 1, "max_steps": 3, "interrupted": 130}


class TextPrinter:
    """The final answer on stdout; everything else on stderr: the narration of the replies that
    call tools, tool calls, engine lines, and what was refused.

    A reply is printed when it ends (only then is it known whether it calls tools), so stdout
    holds the answer alone: ``answer=$(tidegauge -p …)`` takes nothing else.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self._streamed: list[str] = []  # the reply streaming now (said on stderr if it never ends)

    def __call__(self, envelope: EventEnvelope) -> None:
        event = envelope.event
        if isinstance(event, ev.TextDeltaEvent):
            self._streamed.append(event.text)
            return
        if isinstance(event, ev.PartialDiscardedEvent):  # a failed attempt's text: the retry streams it anew
            self._streamed = []
        if isinstance(event, ev.AssistantMessageEvent):
            self._streamed = []
            if event.text:
                self._write(self.err if event.tool_calls else self.out, event.text)
        elif isinstance(event, ResultEvent) and self._streamed:  # an interrupted reply: what came of it
            self._write(self.err, "".join(self._streamed))
            self._streamed = []
        line = self._line(event)
        if line:
            self._write(self.err, line)
        if isinstance(event, ResultEvent) and event.permission_denials:
            self._write(self.err, denials_text(event))

    def _write(self, stream: TextIO, text: str) -> None:
        text = sanitize_for_display(redact(text))
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()

    @staticmethod
    def _line(event: Event) -> str | None:
        if isinstance(event, ev.ToolStartEvent):
            return tool_start_text(event)
        if isinstance(event, ev.ToolResultEvent):
            return tool_result_text(event)
        line = describe(event)
        if line is None:
            return None
        # The engine's own doings (compaction, retries, cuts, ...) stand in brackets, apart from
        # the tool lines; errors and plain information do not.
        return line.text if line.kind in UNBRACKETED_KINDS else f"[{line.text}]"


class JsonPrinter:
    """One JSON object per line, each with a ``type``; keys never leave the process."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, envelope: EventEnvelope) -> None:
        self._write(envelope.to_json())
        # Before engine lines were typed events, each of these came with a prose notice
        # line after it; scripts read it, so it is still printed (worded by describe), with
        # the seq and command id of the event it repeats.
        notice = legacy_notice(envelope.event)
        if notice is not None:
            line: dict[str, object] = {"type": "notice", "level": notice[0], "text": notice[1]}
            if envelope.seq:
                line["seq"] = envelope.seq
            if envelope.command_id is not None:
                line["command_id"] = envelope.command_id
            self._write(line)

    def _write(self, data: dict[str, object]) -> None:
        # A lone surrogate (a non-UTF-8 file name in a tool result) would make the line unwritable.
        line = json.dumps(scrub_surrogates_obj(redact_obj(data)), ensure_ascii=False)
        self.out.write(line + "\n")
        self.out.flush()


async def run_task(session: "RunnableSession", prompt: str) -> ResultEvent | None:
    """Run one turn through the session, then stop it; the prompt's result (None: the session
    stopped without one, which it does only when it failed).

    The first SIGINT interrupts the turn cleanly (synthetic results, an
    ``interrupted`` result; before the turn started, the prompt ends interrupted unrun);
    a second one exits at once with code 130.
    """
    loop = asyncio.get_running_loop()
    results: list[ResultEvent] = []
    prompt_id: int | None = None

    def keep_result(envelope: EventEnvelope) -> None:
        if isinstance(envelope.event, ResultEvent) and envelope.command_id == prompt_id:
            results.append(envelope.event)

    session.subscribe(keep_result)
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            session.submit(Interrupt())
            return
        _exit_now(130)

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError):
        pass
    prompt_id = session.submit(UserInput(prompt))
    session.submit(Shutdown())
    try:
        await session.run()
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass
    return results[-1] if results else None


def _exit_now(code: int) -> None:
    """The second Ctrl-C: no cleanup beyond flushing what was printed and ending what run_bash
    started (whole process trees), no traceback."""
    # Only the second ctrl+c needs these: headless start-up does not wait for them.
    from app.system.process_exit import exit_without_teardown
    from app.system.proctree import kill_all_descendants

    kill_all_descendants()
    exit_without_teardown(code, run_exit_handlers=False)


class ResultJsonPrinter:
    """``--output-format json``: one object at the end, the result's fields and the answer
    (``result``); nothing else on stdout."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, envelope: EventEnvelope) -> None:
        if isinstance(envelope.event, ResultEvent):
            write_result_object(self.out, envelope.event, envelope)


def write_result_object(out: TextIO, result: ResultEvent, envelope: EventEnvelope | None = None) -> None:
    """The result's object; with its ``envelope``, its seq and command id first, as every event line has them."""
    data = envelope.to_json() if envelope is not None else result.model_dump(mode="json")
    data["result"] = data["text"] if result.stop_reason in ("end_turn", "refusal") else ""
    out.write(json.dumps(scrub_surrogates_obj(redact_obj(data)), ensure_ascii=False) + "\n")
    out.flush()


def stderr_notes(err: TextIO, *, errors: bool) -> "Callable[[EventEnvelope], None]":
    """What the JSON formats also say on stderr, for the person watching: repairs of a damaged
    transcript, refused tool calls (and, with ``errors``, the error lines)."""

    def say(envelope: EventEnvelope) -> None:
        event = envelope.event
        text: str | None = None
        if isinstance(event, SessionRepairedEvent) or (errors and isinstance(event, ev.ErrorEvent)) or (
                isinstance(event, (ev.ElicitationResolvedEvent, ev.SamplingEvent)) and event.reason):  # an MCP server's form
            # or model call refused (no one to ask): the person watching learns why
            line = describe(event)
            text = line.text if line is not None else None
        elif isinstance(event, ResultEvent) and event.permission_denials:
            text = denials_text(event)
        if text:
            err.write(sanitize_for_display(redact(text)) + "\n")
            err.flush()

    return say


def run_headless(session: "RunnableSession", prompt: str, output_format: str) -> int:
    """Run ``prompt`` on ``session`` (built by the CLI, not yet running) and print it as
    ``output_format`` says. Exit codes: 0 the model finished (also when tool calls were refused
    for want of approval: the result's ``permission_denials`` and a stderr line say so), 1 an
    error or a refusal, 3 the step limit, 130 interrupted (2, bad input or setup, is the CLI's)."""
    if output_format == "stream-json":
        session.subscribe(JsonPrinter(sys.stdout))
        session.subscribe(stderr_notes(sys.stderr, errors=False))
    elif output_format == "json":
        session.subscribe(ResultJsonPrinter(sys.stdout))
        session.subscribe(stderr_notes(sys.stderr, errors=True))
    else:
        session.subscribe(TextPrinter(sys.stdout, sys.stderr))
    result = asyncio.run(run_task(session, prompt))
    if result is None:
        print("tidegauge: the session stopped without finishing the prompt", file=sys.stderr)
        return 1
    if output_format == "text":
        print(f"resume with: tidegauge --resume {session.info.session_id}", file=sys.stderr)
    return EXIT_CODES.get(result.stop_reason, 1)


MAX_STDIN_BYTES = 10 * 1024 * 1024


def piped_input(stdin: "BinaryIO", *, required: bool) -> str | None:
    """The text piped to tidegauge (None when stdin is a terminal or nothing can be piped).

    Read only from a pipe or a file: a terminal would wait for typing, and /dev/null or a
    closed stdin hold nothing. Raises SetupError (one line) above MAX_STDIN_BYTES.
    """
    # Only a piped prompt is read here: headless start-up does not wait for these.
    import os
    import stat

    from app.kernel.errors import SetupError

    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (OSError, ValueError):
        mode = 0
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        if required:
            raise SetupError("-p -: no prompt piped in (standard input is "
                             f"{'a terminal' if mode and stat.S_ISCHR(mode) and stdin.isatty() else 'not a pipe or a file'})")
        return None
    data = stdin.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        raise SetupError(f"standard input is over {MAX_STDIN_BYTES // (1024 * 1024)} MB: "
                         "give the model a file to read instead")
    return data.decode("utf-8", errors="replace")

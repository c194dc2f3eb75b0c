"""Headless mode: one task, no dashboard. Text or stream-json on stdout.

Both printers are subscribers of the session's event stream, like the
dashboard; the words of text mode come from ``app.describe``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import TYPE_CHECKING, TextIO

from app.commands import Interrupt, Shutdown, UserInput
from app.describe import LineKind, describe, legacy_notice, tool_result_text, tool_start_text
from app.events import Event, ResultEvent, SessionRepairedEvent
from app.redact import redact, redact_obj
from app.sanitize import sanitize_for_display, scrub_surrogates_obj

if TYPE_CHECKING:
    from app.agent_session import AgentSession
    from app.config import Settings

UNBRACKETED_KINDS: frozenset[LineKind] = frozenset({"error", "info"})

EXIT_CODES = {"end_turn": 0, "error": 1, "max_steps": 3, "interrupted": 130}


class TextPrinter:
    """The answer on stdout as it streams; tool calls and engine lines on stderr."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self._mid_line = False
        self._replies = 0  # assistant messages with text printed so far
        self._in_reply = False

    def __call__(self, event: Event) -> None:
        if event.type == "text_delta":
            text = sanitize_for_display(redact(event.text))
            if not self._in_reply:
                self._in_reply = True
                if self._replies:
                    self.out.write("\n")  # a blank line between the replies of one task
            self.out.write(text)
            self.out.flush()
            self._mid_line = not text.endswith("\n")
            return
        if event.type == "assistant_message":
            if self._in_reply:
                self._replies += 1
            self._in_reply = False
            if self._mid_line:
                self.out.write("\n")
                self.out.flush()
                self._mid_line = False
        line = self._line(event)
        if line:
            self.err.write(sanitize_for_display(redact(line)) + "\n")
            self.err.flush()

    @staticmethod
    def _line(event: Event) -> str | None:
        if event.type == "tool_start":
            return tool_start_text(event)
        if event.type == "tool_result":
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

    def __call__(self, event: Event) -> None:
        self._write(event.model_dump(mode="json"))
        # Before engine lines were typed events, each of these came with a prose notice
        # line after it; scripts read it, so it is still printed (worded by describe).
        notice = legacy_notice(event)
        if notice is not None:
            self._write({"type": "notice", "level": notice[0], "text": notice[1]})

    def _write(self, data: dict[str, object]) -> None:
        # A lone surrogate (a non-UTF-8 file name in a tool result) would make the line unwritable.
        line = json.dumps(scrub_surrogates_obj(redact_obj(data)), ensure_ascii=False)
        self.out.write(line + "\n")
        self.out.flush()


async def run_task(session: "AgentSession", prompt: str) -> ResultEvent:
    """Run one turn through the session, then stop it.

    The first SIGINT interrupts the turn cleanly (synthetic results, an
    ``interrupted`` result); a second one exits at once with code 130.
    """
    loop = asyncio.get_running_loop()
    results: list[ResultEvent] = []

    def keep_result(event: Event) -> None:
        if isinstance(event, ResultEvent):
            results.append(event)

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
    session.submit(UserInput(prompt))
    session.submit(Shutdown())
    try:
        await session.run()
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass
    return results[-1] if results else ResultEvent(stop_reason="interrupted", text="", steps=0)


def _exit_now(code: int) -> None:
    """The second Ctrl-C: no cleanup beyond flushing what was printed and ending what run_bash
    started (whole process trees), no traceback."""
    from app.process_exit import exit_without_teardown
    from app.tools.proctree import kill_all_descendants

    kill_all_descendants()
    exit_without_teardown(code, run_exit_handlers=False)


def run_headless(settings: "Settings", prompt: str, output_format: str, *, resume: str | None = None,
                 continue_latest: bool = False) -> int:
    from app.runtime import build_session

    printer = JsonPrinter(sys.stdout) if output_format == "stream-json" else TextPrinter(sys.stdout, sys.stderr)
    session = build_session(settings, approvals=False, resume=resume, continue_latest=continue_latest)
    session.subscribe(printer)
    if output_format == "stream-json":  # repairs of a damaged transcript are said on stderr in both modes
        def say_repairs(event: Event) -> None:
            line = describe(event) if isinstance(event, SessionRepairedEvent) else None
            if line is not None:
                print(line.text, file=sys.stderr)

        session.subscribe(say_repairs)
    result = asyncio.run(run_task(session, prompt))
    if output_format != "stream-json":
        print(f"resume with: tidegauge --resume {session.info.session_id}", file=sys.stderr)
    return EXIT_CODES.get(result.stop_reason, 1)

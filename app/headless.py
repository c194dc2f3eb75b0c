"""Headless mode: one task, no dashboard. Text or stream-json on stdout."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import TextIO

from app.events import Event, ResultEvent
from app.redact import redact, redact_obj
from app.sanitize import sanitize_for_display

EXIT_CODES = {"end_turn": 0, "error": 1, "max_steps": 3, "interrupted": 130}


class TextPrinter:
    """The answer on stdout as it streams; tool calls and engine lines on stderr."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self._mid_line = False

    def __call__(self, event: Event) -> None:
        kind = event.type
        if kind == "text_delta":
            text = sanitize_for_display(redact(event.text))
            self.out.write(text)
            self.out.flush()
            self._mid_line = not text.endswith("\n")
            return
        if kind == "assistant_message" and self._mid_line:
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False
        line = self._describe(event)
        if line:
            self.err.write(sanitize_for_display(redact(line)) + "\n")
            self.err.flush()

    @staticmethod
    def _describe(event: Event) -> str | None:
        kind = event.type
        if kind == "tool_start":
            return f"⏺ {event.name} {event.summary}"
        if kind == "tool_result":
            size = f"{event.original_chars:,} chars"
            cut = f", truncated to {event.kept_chars:,} (full output: {event.full_output_path})" if event.truncated else ""
            status = "error" if event.is_error else "ok"
            return f"  ⎿ {status}, {size}{cut}, {event.duration_ms:.0f} ms"
        if kind in ("notice",):
            return f"[{event.level}] {event.text}"
        if kind == "compaction" and not event.ok:
            return f"[compaction failed: {event.reason}]"
        if kind == "micro_compaction":
            return (f"[micro-compaction ({event.trigger}): cleared {event.results_cleared} old tool results, "
                    f"~{event.tokens_freed:,} tokens]")
        if kind == "warning_crossed":
            return f"[context {event.projected_tokens:,} tokens crossed the warning line {event.warning_line:,}]"
        if kind == "breaker":
            return "[auto-compaction paused: circuit breaker open]" if event.paused else "[auto-compaction resumed]"
        if kind == "retry":
            return f"[retry {event.attempt}/{event.max_attempts} in {event.delay_s:.1f}s: {event.reason}]"
        if kind == "error":
            return f"error: {event.message}"
        if kind == "result" and event.stop_reason == "max_steps":
            return f"step limit reached ({event.steps} steps)"
        return None


class JsonPrinter:
    """One JSON object per line, each with a ``type``; keys never leave the process."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, event: Event) -> None:
        data = redact_obj(event.model_dump(mode="json"))
        self.out.write(json.dumps(data, ensure_ascii=False) + "\n")
        self.out.flush()


async def run_task(agent, prompt: str, settings=None) -> ResultEvent:
    """Run one turn; SIGINT interrupts it cleanly (synthetic results, 'interrupted' result)."""
    from app.runtime import start_session_mcp

    mcp_hub = await start_session_mcp(agent, settings) if settings is not None else None  # issue 16
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    result: ResultEvent | None = None
    captured: list[ResultEvent] = []
    previous_emit = agent.emit

    def capture(event: Event) -> None:
        if event.type == "result":
            captured.append(event)  # type: ignore[arg-type]
        previous_emit(event)

    agent.emit = capture
    inner = asyncio.ensure_future(agent.run_turn(prompt))
    try:
        loop.add_signal_handler(signal.SIGINT, inner.cancel)
    except (NotImplementedError, RuntimeError):
        pass
    try:
        result = await inner
    except asyncio.CancelledError:
        if task is not None and task.cancelling():
            raise
        result = captured[-1] if captured else ResultEvent(stop_reason="interrupted", text="", steps=0)
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass
        if mcp_hub is not None:
            await mcp_hub.aclose()
        await agent.aclose()
    return result


def run_headless(settings, prompt: str, output_format: str, *, resume: str | None = None,
                 continue_latest: bool = False) -> int:
    from app.runtime import build_agent

    printer = JsonPrinter(sys.stdout) if output_format == "stream-json" else TextPrinter(sys.stdout, sys.stderr)
    agent = build_agent(settings, emit=printer, resume=resume, continue_latest=continue_latest)
    result = asyncio.run(run_task(agent, prompt, settings))
    return EXIT_CODES.get(result.stop_reason, 1)

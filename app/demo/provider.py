"""The scripted model behind the Provider protocol; everything around it is real.

What it says comes from ``scenarios.decide``; this module plays the server:
its usage figures are tiktoken counts of the request it got (with the prefix
of the previous request reported as cached, as a server would), it streams
at ``speed`` tokens per second, and it enforces its context window, raising
the Anthropic-style "prompt is too long" error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from app.context.tokens import count_tokens, estimate_message, estimate_tools
from app.demo.scenarios import banner_text, decide, pick_scenario, read_turn
from app.kernel.messages import Message, TextBlock, ThinkingBlock, ToolUseBlock
from app.providers.base import (
    Completed,
    ContextTooLongError,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    UsageUpdate,
)
from app.kernel.usage import Usage

_WORD = re.compile(r"\S+\s*|\s+")


class DemoProvider:
    """A scripted model; see the module docstring and ``app.demo.scenarios``."""

    name = "demo"
    label = "demo (scripted model)"
    # What the runtime uses when the user gave no --window / --budget. With the
    # default compaction output (8,000) the lines are: warning 15,000,
    # auto-compact 20,000 (the seed's "-budget 20000"), blocking 53,000.
    # Measured (headless, 2026-12-01) with the runtime's system prompt and the six
    # tools, run_bash_untruncated included (~1,200 tokens): "find errors" peaks at
    # ~14,400 (the truncated cat is ~12,700), just under the warning line;
    # "summarize the project" crosses the warning line after 16 of 28 files and
    # auto-compacts after 19, then reads the rest from the summary and ends near 11,300.
    DEFAULT_WINDOW = 64_000
    DEFAULT_BUDGET = 20_000
    # In the flood scenario the demo plays a server whose real context is
    # smaller than its table entry (like a local server started with a small
    # --ctx-size): the engine cuts the flood to fit under the warning line it
    # computed from the advertised window, and this server still rejects it, so
    # the reactive overflow recovery runs too. Tuned for the default budget.
    FLOOD_SERVER_WINDOW = 11_000
    COMPACTION_SPEEDUP = 10.0  # the summary is not shown while compacting: don't make the user wait

    def __init__(self, model: str | None = "demo-scripted", *, speed: float = 40.0,
                 window: int | None = None) -> None:
        self.model = model or "demo-scripted"
        self.speed = max(0.0, float(speed))
        self.window = window or self.DEFAULT_WINDOW
        self.calls = 0  # harmless counters: the decisions never read them
        self.rejected = 0
        self._previous_prefix: list[tuple[str, int]] = []
        # The pacing clock (tests record it instead of waiting).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    @property
    def banner(self) -> str:
        return banner_text()

    def server_context(self) -> None:
        """The scripted server manages no context: the engine does it all."""
        return None

    def stop_prompt_caching(self) -> None:
        """The scripted server takes no cache breakpoints."""

    # ---- what the "server" counts ----

    def _segments(self, request: ModelRequest) -> list[tuple[str, int]]:
        """(fingerprint, tokens) of the request's parts in order: system+tools, then each message."""
        head = hashlib.sha1((request.system + json.dumps([t.model_dump() for t in request.tools],
                                                         sort_keys=True)).encode()).hexdigest()
        segments = [(head, count_tokens(request.system) + estimate_tools(request.tools))]
        for msg in request.messages:
            digest = hashlib.sha1(msg.model_dump_json().encode()).hexdigest()
            segments.append((digest, estimate_message(msg)))
        return segments

    def count_request(self, request: ModelRequest) -> int:
        """Input tokens of ``request`` (tiktoken, the same estimate the engine uses)."""
        return sum(tokens for _fp, tokens in self._segments(request))

    def server_limit(self, request: ModelRequest) -> int:
        if request.tool_choice != "none" and pick_scenario(read_turn(request.messages).request) == "flood":
            return min(self.window, self.FLOOD_SERVER_WINDOW)
        return self.window

    def _usage(self, segments: list[tuple[str, int]], output_tokens: int) -> Usage:
        cached = 0
        for (fp, tokens), (prev_fp, _prev) in zip(segments, self._previous_prefix):
            if fp != prev_fp:
                break
            cached += tokens
        total = sum(tokens for _fp, tokens in segments)
        return Usage(input_tokens=total - cached, cache_read_tokens=cached, cache_write_tokens=0,
                     output_tokens=output_tokens)

    # ---- streaming ----

    async def _paced(self, pieces: list[str], speedup: float = 1.0) -> AsyncIterator[str]:
        """Yield ``pieces`` at ``speed`` tokens per second: the whole text's token count,
        spread over the pieces by length (counting each piece alone would overcount)."""
        whole = "".join(pieces)
        seconds = count_tokens(whole) / (self.speed * speedup) if self.speed > 0 else 0.0
        now = asyncio.get_running_loop().time
        started, due = now(), 0.0
        for piece in pieces:
            yield piece
            if seconds and whole:
                share = seconds * len(piece) / len(whole)
                # Wake-ups come late when another thread holds the GIL (the dashboard's,
                # drawing): each sleep catches up on the lateness instead of adding it to
                # the reply's length. Sleeping per piece, the same reply took 3x longer in
                # the dashboard than headless (benchmark 8).
                late = max(0.0, now() - started - due)
                due += share
                await self.sleep(max(0.0, share - late))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        segments = self._segments(request)
        total = sum(tokens for _fp, tokens in segments)
        limit = self.server_limit(request)
        if total > limit:
            self.rejected += 1
            raise ContextTooLongError(f"prompt is too long: {total} tokens > {limit} maximum", status=400,
                                      error_type="invalid_request_error", actual_tokens=total, limit_tokens=limit)
        decision = decide(request)
        usage_in = self._usage(segments, 0)
        yield UsageUpdate(usage_in)
        speedup = self.COMPACTION_SPEEDUP if decision.is_summary else 1.0
        content: list[Any] = []
        if decision.thinking:
            content.append(ThinkingBlock(thinking=decision.thinking))
            async for piece in self._paced([decision.thinking], speedup):
                yield ThinkingDelta(piece)
        if decision.text:
            content.append(TextBlock(text=decision.text))
            pieces = decision.text.splitlines(keepends=True) if decision.is_summary else _WORD.findall(decision.text)
            async for piece in self._paced(pieces, speedup):
                yield TextDelta(piece)
        for index, call in enumerate(decision.calls):
            use = ToolUseBlock(id=f"toolu_demo_{uuid.uuid4().hex[:20]}", name=call.name, input=call.input)
            content.append(use)
            yield ToolCallStart(index=index, id=use.id, name=use.name)
            arguments = json.dumps(call.input, ensure_ascii=False)
            half = len(arguments) // 2
            async for part in self._paced([arguments[:half], arguments[half:]]):
                yield ToolCallDelta(index=index, partial_json=part)
        output_tokens = (count_tokens(decision.thinking) + count_tokens(decision.text)
                         + sum(count_tokens(c.name) + count_tokens(json.dumps(c.input)) for c in decision.calls))
        usage = Usage(input_tokens=usage_in.input_tokens, cache_read_tokens=usage_in.cache_read_tokens,
                      cache_write_tokens=0, output_tokens=output_tokens)
        # A served request is cached for the next call's prefix (rejected ones are not).
        self._previous_prefix = segments
        yield Completed(message=Message(role="assistant", content=content), usage=usage,
                        stop_reason="tool_use" if decision.calls else "end_turn")

    async def aclose(self) -> None:
        return None

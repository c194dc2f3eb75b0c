"""The agent loop: model call, tool calls, repeat; every step through the context engine."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Literal, Protocol, Sequence

from app.context.engine import ContextEngine, Summarize
from app.context.plans import Plan
from app.context.prices import Price
from app.kernel.event_sink import EventSink
from app.context.request_parts import breakpoint_indexes
from app.kernel.events import (
    AgentState,
    AssistantMessageEvent,
    CompactionEvent,
    ConfigWarningEvent,
    ContextEvent,
    ErrorEvent,
    Event,
    InterruptedEvent,
    OutputLimitEvent,
    PartialDiscardedEvent,
    PromptCacheOffEvent,
    RequestRecordedEvent,
    ResultEvent,
    RetryEvent,
    ToolCallsCappedEvent,
    StateEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartEvent,
    ToolUserContentEvent,
    UserMessageEvent,
)
from app.kernel.markers import INTERRUPTED_RESULT, NOT_RUN_RESULT  # one text each: a call cut short, one never started
from app.kernel.request_store import RequestEnvelope, RequestStore
from app.kernel.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from app.kernel.markers import BAD_ARGUMENTS_KEY
from app.agent.permissions import Permissions, source_words
from app.providers.base import MAX_RETRY_AFTER
from app.providers.base import (
    CacheMarkingProvider,
    Completed,
    ContextTooLongError,
    ModelRequest,
    PromptCacheOff,
    Provider,
    ProviderError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallStart,
    UsageUpdate,
    cut_call_result,
)
from app.tools.base import ToolContext
from app.tools.bash import escape_reason
from app.tools.registry import ToolRegistry
from app.kernel.usage import Usage

# How a turn can end: values ResultEvent.stop_reason accepts (mypy checks each one against it).
ResultStopReason = Literal["end_turn", "max_steps", "error", "interrupted", "refusal"]

Approval = Literal["yes", "always", "no"]
Approver = Callable[[ToolUseBlock], Awaitable[Approval]]


class TurnRecorder(Protocol):
    """Where the agent closes each turn and, at the end, the record (the session's transcript
    writer is one; the engine writes the messages through its ``HistoryRecorder``). The loop is
    handed it and never knows the session's files (app/agent imports no app.session)."""

    def end_turn(self) -> None: ...

    def close(self) -> None: ...



def quiet_model_call(stream: Callable[[ModelRequest], AsyncIterator[StreamEvent]]) -> Summarize:
    """One model call streamed to its end, showing nothing and retrying nothing (a failed
    background memory update is simply tried again after more context). ``stream`` is the
    agent's ``model_stream``: the provider is looked up at each call (the host may swap it)."""

    async def call(request: ModelRequest) -> tuple[Message, Usage]:
        async for item in stream(request):
            if isinstance(item, Completed):
                return item.message, item.usage
        raise ProviderError("the stream ended without a final message")

    return call


class ApiClock:
    """Wall time with at least one model call in flight (a background memory update may overlap
    a main call: the overlap counts once). One per session: the agent, its sub-agents and the
    session's own calls share it (``Agent.model_stream``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._in_flight = 0
        self._since = 0.0

    def now(self) -> float:
        """The total so far, a call still in flight included."""
        return self.seconds + (time.monotonic() - self._since if self._in_flight else 0.0)

    async def timed(self, events: AsyncIterator[StreamEvent]) -> AsyncIterator[StreamEvent]:
        """``events`` (one model call) passed on, its time counted until ``Completed`` or its end."""
        self._begin()
        running = True
        try:
            async for item in events:
                if isinstance(item, Completed) and running:
                    running = False  # the caller stops reading here: the call is over
                    self._end()
                yield item
        finally:
            if running:
                self._end()

    def _begin(self) -> None:
        if self._in_flight == 0:
            self._since = time.monotonic()
        self._in_flight += 1

    def _end(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self.seconds += time.monotonic() - self._since


def retry_delay(attempt: int, retry_after: float | None, base: float, cap: float = 30.0,
                rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter; the server's Retry-After wins when given."""
    if retry_after is not None:
        return min(max(0.0, retry_after), MAX_RETRY_AFTER)
    if base <= 0:
        return 0.0
    ceiling = min(cap, base * (2 ** (attempt - 1)))
    return (rng or random).uniform(ceiling / 2, ceiling)


def over_cap_result(cap: int) -> str:
    """The result of a call past the per-turn cap: it never ran."""
    return (f"Not run: over the per-turn cap of {cap} tool calls in one reply (max_tool_calls_per_turn). "
            "Nothing was done for this call; ask for fewer calls at a time.")


def summarize_args(name: str, args: dict[str, object]) -> str:
    """One short line for the UI: the argument that says most."""
    bad = args.get(BAD_ARGUMENTS_KEY)
    if isinstance(bad, str):
        return f"arguments refused: {bad}"[:80]
    # "description": the task tool's few words for its sub-agent (its "prompt" is the long brief)
    for key in ("command", "path", "pattern", "description"):
        value = args.get(key)
        if isinstance(value, str):
            value = value.replace("\n", " ")
            if key == "command" and args.get("unsandboxed") is True:  # never out of the sandbox unseen
                value = "[unsandboxed] " + value
            return value if len(value) <= 80 else value[:77] + "…"
    text = json.dumps(args, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "…"


def not_offered_result(name: str, offered: frozenset[str]) -> str:
    """What the model is told of a call to a tool its request did not declare (nothing was run)."""
    names = sorted(offered)
    known = ", ".join(names[:40]) + (f" and {len(names) - 40} more" if len(names) > 40 else "") if names else "none"
    return (f"Unknown tool {name!r}: it was not offered in this request, and nothing was run. "
            f"Available tools: {known}.")


@dataclass
class AgentOptions:
    max_steps: int = 50
    max_tokens: int = 16_000
    max_tool_calls_per_turn: int = 64
    auto_approve: bool = False  # --yes
    max_retries: int = 4
    retry_base_delay: float = 1.0


@dataclass
class Agent:
    """The loop of one agent: model call, tool calls, repeat, every step through the engine.

    It emits typed events through ``emit`` (the session's stream) and asks
    ``approver`` about tools that change things; it knows no surface.
    """

    provider: Provider
    registry: ToolRegistry
    engine: ContextEngine
    tool_context: ToolContext
    options: AgentOptions = field(default_factory=AgentOptions)
    price: Price | None = None
    session_id: str = ""
    provider_label: str = ""
    # History persistence (the engine writes the messages; the agent closes turns).
    transcript: TurnRecorder | None = None
    # Where the agent's events go; the engine was built with the same sink (``EventSink``).
    emit: EventSink = field(default_factory=EventSink)
    approver: Approver | None = None
    # The rules in force: checked for every call, before --yes and before asking.
    permissions: "Permissions | None" = None
    # Where each main request is kept as sent, for the inspector (None: not kept; sub-agents).
    requests: RequestStore | None = None
    # The session's time in model calls (a sub-agent's count on its parent's clock).
    api_clock: ApiClock = field(default_factory=ApiClock)
    # What a tool call's duration is read from (a test that draws it gives one that repeats).
    tool_clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        self.tool_context.result_in_context = self.engine.result_in_context
        self.tool_context.on_progress = lambda call_id, done, total, message: self.emit(
            ToolProgressEvent(id=call_id, progress=done, total=total, message=message))
        self.tool_context.on_user_content = lambda call_id, text: self.emit(ToolUserContentEvent(id=call_id, text=text))
        self.tool_context.on_task_status = lambda call_id, status, message: self.emit(
            ToolProgressEvent(id=call_id, progress=0, task_status=status, message=message))
        self.step = 0
        self._pending_uses: list[ToolUseBlock] = []
        self._pending_results: list[ToolResultBlock] = []
        self._running_tool: str | None = None
        self._awaiting_approval = False  # an interrupt now stops a call that never ran
        # The reply streamed so far, as pieces: joined once, when it is needed.
        self._partial: list[str] = []

    @property
    def model(self) -> str:
        return self.provider.model

    @property
    def workspace(self) -> Path:
        return self.tool_context.workspace

    @property
    def max_steps(self) -> int:
        return self.options.max_steps

    @property
    def history(self) -> list[Message]:
        return self.engine.history

    def context_event(self) -> ContextEvent:
        return self.engine.context_event()

    def model_stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """One model call on this agent's provider, timed on the session's clock: every call
        (main, compaction, memory, sub-agents, an MCP server's) goes through here."""
        return self.api_clock.timed(self.provider.stream(request))

    def _state(self, state: AgentState, detail: str = "", *, tool_name: str = "", tool_index: int = 0,
               tool_count: int = 0, attempt: int = 0, max_attempts: int = 0) -> None:
        self.emit(StateEvent(state=state, step=self.step, max_steps=self.options.max_steps, detail=detail,
                             tool_name=tool_name, tool_index=tool_index, tool_count=tool_count,
                             attempt=attempt, max_attempts=max_attempts))

    # ---- engine operations bound to keys ----

    async def compact(self, focus: str | None = None, plan: Plan | None = None) -> CompactionEvent:
        self._state("compacting")
        try:
            return await self.engine.compact(self._summarize, "manual", focus, plan)
        finally:
            self._end_turn()
            self._state("idle")

    def reset(self, plan: Plan | None = None) -> None:
        self.engine.reset(plan)
        self.step = 0
        self._end_turn()
        self._state("idle")

    # ---- the loop ----

    def _start_file_history_turn(self) -> None:
        """The files changed from now on belong to this turn, known by the id of the user's message
        (a rewind to it puts back what they held before)."""
        history = self.tool_context.file_history
        last = self.history[-1] if self.history else None
        ids = [b.user_message_id for b in last.content if isinstance(b, TextBlock) and b.user_message_id] if last else []
        if history is not None and ids:
            history.turn = ids[-1]

    async def run_turn(self, user_text: str, attached: Sequence[TextBlock] = (), said: Sequence[Event] = ()) -> ResultEvent:
        """One turn. ``attached``: blocks sent with the user's words that are not theirs (an MCP
        prompt's or resource's text); ``said``: the events that show them, after the user's message."""
        self.engine.append_user_text(user_text, attached)
        self._start_file_history_turn()
        self.emit(UserMessageEvent(text=user_text))
        for event in said:
            self.emit(event)
        self.engine.emit_context()
        self.step = 0
        overflow_retries = 0
        final_text = ""
        try:
            while True:
                if self.step >= self.options.max_steps:
                    return self._finish("max_steps", final_text or
                                        f"step limit reached ({self.options.max_steps} steps): stopped before finishing")
                self.step += 1
                await self.engine.before_request(self._summarize)
                request = self.engine.build_request(self.options.max_tokens)
                self._state("streaming")
                gauge = self.engine.projection().projected_tokens  # what the gauge shows for this request
                try:
                    completed = await self._call_model(request, stream_to_ui=True)
                except ContextTooLongError as err:
                    self._keep_request(request, gauge, None)
                    overflow_retries += 1
                    if overflow_retries > 3 or not self.engine.recover_overflow(err):
                        return self._error(f"prompt too long and recovery failed after {overflow_retries - 1} "
                                           f"attempts: {err.message}")
                    self.step -= 1  # the rejected request did no work
                    continue
                except ProviderError as err:
                    self._keep_request(request, gauge, None)
                    return self._error(str(err))
                self._keep_request(request, gauge, completed)
                overflow_retries = 0
                message = with_unique_tool_ids(completed.message, self.history)
                if not message.content:
                    message = Message.assistant_text("")
                self.engine.append(message)
                self.engine.record_usage("main", completed.usage, self.price)
                self.engine.note_model_call()
                uses = message.tool_uses
                self.emit(AssistantMessageEvent(text=message.text, tool_calls=len(uses)))
                final_text = message.text or final_text
                self.engine.emit_context()
                if not uses:
                    if completed.stop_reason == "max_tokens":
                        self.emit(OutputLimitEvent())
                    return self._finish("refusal" if completed.stop_reason == "refusal" else "end_turn", message.text)
                await self._run_tools(uses, offered=frozenset(spec.name for spec in request.tools))
        except asyncio.CancelledError:
            self._repair_after_interrupt()
            self._finish("interrupted", final_text)
            raise

    async def _run_tools(self, uses: list[ToolUseBlock], offered: frozenset[str]) -> None:
        """Run the calls of one reply in order. ``offered``: the tools the request it answers declared;
        a call to any other (a deferred tool not yet loaded, a name the model made up that a server
        happens to have) is never run: the model is told it is unknown, as a server would."""
        results: list[ToolResultBlock] = []
        self._pending_uses = uses
        self._pending_results = results
        # A reply of thousands of calls (text a model read can ask for that) runs the first few;
        # every other call still gets its result, so the history stays a valid request.
        cap = self.options.max_tool_calls_per_turn
        to_run, over = uses[:cap], uses[cap:]
        if over:
            self.emit(ToolCallsCappedEvent(asked=len(uses), ran=len(to_run)))
        for index, use in enumerate(to_run, start=1):
            self._running_tool = use.name
            self._awaiting_approval = False
            self._state("tool", tool_name=use.name, tool_index=index, tool_count=len(to_run))
            self.emit(ToolStartEvent(id=use.id, name=use.name, input=use.input,
                                     summary=summarize_args(use.name, use.input)))
            # a call cut at the output limit is never run; the model is told to retry smaller
            refusal = (not_offered_result(use.name, offered) if use.name not in offered
                       else cut_call_result(use.name) if use.cut_at_output_limit else await self._approval_refusal(use))
            started = self.tool_clock()  # after approval: the duration is the tool's, not the user's
            if refusal is not None:
                block = ToolResultBlock(tool_use_id=use.id, content=refusal, is_error=True)
                original = kept = len(refusal)
                truncated = False
            else:
                self.tool_context.call_id = use.id
                run = await self.registry.run(use.name, use.input, self.tool_context)
                block = ToolResultBlock(tool_use_id=use.id, content=run.content, is_error=run.is_error,
                                        full_output_path=run.full_output_path, images=run.images)
                pending = [Message(role="user", content=list(results))] if results else []
                block = self.engine.fit_tool_result(block, use.name, pending)
                original, truncated = run.original_chars, run.truncated or len(block.content) < len(run.content)
                kept = len(block.content)
            results.append(block)
            self.emit(ToolResultEvent(
                id=use.id, name=use.name, is_error=block.is_error, truncated=truncated,
                original_chars=original, kept_chars=kept, full_output_path=block.full_output_path,
                duration_ms=(self.tool_clock() - started) * 1000, content=block.content,
                refused=refusal is not None and not use.cut_at_output_limit))
        self._running_tool = None
        results += [ToolResultBlock(tool_use_id=use.id, content=over_cap_result(cap), is_error=True) for use in over]
        self.engine.append(Message(role="user", content=list(results)))
        self._pending_uses = []
        self._pending_results = []
        self.engine.emit_context()

    async def _approval_refusal(self, use: ToolUseBlock) -> str | None:
        if BAD_ARGUMENTS_KEY in use.input:
            return None  # nothing to approve or deny: the registry refuses the call without running it
        mutating = self.registry.is_mutating(use.name)
        # A command asking to leave the sandbox is asked about every time: no allow rule lets it
        # out, only the user's yes or --yes.
        tool = self.registry.get(use.name)
        escape = escape_reason(tool.spec, use.input, self.tool_context.sandbox) if tool is not None else None
        self.tool_context.approved_escape = ""
        if self.permissions is not None:
            verdict = self.permissions.decide(use.name, use.input, mutating=mutating)
            if verdict.effect == "deny" and verdict.rule is not None:  # deny wins, over --yes too
                return (f"{use.name} was refused by the permission rule deny {verdict.rule.text} "
                        f"(from {source_words(verdict.rule.source)}). Do not retry it; try another way "
                        "or ask the user.")
            if verdict.effect == "allow" and escape is None:
                return None
        elif not mutating:
            return None
        if escape == "":
            return (f"{use.name} was refused: unsandboxed needs a reason, which the user reads before saying "
                    "yes. Give one in a few words, or run the command in the sandbox.")
        if self.options.auto_approve:
            self.tool_context.approved_escape = use.id if escape is not None else ""
            return None
        if self.approver is None:
            if escape is not None:
                return (f"{use.name} outside the sandbox was refused: nobody can be asked in this session, and "
                        "running outside the sandbox needs the user's yes. Run it in the sandbox, or tell the "
                        "user to restart tidegauge with --yes (or with sandbox_network = true if it needs the network).")
            return (f"{use.name} was refused: this session does not allow tools that change things. "
                    "Use read_file and list_files to investigate, or tell the user to restart tidegauge with --yes.")
        self._awaiting_approval = True  # left set by an interrupt: the repair after it reads it
        answer = await self.approver(use)  # the session says "waiting_approval" if it has to ask
        self._awaiting_approval = False
        if answer in ("yes", "always"):
            self.tool_context.approved_escape = use.id if escape is not None else ""
            return None
        return f"The user declined this {use.name} call. Ask the user how to proceed or try another way."

    def _repair_after_interrupt(self) -> None:
        """Every tool call left without a result gets a synthetic one, so the next request is valid."""
        uses, results = self._pending_uses, self._pending_results
        running = self._running_tool
        at_approval = self._awaiting_approval
        self._awaiting_approval = False
        if uses:
            answered = {r.tool_use_id for r in results}
            unanswered = [u for u in uses if u.id not in answered]
            # Tools run in order: the first unanswered one was running, or waiting for its approval
            # (its line on screen says so); those after it never started and were never shown. The
            # model is told which did nothing: a command cut short may have changed things.
            def result_for(position: int) -> str:
                return INTERRUPTED_RESULT if position == 0 and not at_approval else NOT_RUN_RESULT
            blocks: list[ContentBlock] = [*results, *(
                ToolResultBlock(tool_use_id=u.id, content=result_for(i), is_error=True) for i, u in enumerate(unanswered))]
            for use in unanswered[:1]:
                said = result_for(0)
                self.emit(ToolResultEvent(id=use.id, name=use.name, is_error=True, truncated=False,
                                          original_chars=len(said), kept_chars=len(said),
                                          content=said, interrupted=True))
            self.engine.append(Message(role="user", content=blocks))
            self._pending_uses = []
            self._pending_results = []
        self._running_tool = None
        partial = "".join(self._partial)
        self._partial = []
        kept = bool(partial) and bool(self.engine.history) and self.engine.history[-1].role == "user"
        if kept:
            # Complete text without tool calls: keep it, marked, so the model knows it was cut.
            self.engine.append(Message.assistant_text(partial + "\n\n[interrupted by the user]"))
        self.emit(InterruptedEvent(tool_name=running if uses else None, partial_kept=kept,
                                   at_approval=at_approval and bool(uses)))

    def _finish(self, stop_reason: ResultStopReason, text: str) -> ResultEvent:
        self.engine.flush_background_events()  # a memory update's events come before the result, never after
        event = ResultEvent(stop_reason=stop_reason, text=text, steps=self.step)
        self._state("idle")
        self.emit(event)  # last: stream-json consumers stop reading at the result
        self._end_turn()
        return event

    def _error(self, message: str) -> ResultEvent:
        self.emit(ErrorEvent(message=message))
        return self._finish("error", message)

    def _end_turn(self) -> None:
        if self.transcript is not None:
            self.transcript.end_turn()

    def _keep_request(self, request: ModelRequest, gauge: int, completed: Completed | None) -> None:
        """Keep a main request as sent (redacted by the store), with the gauge's figure and the
        usage of its reply; the inspector reads it. A store that cannot write costs the
        inspector this request, never the turn."""
        if self.requests is None:
            return
        parts = self.engine.request_parts(request)
        usage = completed.usage if completed is not None else None
        marks = self.provider.cache_marks(request) if isinstance(self.provider, CacheMarkingProvider) else ()
        envelope = RequestEnvelope(
            number=0, gauge_tokens=gauge, model=self.provider.model, max_tokens=request.max_tokens,
            input_tokens=usage.input_tokens if usage else None,
            cache_read_tokens=usage.cache_read_tokens if usage else None,
            cache_write_tokens=usage.cache_write_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            breakpoints=breakpoint_indexes(parts, marks) if marks else (),
            ok=completed is not None)
        try:
            number = self.requests.record(parts, envelope)
        except OSError as err:
            self.requests = None
            self.emit(ConfigWarningEvent(setting="requests",
                                         text=f"requests are no longer kept for the inspector: {err}"))
            return
        self.emit(RequestRecordedEvent(request=number, total_tokens=gauge, parts=len(parts),
                                       store=str(self.requests.folder)))

    # ---- model calls ----

    async def _summarize(self, request: ModelRequest) -> tuple[Message, Usage]:
        self._state("compacting")
        completed = await self._call_model(request, stream_to_ui=False)
        return completed.message, completed.usage

    async def _call_model(self, request: ModelRequest, *, stream_to_ui: bool) -> Completed:
        """One model call with retries for transient failures. Partial output never enters history."""
        attempt = 0
        partial = self._partial
        while True:
            attempt += 1
            partial.clear()
            shown = 0  # characters of reply text shown on screen in this attempt
            tool_started = False
            try:
                async for item in self.model_stream(request):
                    if isinstance(item, TextDelta):
                        if stream_to_ui:
                            if not tool_started:
                                partial.append(item.text)
                            shown += len(item.text)
                            self.emit(TextDeltaEvent(text=item.text))
                    elif isinstance(item, ThinkingDelta):
                        if stream_to_ui:
                            self.emit(ThinkingDeltaEvent(text=item.text))
                    elif isinstance(item, ToolCallStart):
                        # Text with a half-made tool call is not complete text: never keep it.
                        tool_started = True
                        partial.clear()
                    elif isinstance(item, UsageUpdate):
                        if stream_to_ui:  # the gauge moves as soon as the server says the prompt size
                            self.engine.live_usage(item.usage)
                    elif isinstance(item, PromptCacheOff):  # said whichever call hit it (a summary too)
                        self.emit(PromptCacheOffEvent(provider=self.provider.name, reason=item.reason,
                                                      base_url=item.base_url, remembered=item.remembered))
                    elif isinstance(item, Completed):
                        partial.clear()
                        return item
                raise ProviderError("the stream ended without a final message")
            except ProviderError as err:
                partial.clear()
                if shown:
                    self.emit(PartialDiscardedEvent(chars=shown))
                if not err.retryable or attempt > self.options.max_retries:
                    raise
                delay = retry_delay(attempt, err.retry_after, self.options.retry_base_delay)
                # One set of numbers for every surface: retry N of the allowed retries.
                self.emit(RetryEvent(attempt=attempt, max_attempts=self.options.max_retries, delay_s=delay,
                                     reason=str(err)))
                self._state("retrying", f"in {delay:.1f}s", attempt=attempt, max_attempts=self.options.max_retries)
                await asyncio.sleep(delay)
                if stream_to_ui:
                    self._state("streaming")

    async def aclose(self) -> None:
        await self.engine.cancel_background()  # a session-memory update still running
        await self.provider.aclose()
        if self.transcript is not None:
            self.transcript.close()


def with_unique_tool_ids(message: Message, history: list[Message]) -> Message:
    """Tool-call ids made unique within the message and against the live history.

    Some servers repeat ids (``call_0`` in every turn, or twice in one message);
    results are matched to calls by id, so a repeat would pair a result with the
    wrong call. A repeated id gets a suffix before anything runs.
    """
    uses = message.tool_uses
    if not uses:
        return message
    seen = {u.id for m in history if m.role == "assistant" for u in m.tool_uses}
    blocks = []
    changed = False
    for block in message.content:
        if isinstance(block, ToolUseBlock):
            new_id = block.id or "call"
            n = 1
            while new_id in seen:
                n += 1
                new_id = f"{block.id}-{n}"
            seen.add(new_id)
            if new_id != block.id:
                block = block.model_copy(update={"id": new_id})  # everything else as the model sent it
                changed = True
        blocks.append(block)
    return message.copy_with(blocks) if changed else message

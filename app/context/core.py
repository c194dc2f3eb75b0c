"""The context engine's pure core: the live history, its accounting and every decision.

``ContextCore`` owns the history, the accounting, the thresholds, the plans and what the
session memory covers. Each of its operations changes that state and returns what it caused:
a value (a plan, a forecast, a cut, a preview) or the effects to carry out, in order
(``Replaced``/``Appended``: a history change to persist; an event to emit). It never waits,
reads a clock (``now`` is an argument), opens a file or calls a model: the service
(``app/context/engine.py``, ``ContextEngine``) runs what it decides, and
``tests/test_context_core_is_pure.py`` keeps it that way.

What stays in the service is I/O: the model calls (a summary, the background memory
update), the files (cleared and cut outputs saved, restored outputs read, the memory file),
the transcript, the emission of events, the circuit breaker's clock, and which rule files
match a path (matching resolves the path on disk).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Literal, Sequence, TypedDict, Union

from app.context.accounting import USAGE_FLOOR_RATIO, USAGE_WINDOW_FACTOR, ContextAccounting, Ledger, Projection
from app.context.audit import AuditResult, Fact, append_checked_facts, audit_summary
from app.context.compaction import (build_summary_history, is_paste, is_summary_message, kept_user_words,
                                    kept_word_id, summary_problem, typed_words)
from app.context.forecast import Forecast, ForecastAction, forecast
from app.context.overflow import drop_oldest_rounds
from app.context.pins import only_pinned_carry, pinned_carry, pinned_note
from app.context.plans import PLANS_KEPT, MemoryPlan, Plan, PlanKind, new_plan_id
from app.context.prices import Price, cost_usd
from app.context.pruning import PruneResult, call_words, evicted_stub, is_cleared, prune_by_size, prune_by_time, stub_for
from app.context.rewind import RewindTarget, history_before, rewind_points
from app.context.rules import attached_rule_paths
from app.context.session_memory import MEMORY_INTRO, SessionMemory, UnseenMessages, safe_cut
from app.context.summarizer import extractive_summary
from app.context.thresholds import MIN_SUMMARY_ROOM, Thresholds, budget_floor_warning, compute_thresholds, level
from app.context.tokens import count_tokens, estimate_message, estimate_messages, estimate_tools
from app.context.user_words import carried_rule_blocks, user_words
from app.context.truncation import truncate_head_tail
from app.kernel.events import (
    AgentName,
    ChartPointEvent,
    CompactionEvent,
    ContextEvent,
    Event,
    EvictEvent,
    MicroCompactionEvent,
    PinEvent,
    PointKind,
    ResetEvent,
    RestoreEvent,
    ResultCutEvent,
    RewindEvent,
    UsageDistrustedEvent,
    UsageEvent,
    WarningCrossedEvent,
)
from app.kernel.messages import Message, OpaqueBlock, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from app.kernel.usage import ServerEdit, Usage

if TYPE_CHECKING:
    from app.context.memory import MemoryBundle
    from app.context.rules import RuleSet

Trigger = Literal["auto", "manual", "reactive", "fallback", "memory"]

# The least the bound on the user's words a summary keeps may be (tokens).
MIN_KEPT_WORDS = 2_000

# Exact counting of a 15 MB string costs seconds; above this size we sample.
EXACT_COUNT_LIMIT_CHARS = 200_000
SAMPLE_CHARS = 50_000

# what stands before a server's compaction item in the history (the item carries the rest).
SERVER_COMPACTED_NOTE = ("[Context compaction] The conversation before this point was compacted by the server; "
                         "its compaction item follows.")


@dataclass
class EngineConfig:
    window: int
    budget: int
    compact_max_output: int = 8_000
    micro_idle_minutes: float = 60.0
    micro_keep_latest: int = 5
    micro_keep_tokens: int = 40_000
    micro_min_free: int = 20_000
    # The user's words a summary keeps, in tokens (None: a quarter of the auto-compact line, at
    # least MIN_KEPT_WORDS): every message whole, a paste head and tail; the oldest over it left
    # out whole and counted.
    kept_words_budget: int | None = None
    # the provider compacts server-side at the auto-compact line, so ours stands down
    server_compaction: bool = False

    # Session memory: update every N tokens of new context (0: off); a memory
    # compaction keeps at least this many tokens of the latest messages verbatim. Off unless
    # the runtime passes Settings.memory_update_tokens (default 10,000) on: the dashboard must
    # know the "memory" compaction trigger first.
    memory_update_tokens: int = 0
    memory_keep_tokens: int = 4_000
    # The first update waits until the context is this big; each later one also waits for this many
    # tool calls (or a reply that called none). 0: no wait (the runtime passes the settings).
    memory_init_tokens: int = 0
    memory_update_tool_calls: int = 0
    memory_max_output: int = 4_000
    # Reversible clearing: a restored output larger than this is cut head+tail.
    restore_max_chars: int = 40_000


# ---- what the core hands the service to carry out ----

@dataclass(frozen=True)
class Replaced:
    """The history became ``history`` (already the core's): persist it."""

    history: list[Message]
    reason: str


@dataclass(frozen=True)
class Appended:
    """``message`` was appended to the history (already the core's): persist it."""

    message: Message


# In order: a history change is persisted before the events after it are emitted.
Effect = Union[Replaced, Appended, Event]


@dataclass
class _PasteScan:
    """The unsaved-paste blocks of the first ``length`` messages of ``history`` (that very list)."""

    history: list[Message]
    length: int = 0
    last: Message | None = None  # history[length - 1] when scanned: the prefix is still the one scanned
    found: list[TextBlock] = field(default_factory=list)
    carried: bool = False


def _call_words(name: str, tool_input: object) -> str:
    """A tool call as one short phrase: its tool and its first argument ("read_file src/app.py")."""
    values = tool_input.values() if isinstance(tool_input, dict) else ()
    argument = next((str(value) for value in values if isinstance(value, (str, int, float))), "")
    argument = " ".join(argument.split())
    if len(argument) > 48:
        argument = argument[:47] + "…"
    return f"{name} {argument}".strip()


class ResultChangeError(Exception):
    """A tool result cannot be restored, evicted or pinned; the message says why in one line."""


class RestoreError(ResultChangeError):
    """A cleared result cannot be restored; the message says why in one line."""


@dataclass(frozen=True)
class RestorePreview:
    call_id: str
    tool_name: str
    tokens: int  # what the restore adds to the next request
    projected_before: int
    projected_after: int
    level_after: str  # "ok", "warning", "compact", "blocking"
    fits: bool  # False: it would push the request over the blocking line
    plan_id: str = ""  # the plan these figures describe (``RestoreResult(plan_id=...)`` runs it)

    def describe(self) -> str:
        return (f"restore {self.tool_name} result {self.call_id}: +~{self.tokens:,} tokens, "
                f"context ~{self.projected_before:,} → ~{self.projected_after:,} ({self.level_after})")


@dataclass(frozen=True)
class ClearedResult:
    """A cleared result found in the live history, with the file its full output was saved to."""

    message_index: int
    block_index: int
    block: ToolResultBlock
    tool_name: str
    saved_path: str


@dataclass(frozen=True)
class UsageRecord:
    """A call's usage, accounted: its line, and what it caused after it (for the main agent)."""

    event: UsageEvent
    then: list[Effect]


def estimate_text_fast(text: str) -> int:
    """Token estimate that stays cheap for huge texts (head+tail sample, extrapolated)."""
    if len(text) <= EXACT_COUNT_LIMIT_CHARS:
        return count_tokens(text)
    sample = text[:SAMPLE_CHARS] + text[-SAMPLE_CHARS:]
    ratio = count_tokens(sample) / len(sample)
    return int(len(text) * ratio) + 1


def server_instructions_section(server: str, text: str) -> str:
    """One MCP server's instructions as the system prompt carries them: under its name, said to be
    the server's words (a server is someone else's code; the user never wrote them)."""
    return f"\n\n# Instructions from the MCP server {server!r} (the server's own words)\n{text}"


@dataclass
class ContextCore:
    """Live history + accounting + thresholds + plans for one session; no I/O."""

    system_prompt: str
    memory: MemoryBundle
    tools: list[ToolSpec]
    config: EngineConfig
    price: Price | None = None
    compact_price: Price | None = None
    history: list[Message] = field(default_factory=list)
    # MCP: which server a tool comes from (the breakdown per server), and the
    # tokens deferred tool definitions save on every request (the gauge). Set by start_mcp.
    tool_owner: Callable[[str], str | None] | None = None
    tool_tokens_saved: Callable[[], int] = lambda: 0
    # Path-scoped rules: only their paths and sizes are read here.
    rules: RuleSet | None = None
    # The memory's text and what it covers; the service loads and saves its file.
    session_memory: SessionMemory = field(default_factory=lambda: SessionMemory(path=None))

    def __post_init__(self) -> None:
        # MCP servers' `instructions` (from initialize), bounded and sanitized by the hub: server -> text.
        self.server_instructions: dict[str, str] = {}
        self.server_instruction_tokens: dict[str, int] = {}
        self.thresholds: Thresholds = compute_thresholds(
            self.config.window, self.config.budget, self.config.compact_max_output,
            fixed_tokens=self.fixed_tokens_if_budget_is_near(),
        )
        self.accounting = ContextAccounting(window=self.config.window)
        self.ledger = Ledger()
        self.last_assistant_at: float | None = None
        self.warned = False
        # a server compaction seen in a reply, waiting for that call's usage (messages, tokens before)
        self.server_compaction_pending: tuple[int, int] | None = None
        self.server_edits_reported: tuple[ServerEdit, ...] = ()
        self.system_text = self._with_memory(self.memory)
        self.memory_new_tokens = 0  # tokens of the messages the memory has not seen
        # The messages the memory has not seen (an update sends only these). Filled
        # from the history at first use, which after a resume is the whole restored history
        # (which part the memory file covers is not known).
        self.memory_unseen = UnseenMessages()
        self.memory_unseen_ready = False
        # The running update's last message as the history holds it now (a clearing or a restore
        # replaces a message with a new version), so its coverage is found when it ends.
        self.memory_batch_last: Message | None = None
        self.pinned: set[str] = set()  # restored results, kept through the next request
        self.cached_prefix = 0  # prompt-cache tokens of the last main request
        self.summary_sizes: list[int] = []
        # Plans a confirmation may name, and a count of history changes: a plan made
        # on another history than the live one is made again before it runs.
        self.plans: dict[str, Plan] = {}
        self.rewind_plans: dict[str, Plan] = {}  # the last listing's, one per user message
        self.history_version = 0
        self._stable_tokens: int | None = None
        self.attached_rules: set[str] = set()
        # The user's pastes saved whole by the service (message id -> file; None: not saved),
        # which the summaries' cuts name.
        self.saved_pastes: dict[str, str | None] = {}
        # id(message) -> (that message, its unsaved-paste blocks, whether a carried rule is one)
        self._paste_memo: dict[int, tuple[Message, list[TextBlock], bool]] = {}
        self._paste_scan: _PasteScan | None = None
        # Set by a compaction that left the context over the warning line: what a summary keeps
        # (the summary, the user's words, the fixed part) fills the room it should have made, so
        # compacting again at the next request would free a few tokens for a model call each
        # time, request after request. Auto-compaction waits until the context reaches this figure.
        self.auto_compaction_held_until: int | None = None
        # The same for the blocking line's fallback, when what a compaction kept is over the
        # auto-compact line: each fallback would summarize away only the latest turn (the result
        # the model just asked for), request after request.
        self.fallback_held_until: int | None = None

    # ---- the fixed part and the lines ----

    def _with_memory(self, memory: MemoryBundle) -> str:
        return self.system_prompt + (
            "\n\n# Project and user rules (memory files)\n" + memory.text if memory.text else "") + (
            self._instructions_section())

    def _instructions_section(self) -> str:
        return "".join(server_instructions_section(name, text) for name, text in self.server_instructions.items())

    @property
    def counted_system(self) -> str:
        """The system prompt as the accounting counts it: the base prompt and the servers' instructions
        (the memory files are counted apart, as their own part)."""
        return self.system_prompt + self._instructions_section()

    def use_memory(self, memory: MemoryBundle) -> None:
        self.memory = memory
        self.system_text = self._with_memory(memory)
        self.set_budget(self.config.budget)

    def use_server_instructions(self, instructions: dict[str, str]) -> None:
        """The ready MCP servers' instructions: every later request carries them in its system prompt,
        and the budget lines and the stable prefix move with the fixed part."""
        self.server_instructions = dict(instructions)
        # counted once here: every context event shows them under the server's part
        self.server_instruction_tokens = {name: count_tokens(server_instructions_section(name, text))
                                          for name, text in self.server_instructions.items()}
        self.system_text = self._with_memory(self.memory)
        self._stable_tokens = None
        self.set_budget(self.config.budget)

    def use_tools(self, tools: list[ToolSpec]) -> None:
        """The tools every later request offers (an MCP server's, the task tool): the stable
        prefix is counted again with them."""
        self.tools = tools
        self._stable_tokens = None
        # The last exact figure was measured with the old definitions: the whole request is
        # estimated until the next call's usage, rather than miss what was just loaded.
        self.accounting.invalidate()

    def use_tool_owners(self, owner: Callable[[str], str | None] | None, tokens_saved: Callable[[], int]) -> None:
        """Which server a tool comes from (the breakdown per server), and the tokens deferred
        tool definitions save on every request (the gauge)."""
        self.tool_owner = owner
        self.tool_tokens_saved = tokens_saved

    def use_rules(self, rules: RuleSet | None) -> None:
        self.rules = rules

    def load_history(self, history: list[Message]) -> None:
        """A history read back (a resumed session, a replay) taken as the live one; the caller
        persists it if it must."""
        self.history = history

    def set_warning_line(self, line: int) -> None:
        """The warning line at ``line`` instead of where the budget puts it (a what-if policy's)."""
        self.thresholds = replace(self.thresholds, warning_line=max(1, line))

    def fixed_tokens(self) -> int:
        """Estimated tokens every request carries whatever the history: system prompt, memory files, tools."""
        return (count_tokens(self.counted_system) + count_tokens(self.memory.text)
                + estimate_tools(self.tools))

    def fixed_tokens_if_budget_is_near(self) -> int:
        """The fixed part, counted only when the budget could be below the compaction floor:
        counting loads the tokenizer, which start-up should not wait for (a token is at
        least one character, so the characters bound the count from above)."""
        budget = self.config.budget
        if budget <= 0:
            return 0
        upper = (len(self.counted_system) + len(self.memory.text) + MIN_SUMMARY_ROOM
                 + sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) + 64 for t in self.tools))
        return self.fixed_tokens() if budget < upper else 0

    def set_budget(self, budget: int) -> str | None:
        self.config.budget = max(0, int(budget))
        self.thresholds = compute_thresholds(self.config.window, self.config.budget, self.config.compact_max_output,
                                             fixed_tokens=self.fixed_tokens_if_budget_is_near())
        return self.budget_floor_warning()

    def budget_floor_warning(self) -> str | None:
        fixed = self.fixed_tokens_if_budget_is_near()
        if not fixed:
            return None  # the budget is clearly above any floor (or off): nothing to count
        return budget_floor_warning(self.config.budget, fixed, self.config.window, self.config.compact_max_output)

    def stable_prefix(self) -> int:
        """Tokens every request starts with (system prompt with the memory files, tools); counted once."""
        if self._stable_tokens is None:
            self._stable_tokens = count_tokens(self.system_text) + estimate_tools(self.tools)
        return self._stable_tokens

    def projection(self, extra: list[Message] | None = None) -> Projection:
        history = self.history + extra if extra else self.history
        return self.accounting.project(self.counted_system, self.tools, history, self.memory.text)

    def projected(self) -> int:
        return self.projection().projected_tokens

    def projected_unnoted(self) -> int:
        """The projection, worked out on a copy of the accounting: a forecast leaves the estimate
        the next usage is checked against as the last request left it."""
        return self.accounting.copy().project(self.counted_system, self.tools, self.history,
                                              self.memory.text).projected_tokens

    def estimate_request(self, history: list[Message]) -> int:
        """The whole request for ``history``, estimated (one measure for before and after:
        the server's own figure may count with another tokenizer)."""
        return ContextAccounting().project(self.counted_system, self.tools, history,
                                           self.memory.text).projected_tokens

    def estimate_with_summary(self, summary: str) -> int:
        """The estimated context if ``summary`` replaced the history (nothing is changed)."""
        return self.estimate_request(self.summary_history(summary, self.history))

    def kept_words_budget(self) -> int:
        """The bound on the user's words a summary keeps, in tokens."""
        if self.config.kept_words_budget is not None:
            return self.config.kept_words_budget
        return max(MIN_KEPT_WORDS, self.thresholds.auto_compact_line // 4)

    def summary_history(self, summary: str, replaced: Sequence[Message]) -> list[Message]:
        """The summary message for ``replaced``: the summary and the user's words it keeps, then the
        results the user pinned, verbatim (``pins.pinned_carry``)."""
        return (build_summary_history(summary, replaced, self.kept_words_budget(), self.saved_pastes)
                + pinned_carry(replaced))

    def pinned_note(self) -> str | None:
        """What the summarizer is told of the pinned results it must not summarize away."""
        return pinned_note(self.history)

    def pastes_to_save(self, messages: Sequence[Message] | None = None) -> list[tuple[str, str]]:
        """(message id, text) of the user's pastes in ``messages`` (the history) not saved yet: a
        summary keeps only their head and tail, and names the saved copy."""
        if messages is None:
            candidates = self._history_paste_candidates()
        else:
            candidates = [b for b in typed_words(messages) if b.paste_copy is None and is_paste(b.text)]
        return [(kept_word_id(b), b.text) for b in candidates if kept_word_id(b) not in self.saved_pastes]

    def _history_paste_candidates(self) -> list[TextBlock]:
        """The unsaved-paste blocks of ``typed_words(history)``, found once per message: this runs
        before every request, and walking every block of a long history each time made a long
        session's requests quadratic. A message never changes (a change is a new message) and the
        history only grows between replacements, so the messages scanned before are not scanned
        again; after a replacement each message's blocks are remembered by its identity."""
        history = self.history
        scan = self._paste_scan
        if (scan is None or scan.history is not history or scan.length > len(history)
                or (scan.length and history[scan.length - 1] is not scan.last)):
            memo = self._paste_memo
            if len(memo) > 2 * len(history) + 64:  # messages gone from the history are let go
                memo = self._paste_memo = {id(m): memo[id(m)] for m in history
                                           if id(m) in memo and memo[id(m)][0] is m}
            scan = self._paste_scan = _PasteScan(history)
        memo = self._paste_memo
        for message in history[scan.length:]:
            entry = memo.get(id(message))
            if entry is None or entry[0] is not message:
                typed = [b for b in user_words([message]) if b.paste_copy is None and is_paste(b.text)]
                carried = any(b.paste_copy is None and is_paste(b.text) for b in carried_rule_blocks([message]))
                entry = memo[id(message)] = (message, typed, carried)
            scan.found.extend(entry[1])
            scan.carried = scan.carried or entry[2]
        scan.length, scan.last = len(history), (history[-1] if history else None)
        if scan.carried:
            # a rule an older summary carried counts only when no message kept holds its id:
            # decided on the whole history, as typed_words decides it (rare: legacy summaries)
            return [b for b in typed_words(history) if b.paste_copy is None and is_paste(b.text)]
        return list(scan.found)

    # ---- history changes (each returned for the service to persist) ----

    def append(self, message: Message, now: float) -> list[Effect]:
        if message.role == "assistant" and _server_compaction_in(message):
            return self._install_server_compaction(message, now)
        if self.config.memory_update_tokens > 0:
            self.unseen().add(message)  # before the append: a resumed history is unseen too
            self.memory_new_tokens += estimate_message(message)
        self.history.append(message)
        self.history_version += 1
        if message.role == "assistant":
            self.last_assistant_at = now
        return [Appended(message)]

    def append_user_text(self, text: str, attached: Sequence[TextBlock], now: float) -> list[Effect]:
        typed = Message.typed_by_user(text)
        if attached:
            typed = typed.copy_with([*typed.content, *attached])
        if self.history and self.history[-1].role == "user":
            merged = self.history[-1].copy_with([*self.history[-1].content, *typed.content])
            return [self.replace(self.history[:-1] + [merged], "merge_user")]
        return self.append(typed, now)

    def replace(self, new_history: list[Message], reason: str) -> Replaced:
        old_history = self.history
        self.cached_prefix = self._cache_still_valid(old_history, new_history)
        self.history = new_history
        self.history_version += 1
        self.accounting.invalidate()
        self._after_replace(old_history, reason)
        return Replaced(new_history, reason)

    def _cache_still_valid(self, old_history: list[Message], new_history: list[Message]) -> int:
        """The last request's cached prefix that a new history still starts with: the fixed
        part and the messages both share, no more (a compaction keeps only the fixed part). The
        forecasts after it must not count a cache the change already invalidated."""
        if not self.cached_prefix:
            return 0
        shared = 0
        for old, new in zip(old_history, new_history):
            if old is not new:
                break
            shared += 1
        return min(self.cached_prefix, self.stable_prefix() + estimate_messages(old_history[:shared]))

    def _after_replace(self, old_history: list[Message], reason: str) -> None:
        """Keep what the features track about the history in step with a replacement."""
        if self.config.memory_update_tokens > 0:
            self.unseen(old_history)  # a resumed history replaced before any append: still unseen
        if reason in ("micro_compaction", "restore", "merge_user", "evict", "pin") and len(old_history) == len(self.history):
            # Same messages, some blocks changed: the memory still covers the same positions.
            # (A clearing leaves the unseen messages as they were sent: the memory sees the output.)
            covered = self.session_memory.covered_index(old_history)
            merged = reason == "merge_user" and bool(old_history) and old_history[-1] is not self.history[-1]
            if merged and self.config.memory_update_tokens > 0:
                self.unseen().merged(old_history[-1], self.history[-1])
            if merged and covered == len(old_history):
                covered -= 1  # what the user typed into the last message is not covered yet
            self.session_memory.covered = self.history[covered - 1] if covered else None
            if not merged and self.memory_batch_last is not None:
                for old, new in zip(old_history, self.history):
                    if old is self.memory_batch_last:
                        self.memory_batch_last = new
                        break
        else:
            if reason != "memory_compaction" and not self.in_history(self.session_memory.covered):
                self.session_memory.covered = None
            if reason == "reset":
                # A new conversation: the old memory must not seep into its first update (the
                # service cancels a running update and empties the memory's file).
                self.memory_unseen.clear()
                self.memory_unseen_ready = True
        self.recount_memory_tokens()
        if self.rules is not None and self.rules.rules:
            self.attached_rules = attached_rule_paths(
                [b.content for m in self.history if m.role == "user" for b in m.tool_results])

    def reset(self, plan: Plan | None = None) -> list[Effect]:
        """Run a reset plan (None: one made now): clear the conversation and the live accounting;
        the ledger stays. The event carries the plan's forecast beside what happened."""
        plan = plan or self.plan_reset()
        tokens_before = self.projected()
        messages_before = len(self.history)
        replaced = self.replace([], "reset")
        self.accounting.reset()  # the growth of the old conversation says nothing about the new one
        self.last_assistant_at = None
        self.warned = False
        self.cached_prefix = 0  # a new conversation shares no cached prefix beyond the system part
        context = self.context_event()
        event = ResetEvent(messages_before=messages_before, tokens_before=tokens_before,
                           tokens_after=context.projected_tokens, **_planned_fields(plan))
        # the event first: a resumed chart shows the drop
        return [event, replaced, context, self.point(context.projected_tokens, "reset")]

    # ---- the session memory's bookkeeping ----

    def memory_starts_over(self) -> None:
        """The session memory was emptied (a rewind abandoned what it was written from): every
        message the history holds now is unseen by it again, and counted."""
        self.memory_unseen.messages = list(self.history)
        self.memory_unseen_ready = True
        self.recount_memory_tokens()

    def recount_memory_tokens(self) -> None:
        if self.config.memory_update_tokens <= 0:
            self.memory_new_tokens = 0
            return
        self.memory_new_tokens = self.unseen().tokens()

    def unseen(self, history_before: list[Message] | None = None) -> UnseenMessages:
        """The unseen messages; at first use, the history (before a replacement being applied)."""
        if not self.memory_unseen_ready:
            self.memory_unseen_ready = True
            self.memory_unseen.messages = list(self.history if history_before is None else history_before)
            if self.config.memory_update_tokens > 0:  # a resumed history: due at the next request
                self.memory_new_tokens = self.memory_unseen.tokens()
        return self.memory_unseen

    def in_history(self, message: Message | None) -> bool:
        return message is not None and any(m is message for m in reversed(self.history))

    def memory_batch(self) -> list[Message] | None:
        """The messages a background memory update should send now (None: not due). Only what the
        memory has not seen, a bounded batch (after failed updates or a resume the rest follows)."""
        if self.config.memory_update_tokens <= 0 or not self.history:
            return None
        if self.memory_new_tokens < self.config.memory_update_tokens:
            return None
        if not self.session_memory.exists and self.projected() < self.config.memory_init_tokens:
            return None  # a short session: the update would cost as much as the work it summarises
        if not self._enough_tool_calls_for_memory():
            return None
        batch = self.unseen().batch(max(self.config.memory_update_tokens, self.config.window // 2))
        if not batch:
            return None
        self.memory_batch_last = batch[-1]
        return batch

    def _enough_tool_calls_for_memory(self) -> bool:
        """memory_update_tool_calls calls since the memory's last update, or the latest reply
        called none (the end of a piece of work: a natural point to write it down)."""
        wanted = self.config.memory_update_tool_calls
        if wanted <= 0:
            return True
        latest_reply = next((m for m in reversed(self.history) if m.role == "assistant"), None)
        if latest_reply is not None and not latest_reply.tool_uses:
            return True
        return sum(len(m.tool_uses) for m in self.unseen().messages) >= wanted

    def memory_update_failed(self) -> None:
        # Wait for another full interval before retrying (no retry storm on a failing server).
        self.memory_new_tokens = 0
        self.memory_batch_last = None  # its messages stay unseen: the next update sends them

    def memory_update_seen(self, batch: list[Message]) -> Message | None:
        """The batch is summarised: the message the memory now covers up to (the batch's last, if
        the live history still holds it; else None: compacted away since, the coverage is
        unknown and the memory waits for its next update)."""
        self.memory_unseen.seen(batch)
        last, self.memory_batch_last = self.memory_batch_last, None
        return last if self.in_history(last) else None

    # ---- accounting ----

    def record_usage(self, agent: AgentName, usage: Usage, model_price: Price | None) -> UsageRecord:
        cost = cost_usd(usage, model_price) if model_price is not None and usage.known else None
        self.ledger.add(agent, usage, cost)
        check = None
        if agent == "main":
            if self.server_compaction_pending is not None or usage.server_edits:
                self.accounting.server_shrank_the_request()
            check = self.accounting.record_usage(usage, len(self.history))
            if usage.known:
                self.cached_prefix = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
            self.pinned.clear()  # a restored result was seen by this call: prunable again
        event = UsageEvent(
            agent=agent,
            input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            output_tokens=usage.output_tokens,
            context_tokens=usage.context_tokens,
            cost_usd=cost,
            reasoning_tokens=usage.reasoning_tokens,
        )
        then: list[Effect] = []
        if check is not None and check.flag:  # implausible figures: said once per kind, the estimate stands in
            then.append(UsageDistrustedEvent(reason=check.reason, reported_tokens=check.reported_tokens,
                                             estimated_tokens=check.estimated_tokens))
        if agent == "main":
            then.extend(self._reconcile_server_report(usage, model_price))  # after the call's own usage line
        return UsageRecord(event, then)

    def context_event(self) -> ContextEvent:
        proj = self.projection()
        t = self.thresholds
        total = self.ledger.total()
        calls = self.accounting.calls_to(t.auto_compact_line, proj.projected_tokens)
        last = self.history[-1] if self.history else None
        if calls is not None and last is not None and last.role == "assistant" and last.tool_uses:
            # The results of this reply's calls are still to come: they are the first growth the
            # pace counts, and they come before the next model call, not with it.
            calls = calls.less_one()
        return ContextEvent(
            exact_tokens=proj.exact_tokens,
            estimated_tokens=proj.estimated_tokens,
            projected_tokens=proj.projected_tokens,
            thresholds=t,
            breakdown=self._feature_breakdown(
                self.accounting.breakdown(self.counted_system, self.memory.text, self.tools, self.history,
                                          tool_owner=self.tool_owner)),
            level=level(proj.projected_tokens, t),
            turns_to_compact=calls.typical if calls is not None else None,
            calls_to_compact_fewest=calls.fewest if calls is not None else None,
            calls_to_compact_most=calls.most if calls is not None else None,
            cumulative_input=total.input_tokens,
            cumulative_cached=total.cached_tokens,
            cumulative_output=total.output_tokens,
            cumulative_reasoning=total.reasoning_tokens,
            cost_usd=total.cost_usd,
            compact_cost_usd=self.ledger.compact_cost_usd,
            memory_updates=self.ledger.memory.calls,
            memory_input_tokens=self.ledger.memory.input_tokens,
            memory_cost_usd=self.ledger.memory.cost_usd,
            tool_tokens_saved=self.tool_tokens_saved(),
            estimate_scale=proj.estimate_scale,
        )

    def live_context(self, usage: Usage) -> ContextEvent | None:
        """The gauge from a usage figure inside a stream; None when it is not plausible enough."""
        tokens = usage.context_tokens
        if tokens is None:
            return None
        event = self.context_event()
        # Only a plausible figure moves the gauge early (the call's final usage is checked and
        # flagged when it is not): never negative, under a few windows, not far below our estimate.
        fields = (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens)
        if (any(v is not None and v < 0 for v in fields) or tokens > self.config.window * USAGE_WINDOW_FACTOR
                or tokens < event.projected_tokens * USAGE_FLOOR_RATIO):
            return None
        return event.model_copy(update={
            "exact_tokens": tokens, "estimated_tokens": 0, "projected_tokens": tokens,
            "level": level(tokens, self.thresholds), "live": True, "estimate_scale": None,
        })

    def note_model_call(self) -> ChartPointEvent:
        projected = self.projected()
        self.accounting.record_point(projected)
        return self.point(projected, "call")

    def point(self, tokens: int, kind: PointKind) -> ChartPointEvent:
        if kind != "call":  # a compaction, a clearing or a reset: turns-to-compact counts afresh
            self.accounting.restart_growth(tokens)
        return ChartPointEvent(tokens=tokens, kind=kind)

    def _after_change(self, kind: PointKind, tokens: int | None = None) -> list[Effect]:
        """The chart point of a change (first: the context event counts afresh), then the gauge."""
        point = self.point(self.projected() if tokens is None else tokens, kind)
        return [point, self.context_event()]

    # ---- what the provider did to the context, as it reported ----

    def _install_server_compaction(self, message: Message, now: float) -> list[Effect]:
        """The reply carries a compaction item: it stands for everything before it, so the
        history becomes a short note (roles must start with the user) and this reply. The old
        messages stay in the transcript; the event waits for this call's usage."""
        tokens_before = self.projected()  # the request the server just compacted
        messages_before = len(self.history)
        replaced = self.replace([Message.user(SERVER_COMPACTED_NOTE), message], "server_compaction")
        self.last_assistant_at = now
        self.warned = False
        self.server_compaction_pending = (messages_before, tokens_before)
        return [replaced]

    def _reconcile_server_report(self, usage: Usage, model_price: Price | None) -> list[Effect]:
        """What the server reported with this call, as events; the exact figure already is
        the server's (``record_usage``), so the projection starts from it."""
        effects: list[Effect] = []
        if usage.compaction_usage is not None:
            # the server's compaction run is compaction work: it counts apart, like ours
            record = self.record_usage("compact", usage.compaction_usage, self.compact_price or model_price)
            effects += [record.event, *record.then]
        pending, self.server_compaction_pending = self.server_compaction_pending, None
        if pending is not None:
            messages_before, tokens_before = pending
            reported = usage.context_tokens
            estimated = reported is None or usage.compaction_usage is None
            if reported is not None and not estimated:
                tokens_after = reported  # Anthropic: the compaction run apart, this figure is the compacted request
            else:
                # Without the compaction run split out (OpenAI Responses), this call's usage is the
                # request the server compacted: the size before. The compacted size is estimated
                # from what was kept until the next call reports.
                if reported is not None:
                    tokens_before = reported
                    self.accounting.invalidate()
                tokens_after = self.projected()
            effects.append(CompactionEvent(trigger="server", ok=True, messages_before=messages_before,
                                           messages_after=len(self.history), tokens_before=tokens_before,
                                           tokens_after=tokens_after, tokens_after_estimated=estimated))
            effects.append(self.point(tokens_after, "server"))  # drawn apart on the gauge's history
        edits = usage.server_edits
        tool_tokens = sum(e.cleared_input_tokens for e in edits if e.kind.startswith("clear_tool_uses"))
        other_tokens = sum(e.cleared_input_tokens for e in edits) - tool_tokens
        self.accounting.note_server_cleared({"tool_results": tool_tokens, "assistant": other_tokens})
        if edits and tuple(edits) != self.server_edits_reported:
            # The server re-applies its edits to every request (the local history stays whole);
            # a new event only when what it cleared changed.
            uses = sum(e.cleared_tool_uses for e in edits)
            freed = tool_tokens + other_tokens  # thinking turns the server cleared count here too
            effects.append(MicroCompactionEvent(trigger="server", results_cleared=uses, tokens_freed=freed))
        self.server_edits_reported = tuple(edits)
        return effects

    # ---- tool results: the projection rescues what would not fit ----

    def room_for_result(self, block: ToolResultBlock, pending: list[Message]) -> int | None:
        """The characters a fresh result may keep when it alone would push the next request
        over the blocking line (cut to fit under the warning line); None when it fits."""
        t = self.thresholds
        base = self.projection(pending).projected_tokens
        result_tokens = estimate_text_fast(block.content)
        if base + result_tokens <= t.blocking_line:
            return None
        room_tokens = max(500, t.warning_line - base)
        ratio = len(block.content) / max(1, result_tokens)
        return max(1_000, int(room_tokens * ratio * 0.9))

    @staticmethod
    def cut_result(block: ToolResultBlock, tool_name: str, max_chars: int,
                   path: str | None) -> tuple[ToolResultBlock, ResultCutEvent]:
        """The result cut head+tail to ``max_chars`` (``path``: where its full output is), and the event."""
        cut = truncate_head_tail(block.content, max_chars, path)
        event = ResultCutEvent(id=block.tool_use_id, name=tool_name, original_chars=len(block.content),
                               kept_chars=len(cut), full_output_path=path)
        return ToolResultBlock(tool_use_id=block.tool_use_id, content=cut, is_error=block.is_error,
                               full_output_path=path), event

    def result_in_context(self, tool_use_id: str) -> bool:
        """Is the full (not cleared) result of this call still in the live history?

        A result with a saved full output was cut (by the registry or the pre-send
        cut, or cleared): only part of it is in the context, so it does not count.
        """
        for message in reversed(self.history):
            for block in message.content:
                if isinstance(block, ToolResultBlock) and block.tool_use_id == tool_use_id:
                    return not is_cleared(block) and block.full_output_path is None
        return False

    # ---- before every request: the decisions, lightest first ----

    def warning_crossed(self, projected: int) -> WarningCrossedEvent | None:
        """The warning, said once until the context is back under the line."""
        if projected >= self.thresholds.warning_line and not self.warned:
            self.warned = True
            return WarningCrossedEvent(projected_tokens=projected, warning_line=self.thresholds.warning_line)
        return None

    def rearm_warning(self, projected: int) -> None:
        if projected < self.thresholds.warning_line:
            self.warned = False
            # room was made (a reset, a clearing): no longer held
            self.auto_compaction_held_until = self.fallback_held_until = None

    def needs_clearing_by_size(self, projected: int) -> bool:
        """At the warning line: old tool results are cleared, largest savings first."""
        return projected >= self.thresholds.warning_line

    def still_needs_compaction(self, projected: int) -> bool:
        """Still at the auto-compact line (after a compaction from the memory, say)."""
        return projected >= self.thresholds.auto_compact_line

    def must_fall_back(self, projected: int) -> bool:
        """At the blocking line: a request that cannot fit is never sent; the extractive summary
        (unless the last compaction showed a summary cannot make room: see ``fallback_held_until``)."""
        held = self.fallback_held_until
        return projected >= self.thresholds.blocking_line and (held is None or projected >= held)

    def wants_auto_compaction(self, projected: int) -> bool:
        """At the auto-compact line, with something to compact, and ours to do (with
        server-side compaction on, the server compacts at this same line; the blocking-line
        fallback stays, as the last line of defence)."""
        held = self.auto_compaction_held_until
        return (projected >= self.thresholds.auto_compact_line and not self.only_a_summary()
                and self.auto_compaction_is_ours() and (held is None or projected >= held))

    def _hold_auto_compaction(self, tokens_after: int) -> int | None:
        """After a compaction: when it left the context over the warning line, the figure the
        context must reach before auto-compaction tries again (as much growth past what it left as
        the room a compaction is meant to make: the warning line to the auto-compact line); over
        the auto-compact line, the fallback's likewise (the auto-compact line to the blocking line)."""
        t = self.thresholds
        held = tokens_after + max(1, t.auto_compact_line - t.warning_line) if tokens_after >= t.warning_line else None
        self.auto_compaction_held_until = held
        self.fallback_held_until = (tokens_after + max(1, t.blocking_line - t.auto_compact_line)
                                    if tokens_after >= t.auto_compact_line else None)
        return held

    def auto_compaction_is_ours(self) -> bool:
        return not self.config.server_compaction

    def use_server_compaction(self, on: bool) -> None:
        """The server compacts at the auto-compact line (on) or our own compaction does (off)."""
        self.config.server_compaction = on

    def only_a_summary(self) -> bool:
        """A history that is just a summary (plus the user's new words): compacting it
        again gains nothing and, with a tiny budget, would loop on every request."""
        return (bool(self.history) and is_summary_message(self.history[0])
                and only_pinned_carry(self.history[1:]))

    def prune_by_time(self, now: float) -> PruneResult | None:
        """The results to clear after an idle pause (None: nothing to clear)."""
        if self.last_assistant_at is None:
            return None
        idle_min = (now - self.last_assistant_at) / 60.0
        if idle_min <= self.config.micro_idle_minutes:
            return None  # not idle long enough (asked before every request: no copy of the history)
        result = prune_by_time(self.history, idle_min, self.config.micro_idle_minutes, self.config.micro_keep_latest,
                               keep_ids=frozenset(self.pinned))
        return result if result.results_cleared else None

    def prune_by_size(self) -> PruneResult | None:
        """The results to clear over the warning line (None: nothing to clear)."""
        if self.accounting.tool_result_tokens(self.history) < self.config.micro_min_free:
            # All the results together could not free the minimum: no need to walk them (this
            # is asked before every request over the warning line).
            return None
        result = prune_by_size(self.history, self.config.micro_keep_tokens, self.config.micro_min_free,
                               keep_ids=frozenset(self.pinned))
        return result if result.results_cleared else None

    def plan_clearing(self, trigger: Literal["time", "size"], now: float = 0.0) -> Plan | None:
        """The clearing of old results an idle pause (``now``: the time it is) or the warning line
        asks for, as a plan its event is measured against; None: nothing to clear."""
        result = self.prune_by_time(now) if trigger == "time" else self.prune_by_size()
        if result is None:
            return None
        before = self.projected()
        first = next((i for i, (old, new) in enumerate(zip(self.history, result.history)) if old is not new),
                     len(self.history))
        planned = forecast("clear", tokens_before=before, tokens_after=max(0, before - result.tokens_freed),
                           cached_prefix=self.cached_prefix, stable_prefix=self._shared_prefix(first),
                           price=self.price)
        count = len(self.history)
        return Plan(new_plan_id(), "clear", planned, count, count, self.history_mark(), prune=result,
                    trigger=trigger)

    def _shared_prefix(self, index: int) -> int:
        """Tokens of what a change from message ``index`` on leaves cached: the fixed part and the
        messages before it."""
        return self.stable_prefix() + estimate_messages(self.history[:index])

    def outputs_to_save(self, pruned: list[Message]) -> list[ToolResultBlock]:
        """Results a clearing cuts whose full output was never saved (it was not truncated):
        they are written to disk first, so their stubs can name a file the model can re-read."""
        found: list[ToolResultBlock] = []
        for before, after in zip(self.history, pruned):
            if before is after:
                continue
            for was, now in zip(before.content, after.content):
                if (isinstance(was, ToolResultBlock) and isinstance(now, ToolResultBlock)
                        and was.full_output_path is None and not is_cleared(was) and is_cleared(now)):
                    found.append(was)
        return found

    def clear_results(self, result: PruneResult, trigger: Literal["time", "size"],
                      saved: dict[str, str], plan: Plan | None = None) -> list[Effect]:
        """Apply a clearing (``plan``: the one it runs, whose forecast its event carries); ``saved``:
        call id -> the file a result's full output was just saved to (its stub names it; a result
        not in it keeps a "not saved" stub, the transcript holds it)."""
        new = _with_saved_stubs(self.history, result.history, saved) if saved else result.history
        tokens_before = self.projected()
        effects: list[Effect] = [self.replace(new, "micro_compaction")]
        freed = max(0, tokens_before - self.projected()) if plan is not None else result.tokens_freed
        planned = {"forecast_tokens_freed": plan.forecast.tokens_freed, "plan_id": plan.id} if plan else {}
        effects.append(MicroCompactionEvent(trigger=trigger, results_cleared=result.results_cleared,
                                            tokens_freed=freed, **planned))
        return effects + self._after_change("prune")

    def run_clearing(self, plan: Plan, saved: dict[str, str]) -> list[Effect]:
        """Run a clearing plan (``plan_clearing``), made just before on this same history."""
        assert plan.prune is not None and plan.trigger in ("time", "size")
        trigger: Literal["time", "size"] = "time" if plan.trigger == "time" else "size"
        return self.clear_results(plan.prune, trigger, saved, plan)

    # ---- compaction ----

    def compaction_work(self, tokens_before: int) -> list[Message]:
        """The history a compaction request carries: it carries all of it, so one over the
        blocking line would be rejected too; the copy is shrunk first."""
        work = list(self.history)
        if tokens_before > self.thresholds.blocking_line:
            work, _dropped = drop_oldest_rounds(work, tokens_before - self.thresholds.blocking_line)
        return work

    @staticmethod
    def shrink_work(work: list[Message], gap_tokens: int | None) -> list[Message] | None:
        """The compaction request's copy without its oldest rounds, to cover a "too long" gap
        (None: nothing left to drop)."""
        kept, dropped = drop_oldest_rounds(work, gap_tokens)
        return kept if dropped else None

    def summary_problem(self, summary: str, output_tokens: int | None) -> str | None:
        """Why a summary cannot be used: over its cap, or no smaller than the history (None: fine)."""
        return summary_problem(summary, output_tokens, self.config.compact_max_output,
                               self.estimate_request(self.history), self.estimate_with_summary(summary))

    def compaction_not_done(self, trigger: Trigger, messages_before: int, tokens_before: int, *,
                            reason: str | None, replanned: bool = False,
                            nothing_to_compact: bool = False) -> CompactionEvent:
        return CompactionEvent(trigger=trigger, ok=False, messages_before=messages_before,
                               messages_after=messages_before, tokens_before=tokens_before,
                               tokens_after=tokens_before, nothing_to_compact=nothing_to_compact,
                               reason=reason, replanned=replanned)

    def install_summary(self, summary: str, trigger: Trigger, messages_before: int, tokens_before: int,
                        planned: Forecast | None = None, replanned: bool = False) -> tuple[CompactionEvent, list[Effect]]:
        # Audited summaries: the checklist of what is replaced, against the summary and the
        # user's words quoted after it; what is missing is appended as checked facts.
        new_history = self.summary_history(summary, self.history)
        audit = audit_summary(self.history, new_history[0].text)
        if audit.missing:
            summary = append_checked_facts(summary, audit)
            new_history = self.summary_history(summary, self.history)
        audit = self._with_left_out(audit, self.history)
        self.summary_sizes.append(count_tokens(summary))  # the summary alone: the forecast's bound
        replaced = self.replace(new_history, "compaction")
        self.warned = False
        tokens_after = self.projected()
        event = CompactionEvent(trigger=trigger, ok=True, messages_before=messages_before,
                                messages_after=len(new_history), tokens_before=tokens_before,
                                tokens_after=tokens_after, replanned=replanned,
                                auto_held_until=self._hold_auto_compaction(tokens_after), **_audit_fields(audit),
                                **_forecast_fields(planned))
        return event, [replaced, event, *self._after_change("compaction", tokens_after)]

    def _with_left_out(self, audit: AuditResult, replaced: Sequence[Message]) -> AuditResult:
        """The audit's result, with the line saying which of the user's oldest messages the
        bound left out (the summary says it too): never left out silently."""
        kept = kept_user_words(replaced, self.kept_words_budget(), self.saved_pastes)
        if not kept.left_out:
            return audit
        return AuditResult(facts=audit.facts, missing=[*audit.missing, Fact("words", kept.left_out_line())])

    def fallback_compact(self) -> tuple[CompactionEvent, list[Effect]]:
        """Deterministic extractive summary: no model call, so it works when nothing else can."""
        before_msgs = len(self.history)
        tokens_before = self.projected()
        summary = extractive_summary(self.history)
        # written before it runs, so its size after is known: the plan's forecast is exact
        after = round(self.estimate_with_summary(summary) * self.accounting.request_scale)
        planned = forecast("extractive", tokens_before=tokens_before, tokens_after=min(after, tokens_before),
                           cached_prefix=self.cached_prefix, stable_prefix=self.stable_prefix(), price=self.price)
        return self.install_summary(summary, "fallback", before_msgs, tokens_before, planned)

    def recover_overflow(self, gap_tokens: int | None, message: str) -> tuple[bool, list[Effect]]:
        """Drop the oldest API rounds to cover the reported gap. False when nothing can be dropped."""
        before_msgs = len(self.history)
        tokens_before = self.projected()
        kept, dropped = drop_oldest_rounds(self.history, gap_tokens)
        if not dropped:
            return False, [self.compaction_not_done("reactive", before_msgs, tokens_before,
                                                    reason="nothing left to drop")]
        first = next((i for i, (old, new) in enumerate(zip(self.history, kept)) if old is not new), len(kept))
        planned = forecast("drop", tokens_before=tokens_before,
                           tokens_after=min(tokens_before, round(self.estimate_request(kept) * self.accounting.request_scale)),
                           cached_prefix=self.cached_prefix, stable_prefix=self._shared_prefix(first), price=self.price)
        replaced = self.replace(kept, "overflow")
        tokens_after = self.projected()
        event = CompactionEvent(trigger="reactive", ok=True, messages_before=before_msgs,
                                messages_after=len(kept), tokens_before=tokens_before,
                                tokens_after=tokens_after, reason=message, gap_tokens=gap_tokens,
                                **_forecast_fields(planned))
        return True, [replaced, event, *self._after_change("compaction", tokens_after)]

    # ---- compaction from the session memory ----

    def memory_plan(self) -> MemoryPlan | None:
        """(cut, new history) of a compaction from the memory, or None when the memory
        is not up to date or would not bring the context under the auto-compact line."""
        memory = self.session_memory
        if not memory.exists:
            return None
        covered = memory.covered_index(self.history)
        cut = safe_cut(self.history, covered, self.config.memory_keep_tokens)
        if cut is None:
            return None
        replaced, kept = self.history[:cut], self.history[cut:]
        summary = f"{MEMORY_INTRO}\n\n{memory.text}"
        head = self.summary_history(summary, replaced)
        audit = audit_summary(replaced, head[0].text, kept)
        if audit.missing:
            summary = append_checked_facts(summary, audit)
            head = self.summary_history(summary, replaced)
        audit = self._with_left_out(audit, replaced)
        new_history = head + list(kept)
        # Everything the memory does not cover stays verbatim, so a stale memory loses
        # nothing; it is only used when that leaves real headroom (under the warning line).
        after = self.stable_prefix() + estimate_messages(new_history)
        if after >= self.thresholds.warning_line:
            return None
        return MemoryPlan(cut, new_history, audit)

    def compact_from_memory(self, plan: MemoryPlan, planned: Forecast | None = None,
                            replanned: bool = False) -> tuple[CompactionEvent, list[Effect]]:
        new_history, audit = plan.history, plan.audit
        planned = planned or self.forecast_compaction(plan)
        before_msgs = len(self.history)
        tokens_before = self.projected()
        replaced = self.replace(new_history, "memory_compaction")
        self.session_memory.covered = new_history[0]  # the memory covers its own summary message
        self.recount_memory_tokens()
        self.warned = False
        tokens_after = self.projected()
        event = CompactionEvent(trigger="memory", ok=True, messages_before=before_msgs,
                                messages_after=len(new_history), tokens_before=tokens_before,
                                tokens_after=tokens_after, replanned=replanned, **_audit_fields(audit),
                                **_forecast_fields(planned))
        # drawn apart on the gauge's history: no model call
        return event, [replaced, event, *self._after_change("memory", tokens_after)]

    # ---- plans: what the confirmation shows is what runs ----

    def history_mark(self) -> tuple[int, int, int]:
        """Which history (and session memory) a plan was made on: it changes with every append
        and replacement, and with a background memory update (a memory plan carries its text)."""
        return self.history_version, len(self.history), hash(self.session_memory.text)

    def remember(self, plan: Plan) -> Plan:
        self.plans[plan.id] = plan
        while len(self.plans) > PLANS_KEPT:
            del self.plans[next(iter(self.plans))]
        return plan

    def _nothing(self, kind: PlanKind, reason: str, focus: str | None = None) -> Plan:
        tokens = self.projected()
        planned = forecast("nothing", tokens_before=tokens, tokens_after=tokens, cached_prefix=self.cached_prefix,
                           stable_prefix=self.stable_prefix(), price=self.price)
        return Plan(new_plan_id(), kind, planned, len(self.history), len(self.history), self.history_mark(),
                    focus, reason)

    def plan_compaction(self, focus: str | None, *, use_memory: bool) -> Plan:
        """A compaction: from the session memory when it is up to date and frees at least half
        of what a summary would (no model call), else a summary (with ``focus``, always a
        summary: the memory was not written with it); nothing when the context is empty or
        already one summary. Not kept: ``remember`` keeps a plan a confirmation may name."""
        if not self.history:
            return self._nothing("compact", "nothing to compact: the conversation is empty", focus)
        if self.only_a_summary():
            return self._nothing("compact", "nothing to compact: the context is already one summary", focus)
        by_summary = self.forecast_compaction(None)
        count = len(self.history)
        if use_memory and focus is None and self.config.memory_update_tokens > 0:
            memory_plan = self.memory_plan()
            if memory_plan is not None:
                from_memory = self.forecast_compaction(memory_plan)
                if from_memory.tokens_freed * 2 >= by_summary.tokens_freed > 0:
                    return Plan(new_plan_id(), "compact", from_memory, count, len(memory_plan.history),
                                self.history_mark(), focus, memory=memory_plan)
        # one summary, and the pinned results carried after it
        return Plan(new_plan_id(), "compact", by_summary, count, 1 + len(pinned_carry(self.history)),
                    self.history_mark(), focus)

    def plan_reset(self) -> Plan:
        if not self.history:
            return self.remember(self._nothing("reset", "nothing to reset: the conversation is already empty"))
        return self.remember(Plan(new_plan_id(), "reset", self.forecast_reset(), len(self.history), 0,
                                  self.history_mark()))

    def take_plan(self, plan_id: str | None, focus: str | None = None) -> Plan:
        named = self.plans.pop(plan_id, None) if isinstance(plan_id, str) else None
        if named is not None and named.kind == "compact" and named.history_mark == self.history_mark():
            return named
        fresh = self.plan_compaction(focus, use_memory=True)
        return replace(fresh, replanned=True) if plan_id is not None else fresh

    def forecast_compaction(self, plan: MemoryPlan | None) -> Forecast:
        tokens_before = self.projected_unnoted()
        action: ForecastAction = "compact"
        summary_tokens = 0
        after_range: tuple[int, int] | None = None
        if plan is not None:
            action = "memory_compact"
            # the same measure as the gauge's after it: the memory and the kept messages are known
            tokens_after = round(self.estimate_request(plan.history) * self.accounting.request_scale)
        else:
            # The summary's size is not known before it is written: what is kept beside it (the
            # fixed part, the user's words and rules) is counted exactly, the summary is bounded by
            # its max_tokens and by the history it replaces (a summary no smaller than the history
            # is refused). The middle figure: this session's summaries so far, else a typical one.
            kept = round(self.estimate_with_summary("") * self.accounting.request_scale)
            history_tokens = max(0, tokens_before - self.stable_prefix())
            summary_tokens = (sum(self.summary_sizes) // len(self.summary_sizes) if self.summary_sizes
                              else min(1_500, self.config.compact_max_output, max(200, history_tokens // 3)))
            tokens_after = kept + summary_tokens
            after_range = (min(kept, tokens_before), min(kept + self.config.compact_max_output, tokens_before))
        memory = self.ledger.memory
        return forecast(action, tokens_before=tokens_before, tokens_after=min(tokens_after, tokens_before),
                        cached_prefix=self.cached_prefix, stable_prefix=self.stable_prefix(),
                        price=self.price, summary_tokens=summary_tokens, compact_price=self.compact_price,
                        memory_updates=memory.calls, memory_input_tokens=memory.input_tokens,
                        memory_cost_usd=memory.cost_usd if memory.cost_known else None, after_range=after_range)

    def forecast_reset(self) -> Forecast:
        """What ``reset`` will do: everything but the system prompt, memory files and tools goes."""
        tokens_before = self.projected_unnoted()
        return forecast("reset", tokens_before=tokens_before, tokens_after=min(self.stable_prefix(), tokens_before),
                        cached_prefix=self.cached_prefix, stable_prefix=self.stable_prefix(), price=self.price)

    # ---- rewind: back to just before an earlier user message ----

    def plan_rewinds(self) -> list[Plan]:
        """A plan for each user message the conversation can go back to, oldest first; all kept
        (replacing the last listing) so that the one the user picks runs as it was shown."""
        sizes = self._rewind_sizes()
        plans = [self._plan_rewind(target, sizes) for target in rewind_points(self.history)]
        self.rewind_plans = {plan.id: plan for plan in plans}
        return plans

    def _rewind_sizes(self) -> tuple[int, int, list[int]]:
        """(the projection now, the request with no message, each prefix of the history's tokens):
        a request's estimate is its fixed part plus its messages' (``estimate_request``), so every
        point's size is a sum, not a count of its history again (1,000 points in milliseconds)."""
        prefix = [0]
        for message in self.history:
            prefix.append(prefix[-1] + estimate_message(message))
        return self.projected(), self.estimate_request([]), prefix

    def _plan_rewind(self, target: RewindTarget, sizes: tuple[int, int, list[int]]) -> Plan:
        tokens_before, fixed, prefix = sizes
        i, j = target.message_index, target.block_index
        head = self.history[i].copy_with(list(self.history[i].content[:j])) if j else None
        kept = fixed + prefix[i] + (estimate_message(head) if head is not None else 0)
        tokens_after = min(tokens_before, round(kept * self.accounting.request_scale))
        # The messages before the point are sent again as they were: their cached prefix stays.
        shared = self.stable_prefix() + prefix[i]
        planned = forecast("rewind", tokens_before=tokens_before, tokens_after=tokens_after,
                           cached_prefix=self.cached_prefix, stable_prefix=shared, price=self.price)
        return Plan(new_plan_id(), "rewind", planned, len(self.history), i + (1 if head is not None else 0),
                    self.history_mark(), rewind=target)

    def take_rewind_plan(self, plan_id: str) -> Plan | None:
        """The rewind a confirmation named, if made on the live history; else made again to the same
        message, marked ``replanned`` (None: unknown, or that message is no longer in the context)."""
        named = self.rewind_plans.pop(plan_id, None) if isinstance(plan_id, str) else None
        if named is None or named.rewind is None:
            return None
        if named.history_mark == self.history_mark():
            return named
        for target in rewind_points(self.history):
            if target.message_id == named.rewind.message_id:
                return replace(self._plan_rewind(target, self._rewind_sizes()), replanned=True)
        return None

    def rewind(self, plan: Plan) -> tuple[RewindEvent, list[Effect]]:
        """Run a rewind plan: the history becomes what stood just before its message."""
        target = plan.rewind
        assert target is not None, "a rewind plan names its message"
        old_history = self.history
        kept = history_before(old_history, target)
        tokens_before = self.projected()
        abandoned = old_history[target.message_index:]
        if self.config.memory_update_tokens > 0 and self.memory_unseen_ready:
            # the abandoned turns must not reach the session memory's next update
            self.memory_unseen.messages = [m for m in self.memory_unseen.messages
                                           if not any(m is a for a in abandoned)]
        replaced = self.replace(kept, "rewind")
        self.warned = False
        tokens_after = self.projected()
        event = RewindEvent(ok=True, turn=target.turn, message_id=target.message_id, text=target.text,
                            abandoned_turns=target.abandoned_turns, abandoned_ids=list(target.abandoned_ids),
                            messages_before=len(old_history), messages_after=len(kept),
                            tokens_before=tokens_before, tokens_after=tokens_after,
                            forecast_tokens_after=plan.forecast.tokens_after,
                            cache_tokens_invalidated=plan.forecast.cache_tokens_invalidated,
                            replanned=plan.replanned)
        return event, [replaced, event, *self._after_change("rewind", tokens_after)]

    # ---- reversible clearing ----

    def cleared_result(self, call_id: str) -> ClearedResult:
        """The cleared result of ``call_id`` and where its output was saved; RestoreError (one line
        saying why) when there is none to restore."""
        uses = {u.id: u for m in self.history if m.role == "assistant" for u in m.tool_uses}
        # The user picked a line of the tool list: the answer names that call as the list shows
        # it (its tool and argument), never the provider's internal id ("toolu_…").
        use = uses.get(call_id)
        words = _call_words(use.name, use.input) if use is not None else "that call"
        for i in range(len(self.history) - 1, -1, -1):
            for j, block in enumerate(self.history[i].content):
                if isinstance(block, ToolResultBlock) and block.tool_use_id == call_id:
                    if not is_cleared(block):
                        raise RestoreError(f"the result of {words} is not cleared: it is already in the context")
                    if not block.full_output_path:
                        raise RestoreError(f"the result of {words} was cleared without a saved copy: "
                                           "nothing to restore")
                    name = use.name if use is not None else "tool"
                    return ClearedResult(i, j, block, name, block.full_output_path)
        raise RestoreError(f"the result of {words} is no longer in the live context "
                           "(it may have been compacted into a summary)")

    def restore_preview(self, cleared: ClearedResult, text: str) -> RestorePreview:
        """What putting ``text`` (the saved output, as read) back costs: its tokens and the projection after."""
        before = self.projected()
        added = max(0, estimate_text_fast(self._restored_text(cleared, text)) - count_tokens(cleared.block.content))
        after = before + added
        t = self.thresholds
        return RestorePreview(call_id=cleared.block.tool_use_id, tool_name=cleared.tool_name, tokens=added,
                              projected_before=before, projected_after=after, level_after=level(after, t),
                              fits=after < t.blocking_line)

    def _restored_text(self, cleared: ClearedResult, text: str) -> str:
        if len(text) > self.config.restore_max_chars:
            return truncate_head_tail(text, self.config.restore_max_chars, cleared.saved_path)
        return text

    def plan_restore(self, cleared: ClearedResult, text: str) -> RestorePreview:
        """The restore a confirmation asks about, kept as a plan: its figures, with its id."""
        preview = self.restore_preview(cleared, text)
        planned = forecast("restore", tokens_before=preview.projected_before, tokens_after=preview.projected_after,
                           cached_prefix=self.cached_prefix, stable_prefix=self._shared_prefix(cleared.message_index),
                           price=self.price)
        count = len(self.history)
        plan = self.remember(Plan(new_plan_id(), "restore", planned, count, count, self.history_mark(),
                                  call_id=cleared.block.tool_use_id))
        return replace(preview, plan_id=plan.id)

    def restore(self, cleared: ClearedResult, text: str, by: Literal["user", "model"],
                plan: Plan | None = None, replanned: bool = False) -> tuple[RestorePreview, list[Effect]]:
        """Bring a cleared result back for the next request (kept through it, then prunable
        again); RestoreError when it would push the request over the blocking line. ``plan``:
        the one confirmed (its forecast goes on the event); ``replanned``: one was named, and
        the history had changed since."""
        preview = self.restore_preview(cleared, text)
        call_id = cleared.block.tool_use_id
        if not preview.fits:
            raise RestoreError(f"restoring {call_id} (~{preview.tokens:,} tokens) would push the next request "
                               f"to ~{preview.projected_after:,}, over the blocking line "
                               f"({self.thresholds.blocking_line:,}); compact first")
        i, j, block = cleared.message_index, cleared.block_index, cleared.block
        blocks = list(self.history[i].content)
        blocks[j] = ToolResultBlock(tool_use_id=call_id, content=self._restored_text(cleared, text),
                                    is_error=block.is_error, full_output_path=block.full_output_path)
        new_history = list(self.history)
        new_history[i] = self.history[i].copy_with(blocks)
        replaced = self.replace(new_history, "restore")
        self.pinned.add(call_id)
        after = self.projected()
        planned = ({"forecast_projected_after": plan.forecast.tokens_after, "plan_id": plan.id}
                   if plan is not None else {"forecast_projected_after": preview.projected_after})
        event = RestoreEvent(id=call_id, name=preview.tool_name, tokens=preview.tokens,
                             projected_before=preview.projected_before, projected_after=after, by=by,
                             replanned=replanned, **planned)
        done = replace(preview, projected_after=after, level_after=level(after, self.thresholds), fits=True)
        return done, [replaced, event, self.context_event()]

    def cleared_results(self) -> list[str]:
        """Call ids of the cleared results that can be restored (oldest first)."""
        return [b.tool_use_id for m in self.history if m.role == "user" for b in m.tool_results
                if is_cleared(b) and b.full_output_path]

    def marked_results(self) -> tuple[list[str], list[str]]:
        """Call ids of the results the user evicted, and of those pinned (oldest first)."""
        results = [b for m in self.history if m.role == "user" for b in m.tool_results]
        return ([b.tool_use_id for b in results if b.evicted],
                [b.tool_use_id for b in results if b.pinned and not is_cleared(b)])

    # ---- the user's hand on one result: evict, pin (the tool list's d and p) ----

    def take_named_plan(self, kind: PlanKind, plan_id: str | None, call_id: str | None = None) -> Plan | None:
        """The plan a confirmation named, if it is of this kind, about this call, and was made on
        the live history (None: unknown, or made on another history: the caller makes it again)."""
        named = self.plans.pop(plan_id, None) if isinstance(plan_id, str) else None
        if (named is None or named.kind != kind or named.call_id != call_id
                or named.history_mark != self.history_mark()):
            return None
        return named

    def take_reset_plan(self, plan_id: str | None) -> Plan:
        """The reset plan a confirmation named, or one made now (marked ``replanned`` when one was named)."""
        named = self.take_named_plan("reset", plan_id)
        if named is not None:
            return named
        fresh = self.plan_reset()
        return replace(fresh, replanned=plan_id is not None)

    def _live_result(self, call_id: str) -> tuple[int, int, ToolResultBlock, ToolUseBlock | None, str]:
        """(message index, block index, result, its call, the call in words) of ``call_id``'s result
        in the live history; ResultChangeError (one line) when it is not there."""
        use = next((u for m in self.history if m.role == "assistant" for u in m.tool_uses if u.id == call_id), None)
        words = _call_words(use.name, use.input) if use is not None else "that call"
        for i in range(len(self.history) - 1, -1, -1):
            for j, block in enumerate(self.history[i].content):
                if isinstance(block, ToolResultBlock) and block.tool_use_id == call_id:
                    return i, j, block, use, words
        raise ResultChangeError(f"the result of {words} is no longer in the live context "
                                "(it may have been compacted into a summary)")

    def _with_block(self, i: int, j: int, block: ToolResultBlock) -> list[Message]:
        blocks = list(self.history[i].content)
        blocks[j] = block
        new_history = list(self.history)
        new_history[i] = self.history[i].copy_with(blocks)
        return new_history

    def plan_evict(self, call_id: str, save_to: str | None = None) -> Plan:
        """Taking one result out of the context (a stub naming its saved file stays), kept for
        ``take_named_plan``; ResultChangeError when it cannot be. ``save_to``: where the service
        would save an output never saved (the stub names it)."""
        i, _j, block, use, words = self._live_result(call_id)
        if is_cleared(block):
            raise ResultChangeError(f"the result of {words} is already out of the context")
        if block.pinned:
            raise ResultChangeError(f"the result of {words} is pinned: unpin it first (p)")
        before = self.projected()
        stub = evicted_stub(use, block.full_output_path or save_to or "not saved")
        freed = max(0, estimate_text_fast(block.content) - count_tokens(stub))
        planned = forecast("evict", tokens_before=before, tokens_after=before - freed,
                           cached_prefix=self.cached_prefix, stable_prefix=self._shared_prefix(i), price=self.price)
        count = len(self.history)
        return self.remember(Plan(new_plan_id(), "evict", planned, count, count, self.history_mark(),
                                  call_id=call_id, call=call_words(use)))

    def output_to_save(self, call_id: str) -> ToolResultBlock | None:
        """The result an eviction replaces by a stub, when its full output was never saved (the
        service writes it first, so the stub names a file the result can be restored from)."""
        _i, _j, block, _use, _words = self._live_result(call_id)
        return block if block.full_output_path is None and not is_cleared(block) else None

    def evict(self, plan: Plan, saved_path: str | None, replanned: bool = False) -> tuple[EvictEvent, list[Effect]]:
        """Run an eviction plan: the result becomes a stub naming ``saved_path`` (or the file its
        output was already saved to), marked ``evicted``; restore brings it back."""
        assert plan.call_id is not None
        i, j, block, use, words = self._live_result(plan.call_id)
        path = block.full_output_path or saved_path
        if path is None:
            raise ResultChangeError(f"the output of {words} could not be saved, so it stays in the context")
        tokens_before = self.projected()
        stubbed = block.model_copy(update={"content": evicted_stub(use, path), "full_output_path": path,
                                           "evicted": True, "pinned": False})
        replaced = self.replace(self._with_block(i, j, stubbed), "evict")
        tokens_after = self.projected()
        event = EvictEvent(id=plan.call_id, name=use.name if use is not None else "tool", path=path,
                           tokens_before=tokens_before, tokens_after=tokens_after, **_planned_fields(plan, replanned))
        return event, [replaced, event, *self._after_change("prune", tokens_after)]

    def plan_pin(self, call_id: str, pin: bool) -> Plan:
        """Pinning (or unpinning) one result: kept verbatim through clearing and compaction, and the
        summarizer told so; ResultChangeError when it cannot be. The request is the same after it."""
        _i, _j, block, use, words = self._live_result(call_id)
        if pin and is_cleared(block):
            raise ResultChangeError(f"the result of {words} is out of the context: restore it first (ctrl+t)")
        if block.pinned == pin:
            raise ResultChangeError(f"the result of {words} is {'already' if pin else 'not'} pinned")
        before = self.projected()
        # nothing sent changes: the cache stays whole
        planned = forecast("pin" if pin else "unpin", tokens_before=before, tokens_after=before,
                           cached_prefix=self.cached_prefix, stable_prefix=self.cached_prefix, price=self.price)
        count = len(self.history)
        return self.remember(Plan(new_plan_id(), "pin", planned, count, count, self.history_mark(),
                                  call_id=call_id, call=call_words(use), pin=pin))

    def set_pin(self, plan: Plan, replanned: bool = False) -> tuple[PinEvent, list[Effect]]:
        """Run a pin plan: the result's ``pinned`` mark is set (or taken off)."""
        assert plan.call_id is not None
        i, j, block, use, _words = self._live_result(plan.call_id)
        cached = self.cached_prefix
        replaced = self.replace(self._with_block(i, j, block.model_copy(update={"pinned": plan.pin})), "pin")
        self.cached_prefix = cached  # the request is the same: what was cached still is
        event = PinEvent(id=plan.call_id, name=use.name if use is not None else "tool", pinned=plan.pin,
                         call=call_words(use), tokens=estimate_text_fast(block.content),
                         tokens_before=plan.forecast.tokens_before, tokens_after=self.projected(),
                         **_planned_fields(plan, replanned))
        return event, [replaced, event, self.context_event()]

    # ---- the breakdown ----

    def _feature_breakdown(self, breakdown: dict[str, int]) -> dict[str, int]:
        """The session memory's and the attached rules' tokens as parts of their own
        (taken out of "user" and "tool_results", so the parts still add up)."""
        out = dict(breakdown)
        for server, counted in self.server_instruction_tokens.items():  # counted in "system", shown as the server's
            tokens = min(counted, out.get("system", 0))
            out["system"] = out.get("system", 0) - tokens
            out[f"mcp:{server}"] = out.get(f"mcp:{server}", 0) + tokens
        first = self.history[0] if self.history else None
        if first is not None and first.role == "user" and MEMORY_INTRO in first.text:
            tokens = min(estimate_message(first), out.get("user", 0))
            out["user"] = out.get("user", 0) - tokens
            out["session_memory"] = tokens
        if self.attached_rules and self.rules is not None:
            tokens = sum(r.tokens for r in self.rules.rules if str(r.path) in self.attached_rules)
            tokens = min(tokens, out.get("tool_results", 0))
            out["tool_results"] = out.get("tool_results", 0) - tokens
            out["rules"] = tokens
        return out


def _with_saved_stubs(old: list[Message], new: list[Message], saved: dict[str, str]) -> list[Message]:
    """``new`` with the stub of each cleared result in ``saved`` naming the file it was saved to."""
    uses = {u.id: u for m in old if m.role == "assistant" for u in m.tool_uses}
    out = list(new)
    for i, (before, after) in enumerate(zip(old, new)):
        if before is after:
            continue
        blocks = list(after.content)
        changed = False
        for j, (was, now) in enumerate(zip(before.content, after.content)):
            if not (isinstance(was, ToolResultBlock) and isinstance(now, ToolResultBlock)):
                continue
            path = saved.get(was.tool_use_id)
            if path is None or was.full_output_path is not None or is_cleared(was) or not is_cleared(now):
                continue
            kept = ToolResultBlock(tool_use_id=was.tool_use_id, content=was.content,
                                   is_error=was.is_error, full_output_path=path)
            blocks[j] = ToolResultBlock(tool_use_id=now.tool_use_id, content=stub_for(kept, uses.get(was.tool_use_id)),
                                        is_error=now.is_error, full_output_path=path)
            changed = True
        if changed:
            out[i] = after.copy_with(blocks)
    return out


class _AuditFields(TypedDict):
    """The audit's fields of a CompactionEvent."""

    facts_added: int
    checked_facts: list[str]
    facts_checked: int


class _ForecastFields(TypedDict, total=False):
    """The forecast's fields of a CompactionEvent (none when nothing was forecast)."""

    forecast_tokens_freed: int
    forecast_tokens_after_low: int
    forecast_tokens_after_high: int
    cache_tokens_invalidated: int
    next_request_cost_before_usd: float | None
    next_request_cost_after_usd: float | None
    compaction_call_cost_usd: float | None


def _audit_fields(audit: AuditResult) -> _AuditFields:
    return {"facts_added": len(audit.missing), "checked_facts": audit.added, "facts_checked": len(audit.facts)}


class _PlannedFields(TypedDict):
    """The plan's fields of a ResetEvent, EvictEvent or PinEvent: its forecast beside what happened."""

    plan_id: str
    forecast_tokens_after: int
    cache_tokens_invalidated: int
    replanned: bool


def _planned_fields(plan: Plan, replanned: bool = False) -> _PlannedFields:
    return {"plan_id": plan.id, "forecast_tokens_after": plan.forecast.tokens_after,
            "cache_tokens_invalidated": plan.forecast.cache_tokens_invalidated,
            "replanned": replanned or plan.replanned}


def _forecast_fields(planned: Forecast | None) -> _ForecastFields:
    if planned is None:
        return {}
    low, high = planned.after_range
    return {"forecast_tokens_freed": planned.tokens_freed,
            "forecast_tokens_after_low": low, "forecast_tokens_after_high": high,
            "cache_tokens_invalidated": planned.cache_tokens_invalidated,
            "next_request_cost_before_usd": planned.next_request_cost_before_usd,
            "next_request_cost_after_usd": planned.next_request_cost_after_usd,
            "compaction_call_cost_usd": planned.operation_cost_usd}


def _server_compaction_in(message: Message) -> bool:
    """A provider's compaction item (Responses) or block (Anthropic) in a reply."""
    return any(isinstance(b, OpaqueBlock) and b.kind == "compaction" for b in message.content)


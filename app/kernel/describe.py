"""The words for every event: one place, used by headless text mode and the dashboard.

``describe(event)`` gives the engine line a surface prints for an event (or None
for events that draw something else: deltas, the gauge, tool lines). Surfaces
never compose their own sentences from event fields and never parse event text.

This module imports no pydantic at load time: the dashboard imports it before its
first frame, and the events (pydantic models) load after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

# The one sanitizer for what a terminal shows; widgets reach it here (they import only the
# contract modules of app/).
from app.kernel.sanitize import sanitize_for_display

__all__ = ["Line", "denials_text", "describe", "human_tokens", "legacy_notice", "plural", "sanitize_for_display",
           "session_row", "state_text", "tool_progress_text", "tool_result_text",
           "tool_start_text", "ENGINE_LINE_TYPES"]

if TYPE_CHECKING:
    from app.kernel import events as ev

LineKind = Literal[
    "info", "warning", "error", "compaction", "compaction-failed", "overflow", "micro", "cut",
    "breaker", "retry", "interrupted", "queued",
]


@dataclass(frozen=True)
class Line:
    """One engine line: its kind (the dashboard's style class) and its words."""

    kind: LineKind
    text: str


def human_tokens(count: int | float) -> str:
    count = int(count)
    if abs(count) >= 1_000_000:
        return f"{count / 1_000_000:.2f}M"
    if abs(count) >= 1_000:
        return f"{count / 1_000:.1f}K"
    return str(count)


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages`` (``many`` for irregular plurals)."""
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


# ---------------------------------------------------------------- per event


def _compaction(e: "ev.CompactionEvent") -> Line:
    if not e.ok:
        if e.nothing_to_compact:  # not a failure: no model call was made
            again = "; re-planned: the conversation changed after the confirmation" if e.replanned else ""
            return Line("info", f"{e.reason or 'nothing to compact'} (no model call made{again})")
        if e.trigger == "reactive":
            return Line("compaction-failed", f"overflow recovery failed: {e.reason or 'nothing left to drop'}")
        return Line("compaction-failed",
                    f"compaction failed ({e.trigger}): {e.reason or 'unknown reason'} — history unchanged")
    if e.trigger == "reactive":
        gap = f" ({e.gap_tokens:,} tokens over)" if e.gap_tokens is not None else ""
        return Line("overflow",
                    f"overflow recovery: prompt too long{gap}; dropped the oldest rounds, "
                    f"{plural(e.messages_before, 'message')} → {e.messages_after:,}, "
                    f"~{human_tokens(e.tokens_before)} → ~{human_tokens(e.tokens_after)} tokens "
                    "(they stay in the transcript on disk)")
    tokens = f"~{human_tokens(e.tokens_before)} → ~{human_tokens(e.tokens_after)} tokens{_forecast_beside(e)}"
    facts = ""
    if e.facts_added:
        facts = f"; the audit added {plural(e.facts_added, 'checked fact')} the summary missed"
    elif e.facts_checked:
        facts = ("; audit: the one fact checked is in the summary" if e.facts_checked == 1
                 else f"; audit: all {e.facts_checked:,} facts checked are in the summary")
    if e.trigger in ("auto", "memory"):  # nobody confirmed these: their cost is said afterwards
        facts = _forecast_said(e) + facts
    if e.trigger == "server":
        source = ("after estimated from what was kept, until the next call reports" if e.tokens_after_estimated
                  else "as reported")
        return Line("compaction", f"context compacted by the server: {plural(e.messages_before, 'message')}"
                                  f" → 1 compaction item ({tokens}, {source})")
    if e.trigger == "memory":
        return Line("compaction", f"context compacted from the session memory (no model call):"
                                  f" {plural(e.messages_before, 'message')} → 1 summary + {e.messages_after - 1:,}"
                                  f" recent kept ({tokens}){facts}{_checked_facts(e)}")
    if e.replanned:  # not the plan the user confirmed, so it says so
        facts += "; re-planned: the conversation changed after the confirmation"
    if e.auto_held_until is not None:
        facts += (f"; what it kept is over the warning line, so auto-compaction waits until "
                  f"~{human_tokens(e.auto_held_until)} tokens")
    label = {"auto": "auto", "manual": "manual", "fallback": "fallback (extractive)"}.get(e.trigger, e.trigger)
    return Line("compaction",
                f"context compacted: {plural(e.messages_before, 'message')} → 1 summary ({label}, {tokens}){facts}"
                f"{_checked_facts(e)}")


def _forecast_beside(e: "ev.CompactionEvent") -> str:
    """The size after the forecast gave, beside what happened (nothing when none was made)."""
    low, high = e.forecast_tokens_after_low, e.forecast_tokens_after_high
    if low is None or high is None:
        return ""
    said = f"~{human_tokens(low)}" if low == high else f"{human_tokens(low)}–{human_tokens(high)}"
    return f"; forecast {said}"


def _forecast_said(e: "ev.CompactionEvent") -> str:
    """What the forecast made just before an unconfirmed compaction said it would cost."""
    parts = []
    if e.cache_tokens_invalidated:
        parts.append(f"{human_tokens(e.cache_tokens_invalidated)} cached prompt tokens invalidated")
    if e.next_request_cost_before_usd is not None and e.next_request_cost_after_usd is not None and (
            e.next_request_cost_before_usd or e.next_request_cost_after_usd):
        parts.append(f"next request ~${e.next_request_cost_before_usd:.4f} → ~${e.next_request_cost_after_usd:.4f}")
    return "; " + ", ".join(parts) if parts else ""


# Audited summaries: the facts themselves, one line each under the compaction line (the
# count alone would not let the user judge what the summary had missed).
CHECKED_FACTS_SHOWN = 8


def _checked_facts(e: "ev.CompactionEvent") -> str:
    if not e.checked_facts:
        return ""
    shown = [" ".join(fact.split()) for fact in e.checked_facts[:CHECKED_FACTS_SHOWN]]
    lines = [f"  ✓ {fact[:117] + '…' if len(fact) > 120 else fact}" for fact in shown]
    if len(e.checked_facts) > CHECKED_FACTS_SHOWN:
        lines.append(f"  … and {len(e.checked_facts) - CHECKED_FACTS_SHOWN:,} more in the summary")
    return ":\n" + "\n".join(lines)


def _micro(e: "ev.MicroCompactionEvent") -> Line:
    if e.trigger == "server":
        return Line("micro", f"the server cleared {plural(e.results_cleared, 'tool result')} from the request"
                             f" (~{human_tokens(e.tokens_freed)} tokens, as reported); the full history stays here")
    why = {"time": "an hour since the last reply", "size": "context crossed the warning line"}.get(e.trigger, e.trigger)
    planned = f"; forecast ~{human_tokens(e.forecast_tokens_freed)}" if e.forecast_tokens_freed is not None else ""
    return Line("micro", f"micro-compaction ({why}): cleared {plural(e.results_cleared, 'old tool result')},"
                         f" freed ~{human_tokens(e.tokens_freed)} tokens{planned} (full outputs stay on disk)")


def _result_cut(e: "ev.ResultCutEvent") -> Line:
    return Line("cut", f"result of {e.name} cut before sending: {e.original_chars:,} → {e.kept_chars:,}"
                       f" characters (it alone would cross the blocking line); full output at {e.full_output_path}")


def _breaker(e: "ev.BreakerEvent") -> Line:
    if e.paused:
        return Line("breaker", f"auto-compaction paused after {plural(e.failures, 'failure')} in a row"
                               " (circuit breaker); one trial after the cooldown, ctrl+s or /compact always runs")
    return Line("info", "auto-compaction resumed")


def _compaction_paused(e: "ev.CompactionPausedEvent") -> Line:
    wait = f"; one retry in {int(e.retry_in_s)}s" if e.retry_in_s is not None else ""
    return Line("breaker", f"auto-compaction paused after {plural(e.failures, 'failed attempt')}{wait};"
                           " ctrl+s or /compact still runs it")


def _retry(e: "ev.RetryEvent") -> Line:
    # The same numbers as the header's and stream-json's: retry N of the allowed retries.
    return Line("retry", f"retry {e.attempt} of {e.max_attempts} in {e.delay_s:.1f}s: {e.reason}")


def _warning_crossed(e: "ev.WarningCrossedEvent") -> Line:
    return Line("warning", f"context crossed the warning line: ~{human_tokens(e.projected_tokens)}"
                           f" ≥ {human_tokens(e.warning_line)}")


def _reset(e: "ev.ResetEvent") -> Line:
    tokens = ""
    if e.tokens_before:  # a line written before resets were plans has no figures
        tokens = f", ~{human_tokens(e.tokens_before)} → ~{human_tokens(e.tokens_after)} tokens{_planned_beside(e)}"
    return Line("info", f"conversation reset: {plural(e.messages_before, 'message')} cleared from the context"
                        f"{tokens} (transcript and tool outputs kept on disk)")


def _planned_beside(e: "ev.ResetEvent | ev.EvictEvent | ev.PinEvent") -> str:
    """The size after its plan forecast, beside what happened, and whether it was made anew."""
    said = f"; forecast ~{human_tokens(e.forecast_tokens_after)}" if e.forecast_tokens_after is not None else ""
    return said + ("; re-planned: the conversation changed after the confirmation" if e.replanned else "")


def _interrupted(e: "ev.InterruptedEvent") -> Line:
    what = f" while {e.tool_name} ran" if e.tool_name else ""
    if e.tool_name and e.at_approval:
        what = f" at the approval of {e.tool_name} (it did not run)"
    kept = "; the partial reply is kept, marked as interrupted" if e.partial_kept else ""
    return Line("interrupted", f"interrupted by the user{what}{kept}")


def _queued(e: "ev.CommandQueuedEvent") -> Line:
    what = {"prompt": "prompt", "compact": "compaction", "reset": "reset"}[e.command]
    when = "as soon as the agent is ready" if e.waiting_for == "start" else "when this turn ends"
    place = "" if e.position == 1 else f" (#{e.position} in the queue)"
    words = ""
    if e.text:
        first = " ".join(e.text.split())
        words = f": {first[:77] + '…' if len(first) > 80 else first}"
    return Line("queued", f"{what} queued, runs {when}{place}{words}")


def _result(e: "ev.ResultEvent") -> Line | None:
    if e.stop_reason == "max_steps":
        return Line("warning", f"step limit reached ({plural(e.steps, 'step')}): stopped before finishing")
    return None


def denials_text(e: "ev.ResultEvent") -> str:
    """The one line saying which tool calls of a run were refused for want of approval."""
    counts: dict[str, int] = {}
    for denial in e.permission_denials:
        counts[denial.tool_name] = counts.get(denial.tool_name, 0) + 1
    names = ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in counts.items())
    return (f"{plural(len(e.permission_denials), 'tool call')} refused ({names}): not run; --yes allows tools "
            "that change things, except those a deny rule refuses (/permissions lists the rules)")


def short_title(text: str, width: int = 60) -> str:
    """A prompt as a one-line title: whitespace folded, cut at ``width`` with an ellipsis."""
    folded = " ".join(sanitize_for_display(text).split())
    return folded if len(folded) <= width else folded[:width - 1] + "…"


def session_row(*, session_id: str, started: str, last_active: str, title: str, turns: int,
                context_tokens: int | None, cost_usd: float | None, provider: str = "", model: str = "",
                choice: bool = False) -> str:
    """One session in ``tidegauge sessions`` (``choice``: in the dashboard's picker, where the title
    comes first, the figures and provider/model on rows of their own, so an 80-column dialog wraps
    nothing)."""
    context = human_tokens(context_tokens) if context_tokens is not None else "?"
    # a cent or more to the cent; under a cent to four places, so it does not read as nothing
    cost = "$?" if cost_usd is None else f"${cost_usd:.4f}" if 0 < cost_usd < 0.01 else f"${cost_usd:.2f}"
    who = sanitize_for_display("/".join(part for part in (provider, model) if part))
    if choice:  # the id is the option's own (enter opens it); the year goes, a long model is cut
        day = last_active[5:] if last_active[:4].isdigit() and last_active[4:5] == "-" else last_active
        details = " · ".join([plural(turns, "turn"), f"{context} tokens", cost, day])
        return f"{short_title(title, 56)}\n  {details}" + (f"\n  {short_title(who, 40)}" if who else "")
    return (f"{session_id}  {started} → {last_active}  {plural(turns, 'turn')}, {context} tokens, {cost}  "
            + (f"{who}  " if who else "") + short_title(title))


def _report(e: "ev.ReportEvent") -> Line:
    c = e.context
    t = c.thresholds
    if e.kind == "usage":
        return Line("info",
                    f"{plural(e.messages, 'message')}, context ~{c.projected_tokens:,} tokens "
                    f"(auto-compact at {t.auto_compact_line:,}, window {t.window:,}); "
                    f"cumulative input {c.cumulative_input:,} (cached {c.cumulative_cached:,}"
                    f"{cached_share(c.cumulative_cached, c.cumulative_input)}), "
                    f"output {c.cumulative_output:,}{reasoning_share(c.cumulative_reasoning)}, "
                    f"~${c.cost_usd:.4f} (compaction ${c.compact_cost_usd:.4f})" + _memory_usage(c))
    parts = ", ".join(f"{k} {v:,}" for k, v in c.breakdown.items())
    exact = f"{c.exact_tokens:,}" if c.exact_tokens is not None else "none yet"
    # the estimate scaled to how the server counts (its tokenizer is not cl100k)
    scaled = f", scaled x{c.estimate_scale:.2f} to the server's count" if c.estimate_scale is not None else ""
    return Line("info",
                f"context ~{c.projected_tokens:,} tokens (exact {exact} + ~{c.estimated_tokens:,} since{scaled}); "
                f"warning {t.warning_line:,}, auto-compact {t.auto_compact_line:,}, blocking {t.blocking_line:,}, "
                f"window {t.window:,}; by part: {parts}")


def _memory_usage(c: "ev.ContextEvent") -> str:
    """The session memory's updates, apart, and the setting that turns them off."""
    if not c.memory_updates:
        return ""
    return (f"; session memory {plural(c.memory_updates, 'update')}: input {c.memory_input_tokens:,}, "
            f"${c.memory_cost_usd:.4f} (memory_update_tokens = 0 turns them off)")


def reasoning_share(reasoning: int) -> str:
    """`` (reasoning 1,024)``: the part of the output the servers said was reasoning; "" when none said."""
    return f" (reasoning {reasoning:,})" if reasoning > 0 else ""


def cached_share(cached: int, total_input: int) -> str:
    """``, 62% of input`` (prompt caching); "" before any input."""
    if total_input <= 0:
        return ""
    return f", {cached / total_input:.0%} of input"


def _mcp_server(e: "ev.McpServerEvent") -> Line | None:
    if e.status == "ready":
        left_out = (f"; not offered: {', '.join(e.not_offered)} (they run only as MCP tasks, which the server "
                    "does not say it accepts)") if e.not_offered else ""
        roots = ("" if e.roots is None else "; no roots advertised" if not e.roots
                 else f"; roots: {', '.join(e.roots)}")
        return Line("info", f"MCP server {e.name} ready: {plural(e.tools, 'tool')}{roots}{left_out}")
    if e.status == "failed":
        return Line("warning", f"MCP server {e.name} did not start: {e.detail}; carrying on without its tools")
    if e.status == "exited":
        return Line("warning", f"MCP server {e.name} stopped: {e.detail}; its tools are unavailable until it is"
                               " reconnected (/mcp in the dashboard)")
    return None


def _sub_agent(e: "ev.SubAgentEvent") -> Line | None:
    if e.status == "started":
        return Line("info", f"sub-agent started: {e.summary}" if e.summary else "sub-agent started")
    if e.status == "finished":
        return Line("info", f"sub-agent finished ({e.summary}) after {plural(e.step, 'step')}")
    return None  # its tool calls and context are drawn under the task call


def _session_memory(e: "ev.SessionMemoryEvent") -> Line:
    if not e.ok:
        return Line("warning", f"session memory update failed ({e.reason}); it is retried after more new context")
    # After a compaction the messages the memory covered are gone from the context: no count then.
    covering = f", covering the first {plural(e.covered_messages, 'message')} of the context" if e.covered_messages else ""
    return Line("info", f"session memory updated: ~{human_tokens(e.memory_tokens)} tokens{covering}")


def _restore(e: "ev.RestoreEvent") -> Line:
    who = "the model asked for" if e.by == "model" else "restored"
    planned = ""
    if e.forecast_projected_after is not None and e.forecast_projected_after != e.projected_after:
        planned = f"; forecast ~{human_tokens(e.forecast_projected_after)}"
    if e.replanned:
        planned += "; re-planned: the context changed after the confirmation"
    return Line("info", f"{who} the {e.name} result {e.id} back into the context"
                        f" (+~{human_tokens(e.tokens)} tokens, ~{human_tokens(e.projected_after)} now{planned})")


def _repaired(e: "ev.SessionRepairedEvent") -> Line:
    return Line("warning", f"the transcript was damaged and repaired on resume: {'; '.join(e.warnings)}")


# ---- the dashboard's questions and their answers ----


def forecast_text(e: "ev.ForecastEvent") -> str:
    """What a compaction or a reset will do, for its confirmation (same figures as auto-compaction logs)."""
    if e.action == "nothing":  # said at once, in one line, without a dialog
        return e.reason or f"nothing to {e.kind}"
    if e.action == "evict":
        return evict_text(e)
    what = {"compact": "compaction", "memory_compact": "compaction from the session memory",
            "reset": "reset"}[e.action]
    if e.tokens_after_low is not None and e.tokens_after_high is not None and e.tokens_after_low < e.tokens_after_high:
        low, high = e.tokens_after_low, e.tokens_after_high
        lines = [f"{what}: frees {max(0, e.tokens_before - high):,}–{max(0, e.tokens_before - low):,} tokens "
                 f"(~{e.tokens_before:,} → {low:,}–{high:,})",
                 f"after: {low:,} kept (counted) + the summary, up to {high - low:,} (its max_tokens; "
                 "its length is known once it is written)"]
    else:
        lines = [f"{what}: frees ~{e.tokens_freed:,} tokens (~{e.tokens_before:,} → ~{e.tokens_after:,})"]
    if e.messages_before:
        kept = {"compact": "1 summary", "reset": "none kept",
                "memory_compact": f"the memory + {plural(max(0, e.messages_after - 1), 'recent message')} kept"}
        lines.append(f"messages: {e.messages_before:,} → {kept[e.action]}")
    lines.append(f"prompt cache: invalidates {e.cache_tokens_invalidated:,} cached tokens")
    if e.next_request_cost_before_usd is not None and e.next_request_cost_after_usd is not None:
        lines.append(f"next request: ~${e.next_request_cost_before_usd:.4f} → ~${e.next_request_cost_after_usd:.4f}")
    else:
        lines.append("next request: cost unknown (no prices for this model)")
    if e.model_call:
        cost = f" (~${e.operation_cost_usd:.4f})" if e.operation_cost_usd else ""
        lines.append(f"calls the model to write the summary{cost}")
    else:
        lines.append("no model call")
    if e.kind == "compact" and e.memory_updates:
        cost = f", ~${e.memory_cost_usd:.4f}" if e.memory_cost_usd else ""
        lines.append(f"session memory so far: {plural(e.memory_updates, 'background update')}, "
                     f"{e.memory_input_tokens:,} input tokens{cost} (memory_update_tokens = 0 turns them off)")
    return "\n".join(lines)


def restore_question(e: "ev.RestorePreviewEvent") -> str:
    return (f"Restore the cleared {e.tool_name} result {e.call_id} into the context?\n\n"
            f"+~{e.tokens:,} tokens: context ~{e.projected_before:,} → ~{e.projected_after:,}"
            f" ({e.level_after}) for the next request")


def _restore_preview(e: "ev.RestorePreviewEvent") -> Line | None:
    if e.reason:
        return Line("warning", f"cannot restore: {e.reason}")  # the reasons name the call
    return None  # the figures are the restore dialog's question (restore_question)


def evict_text(e: "ev.ForecastEvent") -> str:
    """What taking one result out of the context will do, for its confirmation."""
    lines = [f"eviction: frees ~{e.tokens_freed:,} tokens (~{e.tokens_before:,} → ~{e.tokens_after:,})",
             "the result becomes a one-line stub naming its saved file; restore (ctrl+t) brings it back",
             f"prompt cache: invalidates {e.cache_tokens_invalidated:,} cached tokens"]
    if e.next_request_cost_before_usd is not None and e.next_request_cost_after_usd is not None:
        lines.append(f"next request: ~${e.next_request_cost_before_usd:.4f} → ~${e.next_request_cost_after_usd:.4f}")
    lines.append("no model call")
    return "\n".join(lines)


def evict_question(e: "ev.ForecastEvent") -> str:
    return f"Take the result of {e.call or e.call_id} out of the context?"


def _evict(e: "ev.EvictEvent") -> Line:
    if e.reason is not None:
        return Line("warning", f"cannot evict: {e.reason}")
    return Line("micro", f"evicted the {e.name} result {e.id} from the context: ~{human_tokens(e.tokens_before)} → "
                         f"~{human_tokens(e.tokens_after)} tokens{_planned_beside(e)} (full output at {e.path};"
                         " ctrl+t restores it)")


def _pin(e: "ev.PinEvent") -> Line:
    if e.reason is not None:
        return Line("warning", f"cannot {'pin' if e.pinned else 'unpin'}: {e.reason}")
    if e.pinned:
        return Line("info", f"pinned {e.call or e.id}: its ~{human_tokens(e.tokens)} tokens stay verbatim through "
                            f"clearing and compaction (context ~{human_tokens(e.tokens_after)}{_planned_beside(e)})")
    return Line("info", f"unpinned {e.call or e.id}: clearing and compaction may free its ~{human_tokens(e.tokens)}"
                        f" tokens again (context ~{human_tokens(e.tokens_after)}{_planned_beside(e)})")


def _whatif(e: "ev.WhatIfEvent") -> Line:
    if e.reason:
        return Line("warning", f"what-if not replayed: {e.reason}")
    return Line("info", f"what-if {e.name} (window {e.window:,}, auto-compact at {e.auto_compact_line:,}): "
                        f"{plural(e.compactions, 'compaction')}, peak {e.peak_tokens:,} tokens; recorded "
                        f"{plural(e.recorded_compactions, 'compaction')}, peak {e.recorded_peak_tokens:,} "
                        "(the chart overlays its curve)")


def _server_compaction(e: "ev.ServerCompactionEvent") -> Line:
    if e.reason:
        return Line("warning", f"server-side compaction not switched {'off' if e.on else 'on'}: {e.reason}")
    if e.on:
        at = f" at {e.threshold:,} tokens (the auto-compact line)" if e.threshold else ""
        return Line("info", f"server-side compaction on for this session: the {e.provider} server compacts{at};"
                            " tidegauge's own auto-compaction stands down")
    return Line("info", "server-side compaction off: tidegauge compacts at the auto-compact line as usual")


def _file_names(paths: "list[str]") -> str:
    """Paths a rewind names, made harmless to print (a file name is the workspace's, not ours)."""
    return ", ".join(sanitize_for_display(path) for path in paths)


def _rewind(e: "ev.RewindEvent") -> Line:
    if not e.ok:
        return Line("warning", f"rewind not done: {e.reason or 'unknown reason'} — conversation unchanged")
    forecast = (f" (forecast ~{human_tokens(e.forecast_tokens_after)})"
                if e.forecast_tokens_after is not None and e.forecast_tokens_after != e.tokens_after else "")
    again = "; re-planned: the conversation changed after the list was shown" if e.replanned else ""
    lines = [f"rewound to before turn {e.turn}: {plural(e.abandoned_turns, 'turn')} abandoned (kept in the "
             f"transcript), ~{human_tokens(e.tokens_before)} → ~{human_tokens(e.tokens_after)} tokens{forecast}{again}"]
    if e.files_restored:
        lines.append(f"files restored: {_file_names(e.files_restored)}")
    if e.files_skipped:
        lines.append("files left as they are (changed since tidegauge wrote them): "
                     + _file_names(e.files_skipped))
    if e.files_not_restorable:
        lines.append("files not restorable (no copy kept: over the size bound or unreadable): "
                     + _file_names(e.files_not_restorable))
    if e.reason:
        lines.append(e.reason)
    return Line("info", "\n".join(lines))


def _rewind_points(e: "ev.RewindPointsEvent") -> Line | None:
    if e.reason:
        return Line("info", e.reason)
    return None  # the list is the rewind dialog


def rewind_point_row(p: "ev.RewindPoint", width: int = 60) -> str:
    """One user message in the rewind list: its turn, the context just before it, its words."""
    size = "~" + human_tokens(p.tokens_after)
    return f"turn {p.turn:>3}  {size:>7}  {short_title(p.text, width)}"


def rewind_plan_text(tokens_before: int, p: "ev.RewindPoint", cost_before: float | None = None) -> str:
    """What rewinding to ``p`` will do (the plan it runs), for the rewind dialog."""
    lines = [f"rewind to before turn {p.turn}: frees ~{max(0, tokens_before - p.tokens_after):,} tokens "
             f"(~{tokens_before:,} → ~{p.tokens_after:,})",
             f"abandons {plural(p.abandoned_turns, 'turn')} (kept in the transcript); "
             f"prompt cache: invalidates {p.cache_tokens_invalidated:,} cached tokens; no model call"]
    if cost_before is not None and p.next_request_cost_after_usd is not None:
        lines.append(f"next request: ~${cost_before:.4f} → ~${p.next_request_cost_after_usd:.4f}")
    if p.files:
        lines.append(f"files changed since: {_file_names(p.files)}")
    if p.files_changed_since:
        lines.append("changed since by something else (left as they are unless overwritten): "
                     + _file_names(p.files_changed_since))
    if p.files_not_restorable:
        lines.append("not restorable: " + _file_names(p.files_not_restorable))
    return "\n".join(lines)


def tool_start_text(e: "ev.ToolStartEvent") -> str:
    """A tool call's line in headless text mode (the dashboard draws it as a widget)."""
    return f"⏺ {e.name} {e.summary}"


def tool_result_text(e: "ev.ToolResultEvent") -> str:
    """The line under a tool call in headless text mode: status, size, cut, duration."""
    if e.interrupted:
        return "  ⎿ interrupted"
    size = f"{e.original_chars:,} chars"
    cut = f", truncated to {e.kept_chars:,} (full output: {e.full_output_path})" if e.truncated else ""
    return f"  ⎿ {'error' if e.is_error else 'ok'}, {size}{cut}, {e.duration_ms:.0f} ms"


# The header's words for what the session is doing (``state_text``); "starting" is the
# dashboard's own, before the session exists.
STATE_WORDS = {
    "starting": "starting…",
    "idle": "idle",
    "streaming": "streaming",
    "tool": "running tool",
    "compacting": "compacting",
    "waiting_approval": "waiting for approval",
    "retrying": "retrying",
    "interrupting": "interrupting",
}


def state_text(e: "ev.StateEvent | None") -> str:
    """What the session is doing, with the numbers it gave: ``running run_bash (2/3)``,
    ``retry 2/5 in 4.0s``, ``compacting: focus``. None: the session is still starting."""
    if e is None:
        return STATE_WORDS["starting"]
    words = STATE_WORDS.get(e.state, e.state)
    of = f" ({e.tool_index}/{e.tool_count})" if e.tool_count > 1 else ""
    if e.state == "tool" and e.tool_name:
        return f"running {e.tool_name}{of}"
    if e.state == "waiting_approval" and e.tool_name:
        return f"waiting for approval: {e.tool_name}{of}"
    if e.state == "retrying" and e.max_attempts:
        detail = f" {e.detail}" if e.detail else ""
        return f"retry {e.attempt}/{e.max_attempts}{detail}"
    if e.detail and e.state not in ("idle", "streaming"):
        return f"{words}: {e.detail}"
    return words


def tool_progress_text(e: "ev.ToolProgressEvent") -> str:
    """How far a running tool got: ``3 of 10 (30%): indexing``, or ``3: indexing`` with no total; an
    MCP task's status: ``task working: Gathering sources...``."""
    if e.task_status:
        status = f"task {e.task_status.replace('_', ' ')}"
        return f"{status}: {e.message}" if e.message else status
    done = f"{e.progress:g}"
    if e.total is not None and e.total > 0:
        done = f"{done} of {e.total:g} ({min(e.progress / e.total, 1.0):.0%})"
    return f"{done}: {e.message}" if e.message else done


def _tool_calls_capped(e: "ev.ToolCallsCappedEvent") -> Line:
    return Line("warning", f"the model asked for {e.asked:,} tool calls in one reply: the first {e.ran:,} ran, "
                           f"{e.asked - e.ran:,} were answered \"not run\" (max_tool_calls_per_turn = {e.ran:,})")


def _tool_user_content(e: "ev.ToolUserContentEvent") -> Line:
    return Line("info", f"tool output for you (not sent to the model): {e.text}")


def _notice(e: "ev.NoticeEvent") -> Line:
    return Line(e.level, e.text)


def _silent(_e: Any) -> None:
    return None


def _memory_import(e: "ev.MemoryImportEvent") -> Line:
    where = f"memory import {e.path} (from {e.importer})"
    if e.action == "ask":
        return Line("warning", f"{where} is {e.reason}: approve or decline it")
    if e.action == "skipped":
        return Line("warning", f"{where} skipped: {e.reason}; to allow it, add \"{e.path}\" to "
                               "memory_allowed_imports in config.toml")
    if e.action == "refused":
        return Line("warning", f"{where} refused: {e.reason}")
    if e.action == "declined":
        return Line("info", f"{where} not loaded: you declined it for this project")
    if e.action == "cut":
        return Line("cut", f"{where} cut: {e.reason}")
    return Line("info", f"{where} approved for this project: it is in the next request")


# ---- MCP servers asking the client

def _elicitation_request(e: "ev.ElicitationRequestEvent") -> Line:
    return Line("warning", f"MCP server {e.server} asks you to fill in a form (your answer goes to {e.server} only)")


def _elicitation_resolved(e: "ev.ElicitationResolvedEvent") -> Line:
    if e.reason:
        return Line("warning", f"MCP server {e.server} asked for a form: {e.action}d, {e.reason}"
                    if e.action != "cancel" else f"MCP server {e.server}'s form cancelled: {e.reason}")
    if e.action == "accept":
        sent = f" ({', '.join(e.fields)})" if e.fields else ""
        return Line("info", f"form sent to MCP server {e.server}{sent}")
    return Line("info", f"MCP server {e.server}'s form {'declined' if e.action == 'decline' else 'cancelled'}")



def _sampling(e: "ev.SamplingEvent") -> Line:
    if e.status == "answered":
        tokens = f", {e.output_tokens:,} tokens out" if e.output_tokens is not None else ""
        return Line("info", f"model call for MCP server {e.server} answered (at most {e.max_tokens:,} tokens{tokens})")
    if e.status == "refused":
        return Line("warning", f"MCP server {e.server} asked for a model call: refused, {e.reason}")
    return Line("warning", f"model call for MCP server {e.server} failed: {e.reason}")

# ---- permissions

_EFFECT_WORDS = {"allow": "allow", "ask": "ask  ", "deny": "deny "}

# Where a permission rule came from, in the user's words (here, not in app.agent.permissions:
# the words of every event live in kernel, which imports nothing above it).
SOURCE_WORDS: dict[str, str] = {
    "flag": "--allowed-tools/--disallowed-tools",
    "config": "config.toml",
    "project": "the project's .tidegauge/settings.toml",
    "saved": "saved for this project",
    "session": "chosen this session",
}


def source_words(source: str) -> str:
    return SOURCE_WORDS.get(source, source)


def _prompt_cache_off(e: "ev.PromptCacheOffEvent") -> Line:
    server = e.base_url or f"the {e.provider} server"
    if e.remembered:
        return Line("warning", f"prompt caching off for {server}: it refused cached requests in an earlier session"
                               f" ({e.reason}); none are sent (prompt_caching = true asks for them again)")
    return Line("warning", f"prompt caching off for {server}: it refused the cached request ({e.reason}); sent"
                           " again without cache marks and with a plain system prompt, and remembered for its"
                           " later sessions")


SANDBOX_WORDS = {
    "bwrap": "commands run in a sandbox (bubblewrap): only the workspace and a private /tmp are writable, "
             "key stores and tidegauge's data are hidden",
    "off": "commands are not sandboxed (sandbox = \"off\")",
    "unavailable": "commands are not sandboxed: bubblewrap cannot run here (apt-get install bubblewrap, "
                   "or enable user namespaces)",
}
# The header's few words.
SANDBOX_BADGES = {"bwrap": "sandboxed", "off": "no sandbox", "unavailable": "no sandbox (unavailable)"}


def sandbox_words(state: str, network: bool = False) -> str:
    """How commands run, as /permissions says it."""
    words = SANDBOX_WORDS.get(state, state)
    if state == "bwrap":
        words += "; network " + ("on (sandbox_network)" if network else "off")
    return words


def _permissions(e: "ev.PermissionsEvent") -> Line:
    """/permissions: the rules in force, strongest first, each with where it came from."""
    if e.rules:
        lines = [f"  {_EFFECT_WORDS[r.effect]} {r.rule}   ({source_words(r.source)})" for r in e.rules]
    else:
        lines = ["  no rules: tools that change things ask, the rest run"]
    head = "permission rules (deny wins over ask, ask over allow; deny also over --yes):"
    where = [sandbox_words(e.sandbox, e.sandbox_network)] if e.sandbox is not None else []
    if e.project_file:
        where.append(f"project rules (ask and deny only): {e.project_file}")
    if e.saved_file:
        where.append(f"rules saved from the approval dialog: {e.saved_file}")
    return Line("info", sanitize_for_display("\n".join([head, *lines, *where])))


def _approval_resolved(e: "ev.ApprovalResolvedEvent") -> Line | None:
    if not e.rules:
        return None
    where = "saved for this project" if e.saved else "for this session"
    return Line("info", sanitize_for_display(f"allowed without asking from now on ({where}): {', '.join(e.rules)}"))


def approval_question(e: "ev.ApprovalRequestEvent") -> str:
    """The approval dialog's question: leaving the sandbox is said as such, with the model's reason."""
    if e.outside_sandbox is not None:
        reason = " ".join(sanitize_for_display(e.outside_sandbox).split())
        return f"Allow {e.name} to run outside the sandbox: {reason}?"
    return f"Allow {e.name}?"


def approval_choices(e: "ev.ApprovalRequestEvent") -> list[tuple[str, str]]:
    """(decision, words) of each answer the approval dialog offers, in order."""
    if e.outside_sandbox is not None:  # asked every time: no rule may let a command out
        return [("yes", "Yes, run it outside the sandbox this once"), ("no", "No")]
    offered: list[tuple[str, str]] = [("yes", "Yes, this once")]
    exact, prefix = e.choices.get("exact"), e.choices.get("prefix")
    command = e.name in ("run_bash", "run_bash_untruncated")
    if exact:
        offered.append(("always_exact", "Always this exact command" if command else "Always this file"))
    if prefix:
        shown = ", ".join(_pattern_of(rule).removesuffix(":*") + " …" for rule in prefix)
        folder = ", ".join(_pattern_of(rule).removesuffix("**") for rule in prefix)
        offered.append(("always_prefix", f"Always commands starting with {shown}" if command
                        else f"Always files in {folder}"))
    offered.append(("always", f"Always {e.name}, any call"))  # "always": the tool, as before
    offered.append(("no", "No"))
    return offered


def _pattern_of(rule: str) -> str:
    return rule[rule.index("(") + 1:-1] if rule.endswith(")") and "(" in rule else rule


def _mcp_auth(e: "ev.McpAuthEvent") -> Line:
    scopes = f" ({sanitize_for_display(e.scopes)})" if e.scopes else ""
    if e.status == "offer":
        return Line("warning", f"MCP server {e.server} wants more scope{scopes}: asked whether to log in again")
    if e.status == "consent":
        return Line("info", f"logging in to MCP server {e.server}{scopes}: authorize tidegauge in your browser "
                            f"(opened if there is a display), at {sanitize_for_display(e.url)}")
    if e.status == "logged_in":
        return Line("info", f"logged in to MCP server {e.server}{scopes}")
    if e.status == "logged_out":
        return Line("info", f"logged out of MCP server {e.server}: its tokens are deleted")
    return Line("warning", f"login to MCP server {e.server} failed: {sanitize_for_display(e.reason)}")


def reauthorize_question(e: "ev.McpAuthEvent") -> str:
    """The re-authorize dialog's words: which server, which scopes the new login will ask for."""
    scopes = sanitize_for_display(e.scopes) or "the scope it names"
    return (f"MCP server {e.server} refused a tool call: it wants more scope (HTTP 403 insufficient_scope).\n"
            f"Log in again, asking for: {scopes}?\n"
            "Your browser opens for consent; the call waits and is sent again once you are logged in.")


MCP_VIEW_HEADER = ("server", "state", "transport", "tools", "prompts", "resources", "schema tokens", "deferred",
                   "auth")


def mcp_server_cells(row: Any) -> tuple[str, ...]:
    """A server's cells under ``MCP_VIEW_HEADER`` (an ``McpServerRow`` or ``app.mcp.status.ServerStatus``):
    the same words in ``tidegauge mcp list`` and the dashboard's /mcp view."""
    state = row.state + (f" ({row.busy})" if getattr(row, "busy", "") else "")
    tokens = f"{row.schema_tokens:,}" + (f" (+{row.instructions_tokens:,} instructions)"
                                         if row.instructions_tokens else "")
    auth = row.auth + (f"; scopes: {row.scopes}" if getattr(row, "scopes", "") else "")
    return (row.name, state, row.transport, str(row.tools), str(row.prompts), "yes" if row.resources else "no",
            tokens, "yes" if row.deferred else "no", sanitize_for_display(auth))


def mcp_row_lines(row: Any) -> list[str]:
    """A server of the /mcp view in lines: name, state, transport and target; what it offers and
    costs; its auth; why it failed, when it did."""
    state = row.state + (f" ({row.busy})" if getattr(row, "busy", "") else "")
    lines = [f"{row.name}  {state}  {row.transport} {row.target}".rstrip()]
    offers = (f"{plural(row.tools, 'tool')}, {plural(row.prompts, 'prompt')}, "
              f"{'resources' if row.resources else 'no resources'}; "
              f"schema {row.schema_tokens:,} tokens"
              + (f" (+{row.instructions_tokens:,} instructions)" if row.instructions_tokens else "")
              + ("; deferred behind load_tools" if row.deferred else ""))
    if row.state == "ready":
        lines.append(f"  {offers}")
    auth = row.auth + (f"; scopes: {row.scopes}" if getattr(row, "scopes", "") else "")
    lines.append(f"  auth: {auth}")
    if row.reason:
        lines.append(f"  {' '.join(row.reason.split())}")
    return [sanitize_for_display(line) for line in lines]


# Every event type has an entry (a test checks it against the Event union): a new
# event type without words is a failing test, not a silent gap.

def _mcp_attachment(e: "ev.McpAttachmentEvent") -> Line:
    """Says whose text it is: the server's, sent with the user's turn, not typed by the user."""
    size = f"{e.chars:,} characters"
    if e.original_chars > e.chars:
        size = f"{e.chars:,} of {e.original_chars:,} characters (cut like a tool result"
        size += f"; full text in {e.full_output_path})" if e.full_output_path else ")"
    if e.kind == "prompt":
        return Line("info", f"MCP prompt {sanitize_for_display(e.name)} from server {e.server}: "
                            f"{plural(e.messages, 'message')}, {size}, the server's text sent with your turn")
    return Line("info", f"MCP resource {sanitize_for_display(e.name)} from server {e.server} attached: {size}")

DESCRIBERS: dict[str, Callable[[Any], Line | None]] = {
    # drawn as their own widgets or figures, not as engine lines
    "text_delta": _silent,
    "thinking_delta": _silent,
    "assistant_message": _silent,
    "user_message": _silent,
    "tool_start": _silent,
    "tool_result": _silent,
    "tool_calls_capped": _tool_calls_capped,
    "tool_progress": _silent,  # drawn on the tool's own line (tool_progress_text)
    "tool_user_content": _tool_user_content,
    "usage": _silent,
    "context": _silent,
    "state": _silent,
    "session": _silent,
    "chart_point": _silent,
    "approval_request": _silent,
    "approval_resolved": _approval_resolved,  # a line only when an "always" added rules
    # engine lines
    "compaction": _compaction,
    "micro_compaction": _micro,
    "reset": _reset,
    "warning_crossed": _warning_crossed,
    "result_cut": _result_cut,
    "breaker": _breaker,
    "compaction_paused": _compaction_paused,
    "retry": _retry,
    "notice": _notice,
    "error": lambda e: Line("error", f"error: {e.message}"),
    "result": _result,
    "queued": _queued,
    "interrupted": _interrupted,
    "output_limit": lambda _e: Line("warning", "the model hit its output limit (max_tokens)"),
    "partial_discarded": lambda e: Line(
        "warning", f"the partial reply above ({e.chars:,} characters) was discarded: the stream failed"),
    "report": _report,
    "mcp_server": _mcp_server,
    "config_warning": lambda e: Line("warning", e.text),
    "session_memory": _session_memory,
    "restore": _restore,
    "rule_attached": lambda e: Line("info", f"rule {e.rule_path} attached for {e.file_path}"
                                            f" (~{human_tokens(e.tokens)} tokens)"),
    "session_repaired": _repaired,
    "usage_distrusted": lambda e: Line("warning", f"usage from the server not believed: {e.reason};"
                                                  f" our estimate (~{human_tokens(e.estimated_tokens)}) stands in"),
    "sub_agent": _sub_agent,
    "forecast": _silent,  # the confirmation dialog's question (forecast_question)
    "cleared_results": _silent,  # the tool list marks them
    "restore_preview": _restore_preview,
    "server_compaction": _server_compaction,
    "memory_import": _memory_import,  # imports outside the repository, refused, cut
    "prompt_cache_off": _prompt_cache_off,
    "permissions": _permissions,  # /permissions
    "elicitation_request": _elicitation_request,  # an MCP server's form (the App shows it)
    "elicitation_resolved": _elicitation_resolved,
    "mcp_sampling": _sampling,
    "request_recorded": _silent,  # the inspector (i, /inspect) shows it
    "mcp_prompts": _silent,  # the prompt box completes them; /help names none
    "mcp_attachment": _mcp_attachment,  # a server's prompt or resource in the user's turn
    "whatif": _whatif,  # the transcript replayed under another policy; the chart overlays the curve
    "evict": _evict,  # the tool list's d
    "pin": _pin,  # the tool list's p
    "rewind_points": _rewind_points,  # the rewind dialog's list (a line only when there is nothing)
    "rewind": _rewind,
    "mcp_status": _silent,  # the /mcp view draws it
    "mcp_auth": _mcp_auth,  # a login in a running session, and the re-authorize offer
}


# The event types that draw an engine line (the dashboard routes them to the conversation).
ENGINE_LINE_TYPES = frozenset(kind for kind, describer in DESCRIBERS.items() if describer is not _silent)


def describe(event: Any) -> Line | None:
    """The engine line for ``event``, or None when it draws no line."""
    describer = DESCRIBERS.get(event.type)
    return describer(event) if describer is not None else None


# stream-json kept a prose ``notice`` line after these events before they were
# typed; it still does (scripts read it), worded by ``describe``.
LEGACY_NOTICE_LEVELS: dict[str, Callable[[Any], Literal["info", "warning", "error"] | None]] = {
    "compaction": lambda e: ("info" if e.trigger != "reactive" else "warning") if e.ok else (
        "error" if e.trigger != "reactive" else None),
    "result_cut": lambda _e: "warning",
    "reset": lambda _e: "info",
    "compaction_paused": lambda _e: "warning",
    "interrupted": lambda _e: "warning",
    "output_limit": lambda _e: "warning",
    "mcp_server": lambda e: "warning" if e.status in ("failed", "exited") else None,
    "partial_discarded": lambda _e: "warning",
}


def legacy_notice(event: Any) -> tuple[Literal["info", "warning", "error"], str] | None:
    """(level, text) of the notice stream-json prints after ``event``, if it printed one before."""
    level_of = LEGACY_NOTICE_LEVELS.get(event.type)
    if level_of is None:
        return None
    level = level_of(event)
    line = describe(event)
    if level is None or line is None:
        return None
    return level, line.text

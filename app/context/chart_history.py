"""The gauge's history for a session recorded before chart points were events.

Live, the engine emits a ``ChartPointEvent`` where it acts (a model call, a compaction,
a prune, a reset). A transcript written before that has none; its points are derived
here, beside the engine, from the events the engine recorded at those same moments, so
the session (and every surface) only passes them on.
"""

from __future__ import annotations

from app.kernel.events import (ChartPointEvent, CompactionEvent, ContextEvent, Event, MicroCompactionEvent, PointKind,
                               ResetEvent, UsageEvent)


def compaction_point_kind(trigger: str) -> PointKind:
    """The gauge's history marks compactions from the session memory and by the server apart."""
    if trigger == "memory":
        return "memory"
    return "server" if trigger == "server" else "compaction"


def with_chart_points(events: list[Event]) -> list[Event]:
    """``events`` with the chart points an old session's transcript lacks (unchanged when it has them)."""
    if any(isinstance(e, ChartPointEvent) for e in events):
        return list(events)
    out: list[Event] = []
    pending_drop: PointKind | None = None
    last_projected = 0
    for event in events:
        out.append(event)
        # Only the events an old transcript can hold matter here: no exhaustive match (a new
        # event is never in a transcript written before chart points were events).
        if isinstance(event, UsageEvent) and event.agent == "main":
            out.append(ChartPointEvent(tokens=event.context_tokens or last_projected, kind="call"))
        elif isinstance(event, CompactionEvent) and event.ok:
            out.append(ChartPointEvent(tokens=event.tokens_after, kind=compaction_point_kind(event.trigger)))
        elif isinstance(event, (MicroCompactionEvent, ResetEvent)):
            pending_drop = "prune" if isinstance(event, MicroCompactionEvent) else "reset"
        elif isinstance(event, ContextEvent):
            last_projected = event.projected_tokens
            if pending_drop is not None:
                out.append(ChartPointEvent(tokens=event.projected_tokens, kind=pending_drop))
                pending_drop = None
    return out

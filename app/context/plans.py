"""Plans: what a compaction or a reset will do, worked out before it runs, and then run as is.

The confirmation shows a plan; confirming names the plan by its id, and the engine runs that
plan, not a fresh guess (a forecast once described a compaction from the session memory, no
model call, while a summary with a model call ran). A plan made on a history that has changed
since is made again, and the compaction says so. A plan that does nothing (the context is
already one summary, the conversation is already empty) is answered at once, without a dialog.

Pure data: the core (app/context/core.py) makes them, the engine (app/context/engine.py) runs them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from app.context.audit import AuditResult
from app.context.forecast import Forecast
from app.kernel.messages import Message


@dataclass(frozen=True)
class MemoryPlan:
    """A compaction from the session memory, worked out but not applied."""

    cut: int  # messages before this index are replaced by the memory
    history: list[Message]  # the new history: the memory message, then the kept messages
    audit: AuditResult


PlanKind = Literal["compact", "reset"]

# Plans kept for a confirmation to name (older ones are made again when named).
PLANS_KEPT = 8
_ids = itertools.count(1)


def new_plan_id() -> str:
    return f"plan-{next(_ids)}"


@dataclass(frozen=True)
class Plan:
    """One operation on the context, worked out but not applied."""

    id: str
    kind: PlanKind  # what was asked for
    forecast: Forecast  # its action says what runs: "compact", "memory_compact", "reset" or "nothing"
    messages_before: int
    messages_after: int  # a summary (or the memory) and the messages kept verbatim; 0 after a reset
    history_mark: tuple[int, int, int]  # the history it was made on (see ContextCore.history_mark)
    focus: str | None = None
    reason: str = ""  # why it does nothing (for "nothing")
    memory: MemoryPlan | None = None  # the compaction from the session memory it runs
    replanned: bool = False  # made again at run time: the history changed after the confirmation

    @property
    def action(self) -> str:
        return self.forecast.action

    @property
    def does_nothing(self) -> bool:
        return self.forecast.action == "nothing"

    @property
    def model_call(self) -> bool:
        return self.forecast.model_call

    def describe(self) -> str:
        """One line for a log (the dialog's words are app.kernel.describe.forecast_text)."""
        if self.does_nothing:
            return self.reason
        return self.forecast.describe()

"""The record of one tool call that every widget showing it draws.

Apart from the view model (which folds events into these records) so that the widgets that
draw them import no pydantic: the dashboard's first frame needs the widgets, not the events.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ToolCallRecord:
    """One tool call, as the conversation line, the tool list and the output panel show it."""

    id: str
    name: str
    summary: str
    status: str = "running"  # running | ok | error | interrupted
    original_chars: int = 0
    kept_chars: int = 0
    truncated: bool = False
    duration_ms: float = 0.0
    full_output_path: str | None = None  # the full output, saved when it was cut
    cut_before_send: bool = False  # cut again before sending: it alone would have crossed the blocking line
    cleared: bool = False  # micro-compaction cleared the result from the context (restorable)
    restored: bool = False  # a cleared result brought back into the context
    evicted: bool = False  # the user took the result out of the context (restorable)
    pinned: bool = False  # the user pinned the result: clearing and compaction keep it verbatim
    progress: str = ""  # while it runs: how far it got, in describe's words
    content: str | None = None  # what the model saw (None until the result comes)
    waiting_approval: bool = False  # not running yet: the user is asked first
    rewound: bool = False  # in a turn a rewind went back before: out of the context (kept in the transcript)

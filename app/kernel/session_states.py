"""Whether a session is running a command, by its state word.

Apart from ``app.kernel.events`` (which re-exports both) so that the dashboard's header can
tell before its first frame, without importing pydantic.
"""

from __future__ import annotations

# Whether the session is running a command, by its state: the one definition, for the session's
# snapshot, its process mirror, the view model and the header. "starting" is the dashboard's own
# word before the session exists: nothing runs yet, so nothing to interrupt or queue behind.
AT_REST: frozenset[str] = frozenset({"starting", "idle"})


def is_busy(state: str) -> bool:
    """A session in ``state`` is running a command (an interrupt has something to stop); a state
    word this version does not know (a newer session's) counts as busy: nothing is sent past it."""
    return state not in AT_REST

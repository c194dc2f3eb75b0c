"""Inputs shared by the benchmarks: the seed's app.log, code that is optional until it lands."""

from __future__ import annotations

import importlib
from types import ModuleType

from benchmarks.harness import Unavailable

FULL_LOG_LINES = 300_000  # about 15 MB, as in the seed's experiment
QUICK_LOG_LINES = 60_000  # about 3 MB


def app_log_text(lines: int) -> str:
    """The seed's app.log: ``lines`` INFO lines, then the ERROR line at the very end.

    seq 1 N | sed 's/^/2026-10-18 12:00:00 INFO request handled id=/' > app.log
    echo "2026-10-18 12:00:01 ERROR database connection refused" >> app.log
    """
    body = "".join(f"2026-10-18 12:00:00 INFO request handled id={i}\n" for i in range(1, lines + 1))
    return body + "2026-10-18 12:00:01 ERROR database connection refused\n"


def require(module: str) -> ModuleType:
    """Import ``module``; if it does not exist yet, the benchmark is skipped with a reason.

    A module that exists but fails to import is a real error and propagates.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise Unavailable(f"{module} does not exist yet (TODO: measure once it lands)") from exc
        raise

"""10. A huge MCP tool result through a stdio server: linear time, bounded memory.

A real stdio server (tests/mcp_servers/content_server.py, the SDK's MCPServer)
answers ``big`` with a 10 MB and a 100 MB text result. Each rep is what a session
does with the server: start it, make the one call, stop it. The SDK's own reader
re-split its whole buffer on every chunk (100 MB: 240 s, 685 MB); ours looks at
each chunk once and sends an answer over the cap to a file.

- 11a: the 100 MB rep's time against the 10 MB rep's (median of the reps, ABBA).
- 11b: this process's peak resident size over all reps (the server's own memory is
  its business: a separate process).

Slow (tens of seconds): left out of ``--quick``.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._fixtures import require
from benchmarks.harness import Check, interleaved, median, seconds, skipped

NAME_TIME = "11a MCP stdio: 100 MB result"
NAME_RSS = "11b MCP stdio: 100 MB result, RSS"
TARGET_RATIO = 3.0
TARGET_RSS_MB = 300.0
SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp_servers" / "content_server.py"


def run(quick: bool) -> list[Check]:
    time_target = f"<= {TARGET_RATIO:g}× the time of 10 MB"
    rss_target = f"< {TARGET_RSS_MB:g} MB"
    if quick:
        reason = "slow (tens of seconds): full run only"
        return [skipped(NAME_TIME, time_target, reason), skipped(NAME_RSS, rss_target, reason)]
    require("app.mcp.bounded_stdio")
    from app.mcp.client import McpConnection
    from app.mcp.settings import McpServerConfig

    calls: dict[int, list[float]] = {10: [], 100: []}
    cut: dict[int, bool] = {}

    def one(megabytes: int) -> float:
        async def session() -> float:
            with tempfile.TemporaryDirectory() as folder:
                config = McpServerConfig(command=sys.executable, args=[str(SERVER)], startup_timeout=120,
                                         tool_timeout=600)
                started = time.perf_counter()
                connection = McpConnection("big", config, Path(folder), Path(folder) / "session")
                await connection.start()
                try:
                    call_started = time.perf_counter()
                    output = await connection.call_tool("big", {"megabytes": megabytes})
                    calls[megabytes].append(time.perf_counter() - call_started)
                finally:
                    await connection.aclose()
                assert not output.is_error, output.text[:300]
                cut[megabytes] = output.full_output_path is not None
                return time.perf_counter() - started

        return asyncio.run(session())

    reps = 3
    small, large = interleaved(lambda: one(10), lambda: one(100), reps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
    s, b = median(large), median(small)
    call_s, call_b = median(calls[100]), median(calls[10])
    figure = (f"{seconds(s)} vs {seconds(b)} (start, call, stop; the call alone {seconds(call_s)} vs "
              f"{seconds(call_b)}; median of {reps})")
    extra: dict[str, Any] = {"large_s": s, "small_s": b, "large_call_s": call_s, "small_call_s": call_b,
                             "cut_at_transport": cut}
    return [
        Check(name=NAME_TIME, figure=figure, target=time_target, value=s / b, limit=TARGET_RATIO, op="<=",
              unit="x", extra=extra),
        Check(name=NAME_RSS, figure=f"peak {peak_mb:.0f} MB over {2 * reps} sessions", target=rss_target,
              value=peak_mb, limit=TARGET_RSS_MB, op="<=", unit="MB", extra={"peak_rss_mb": peak_mb}),
    ]

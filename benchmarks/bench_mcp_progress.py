"""11c. A flood of MCP progress notifications: a call whose stdio server sends 110,000 of them (quick:
20,000) in one go, against the server's own time to write them into a pipe read as fast as it goes.

The MCP SDK spends about a millisecond on each notification it is handed (two tasks each): the
transport hands it only the newest of each run for a token, so the call keeps up with the server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._fixtures import require
from benchmarks.harness import Check, interleaved, median, seconds

NAME = "11c MCP progress flood"
TARGET_RATIO = 2.0
SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp_servers" / "progress_flood.py"


def _servers_own_time(n: int) -> float:
    """The server writing ``n`` notifications into a pipe that is read in large pieces, start to exit."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--emit", str(n)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    while proc.stdout.read(1 << 20):
        pass
    proc.wait()
    return time.perf_counter() - started


def _through_tidegauge(n: int) -> float:
    """Start the server (not timed), then one call of ``flood`` through the session's MCP client, then
    a stop (not timed); the process start is in both figures."""
    from app.mcp.client import McpConnection
    from app.mcp.settings import McpServerConfig

    async def session() -> float:
        with tempfile.TemporaryDirectory() as folder:
            config = McpServerConfig(command=sys.executable, args=[str(SERVER)], startup_timeout=120, tool_timeout=600)
            connection = McpConnection("flood", config, Path(folder), Path(folder) / "session")
            reports: list[float] = []
            await connection.start()
            try:
                started = time.perf_counter()
                output = await connection.call_tool("flood", {"n": n}, on_progress=lambda done, *_: reports.append(done))
                spent = time.perf_counter() - started
            finally:
                await connection.aclose()
            assert not output.is_error and reports and reports[-1] == n, (output.text[:200], reports[-1:])
            return spent

    return asyncio.run(session())


def run(quick: bool) -> list[Check]:
    require("app.mcp.bounded_stdio")
    n = 20_000 if quick else 110_000
    reps = 3
    own, ours = interleaved(lambda: _servers_own_time(n), lambda: _through_tidegauge(n), reps)
    value = median(ours) / median(own)
    figure = (f"{seconds(median(ours))} through tidegauge vs {seconds(median(own))} the server alone "
              f"({n:,} notifications; median of {reps})")
    return [Check(name=NAME, figure=figure, target=f"<= {TARGET_RATIO:g}× the server's own time", value=value,
                  limit=TARGET_RATIO, op="<=", unit="x", extra={"ours_s": ours, "own_s": own, "notifications": n})]

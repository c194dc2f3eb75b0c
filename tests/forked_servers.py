"""Server processes forked from one interpreter that imported their scripts once
(tests/mcp_servers/forking.py).

For the tests whose server must be a process, because they kill it or check that it outlives a
session, but which do not check how it starts: each start is a real process of its own (a fork),
without the interpreter start and the SDK's imports (about a CPU-second) a new ``python SCRIPT``
pays. One ``ForkingServers`` per module (a module-scoped fixture) serves all its tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FORKING = Path(__file__).parent / "mcp_servers" / "forking.py"


class ForkingServers:
    """``python tests/mcp_servers/forking.py MODULES``, asked for server processes."""

    def __init__(self, *modules: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(FORKING), *modules], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the forking server ended (exit code {self.proc.wait(timeout=30)})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def start(self, module: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> ForkedServer:
        """MODULE's ``main()`` with ``sys.argv[1:]`` = ARGV in a new process; its output appended to LOG."""
        pid = self.ask(start=module, argv=argv, env=dict(os.environ if env is None else env), log=str(log))["pid"]
        return ForkedServer(self, pid)

    def close(self) -> None:
        """Every server still running is killed; then the forking process ends."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class ForkedServer:
    """One forked server process: what a test does with ``subprocess.Popen``'s."""

    def __init__(self, forking: ForkingServers, pid: int) -> None:
        self.forking = forking
        self.pid = pid

    def poll(self) -> int | None:
        """None while it runs; its ``os.waitpid`` status once it has ended."""
        status: int | None = self.forking.ask(poll=self.pid)["status"]
        return status

    def kill(self) -> None:
        """SIGKILL, returning once it has ended (its sockets closed)."""
        self.forking.ask(kill=self.pid)

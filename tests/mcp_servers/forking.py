"""One interpreter that has imported server scripts once, and forks a server process per start.

    python tests/mcp_servers/forking.py MODULE [MODULE ...]

A script here run as its own process costs an interpreter start and the MCP SDK's imports (about
a CPU-second) each time. A test that needs the server to be a process (it kills it, or checks that
it outlives a session) but does not check its start asks this process instead (tests/forked_servers.py):
each start is a fork of it, a real process with its own pid whose sockets the kernel closes when
it is killed, that runs the module's ``main()`` with the given argv and environment.

Commands on stdin, one JSON line each, one JSON line answered on stdout:

- ``{"start": MODULE, "argv": [...], "env": {...}, "log": PATH}`` → ``{"pid": N}``: stdout and
  stderr go to PATH (appended), stdin is /dev/null;
- ``{"kill": N}`` → ``{"status": S}``: SIGKILL, then waited for (S is ``os.waitpid``'s status);
- ``{"poll": N}`` → ``{"status": S or null}``.

At the end of stdin every server still running is killed and waited for. This process starts no
thread, so a fork holds no lock another thread had.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any


def _start(module: Any, argv: list[str], env: dict[str, str], log: str) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [module.__file__, *argv]
        module.main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    modules = {name: importlib.import_module(name) for name in sys.argv[1:]}
    # The imported objects out of the collector's sight: a fork's collections would otherwise
    # write to (and so copy) every page of them.
    gc.freeze()
    running: set[int] = set()
    ended: dict[int, int] = {}  # pid -> waitpid status, for a poll after the kill or the exit
    for line in sys.stdin:
        command = json.loads(line)
        answer: dict[str, Any]
        if "start" in command:
            pid = _start(modules[command["start"]], command["argv"], command["env"], command["log"])
            running.add(pid)
            answer = {"pid": pid}
        else:
            pid = command.get("kill", command.get("poll"))
            if pid in running:
                if "kill" in command:
                    os.kill(pid, signal.SIGKILL)
                done, status = os.waitpid(pid, 0 if "kill" in command else os.WNOHANG)
                if done:
                    running.discard(pid)
                    ended[pid] = status
            answer = {"status": ended.get(pid)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for pid in running:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()

"""12. What the session memory's background updates cost over a long session (issue 27).

A real ``tidegauge -p`` process against the loopback server (tests/fake_llm_server.py,
real HTTP and SSE): a scripted session of one ~30 KB file read per turn at a 1M-token
window, the memory on at its default interval (``memory_update_tokens`` 10,000, so an update
after every turn or two). The server reports each request's input as its body's size / 4
(the same measure for both kinds, cheaper than a tokenizer over 100 MB of bodies); the
figures are the run's own ``usage_by_agent`` from its result line: "memory" against "main".

An update used to resend the whole history, so it cost about what the main request did
(the issue saw half the session's input go to updates); it now sends the memory so far and
the messages since the last update, so its cost grows with what is new.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from benchmarks._fixtures import require
from benchmarks._live import ROOT
from benchmarks.harness import Check

import fake_llm_server as fls  # noqa: E402  (benchmarks._live put tests/ on the path)

NAME = "13 session memory updates' input"
TARGET_RATIO = 0.2
TURNS, QUICK_TURNS = 100, 30
FILE_BYTES = 30_000
KEY = "sk-bench-fake-key-0123456789"
MEMORY_HEAD = "[Session memory update]"  # app.context.session_memory.MEMORY_PROMPT_HEAD


def _file_text(turn: int) -> str:
    lines = [f"# module {turn}"]
    while sum(len(line) + 1 for line in lines) < FILE_BYTES:
        n = len(lines)
        lines.append(f"def handler_{turn}_{n}(request):  return request.user or raise_error('{turn}-{n}')  # ok")
    return "\n".join(lines) + "\n"


class Script:
    """Turn i reads f{i}.py; a memory update gets a short memory back."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.step = 0
        self.updates = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], path: str) -> fls.Reply:
        usage = {"prompt": len(json.dumps(body)) // 4, "completion": 40}
        with self.lock:
            if body.get("tool_choice") == "none":
                self.updates += 1
                return fls.openai_text(f"## Task goal and acceptance criteria\nreview the modules (memory {self.updates})\n"
                                       "## Done so far\nread the modules in order\n## Key findings\nnone\n"
                                       "## In progress / next step\nread the next one\n## User preferences\nnone",
                                       usage=usage)
            self.step += 1
            if self.step > self.turns:
                return fls.openai_text("All modules reviewed.", usage=usage)
            return fls.openai_tool_calls([("read_file", {"path": f"f{self.step:03d}.py"})],
                                         text=f"Reading module {self.step}.", usage=usage)


def run(quick: bool) -> list[Check]:
    require("app.context.session_memory")
    turns = QUICK_TURNS if quick else TURNS
    server = fls.FakeLLMServer().start()
    server.default = Script(turns)
    try:
        with tempfile.TemporaryDirectory(prefix="tg-bench-memory-") as tmp:
            base = Path(tmp)
            work = base / "work"
            work.mkdir()
            for i in range(1, turns + 1):
                (work / f"f{i:03d}.py").write_text(_file_text(i))
            env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
            env.update({"TIDEGAUGE_CONFIG_DIR": str(base / "config"), "TIDEGAUGE_DATA_DIR": str(base / "data"),
                        "OPENAI_API_KEY": KEY, "TIDEGAUGE_WINDOW": "1000000", "TIDEGAUGE_BUDGET": "0",
                        "TIDEGAUGE_MAX_RETRIES": "0", "PYTHONPATH": str(ROOT)})
            proc = subprocess.run(
                [sys.executable, "-m", "app", "-p", f"review f001.py to f{turns:03d}.py, one per turn",
                 "--provider", "openai", "--model", "m", "--base-url", server.base_url("openai"),
                 "--output-format", "stream-json", "--max-steps", str(turns + 5), "--yes"],
                cwd=work, env=env, capture_output=True, text=True, timeout=280)
    finally:
        server.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"tidegauge exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    by_agent = result["usage_by_agent"]
    main = by_agent["main"]["input_tokens"]
    memory = by_agent.get("memory", {}).get("input_tokens", 0)
    updates = sum(1 for r in server.requests if MEMORY_HEAD in json.dumps(r.json.get("messages", [])))
    largest_main = max(len(json.dumps(r.json)) // 4 for r in server.requests if r.json.get("tool_choice") != "none")
    if not updates or not memory:
        raise RuntimeError("no memory update ran: the benchmark measured nothing")
    ratio = memory / main
    return [Check(
        name=NAME,
        figure=(f"{memory:,} memory vs {main:,} main input tokens ({updates} updates over {turns} turns of "
                f"~{FILE_BYTES // 1000} KB reads; last request ~{largest_main:,} tokens)"),
        target=f"<= {TARGET_RATIO:g}× the main requests' input",
        value=ratio, limit=TARGET_RATIO, op="<=", unit="x",
        extra={"memory_input_tokens": memory, "main_input_tokens": main, "updates": updates, "turns": turns,
               "largest_main_request_tokens": largest_main},
    )]

"""15. What the sandbox costs a command: a trivial run_bash call in bubblewrap and without.

Subject: the real run_bash tool (``RunBashTool.call``) running ``true`` in the sandbox
(bwrap: the PID, network, IPC and UTS namespaces, the read-only root, the private /tmp, the
key stores covered), as every command of a session runs by default.

Baseline: the same call with the sandbox off: the same tool, the same fork, the same
process-group and marker bookkeeping, bash started directly.

Target: the sandbox adds at most 15 ms (the median of the paired differences, the two
interleaved ABBA). An added time, not a ratio: the target is what a user waits for more, and
the baseline (a fork of a Python process and bash's start) is itself a few milliseconds.
Skipped where bwrap cannot run.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from benchmarks.harness import Check, Unavailable, interleaved, median, seconds

NAME = "18 sandboxed run_bash: added time"
MAX_ADDED_MS = 15.0


def run(quick: bool) -> list[Check]:
    from app.tools.base import ToolContext
    from app.tools.bash import RunBashArgs, RunBashTool
    from app.tools.sandbox import bwrap_problem, policy_for

    if (problem := bwrap_problem()) is not None:
        raise Unavailable(f"bwrap cannot run here: {problem}")
    reps = 15 if quick else 40
    tool = RunBashTool()
    args = RunBashArgs(command="true")

    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
        work = Path(tmp)
        contexts = {mode: ToolContext(workspace=work, tool_results_dir=work / "tool-results",
                                      sandbox=policy_for(mode, False, (work / "data",)))
                    for mode in ("on", "off")}
        loop = asyncio.new_event_loop()
        outputs: dict[str, str] = {}

        def call(mode: str) -> float:
            started = loop.time()
            output = loop.run_until_complete(tool.call(args, contexts[mode]))
            elapsed = loop.time() - started
            outputs[mode] = output.text
            return elapsed

        try:
            for mode in ("on", "off"):  # warm: the first fork of each kind pays for page faults
                call(mode)
            base, subj = interleaved(lambda: call("off"), lambda: call("on"), reps)
        finally:
            loop.close()
    # Both did the real work: bash ran `true` and the tool read its exit.
    assert all(text.endswith("[exit code: 0]") for text in outputs.values()), outputs
    added = [s - b for b, s in zip(base, subj)]
    added_ms = median(added) * 1e3
    return [Check(
        name=NAME,
        figure=(f"+{added_ms:.1f} ms: {seconds(median(subj))} sandboxed vs {seconds(median(base))} without "
                f"(median of {reps} pairs)"),
        target=f"adds <= {MAX_ADDED_MS:g} ms to `true`",
        value=added_ms, limit=MAX_ADDED_MS, op="<=", unit="ms",
        extra={"sandboxed_s": subj, "unsandboxed_s": base},
    )]

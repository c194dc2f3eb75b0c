"""Run every benchmark, print the table, exit non-zero when a target is missed.

    python benchmarks/run.py            # full sizes (a few minutes on 2 cores)
    python benchmarks/run.py --quick    # smaller sizes, for CI
    python benchmarks/run.py --json results.json --only ingest,compaction

Each benchmark module runs in its own child process, so one benchmark's
memory (a 15 MB output, tiktoken's buffers) cannot inflate another's resident
size figure or its garbage collections.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import Check, Unavailable, errored, exit_code, format_table, machine_info, skipped, write_json  # noqa: E402

# Module name -> the targets it reports (names and target texts, used when it cannot run).
BENCHMARKS: dict[str, list[tuple[str, str]]] = {
    "bench_ingest": [("1 ingest 15 MB tool result", ">= 10× faster than tiktoken of the whole")],
    "bench_expand": [
        ("2a expand: first paint", "<= 1.5× bare Log widget"),
        ("2b expand: page-down", "each < 50 ms"),
    ],
    "bench_stream": [
        ("3a stream 80k deltas (real provider)", "<= 2.2× the time of 40k"),
        ("3b stream at 2k/s: screen lag at end", "<= 100 ms"),
        ("3c key echo while streaming", "p95 <= 25 ms"),
    ],
    "bench_session": [("4a 1,000 turns: accounting", "turn 1,000 <= 2× turn 10")],
    "bench_memory": [
        ("4b 1,000 outputs: dashboard RSS", "< 300 MB"),
        ("4c 1,000 outputs: DOM pruned", "conversation children bounded"),
    ],
    "bench_startup": [("5 start-up to first frame", "<= 1.3× import textual.app")],
    "bench_compaction": [("6 compaction overhead", "< 50 ms at 150k tokens")],
    "bench_memory_compaction": [("7 compaction from session memory", "<= 0.5× a normal compaction")],
    "bench_demo": [("8 demo scenario: dashboard vs headless", "<= 1.15× headless")],
    "bench_quit": [
        ("9a quit: ctrl+q to exit, idle", "< 0.1 s"),
        ("9b quit: ctrl+q to exit, mid-reply", "< 0.1 s"),
    ],
    "bench_arguments": [("10 30 MB tool argument refused", "<= 4× reading the bytes")],
    "bench_mcp_stdio": [
        ("11a MCP stdio: 100 MB result", "<= 3× the time of 10 MB"),
        ("11b MCP stdio: 100 MB result, RSS", "< 300 MB"),
    ],
    "bench_mcp_progress": [("11c MCP progress flood", "<= 2× the server's own time")],
    "bench_headless": [("12 one-turn headless run", "<= 2.5× import httpx, pydantic")],
    "bench_memory_updates": [("13 session memory updates' input", "<= 0.2× the main requests' input")],
    "bench_resume": [("14 --resume of 5,000 turns vs 50", "<= 14× the time of 50 turns (quick: 1,000, <= 4×)")],
    "bench_redact": [("15 redaction of a 1 MB body", "<= 30 ms, encoded and folded copies included")],
    "bench_inspect": [
        ("16a inspector opens: 1M-token request, 80×24", "<= 150 ms"),
        ("16b inspector opens: 1M-token request, 160×50", "<= 150 ms"),
        ("16c inspect --json: 1M-token request", "<= 1 s"),
    ],
    "bench_whatif": [("17 whatif: 1,000 turns, three policies", "<= 5 s")],
    "bench_sandbox": [("18 sandboxed run_bash: added time", "adds <= 15 ms to `true`")],
    "bench_peer_codex": [
        ("19 headless run vs codex exec", "<= 1.0× codex exec"),
        ("19b headless run, new data directory, vs codex exec", "<= 1.3× codex exec"),
    ],
}

_MARKER = "@@BENCH-RESULTS@@"


def _run_child(module: str, quick: bool) -> None:
    """In the child: run one module and print its checks as JSON after a marker line."""
    targets = BENCHMARKS[module]
    try:
        bench = importlib.import_module(f"benchmarks.{module}")
        checks: list[Check] = bench.run(quick)
    except Unavailable as exc:
        checks = [skipped(name, target, str(exc)) for name, target in targets]
    except Exception as exc:  # reported as an error row, and the run fails
        import traceback

        traceback.print_exc()
        checks = [errored(name, target, f"{type(exc).__name__}: {exc}") for name, target in targets]
    sys.stdout.flush()
    print(_MARKER)
    print(json.dumps([c.to_json() for c in checks]))


def _run_in_subprocess(module: str, quick: bool, timeout: float, verbose: bool) -> list[Check]:
    targets = BENCHMARKS[module]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", module]
    if quick:
        cmd.append("--quick")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return [errored(name, target, f"timed out after {timeout:.0f} s") for name, target in targets]
    if verbose and proc.stderr.strip():
        print(proc.stderr, file=sys.stderr)
    out = proc.stdout
    if _MARKER not in out:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [errored(name, target, f"child exited {proc.returncode}: {tail}") for name, target in targets]
    payload = out.split(_MARKER, 1)[1].strip().splitlines()[0]
    checks = [Check.from_json(item) for item in json.loads(payload)]
    if not verbose and any(c.status == "error" for c in checks) and proc.stderr.strip():
        print(f"--- {module} stderr ---\n{proc.stderr.strip()}", file=sys.stderr)
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (CI)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--only", metavar="NAMES", help="comma-separated modules, e.g. ingest,compaction")
    parser.add_argument("--strict", action="store_true", help="a skipped benchmark fails the run too")
    parser.add_argument("--verbose", action="store_true", help="show the children's stderr")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        _run_child(args.child, args.quick)
        return 0

    modules = list(BENCHMARKS)
    if args.only:
        wanted = {n.strip().removeprefix("bench_") for n in args.only.split(",") if n.strip()}
        unknown = wanted - {m.removeprefix("bench_") for m in modules}
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        modules = [m for m in modules if m.removeprefix("bench_") in wanted]

    info = machine_info()
    timeout = 300.0 if args.quick else 1200.0
    checks: list[Check] = []
    started = time.perf_counter()
    for module in modules:
        print(f"running {module}{' (quick)' if args.quick else ''} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        checks += _run_in_subprocess(module, args.quick, timeout, args.verbose)
        print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    info["wall_seconds"] = round(time.perf_counter() - started, 1)

    print(format_table(checks, info))
    if args.json:
        write_json(args.json, checks, info, args.quick)
    return exit_code(checks, strict=args.strict)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())

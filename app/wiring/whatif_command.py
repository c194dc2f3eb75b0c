"""`tidegauge whatif [SESSION] ...`: a recorded session replayed offline under other policies.

The replay is ``app/session/whatif.py``'s; this is the command line around it: which session,
which policies, and the output (a table and sparklines, ``--json``, ``--plot FILE``). It
makes no model call and opens no connection. matplotlib is imported only for ``--plot``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Sequence

from app.kernel.errors import SetupError
from app.wiring.subcommand_parser import SubcommandParser
from app.session.store import SessionStore
from app.session.whatif import PolicyError, load_recording, make_policy, parse_policy, run_whatif, sparkline
from app.wiring.config import load_settings
from app.kernel.sanitize import sanitize_for_display

if TYPE_CHECKING:
    from app.session.whatif import WhatIfCurve

POLICY_HELP = ('another policy to replay, its settings as KEY=VALUE with commas: window, auto-compact, warning, '
               'max-output, micro-compact, summarizer (e.g. "window=100000,auto-compact=0.6"; repeatable)')



def build_whatif_parser() -> argparse.ArgumentParser:
    p = SubcommandParser(
        prog="tidegauge whatif",
        description="Replay a recorded session offline under other context settings and compare the context "
                    "curves: compactions, peak, input tokens and cost per policy, the recorded run first. No model "
                    "is called: the recorded replies and tool outputs stand, compactions use the extractive "
                    "summarizer (or the session memory, written extractively).",
        epilog="The flags below --policy make one policy; each --policy adds another. With neither, the recorded "
               "settings are replayed (how close the replay comes to the recording).")
    p.add_argument("session", nargs="?", metavar="SESSION",
                   help="session id or a unique prefix (default: the latest of this directory, as --continue)")
    p.add_argument("--window", metavar="TOKENS", help="context window in tokens")
    p.add_argument("--auto-compact", metavar="FRACTION",
                   help="auto-compact line as a fraction of the window (0-1; default: the recorded line's share)")
    p.add_argument("--warning", metavar="FRACTION", help="warning line (clearing of old tool results) as a fraction of the window")
    p.add_argument("--max-output", metavar="CHARS",
                   help="tool output kept, head and tail (0: no cut); full outputs come from the session's saved files")
    p.add_argument("--micro-compact", metavar="SPEC",
                   help='micro-compaction: "off", or "idle=MINUTES;keep=N;keep-tokens=N;min-free=N" (any of them)')
    p.add_argument("--summarizer", metavar="memory|extractive",
                   help="compact from the session memory (updated extractively) or by an extractive summary "
                        "(default: as the recorded run)")
    p.add_argument("--policy", action="append", default=[], metavar="SPEC", help=POLICY_HELP)
    p.add_argument("--json", action="store_true", help='print {"policies": [...]} instead of the table')
    p.add_argument("--plot", metavar="FILE", help="also draw the curves into FILE (.svg or .png; needs matplotlib)")
    return p


def run_whatif_command(argv: Sequence[str], out: IO[str] | None = None) -> int:
    """The command; a bad input raises SetupError (one line, exit 2 in ``main``)."""
    out = out or sys.stdout
    args = build_whatif_parser().parse_args(list(argv))
    if args.plot is not None and Path(args.plot).suffix.lower() not in (".svg", ".png"):
        raise SetupError(f"--plot: {args.plot!r} must end in .svg or .png")
    try:
        policies = []
        flags = (args.window, args.auto_compact, args.warning, args.max_output, args.micro_compact, args.summarizer)
        if any(v is not None for v in flags) or not args.policy:
            policies.append(make_policy(window=args.window, auto_compact=args.auto_compact, warning=args.warning,
                                        max_output=args.max_output, micro=args.micro_compact,
                                        summarizer=args.summarizer))
        policies.extend(parse_policy(spec) for spec in args.policy)
    except PolicyError as err:
        raise SetupError(str(err)) from None
    settings = load_settings({})
    store = SessionStore(settings.data_dir_path)
    if args.session:
        session = store.open(args.session)
    else:
        found = store.latest_for(Path.cwd())
        if found is None:
            raise SetupError(f"whatif: no session for {Path.cwd()} (pass an id; `tidegauge sessions --all` lists them)")
        session = found
    try:
        recording = load_recording(session.transcript_path, session_id=session.id, model=session.meta.model,
                                   tool_results_dir=session.tool_results_dir, price_overrides=settings.prices)
    except PolicyError as err:
        raise SetupError(str(err)) from None
    curves = run_whatif(recording, policies)
    if args.plot is not None:
        # matplotlib only with --plot.
        from app.wiring.whatif_plot import PlotError, write_plot

        try:
            write_plot(Path(args.plot), curves, title=f"tidegauge whatif · session {session.id}")
        except PlotError as err:
            raise SetupError(str(err)) from None
    if args.json:
        print(json.dumps({"session": session.id, "policies": [c.as_json() for c in curves]}), file=out)
    else:
        print_table(session.id, recording.model, curves, out)
        if args.plot is not None:
            print(f"plot written to {args.plot}", file=out)
    return 0


def print_table(session_id: str, model: str, curves: Sequence["WhatIfCurve"], out: IO[str]) -> None:
    requests = len(curves[0].points) if curves else 0
    print(f"session {session_id} ({sanitize_for_display(model) or 'model unknown'}): {requests} model calls, "
          "replayed offline (extractive summaries, no model call)", file=out)
    headers = ("policy", "window", "auto-compact", "compactions", "peak", "input tokens", "cost")
    rows = [(c.name, f"{c.window:,}", f"{c.auto_compact_line:,}", f"{c.compactions}", f"{c.peak_tokens:,}",
             f"{c.input_tokens:,}", "unknown" if c.cost_usd is None else f"${c.cost_usd:,.4f}") for c in curves]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    name_width = min(widths[0], 40)
    widths[0] = name_width

    def line(cells: Sequence[str]) -> str:
        first = cells[0] if len(cells[0]) <= name_width else cells[0][:name_width - 1] + "…"
        return "  ".join([first.ljust(name_width), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:]))])

    print(line(headers), file=out)
    for row in rows:
        print(line(row), file=out)
    top = max((c.peak_tokens for c in curves), default=0)
    print(f"context per model call (each bar's height: up to {top:,} tokens)", file=out)
    for c in curves:
        name = c.name if len(c.name) <= name_width else c.name[:name_width - 1] + "…"
        print(f"{name.ljust(name_width)}  {sparkline(c.points, top, 48)}", file=out)


"""`tidegauge rewind [SESSION] [--list] [--to N [--files] [--overwrite-changed]] [--json]`.

The headless way to what Esc Esc does in the dashboard: list the user messages a recorded session
can go back to (newest first, with the context just before each), or go back to one. Going back
appends a ``rewind`` history line and a ``rewind`` event to the transcript (it stays append-only:
the abandoned turns stay in it), so a later ``--continue``/``--resume`` starts from just before
that message, without the abandoned turns in its context; the message is printed to be edited and
sent again. ``--files`` also puts back the files write_file/edit_file changed since, leaving any
file changed since by something else as it is unless ``--overwrite-changed``.

No model is called and nothing is sent; the transcript's writer lock refuses while a live session
writes it. Sizes are estimates of the request (the fixed part as the session last measured it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, Any, Sequence

from app.kernel.errors import SetupError
from app.wiring.subcommand_parser import SubcommandParser
from app.context.rewind import history_before, rewind_points, rewind_recorded
from app.context.tokens import estimate_messages
from app.kernel.envelope import EventEnvelope
from app.kernel.events import ContextEvent, SessionInfoEvent
from app.kernel.sanitize import sanitize_for_display
from app.session.store import SessionStore
from app.tools.file_history import FileHistory
from app.wiring.config import load_settings
from app.kernel.describe import human_tokens, short_title, describe



def build_rewind_parser() -> argparse.ArgumentParser:
    p = SubcommandParser(
        prog="tidegauge rewind",
        description="Take a recorded session back to just before one of your earlier messages, as Esc Esc does "
                    "in the dashboard. With no --to, list the messages it can go back to (newest first: turn, "
                    "context size just before it, the message). --to N records the rewind in the transcript "
                    "(append-only: the abandoned turns stay in it, marked), so `tidegauge --continue` starts from "
                    "there; the message is printed for you to edit and send again.",
        epilog="Example: tidegauge rewind --list; tidegauge rewind --to 3 --files; "
               "tidegauge --continue -p \"the message, edited\"")
    p.add_argument("session", nargs="?", metavar="SESSION",
                   help="session id or a unique prefix (default: the latest of this directory, as --continue)")
    p.add_argument("--list", action="store_true", help="list the messages it can go back to (the default)")
    p.add_argument("--to", type=int, metavar="N", help="go back to just before turn N (a turn the list shows)")
    p.add_argument("--files", action="store_true",
                   help="also put back the files write_file/edit_file changed since (a file changed since by "
                        "something else is left as it is and named)")
    p.add_argument("--overwrite-changed", action="store_true",
                   help="with --files: put back even the files changed since by something else")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def run_rewind_command(argv: Sequence[str], out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    args = build_rewind_parser().parse_args(list(argv))
    if args.list and args.to is not None:
        raise SetupError("rewind: --list and --to: choose one (--list shows the turns --to takes)")
    if (args.files or args.overwrite_changed) and args.to is None:
        raise SetupError("rewind: --files goes with --to N")
    store = SessionStore(load_settings({}).data_dir_path)
    session = store.open(args.session) if args.session is not None else store.latest_for(Path.cwd())
    if session is None:
        raise SetupError(f"rewind: no session for {sanitize_for_display(str(Path.cwd()))} "
                         "(`tidegauge sessions --all` lists every directory's)")
    state = session.restore()
    history = state.history
    contexts = [e for e in state.events if isinstance(e, ContextEvent)]
    fixed = _fixed_tokens(contexts[-1].breakdown) if contexts else 0
    infos = [e for e in state.events if isinstance(e, SessionInfoEvent)]
    workspace = Path(infos[-1].workspace) if infos and infos[-1].workspace else session.cwd
    files = FileHistory(session.dir, workspace)
    points = rewind_points(history)
    tokens_now = fixed + estimate_messages(history)

    if args.to is None:
        listed = []
        newest_first = list(reversed(points))
        for point, plan in zip(newest_first, files.plans([p.abandoned_ids for p in newest_first])):
            listed.append({"turn": point.turn, "tokens_after": fixed + estimate_messages(history_before(history, point)),
                           "abandoned_turns": point.abandoned_turns, "text": point.text,
                           "files": plan.files, "files_changed_since": plan.changed_since,
                           "files_not_restorable": plan.not_restorable})
        _print_list(out, session.id, tokens_now, listed, as_json=args.json)
        return 0

    target = next((p for p in points if p.turn == args.to), None)
    if target is None:
        turns = ", ".join(str(p.turn) for p in points) or "none"
        raise SetupError(f"rewind: --to {args.to}: session {session.id} can go back to turn(s) {turns} "
                         "(tidegauge rewind --list shows them)")
    said: dict[str, Any] = {}
    writer = session.writer()  # refuses (one line naming the process) while a live session writes it
    try:
        if args.files:
            done = files.restore(target.abandoned_ids, overwrite_changed=args.overwrite_changed)
            said = {"files_restored": done.restored, "files_skipped": done.skipped,
                    "files_not_restorable": done.not_restorable, "reason": "; ".join(done.problems) or None}
        kept, event, chart_point = rewind_recorded(history, target, tokens_now, fixed, said=said)
        writer.replace_history(kept, "rewind")  # what --continue starts from
        # Numbered after the transcript's last event, as the session would have numbered them.
        writer.append_event(EventEnvelope(state.last_seq + 1, None, event))
        writer.append_event(EventEnvelope(state.last_seq + 2, None, chart_point))
        writer.sync()
    finally:
        writer.close()
    _print_done(out, session.id, event, as_json=args.json)
    return 0


def _fixed_tokens(breakdown: dict[str, int]) -> int:
    """What every request carries whatever the history, as the session last counted it."""
    return sum(tokens for part, tokens in breakdown.items()
               if part in ("system", "memory", "tools") or part.startswith("mcp:"))


def _print_list(out: IO[str], session_id: str, tokens_now: int, listed: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"session": session_id, "tokens_now": tokens_now, "points": listed}, ensure_ascii=False),
              file=out)
        return
    if not listed:
        print(f"session {session_id}: nothing to rewind (no message of yours is in its context)", file=out)
        return
    print(f"session {session_id}: context now ~{human_tokens(tokens_now)} tokens; it can go back to just before",
          file=out)
    print(f"{'turn':>5}  {'context':>8}  message", file=out)
    for point in listed:
        files = f"  [{len(point['files'])} file(s) changed since]" if point["files"] else ""
        size = "~" + human_tokens(point["tokens_after"])
        print(f"{point['turn']:>5}  {size:>8}  {short_title(point['text'], 60)}{files}", file=out)
    print("tidegauge rewind --to N [--files] goes back to just before turn N", file=out)


def _print_done(out: IO[str], session_id: str, event: Any, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"session": session_id, "turn": event.turn, "text": event.text,
                          "abandoned_turns": event.abandoned_turns, "tokens_before": event.tokens_before,
                          "tokens_after": event.tokens_after, "files_restored": event.files_restored,
                          "files_skipped": event.files_skipped, "files_not_restorable": event.files_not_restorable},
                         ensure_ascii=False), file=out)
        return
    line = describe(event)
    if line is not None:
        print(f"session {session_id}: {line.text}", file=out)
    print("your message, to edit and send again (tidegauge --continue starts from here):", file=out)
    print(sanitize_for_display(event.text), file=out)

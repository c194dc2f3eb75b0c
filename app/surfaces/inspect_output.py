"""`tidegauge inspect`'s output: a kept request (or its diff) as JSON or as a table for people."""

from __future__ import annotations

import json
from typing import Sequence

from app.kernel.describe import plural
from app.kernel.request_store import PartView, StoredRequests
from app.kernel.sanitize import sanitize_for_display
from app.surfaces.view_model import InspectorPage

PREVIEW_CHARS = 48


def inspect_json(session_id: str, stored: StoredRequests, number: int, *, diff: bool) -> str:
    envelope = stored.envelope(number)
    if diff:
        changes = stored.diff(number)
        return json.dumps({"session": session_id, "request": number, "total_tokens": envelope.gauge_tokens,
                           **{kind: [v.as_json() for v in views] for kind, views in changes.items()}},
                          ensure_ascii=False)
    views = stored.views(number)
    return json.dumps({"session": session_id, "request": number, "total_tokens": envelope.gauge_tokens,
                       "usage": usage_json(stored, number), "cache": cache_json(views, stored, number),
                       "parts": [v.as_json() for v in views]}, ensure_ascii=False)


def cache_json(views: Sequence[PartView], stored: StoredRequests, number: int) -> dict[str, object]:
    """What the prompt cache did for the request: the parts (numbered from 1) a breakpoint follows,
    the tokens the server read from it and wrote to it, and how many parts, from the first, it served."""
    e = stored.envelope(number)
    return {"breakpoints": [index for index, view in enumerate(views, start=1) if view.breakpoint],
            "read_tokens": e.cache_read_tokens, "write_tokens": e.cache_write_tokens,
            "cached_parts": sum(1 for view in views if view.cached)}


def usage_json(stored: StoredRequests, number: int) -> dict[str, int | None]:
    e = stored.envelope(number)
    return {"input_tokens": e.input_tokens, "cache_read_tokens": e.cache_read_tokens,
            "cache_write_tokens": e.cache_write_tokens, "output_tokens": e.output_tokens}


def headline(session_id: str, stored: StoredRequests, number: int) -> str:
    """One line on the request: which, its size as the gauge showed it, and the cache."""
    e = stored.envelope(number)
    usage = ("no usage came back" if e.input_tokens is None and e.cache_read_tokens is None else
             f"server: {e.input_tokens or 0:,} input, {e.cache_read_tokens or 0:,} read from cache, "
             f"{e.cache_write_tokens or 0:,} written to cache")
    failed = " · the call failed" if not e.ok else ""
    return (f"session {session_id} · request {number} of {stored.count} · {e.gauge_tokens:,} tokens"
            f" (the gauge) · {usage}{failed}")


def one_line(text: str, width: int = PREVIEW_CHARS) -> str:
    flat = " ".join(sanitize_for_display(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def part_label(view: PartView) -> str:
    """What a part is, in a few words: its kind, its role, the start of its text."""
    kind = {"system": "system prompt", "memory": "memory files", "tool": "tool schema", "text": "text",
            "thinking": "thinking", "tool_use": "tool call", "tool_result": "tool result",
            "opaque": "provider item"}.get(view.kind, view.kind)
    role = "" if view.role in ("system", "tools") else f"{view.role} "
    return f"{role}{kind}: {one_line(view.text, PREVIEW_CHARS)}"


def table(views: Sequence[PartView], *, change: bool = False) -> list[str]:
    rows = [(view.change if change else str(index), part_label(view), one_line(view.origin, 40),
             (f"{view.tokens:,}" if view.tokens_before is None else f"{view.tokens_before:,} → {view.tokens:,}"),
             ("yes" if view.cached else "") + (" ▸" if view.breakpoint else ""))
            for index, view in enumerate(views, start=1)]
    head = ("" if change else "#", "part", "origin", "tokens", "cached")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    lines = []
    for row in [head, *rows]:
        lines.append("  ".join([row[0].rjust(widths[0]), row[1].ljust(widths[1]), row[2].ljust(widths[2]),
                                row[3].rjust(widths[3]), row[4]]).rstrip())
    return lines


def diff_line(stored: StoredRequests, number: int, changes: dict[str, list[PartView]]) -> str:
    if number <= 1:
        return "the first request: every part is new"
    moved = (sum(v.tokens for v in changes["added"]) - sum(v.tokens for v in changes["removed"])
             + sum(v.tokens - (v.tokens_before or 0) for v in changes["changed"]))
    return (f"against request {number - 1}: {len(changes['added'])} added, {len(changes['removed'])} removed, "
            f"{len(changes['changed'])} changed, {moved:+,} tokens")


def inspector_page(session_id: str, stored: StoredRequests, number: int) -> InspectorPage:
    """The inspector's page for request ``number``: its parts and its diff."""
    def diff_of() -> tuple[str, tuple[PartView, ...]]:
        changes = stored.diff(number, whole_text=True)
        return diff_line(stored, number, changes), (*changes["removed"], *changes["changed"], *changes["added"])

    return InspectorPage(number=number, count=stored.count, title=headline(session_id, stored, number),
                         parts=tuple(stored.views(number, whole_text=True)), diff_of=diff_of,
                         page_for=lambda other: inspector_page(session_id, stored, other))


def inspect_text(session_id: str, stored: StoredRequests, number: int, *, diff: bool) -> str:
    lines = [headline(session_id, stored, number)]
    if diff:
        changes = stored.diff(number)
        views = [*changes["removed"], *changes["changed"], *changes["added"]]
        lines.append(diff_line(stored, number, changes))
        if views:
            lines.extend(table(views, change=True))
        return "\n".join(lines)
    views = stored.views(number)
    marks = sum(1 for v in views if v.breakpoint)
    if marks:
        lines.append(f"{plural(marks, 'cache breakpoint')} (▸): the cache can serve the request up to each")
    lines.extend(table(views))
    return "\n".join(lines)

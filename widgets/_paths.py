"""Paths shortened to fit a row (not a widget): the header's project, the full output's file."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len


def shorten_path(path: str, room: int, *, home: bool = True) -> str:
    """``path`` in at most ``room`` cells, given up from the left: whole trailing parts after
    "…/" when the last part fits ("…/work/project"), else the last part's end ("…oject").
    ``home``: the home directory is written "~"."""
    home_dir = str(Path.home())
    if home and home_dir != "/" and (path == home_dir or path.startswith(home_dir + "/")):
        path = "~" + path[len(home_dir):]
    if cell_len(path) <= room:
        return path
    parts = path.split("/")
    kept = ""
    for part in reversed(parts):
        candidate = f"{part}/{kept}" if kept else part
        if cell_len(candidate) + 2 > room:
            break
        kept = candidate
    if kept:
        return "…/" + kept
    tail = path
    while tail and cell_len(tail) > room - 1:
        tail = tail[1:]
    return "…" + tail

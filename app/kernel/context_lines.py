"""The gauge's lines: one definition for the engine (which computes them, in
``app.context.thresholds``) and for the ``context`` event that carries them to the surfaces
(pydantic validates and writes this dataclass as it is, so the JSON is the fields)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    window: int
    reserve: int
    effective_window: int
    auto_compact_line: int
    warning_line: int
    blocking_line: int

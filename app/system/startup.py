"""The cyclic garbage collector during start-up.

Start-up makes a few hundred thousand objects that live as long as the process (modules,
classes, pydantic models, the tool registry), and the collector scanned them again and again as
they were made: about a tenth of a one-turn headless run. ``app/__main__.py`` raises the
collector's first threshold before anything is imported (``begin``); once a session is built, or
a long-lived surface starts, ``started`` moves everything alive into the permanent generation
(never scanned again) and gives the collector back its usual thresholds. A path that never calls
``started`` (a short command) still collects, only rarely.
"""

from __future__ import annotations

import gc
import sys
import types

# Collections every million allocations rather than every 700: rare, but never none.
STARTUP_THRESHOLDS = (1_000_000, 100, 100)
_usual: tuple[int, int, int] | None = None


def begin() -> None:
    global _usual
    if _usual is None:
        _usual = gc.get_threshold()
        gc.set_threshold(*STARTUP_THRESHOLDS)


def started() -> None:
    """Start-up is over: what it made is permanent; the usual thresholds from now on."""
    global _usual
    if _usual is not None:
        gc.freeze()
        gc.set_threshold(*_usual)
        _usual = None


def skip_pydantic_plugins() -> None:
    """pydantic looks for plug-ins (every installed distribution's ``pydantic`` entry points) when
    it builds its first validator: it imports ``importlib.metadata`` (email, csv, zipfile) and reads
    each package's metadata, about a twentieth of a one-turn headless run, before its first request.
    tidegauge uses no pydantic plug-in, and one installed beside it would run inside tidegauge: in
    tidegauge's own processes the loader is one that finds none. Call it before the first validator
    is built; once pydantic has looked, it changes nothing."""
    if "pydantic.plugin._loader" not in sys.modules:
        no_plugins = types.ModuleType("pydantic.plugin._loader", "tidegauge: no pydantic plug-ins")
        no_plugins.get_plugins = tuple  # type: ignore[attr-defined]  # (): pydantic's "none installed"
        sys.modules["pydantic.plugin._loader"] = no_plugins

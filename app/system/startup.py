"""The cyclic garbage collector during start-up.

Start-up makes a few hundred thousand objects that live as long as the process (modules,
classes, pydantic models, the tool registry), and the collector scanned them again and again as
they were made: about a tenth of a one-turn headless run. tidegauge's entry (``app/wiring/entry.py``) raises the
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


def skip_price_updater() -> None:
    """genai-prices' ``__init__`` imports its price auto-updater (``update_prices``: a second HTTP
    client, httpx2, and asyncio's subprocess support) and reads its own version from the installed
    metadata (``importlib.metadata``): about a tenth of a one-turn headless run in a new data
    directory. tidegauge reads only the bundled catalogue (``genai_prices.data``, ``.types``,
    ``.data_snapshot``, none of which imports the package's ``__init__``) and never starts the
    updater: in tidegauge's own processes the package is entered as its folder alone, so its
    submodules import as usual and its ``__init__`` (with the code that would phone home) never
    runs. Call it before the catalogue is first read; once the package is loaded, it changes nothing."""
    if "genai_prices" in sys.modules:
        return
    # Only where the package is: find_spec reads no file of it.
    from importlib.util import find_spec, module_from_spec

    spec = find_spec("genai_prices")
    if spec is not None and spec.submodule_search_locations:
        sys.modules["genai_prices"] = module_from_spec(spec)  # its __path__, not its code


def skip_httpx_command_line() -> None:
    """``import httpx`` also imports its own command-line client (``httpx._main``: rich, click and
    pygments, a fifth of a headless run's imports) although tidegauge never calls ``httpx.main``;
    httpx's ``__init__`` falls back to a stub when that import fails. Only for tidegauge's own
    processes, and only before httpx is loaded: once it is, this changes nothing."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"

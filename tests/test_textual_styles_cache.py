"""Textual keeps a finished App's widgets alive in a cache; tests/conftest.py empties it.

``StylesCache.get_inner_outer`` is an ``lru_cache`` on a method (Textual issue #6665): its keys
hold each widget's styles cache, with every line that widget rendered, after the App is gone.
The suite's teardown hook empties it after every test, which halves a worker's heap. This test
shows the leak the hook works around, so that a Textual upgrade that fixes it (or moves the
name) says so here rather than leaving the hook to do nothing or to fail in every test.
"""

from __future__ import annotations

import asyncio
import gc

from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.widgets import Static


class _OneLabel(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("tide\ngauge", id="label")


def _live_styles_caches() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, StylesCache))


async def _run_once() -> None:
    async with _OneLabel().run_test(size=(40, 6)) as pilot:
        await pilot.pause()


def test_a_finished_apps_styles_caches_stay_alive_until_the_cache_is_emptied() -> None:
    StylesCache.get_inner_outer.cache_clear()
    # Frozen, the worker's heap (a million objects and more by the end of a run) is left out of
    # the collections and the listing below, which then see only what this App made.
    gc.freeze()
    try:
        # A loop of its own: the App is then referenced by nothing once it has finished (a
        # test's own task would keep it as the active App, and its widgets with it).
        asyncio.run(_run_once())
        kept = _live_styles_caches()
        assert not any(isinstance(obj, _OneLabel) for obj in gc.get_objects())
        assert kept > 0, "Textual no longer keeps a finished App's styles caches: drop the conftest hook"
        StylesCache.get_inner_outer.cache_clear()
        assert _live_styles_caches() == 0
    finally:
        gc.unfreeze()

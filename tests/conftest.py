"""Shared fixtures. ``fake_llm``: the scripted local LLM server (see tests/fake_llm_server.py)."""

from __future__ import annotations

import gc
import os
import sys
from typing import Iterator

import pytest
from hypothesis import settings

from fake_llm_server import FakeLLMServer

# Shared, loaded machines make per-example deadlines flaky; the pytest timeout is the hang guard.
settings.register_profile("tidegauge", deadline=None)
settings.load_profile("tidegauge")


def pytest_configure(config: pytest.Config) -> None:
    """Let the suite's processes keep the bytecode they compile.

    With PYTHONDONTWRITEBYTECODE set (some machines set it), every ``python -m app`` the tests
    start compiled tidegauge's ~80 modules from source again: a third of a headless run's CPU.
    The bytecode goes where Python always puts it (``__pycache__`` beside each module, ignored by
    git), is checked against its source on every import, and changes nothing a test observes.
    Set here, before xdist starts its workers, so they and every child they start inherit it."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the marks into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep the tests that share a module-scoped fixture on one xdist worker.

    Such a fixture is built once per worker that runs one of its tests (the demo's sessions in
    test_demo_orders.py, a recorded session, a web server): split over both workers it is built
    twice. ``--dist loadgroup`` (pyproject.toml) sends each group whole to one worker; every other
    test is spread one by one as before."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


# Young objects a worker allocates before a young collection (Python's default: 700). Measured
# over test_tui_first_run, test_engine_properties and test_widgets_context (-n 0): with the freeze
# below, 850 young and 7 full collections instead of ~1,600 and 10, and 1.2 CPU-s in the collector
# instead of 2.1 (of ~22), for 12 MB more peak resident memory.
WORKER_GC_YOUNG_THRESHOLD = 10_000


def pytest_collection_finish(session: pytest.Session) -> None:
    """Spare the test process's collector the heap that only grows: what import and collection built.

    Frozen, it is left out of every later collection (a full one walked all of textual, pydantic,
    hypothesis and the suite's modules again); a dashboard's exit unfreezes the heap (the App's
    own start-up freeze), which only returns it to the usual collections. The young threshold
    stays in effect for the whole run; the dashboard sets its own while it runs and restores this
    one. Tests that count live objects (tests/test_widgets_pruned_items.py) collect first, and
    resident-size tests measure a child process, so neither sees a difference."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(WORKER_GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Let a finished test's dashboards go: Textual keeps up to 1,024 of them in a cache.

    ``StylesCache.get_inner_outer`` is an ``lru_cache`` on a method, so its keys hold each
    widget's styles cache with every line it rendered (Textual issue #6665). In a test process
    that runs hundreds of dashboards it kept ~30,000 strips and ~250,000 small caches alive
    (half of a worker's heap after a full collection), which every full collection walked again.
    Only a cache of two colours per widget is emptied; the next dashboard fills it as it draws.
    Textual is pinned (pyproject.toml): if the name moves, this fails loudly in every test."""
    styles_cache = sys.modules.get("textual._styles_cache")
    if styles_cache is not None:
        styles_cache.StylesCache.get_inner_outer.cache_clear()


def pytest_unconfigure(config: pytest.Config) -> None:
    """One full collection at the end, not five.

    pytest's unraisable-exception check collects five times after this hook so that a
    finalizer's error is reported. Every one of them walked the worker's whole heap (1-2 million
    objects, 0.6-1.5 CPU-s each, ~8 s at the end of a run with four workers on two cores).
    Here the garbage is collected once, so its finalizers run while pytest still records their
    errors, and what is left is frozen: the five collections then have nothing to walk. Garbage
    a finalizer creates during this collection is left to the process's exit."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def preempted_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process is preempted for 50 ms just after each Textual timer starts: the clock its
    timers read jumps between a timer's first read (its start) and its second (the first check of
    its deadline). Textual 8.2.8's one-shot timer then finds its deadline passed and ends without
    calling back; a repeating one skips the ticks it missed."""
    from textual import _time  # (the clock Textual's timers read: how a preemption looks to them)
    from textual.timer import Timer

    real = _time.get_time
    timer_code = Timer._run.__code__
    reads: dict[Timer, int] = {}  # each timer started -> its reads of the clock (held: no id reused)
    offset = 0.0

    def read() -> float:
        nonlocal offset
        caller = sys._getframe(1)
        if caller.f_code is timer_code:
            timer = caller.f_locals["self"]
            reads[timer] = reads.get(timer, 0) + 1
            if reads[timer] == 2:
                offset += 0.05
        return real() + offset

    monkeypatch.setattr(_time, "get_time", read)


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    """A fresh fake LLM server on 127.0.0.1 for one test.

    Fails the test at teardown if a request found nothing scripted (unless
    ``fake_llm.allow_unscripted = True``) or a reply handler raised.
    """
    server = FakeLLMServer().start()
    try:
        yield server
    finally:
        server.stop()
    problems = server.problems()
    if problems:
        pytest.fail("fake_llm: " + "; ".join(problems), pytrace=False)

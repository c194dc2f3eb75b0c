"""Shared fixtures. ``fake_llm``: the scripted local LLM server (see tests/fake_llm_server.py)."""

from __future__ import annotations

from typing import Iterator

import pytest
from hypothesis import settings

from fake_llm_server import FakeLLMServer

# Shared, loaded machines make per-example deadlines flaky; the pytest timeout is the hang guard.
settings.register_profile("tidegauge", deadline=None)
settings.load_profile("tidegauge")


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

"""Transient API failures are retried (visibly); others are not, and leave history as it was."""

from __future__ import annotations

import random

import pytest
from agent_helpers import make_agent
from fake_llm_server import anthropic_error_body, anthropic_text, http_error, openai_error_body, openai_text

from app.agent.loop import retry_delay


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
async def test_transient_statuses_are_retried_with_a_visible_attempt(fake_llm, tmp_path, monkeypatch, status):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(http_error(status, openai_error_body("try later", type="server_error"), headers={"Retry-After": "0"}),
                     openai_text("ok now"))
    result = await agent.run_turn("hi")
    assert result.stop_reason == "end_turn" and result.text == "ok now"
    retries = events.of("retry")
    assert len(retries) == 1 and retries[0].attempt == 1 and "try later" in retries[0].reason
    assert retries[0].delay_s == 0.0  # Retry-After: 0 honoured
    await agent.aclose()


async def test_anthropic_529_overloaded_is_retried(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, provider="anthropic")
    fake_llm.enqueue(http_error(529, anthropic_error_body("overloaded_error", "Overloaded")), anthropic_text("fine"))
    result = await agent.run_turn("hi")
    assert result.stop_reason == "end_turn"
    assert len(events.of("retry")) == 1
    await agent.aclose()


async def test_retries_give_up_after_the_limit_with_the_server_message(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch, max_retries=2)
    for _ in range(3):
        fake_llm.enqueue(http_error(503, openai_error_body("Service overloaded", type="server_error")))
    result = await agent.run_turn("hi")
    assert result.stop_reason == "error" and "Service overloaded" in result.text
    assert len(fake_llm.requests) == 3 and len(events.of("retry")) == 2
    assert [m.role for m in agent.history] == ["user"]
    await agent.aclose()


async def test_a_400_is_not_retried(fake_llm, tmp_path, monkeypatch):
    agent, events = make_agent(fake_llm, tmp_path, monkeypatch)
    fake_llm.enqueue(http_error(400, openai_error_body("Invalid 'messages[1]'", type="invalid_request_error")))
    result = await agent.run_turn("hi")
    assert result.stop_reason == "error" and "Invalid 'messages[1]'" in result.text
    assert len(fake_llm.requests) == 1 and not events.of("retry")
    await agent.aclose()


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    rng = random.Random(7)
    delays = [retry_delay(n, None, base=1.0, cap=30.0, rng=rng) for n in range(1, 8)]
    for n, d in enumerate(delays, start=1):
        ceiling = min(30.0, 2 ** (n - 1))
        assert ceiling / 2 <= d <= ceiling
    assert retry_delay(3, 12.5, base=1.0) == 12.5  # the server's Retry-After wins
    assert retry_delay(3, 10_000, base=1.0) == 120.0  # but a silly one is bounded

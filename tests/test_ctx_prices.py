"""Price table and cost of a call."""

from __future__ import annotations

import pytest

from app.context.prices import Price, cost_usd, price_for
from app.usage import Usage


def test_builtin_prices_by_prefix() -> None:
    sonnet = price_for("claude-sonnet-4-5-20250929")
    assert sonnet == Price(3.0, 0.3, 3.75, 15.0)
    assert price_for("gpt-4.1-mini") != price_for("gpt-4.1")
    assert price_for("totally-unknown-model") is None


def test_user_override_merges_over_builtin() -> None:
    p = price_for("claude-sonnet-4-5", {"claude-sonnet": {"output": 30}})
    assert p == Price(3.0, 0.3, 3.75, 30.0)


def test_override_for_a_new_model() -> None:
    p = price_for("my-local-model", {"my-local": {"input_per_mtok": 1, "output_per_mtok": 2}})
    assert p == Price(1.0, 1.0, 1.0, 2.0)
    with pytest.raises(ValueError):
        price_for("my-local-model", {"my-local": {"output": 2}})
    with pytest.raises(ValueError, match="unknown price field"):
        price_for("gpt-4o", {"gpt-4o": {"inptu": 1}})


def test_cost_counts_cache_reads_writes_and_output() -> None:
    usage = Usage(input_tokens=1_000_000, cache_read_tokens=2_000_000,
                  cache_write_tokens=1_000_000, output_tokens=100_000)
    assert cost_usd(usage, Price(3.0, 0.3, 3.75, 15.0)) == pytest.approx(3 + 0.6 + 3.75 + 1.5)


def test_cost_unknown_without_price_or_usage() -> None:
    assert cost_usd(Usage(input_tokens=10, output_tokens=1), None) is None
    assert cost_usd(Usage(), Price(1, 1, 1, 1)) is None

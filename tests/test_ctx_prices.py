"""Price table and cost of a call."""

from __future__ import annotations

import pytest

from app.context.forecast import forecast, request_cost
from app.context.prices import Price, cost_usd, price_for
from app.kernel.usage import Usage


def test_catalogue_prices_by_model_name() -> None:
    sonnet = price_for("claude-sonnet-4-5-20250929")
    assert sonnet is not None and sonnet.rates_for(0) == Price(3.0, 0.3, 3.75, 15.0)
    assert price_for("openai/claude-sonnet-4-5") == sonnet  # a router prefix is ignored
    assert price_for("gpt-4.1-mini") != price_for("gpt-4.1")
    assert price_for("totally-unknown-model") is None
    assert price_for("x" * 1_000) is None  # no model of the catalogue's; its regexes never see it
    # A model a plug-in prices itself (the demo's): its price, under the user's own entry.
    assert price_for("demo-scripted", provider_price={"input": 0, "output": 0}) == Price(0.0, 0.0, 0.0, 0.0)
    assert price_for("demo-scripted", {"demo": {"output": 2}},
                     provider_price={"input": 0, "output": 0}) == Price(0.0, 0.0, 0.0, 2.0)


def test_user_override_merges_over_the_catalogue_at_every_size() -> None:
    p = price_for("claude-sonnet-4-5", {"claude-sonnet": {"output": 30}})
    assert p is not None and p.rates_for(0) == Price(3.0, 0.3, 3.75, 30.0)
    assert p.rates_for(250_000).output_per_mtok == 30.0  # above the long-context tier too
    assert p.rates_for(250_000).input_per_mtok == price_for("claude-sonnet-4-5").rates_for(250_000).input_per_mtok


def test_a_forecast_above_a_tier_uses_the_tiers_rates() -> None:
    sonnet = price_for("claude-sonnet-4-5")
    assert sonnet is not None and sonnet.tiers
    tier = sonnet.tiers[0]
    above = tier.above_input_tokens + 50_000
    expected = ((above - 10_000) * tier.rates.input_per_mtok + 10_000 * tier.rates.cached_input_per_mtok) / 1e6
    assert request_cost(above, 10_000, sonnet) == pytest.approx(expected)
    assert tier.rates.input_per_mtok > sonnet.input_per_mtok
    plan = forecast("compact", tokens_before=above, tokens_after=20_000, cached_prefix=0, stable_prefix=0,
                    price=sonnet, summary_tokens=1_000)
    assert plan.operation_cost_usd == pytest.approx((above * tier.rates.input_per_mtok
                                                     + 1_000 * tier.rates.output_per_mtok) / 1e6)
    assert plan.next_request_cost_after_usd == pytest.approx(20_000 * sonnet.input_per_mtok / 1e6)


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


def test_an_unknown_models_name_is_shown_inert_in_what_is_said() -> None:
    """The model name is the user's (flag, env, config) but lands on a terminal: no escape runs."""
    from app.context.prices import assumed_price_warning
    from app.context.thresholds import assumed_window_warning

    name = "evil\x1b]52;c;aGk=\x07model"
    for line in (assumed_price_warning(name), assumed_window_warning(name)):
        assert line is not None and "\x1b" not in line and "\x07" not in line and "\n" not in line
        assert "\\u001b]52" in line
    assert assumed_price_warning("gpt-4o") is None and assumed_window_warning("gpt-4o") is None
    assert assumed_price_warning("my-model", {"my-": {"input": 1, "output": 2}}) is None

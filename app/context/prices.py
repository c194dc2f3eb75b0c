"""Rough public list prices, USD per million tokens, by model-name prefix.

Prices change often and vary by provider: this table is only a default.
Users override it in config (``prices = {"model-prefix" = {...}}``), and
``price_for`` merges the override over the built-in entry.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from app.usage import Usage


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    cached_input_per_mtok: float
    cache_write_per_mtok: float
    output_per_mtok: float


def _p(inp: float, cached: float, write: float | None, out: float) -> Price:
    # OpenAI-style APIs do not bill cache writes separately: a write costs plain input.
    return Price(inp, cached, inp if write is None else write, out)


# Overridable: see the module docstring. Longest matching prefix wins.
BUILTIN_PRICES: dict[str, Price] = {
    # Anthropic (cache write = 1.25x input, cache read = 0.1x input)
    "claude-opus-4-5": _p(5.0, 0.5, 6.25, 25.0),
    "claude-opus-4": _p(15.0, 1.5, 18.75, 75.0),
    "claude-3-opus": _p(15.0, 1.5, 18.75, 75.0),
    "claude-sonnet-4": _p(3.0, 0.3, 3.75, 15.0),
    "claude-3-7-sonnet": _p(3.0, 0.3, 3.75, 15.0),
    "claude-3-5-sonnet": _p(3.0, 0.3, 3.75, 15.0),
    "claude-haiku-4": _p(1.0, 0.1, 1.25, 5.0),
    "claude-3-5-haiku": _p(0.8, 0.08, 1.0, 4.0),
    "claude-3-haiku": _p(0.25, 0.03, 0.3, 1.25),
    # OpenAI
    "gpt-5-nano": _p(0.05, 0.005, None, 0.4),
    "gpt-5-mini": _p(0.25, 0.025, None, 2.0),
    "gpt-5": _p(1.25, 0.125, None, 10.0),
    "gpt-4.1-nano": _p(0.1, 0.025, None, 0.4),
    "gpt-4.1-mini": _p(0.4, 0.1, None, 1.6),
    "gpt-4.1": _p(2.0, 0.5, None, 8.0),
    "gpt-4o-mini": _p(0.15, 0.075, None, 0.6),
    "gpt-4o": _p(2.5, 1.25, None, 10.0),
    "o4-mini": _p(1.1, 0.275, None, 4.4),
    "o3-mini": _p(1.1, 0.55, None, 4.4),
    "o3": _p(2.0, 0.5, None, 8.0),
    # DeepSeek (cache hit / miss pricing)
    "deepseek-": _p(0.28, 0.028, None, 0.42),
    # The offline demo provider's scripted model costs nothing.
    "demo": _p(0.0, 0.0, 0.0, 0.0),
}

_ALIASES = {
    "input": "input_per_mtok",
    "cached_input": "cached_input_per_mtok",
    "cache_read": "cached_input_per_mtok",
    "cache_write": "cache_write_per_mtok",
    "output": "output_per_mtok",
}
_FIELDS = {f.name for f in fields(Price)}


def _longest_prefix(name: str, keys: Any) -> str | None:
    best: str | None = None
    for key in keys:
        k = key.lower()
        if name.startswith(k) and (best is None or len(k) > len(best)):
            best = key
    return best


def _apply(base: Price | None, override: dict[str, Any]) -> Price:
    values: dict[str, float] = {}
    for key, value in override.items():
        name = _ALIASES.get(key, key)
        if name not in _FIELDS:
            raise ValueError(f"unknown price field {key!r} (expected one of {sorted(_FIELDS)})")
        values[name] = float(value)
    if base is not None:
        return replace(base, **values)
    if "input_per_mtok" not in values or "output_per_mtok" not in values:
        raise ValueError("a price for a new model needs at least input_per_mtok and output_per_mtok")
    inp = values["input_per_mtok"]
    return Price(
        input_per_mtok=inp,
        cached_input_per_mtok=values.get("cached_input_per_mtok", inp),
        cache_write_per_mtok=values.get("cache_write_per_mtok", inp),
        output_per_mtok=values["output_per_mtok"],
    )


def price_for(model: str, overrides: dict[str, dict[str, Any]] | None = None) -> Price | None:
    """The price of ``model``: the user's override (by prefix) over the built-in entry.

    Override fields may use the full names or the short ones (input,
    cached_input, cache_write, output); missing fields keep the built-in value.
    Raises ValueError for a malformed override so config can name it.
    """
    name = model.strip().lower().rsplit("/", 1)[-1]
    builtin_key = _longest_prefix(name, BUILTIN_PRICES)
    base = BUILTIN_PRICES[builtin_key] if builtin_key is not None else None
    if overrides:
        over_key = _longest_prefix(name, overrides)
        if over_key is not None:
            return _apply(base, overrides[over_key])
    return base


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """Cost of one call; None when the price or the usage is unknown."""
    if price is None or not usage.known:
        return None
    return (
        (usage.input_tokens or 0) * price.input_per_mtok
        + (usage.cache_read_tokens or 0) * price.cached_input_per_mtok
        + (usage.cache_write_tokens or 0) * price.cache_write_per_mtok
        + (usage.output_tokens or 0) * price.output_per_mtok
    ) / 1_000_000

"""Prices: list price from cost and margin, tiered quantity discounts, customer rules.

All money is Decimal and rounded once, at the end, half-up to the currency's minor unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from inventory.errors import ValidationError
from inventory.models import Item

MINOR_UNITS = {"EUR": 2, "USD": 2, "GBP": 2, "CHF": 2, "JPY": 0, "SEK": 2, "KWD": 3}
DEFAULT_MARGIN = Decimal("0.35")


def quantize(amount: Decimal, currency: str) -> Decimal:
    digits = MINOR_UNITS.get(currency)
    if digits is None:
        raise ValidationError(f"no minor unit known for currency {currency}", field="currency")
    return amount.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Tier:
    min_quantity: int
    discount: Decimal  # 0.05 = 5% off

    def __post_init__(self) -> None:
        if not Decimal(0) <= self.discount < Decimal(1):
            raise ValidationError(f"discount {self.discount} must be in [0, 1)", field="discount")


@dataclass
class PriceRule:
    """Margin over cost plus quantity tiers; an optional floor protects the margin."""

    margin: Decimal = DEFAULT_MARGIN
    tiers: list[Tier] = field(default_factory=list)
    floor_margin: Decimal = Decimal("0.05")

    def __post_init__(self) -> None:
        self.tiers.sort(key=lambda t: t.min_quantity)
        if self.margin < self.floor_margin:
            raise ValidationError("margin below the floor margin", field="margin")

    def tier_for(self, quantity: int) -> Tier | None:
        chosen = None
        for tier in self.tiers:
            if quantity >= tier.min_quantity:
                chosen = tier
        return chosen


def list_price(item: Item, rule: PriceRule) -> Decimal:
    """Unit price before discounts."""
    return quantize(item.unit_cost * (1 + rule.margin), item.currency)


def quote(item: Item, quantity: int, rule: PriceRule, customer_discount: Decimal = Decimal(0)) -> Decimal:
    """Total for ``quantity`` units: tier discount and customer discount, never below the floor."""
    if quantity <= 0:
        raise ValidationError("quantity must be positive", field="quantity")
    unit = item.unit_cost * (1 + rule.margin)
    tier = rule.tier_for(quantity)
    if tier is not None:
        unit *= 1 - tier.discount
    unit *= 1 - customer_discount
    floor = item.unit_cost * (1 + rule.floor_margin)
    unit = max(unit, floor)
    return quantize(unit * quantity, item.currency)


def convert(amount: Decimal, rate: Decimal, currency: str) -> Decimal:
    """``amount`` times an exchange ``rate``, rounded for the target ``currency``."""
    if rate <= 0:
        raise ValidationError("exchange rate must be positive", field="rate")
    return quantize(amount * rate, currency)


STANDARD_RULE = PriceRule(
    tiers=[Tier(50, Decimal("0.03")), Tier(200, Decimal("0.07")), Tier(1000, Decimal("0.12"))],
)

from decimal import Decimal

import pytest

from inventory.errors import ValidationError
from inventory.models import Item, Sku
from inventory.pricing import STANDARD_RULE, PriceRule, Tier, list_price, quantize, quote

BOLT = Item(Sku.parse("BLT-M8-0042"), "M8 bolt", Decimal("0.18"))


def test_list_price_rounds_half_up():
    assert list_price(BOLT, PriceRule(margin=Decimal("0.35"))) == Decimal("0.24")


def test_tier_discount_applies_from_its_minimum():
    assert quote(BOLT, 49, STANDARD_RULE) == Decimal("11.91")
    assert quote(BOLT, 50, STANDARD_RULE) == Decimal("11.79")


def test_floor_margin_wins_over_discounts():
    rule = PriceRule(margin=Decimal("0.10"), tiers=[Tier(1, Decimal("0.5"))])
    assert quote(BOLT, 100, rule) == quantize(Decimal("0.18") * Decimal("1.05") * 100, "EUR")


def test_yen_has_no_minor_unit():
    assert quantize(Decimal("10.5"), "JPY") == Decimal("11")


def test_bad_discount():
    with pytest.raises(ValidationError):
        Tier(10, Decimal("1.2"))

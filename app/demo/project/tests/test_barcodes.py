import pytest

from inventory.barcodes import check_digit, gtin_for, is_valid, sku_for
from inventory.errors import ValidationError
from inventory.models import Sku


def test_known_ean13_check_digit():
    assert check_digit("400638133393") == 1
    assert is_valid("4006381333931")


def test_internal_gtin_round_trip():
    sku = Sku.parse("BLT-M8-0042")
    gtin = gtin_for(sku)
    assert is_valid(gtin)
    assert sku_for(gtin, {"x": sku}) == sku


def test_bad_check_digit_is_refused():
    with pytest.raises(ValidationError):
        sku_for("4006381333932", {})

import pytest

from inventory.errors import ValidationError
from inventory.models import Location, Movement, MovementKind, Sku


def test_sku_round_trip():
    assert str(Sku.parse("blt-m8-0042")) == "BLT-M8-0042"


@pytest.mark.parametrize("text", ["BLT-M8-42", "BOLT-M8-0042", "", "BLT_M8_0042"])
def test_malformed_sku_is_refused(text):
    with pytest.raises(ValidationError):
        Sku.parse(text)


def test_location_code_format():
    assert Location("C-04").aisle == "C"
    with pytest.raises(ValidationError):
        Location("C4")


def test_shipment_quantities_are_negative():
    with pytest.raises(ValidationError):
        Movement(Sku.parse("BLT-M8-0042"), "A-01", 5, MovementKind.SHIPMENT)

"""Barcodes: EAN-13 check digits and the store's internal GTINs for SKUs."""

from __future__ import annotations

from inventory.errors import ValidationError
from inventory.models import Sku

# The company prefix we were assigned (GS1); internal items use it with the SKU serial.
COMPANY_PREFIX = "4012345"
FAMILY_CODES = {"BLT": 1, "NUT": 2, "WSH": 3, "SCR": 4, "BRK": 5, "HNG": 6, "PIP": 7, "VLV": 8, "CBL": 9, "FLT": 0}


def check_digit(digits: str) -> int:
    """EAN/GTIN check digit of the first 12 (EAN-13) or 7 (EAN-8) digits."""
    if not digits.isdigit():
        raise ValidationError(f"barcode digits expected, got {digits!r}", field="barcode")
    total = 0
    for position, char in enumerate(reversed(digits)):
        weight = 3 if position % 2 == 0 else 1
        total += int(char) * weight
    return (10 - total % 10) % 10


def is_valid(barcode: str) -> bool:
    barcode = barcode.strip()
    if len(barcode) not in (8, 13) or not barcode.isdigit():
        return False
    return check_digit(barcode[:-1]) == int(barcode[-1])


def gtin_for(sku: Sku) -> str:
    """The internal EAN-13 of a SKU: prefix, family code, serial, check digit."""
    family = FAMILY_CODES.get(sku.family)
    if family is None:
        raise ValidationError(f"no barcode family for {sku.family}", field="sku")
    body = f"{COMPANY_PREFIX}{family}{sku.serial:04d}"
    if len(body) != 12:
        raise ValidationError(f"GTIN body {body} is not 12 digits", field="sku")
    return body + str(check_digit(body))


def sku_for(barcode: str, known: dict[str, Sku]) -> Sku:
    """Look a scanned barcode up; internal GTINs are decoded, others must be in ``known``."""
    if not is_valid(barcode):
        raise ValidationError(f"invalid barcode {barcode!r} (bad length or check digit)", field="barcode")
    if barcode in known:
        return known[barcode]
    if barcode.startswith(COMPANY_PREFIX) and len(barcode) == 13:
        family_code = int(barcode[7])
        serial = int(barcode[8:12])
        for family, code in FAMILY_CODES.items():
            if code == family_code:
                for sku in known.values():
                    if sku.family == family and sku.serial == serial:
                        return sku
    raise ValidationError(f"barcode {barcode} is not in the catalogue", field="barcode")

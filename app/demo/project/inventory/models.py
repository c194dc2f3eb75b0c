"""The domain model. Plain dataclasses: storage and services pass them around."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from enum import Enum

from inventory.errors import ValidationError

# SKU: a three-letter family, a size code and a four-digit serial, e.g. BLT-M8-0042.
_SKU_RE = re.compile(r"^(?P<family>[A-Z]{3})-(?P<size>[A-Z0-9]{1,4})-(?P<serial>\d{4})$")


@dataclass(frozen=True, order=True)
class Sku:
    family: str
    size: str
    serial: int

    @classmethod
    def parse(cls, text: str) -> "Sku":
        match = _SKU_RE.match(text.strip().upper())
        if match is None:
            raise ValidationError(f"malformed SKU {text!r} (expected e.g. BLT-M8-0042)", field="sku")
        return cls(match["family"], match["size"], int(match["serial"]))

    def __str__(self) -> str:
        return f"{self.family}-{self.size}-{self.serial:04d}"


@dataclass
class Item:
    sku: Sku
    name: str
    unit_cost: Decimal
    currency: str = "EUR"
    reorder_point: int = 0
    lead_time_days: int = 14
    active: bool = True

    def __post_init__(self) -> None:
        if self.unit_cost < 0:
            raise ValidationError("unit cost cannot be negative", field="unit_cost")
        if self.reorder_point < 0:
            raise ValidationError("reorder point cannot be negative", field="reorder_point")
        if len(self.currency) != 3:
            raise ValidationError(f"currency must be an ISO code, got {self.currency!r}", field="currency")


@dataclass(frozen=True)
class Location:
    """A shelf or bin, coded aisle-bin: A-01, C-04."""

    code: str
    description: str = ""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Z]-\d{2}", self.code):
            raise ValidationError(f"location code {self.code!r} must look like A-01", field="location")

    @property
    def aisle(self) -> str:
        return self.code.split("-", 1)[0]


@dataclass
class StockLevel:
    sku: Sku
    location: str
    on_hand: int = 0
    reserved: int = 0

    @property
    def available(self) -> int:
        return self.on_hand - self.reserved

    def below(self, reorder_point: int) -> bool:
        return self.available <= reorder_point


class MovementKind(str, Enum):
    RECEIPT = "receipt"
    SHIPMENT = "shipment"
    TRANSFER_OUT = "transfer_out"
    TRANSFER_IN = "transfer_in"
    ADJUSTMENT = "adjustment"


@dataclass
class Movement:
    """One change of stock. The stock level is the sum of all movements."""

    sku: Sku
    location: str
    quantity: int  # signed: receipts positive, shipments negative
    kind: MovementKind
    reference: str = ""
    at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    id: int | None = None

    def __post_init__(self) -> None:
        if self.quantity == 0:
            raise ValidationError("a movement of zero units records nothing", field="quantity")
        outgoing = self.kind in (MovementKind.SHIPMENT, MovementKind.TRANSFER_OUT)
        if outgoing and self.quantity > 0:
            raise ValidationError(f"{self.kind.value} quantities are negative", field="quantity")
        if self.kind in (MovementKind.RECEIPT, MovementKind.TRANSFER_IN) and self.quantity < 0:
            raise ValidationError(f"{self.kind.value} quantities are positive", field="quantity")


def total_on_hand(levels: list[StockLevel]) -> int:
    return sum(level.on_hand for level in levels)

"""Suppliers and what they sell: pack sizes, minimum order values, lead times, price lists."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

from inventory.errors import InventoryError, ValidationError
from inventory.models import Sku


class UnknownSupplierError(InventoryError):
    def __init__(self, code: str) -> None:
        super().__init__(f"unknown supplier {code}")
        self.code = code


@dataclass(frozen=True)
class Offer:
    """One supplier's terms for one item."""

    sku: Sku
    unit_cost: Decimal
    pack_size: int = 1
    lead_time_days: int = 14

    def __post_init__(self) -> None:
        if self.pack_size < 1:
            raise ValidationError("pack size must be at least 1", field="pack_size")
        if self.unit_cost <= 0:
            raise ValidationError("an offer needs a positive unit cost", field="unit_cost")

    def round_up(self, quantity: int) -> int:
        """Whole packs only: 130 units in packs of 50 is 150."""
        packs = -(-quantity // self.pack_size)
        return packs * self.pack_size


@dataclass
class Supplier:
    code: str
    name: str
    currency: str = "EUR"
    minimum_order: Decimal = Decimal(0)
    offers: dict[str, Offer] = field(default_factory=dict)
    closed_days: set[date] = field(default_factory=set)

    def offer_for(self, sku: Sku | str) -> Offer | None:
        return self.offers.get(str(sku))

    def delivery_date(self, ordered: date, sku: Sku | str) -> date:
        """Order date plus lead time, moved past weekends and the supplier's closed days."""
        offer = self.offer_for(sku)
        if offer is None:
            raise ValidationError(f"{self.code} does not sell {sku}", field="sku")
        day = ordered + timedelta(days=offer.lead_time_days)
        while day.weekday() >= 5 or day in self.closed_days:
            day += timedelta(days=1)
        return day


class SupplierBook:
    """All suppliers, and the cheapest way to buy each item."""

    def __init__(self, suppliers: list[Supplier] | None = None) -> None:
        self._suppliers = {s.code: s for s in suppliers or []}

    def add(self, supplier: Supplier) -> None:
        if supplier.code in self._suppliers:
            raise ValidationError(f"supplier {supplier.code} already exists", field="code")
        self._suppliers[supplier.code] = supplier

    def get(self, code: str) -> Supplier:
        try:
            return self._suppliers[code]
        except KeyError:
            raise UnknownSupplierError(code) from None

    def sellers(self, sku: Sku | str) -> list[tuple[Supplier, Offer]]:
        found = []
        for supplier in self._suppliers.values():
            offer = supplier.offer_for(sku)
            if offer is not None:
                found.append((supplier, offer))
        return found

    def cheapest(self, sku: Sku | str, quantity: int) -> tuple[Supplier, Offer, int] | None:
        """The supplier with the lowest total for ``quantity`` units (rounded to packs); ties: faster."""
        best = None
        for supplier, offer in self.sellers(sku):
            units = offer.round_up(quantity)
            key = (offer.unit_cost * units, offer.lead_time_days)
            if best is None or key < best[0]:
                best = (key, supplier, offer, units)
        return None if best is None else (best[1], best[2], best[3])

    def supplier_map(self, skus: list[str], quantities: dict[str, int]) -> dict[str, str]:
        """sku -> supplier code, for orders.draft_orders."""
        result = {}
        for sku in skus:
            choice = self.cheapest(sku, quantities.get(sku, 1))
            if choice is not None:
                result[sku] = choice[0].code
        return result


def load_price_list(path: Path, supplier: Supplier) -> int:
    """Read a supplier price list (sku, unit_cost, pack_size, lead_time_days); returns offers loaded."""
    count = 0
    with open(path, newline="", encoding="utf-8") as f:
        for number, row in enumerate(csv.DictReader(f), start=2):
            try:
                offer = Offer(Sku.parse(row["sku"]), Decimal(row["unit_cost"]),
                              int(row.get("pack_size") or 1), int(row.get("lead_time_days") or 14))
            except (KeyError, ValueError, ArithmeticError) as exc:
                raise ValidationError(f"bad price list row: {exc}", row=number) from None
            supplier.offers[str(offer.sku)] = offer
            count += 1
    return count

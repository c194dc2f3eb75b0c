"""CSV import of a stock snapshot: validate every row, report all errors, import nothing on error."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from inventory.errors import ValidationError
from inventory.models import Item, Location, Movement, MovementKind, Sku
from inventory.storage import Repository

REQUIRED_COLUMNS = ("sku", "name", "location", "on_hand", "reorder_point", "unit_cost", "currency")


@dataclass
class ImportReport:
    rows: int = 0
    items: int = 0
    locations: int = 0
    units: int = 0
    errors: list[ValidationError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class _Row:
    item: Item
    location: Location
    on_hand: int


def _parse_row(number: int, row: dict[str, str]) -> _Row:
    try:
        sku = Sku.parse(row["sku"])
    except ValidationError as exc:
        raise ValidationError(str(exc.args[0]), field="sku", row=number) from None
    try:
        cost = Decimal(row["unit_cost"])
    except InvalidOperation:
        raise ValidationError(f"unit_cost {row['unit_cost']!r} is not a number", field="unit_cost", row=number) from None
    try:
        on_hand = int(row["on_hand"])
        reorder_point = int(row["reorder_point"])
    except ValueError:
        raise ValidationError("on_hand and reorder_point must be whole numbers", field="on_hand", row=number) from None
    if on_hand < 0:
        raise ValidationError("on_hand cannot be negative", field="on_hand", row=number)
    try:
        item = Item(sku, row["name"].strip(), cost, row["currency"].strip().upper(), reorder_point)
        location = Location(row["location"].strip().upper())
    except ValidationError as exc:
        raise ValidationError(str(exc.args[0]), field=exc.field, row=number) from None
    return _Row(item, location, on_hand)


def read_snapshot(path: Path) -> tuple[list[_Row], list[ValidationError]]:
    rows: list[_Row] = []
    errors: list[ValidationError] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            return [], [ValidationError(f"missing columns: {', '.join(missing)}")]
        for number, raw in enumerate(reader, start=2):  # row 1 is the header
            try:
                rows.append(_parse_row(number, raw))
            except ValidationError as exc:
                errors.append(exc)
    return rows, errors


def import_snapshot(repo: Repository, path: Path, reference: str = "import") -> ImportReport:
    """All rows or none: a file with any invalid row changes nothing."""
    rows, errors = read_snapshot(path)
    report = ImportReport(rows=len(rows) + len(errors), errors=errors)
    if errors:
        return report
    seen_locations: set[str] = set()
    with repo.transaction():
        for row in rows:
            repo.upsert_item(row.item)
            if row.location.code not in seen_locations:
                repo.add_location(row.location)
                seen_locations.add(row.location.code)
            current = repo.level(row.item.sku, row.location.code).on_hand
            delta = row.on_hand - current
            if delta:
                repo.record(Movement(row.item.sku, row.location.code, delta, MovementKind.ADJUSTMENT, reference))
            report.units += row.on_hand
    report.items = len({str(r.item.sku) for r in rows})
    report.locations = len(seen_locations)
    return report

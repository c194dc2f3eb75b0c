"""Reports: valuation, low stock, slow movers; rendered as text, Markdown or CSV."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Literal, Sequence

from inventory.models import MovementKind
from inventory.pricing import quantize
from inventory.storage import Repository

Format = Literal["text", "markdown", "csv"]


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    footer: str = ""


def valuation(repo: Repository, currency: str = "EUR") -> Table:
    """Stock value at cost, per item, with a grand total."""
    costs = {str(item.sku): item for item in repo.items(active_only=False)}
    totals: dict[str, int] = {}
    for level in repo.levels():
        totals[str(level.sku)] = totals.get(str(level.sku), 0) + level.on_hand
    rows = []
    grand = Decimal(0)
    for sku, units in sorted(totals.items()):
        item = costs[sku]
        value = item.unit_cost * units
        grand += value
        rows.append([sku, item.name, str(units), str(item.unit_cost), str(quantize(value, currency))])
    return Table("Stock valuation", ["sku", "name", "units", "unit cost", "value"], rows,
                 footer=f"total {quantize(grand, currency)} {currency}")


def low_stock(repo: Repository) -> Table:
    points = {str(item.sku): item.reorder_point for item in repo.items()}
    rows = []
    for level in repo.levels():
        point = points.get(str(level.sku))
        if point is not None and level.below(point):
            rows.append([str(level.sku), level.location, str(level.available), str(point)])
    return Table("Low stock", ["sku", "location", "available", "reorder point"], rows)


def slow_movers(repo: Repository, days: int = 90, now: datetime | None = None) -> Table:
    """Items in stock with no shipment in the last ``days`` days."""
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(days=days)
    shipped = {str(m.sku) for m in repo.movements(since=since) if m.kind is MovementKind.SHIPMENT}
    rows = []
    for level in repo.levels():
        if level.on_hand > 0 and str(level.sku) not in shipped:
            rows.append([str(level.sku), level.location, str(level.on_hand)])
    return Table(f"No shipments in {days} days", ["sku", "location", "on hand"], rows)


def render(table: Table, fmt: Format = "text") -> str:
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.columns)
        writer.writerows(table.rows)
        return out.getvalue()
    if fmt == "markdown":
        lines = [f"### {table.title}", "", "| " + " | ".join(table.columns) + " |",
                 "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in table.rows]
        if table.footer:
            lines += ["", f"**{table.footer}**"]
        return "\n".join(lines) + "\n"
    return _render_text(table.title, table.columns, table.rows, table.footer)


def _render_text(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], footer: str) -> str:
    widths = [len(c) for c in columns]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [title, "=" * len(title), line, "-" * len(line)]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    if not rows:
        out.append("(nothing to report)")
    if footer:
        out += ["", footer]
    return "\n".join(out) + "\n"

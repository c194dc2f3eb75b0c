"""The demo's scratch workspace: the seed's 15 MB log plus a small project to read.

The demo provider's scripts run real tools here: ``cat app.log`` meets the
registry's truncation (seed 000, experiments 1 and 2) and reading the
``inventory`` project file after file climbs through the demo's small budget
into an auto-compaction (experiment 3).
"""

from __future__ import annotations

import csv
import io
import random
import os
import shutil
from pathlib import Path

LOG_NAME = "app.log"
LOG_LINES = 300_000
LOG_INFO_PREFIX = "2026-10-18 12:00:00 INFO request handled id="
LOG_ERROR_LINE = "2026-10-18 12:00:01 ERROR database connection refused"
_LOG_CHUNK = 50_000  # lines per write: fast without holding 15 MB of small strings


def _expected_log_bytes() -> int:
    """Size of a complete app.log, computed without writing it (for the idempotence check)."""
    total = 0
    low = 1
    width = 1
    while low <= LOG_LINES:
        high = min(LOG_LINES, 10 ** width - 1)
        total += (high - low + 1) * (len(LOG_INFO_PREFIX) + width + 1)
        low = high + 1
        width += 1
    return total + len(LOG_ERROR_LINE) + 1


def write_app_log(path: Path) -> None:
    """300,000 INFO lines and one ERROR line at the very end, as in the seed."""
    tmp = path.with_suffix(".log.tmp")
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        for start in range(1, LOG_LINES + 1, _LOG_CHUNK):
            stop = min(LOG_LINES, start + _LOG_CHUNK - 1)
            f.write("".join(f"{LOG_INFO_PREFIX}{n}\n" for n in range(start, stop + 1)))
        f.write(LOG_ERROR_LINE + "\n")
    tmp.replace(path)


def _sample_stock_csv() -> str:
    """A deterministic stock snapshot (the importer's input format)."""
    rng = random.Random(20261018)
    kinds = [("BLT", "bolt"), ("NUT", "nut"), ("WSH", "washer"), ("SCR", "screw"), ("BRK", "bracket"),
             ("HNG", "hinge"), ("PIP", "pipe"), ("VLV", "valve"), ("CBL", "cable"), ("FLT", "filter")]
    sizes = ["M3", "M4", "M5", "M6", "M8", "M10", "M12"]
    finishes = ["zinc", "steel", "brass", "black oxide", "stainless"]
    locations = ["A-01", "A-02", "A-03", "B-01", "B-02", "C-01", "C-04", "D-07"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["sku", "name", "location", "on_hand", "reorder_point", "unit_cost", "currency"])
    for i in range(1, 121):
        code, noun = kinds[i % len(kinds)]
        size = sizes[rng.randrange(len(sizes))]
        finish = finishes[rng.randrange(len(finishes))]
        writer.writerow([
            f"{code}-{size}-{i:04d}",
            f"{size} {noun}, {finish}",
            locations[rng.randrange(len(locations))],
            rng.randrange(0, 900),
            rng.choice([25, 50, 100, 150, 200]),
            f"{rng.uniform(0.02, 14.0):.2f}",
            "EUR",
        ])
    return out.getvalue()


# ---- the project the "summarize the project" scenario reads ----

README = """\
# inventory

A small stock-keeping library with a command line: items, locations, stock
movements, purchase orders and reports, stored in SQLite.

## Layout

- `inventory/models.py` — the domain: `Sku`, `Item`, `Location`, `StockLevel`, `Movement`
- `inventory/errors.py` — the exception hierarchy (everything derives from `InventoryError`)
- `inventory/config.py` — settings from environment variables and `inventory.toml`
- `inventory/storage.py` — `Repository`, the SQLite persistence layer (schema + queries)
- `inventory/stock.py` — `StockService`: receive, ship, transfer, adjust, reserve
- `inventory/pricing.py` — price rules, tiered discounts, rounding with `Decimal`
- `inventory/orders.py` — purchase orders and reorder suggestions (safety stock, EOQ)
- `inventory/importer.py` — CSV import with per-row validation errors
- `inventory/reports.py` — valuation, low stock and slow movers as text, Markdown or CSV
- `inventory/suppliers.py` — suppliers, offers, pack sizes, cheapest source
- `inventory/barcodes.py` — EAN-13 check digits, internal GTINs
- `inventory/audit.py` — replay the movement log, compare with a physical count
- `inventory/api.py` — read-only JSON API over HTTP
- `inventory/cli.py` — `inventory` command line (`import`, `stock`, `receive`, `ship`, `report`, `reorder`)
- `data/sample_stock.csv` — a sample snapshot to import
- `tests/` — pytest suite

## Quick start

```
pip install -e .
inventory import data/sample_stock.csv
inventory report valuation --format markdown
inventory reorder --days 30
```

## Conventions

Quantities are integers (units); money is `Decimal`, never float. Every change
of stock is a `Movement` row, so the stock level of any item at any time can be
rebuilt from the movement log. See AGENTS.md for the rules of this repository.
"""

AGENTS_MD = """\
# Rules for agents working in this repository

- Never change public function signatures: other teams import `inventory` as a library.
- Money is `Decimal`; never introduce float arithmetic on prices.
- Run `pytest -q` before saying a change is done.
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "inventory"
version = "1.4.2"
description = "Stock keeping: items, locations, movements, purchase orders, reports"
requires-python = ">=3.11"
dependencies = []

[project.optional-dependencies]
test = ["pytest>=7"]

[project.scripts]
inventory = "inventory.cli:main"
"""

INIT_PY = '''\
"""inventory: stock keeping as a library and a command line."""

from inventory.errors import InsufficientStockError, InventoryError, UnknownItemError, ValidationError
from inventory.models import Item, Location, Movement, MovementKind, Sku, StockLevel
from inventory.stock import StockService
from inventory.storage import Repository

__version__ = "1.4.2"

__all__ = [
    "InsufficientStockError",
    "InventoryError",
    "Item",
    "Location",
    "Movement",
    "MovementKind",
    "Repository",
    "Sku",
    "StockLevel",
    "StockService",
    "UnknownItemError",
    "ValidationError",
]
'''

ERRORS_PY = '''\
"""The exception hierarchy. Callers catch InventoryError; the CLI prints its message."""

from __future__ import annotations


class InventoryError(Exception):
    """Base class of every error this package raises on purpose."""

    exit_code = 1


class ValidationError(InventoryError):
    """Input that does not make sense (a negative quantity, a malformed SKU)."""

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None, row: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.row = row

    def __str__(self) -> str:
        where = []
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.field:
            where.append(self.field)
        prefix = f"{', '.join(where)}: " if where else ""
        return prefix + super().__str__()


class UnknownItemError(InventoryError):
    """The SKU is not in the catalogue."""

    def __init__(self, sku: str) -> None:
        super().__init__(f"unknown item {sku}")
        self.sku = sku


class UnknownLocationError(InventoryError):
    def __init__(self, code: str) -> None:
        super().__init__(f"unknown location {code}")
        self.code = code


class InsufficientStockError(InventoryError):
    """A shipment or transfer asked for more than is available (on hand minus reserved)."""

    def __init__(self, sku: str, location: str, wanted: int, available: int) -> None:
        super().__init__(f"{sku} at {location}: wanted {wanted}, only {available} available")
        self.sku = sku
        self.location = location
        self.wanted = wanted
        self.available = available


class StorageError(InventoryError):
    """The database failed (locked, corrupt, wrong schema version)."""

    exit_code = 3
'''

MODELS_PY = '''\
"""The domain model. Plain dataclasses: storage and services pass them around."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from enum import Enum

from inventory.errors import ValidationError

# SKU: a three-letter family, a size code and a four-digit serial, e.g. BLT-M8-0042.
_SKU_RE = re.compile(r"^(?P<family>[A-Z]{3})-(?P<size>[A-Z0-9]{1,4})-(?P<serial>\\d{4})$")


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
        if not re.fullmatch(r"[A-Z]-\\d{2}", self.code):
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
'''

CONFIG_PY = '''\
"""Settings: defaults, then inventory.toml, then INVENTORY_* environment variables."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from inventory.errors import ValidationError

CONFIG_FILE = "inventory.toml"


@dataclass
class Settings:
    database: Path = Path("inventory.sqlite3")
    currency: str = "EUR"
    default_lead_time_days: int = 14
    service_level: float = 0.95  # for safety stock
    order_cost: str = "25.00"  # fixed cost of placing one purchase order (Decimal text)
    holding_rate: float = 0.22  # yearly holding cost as a share of unit cost
    slow_mover_days: int = 90


def _coerce(name: str, raw: object, target: type) -> object:
    try:
        if target is Path:
            return Path(str(raw))
        if target is bool:
            return str(raw).lower() in ("1", "true", "yes", "on")
        return target(raw)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"setting {name}: {raw!r} is not a valid {target.__name__}", field=name) from exc


def load_settings(directory: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Settings for ``directory`` (default: the current one)."""
    directory = directory or Path.cwd()
    env = dict(os.environ) if env is None else env
    values: dict[str, object] = {}
    path = directory / CONFIG_FILE
    if path.exists():
        with open(path, "rb") as f:
            values.update(tomllib.load(f).get("inventory", {}))
    for f in fields(Settings):
        key = f"INVENTORY_{f.name.upper()}"
        if key in env:
            values[f.name] = env[key]
    settings = Settings()
    types = {f.name: type(getattr(settings, f.name)) for f in fields(Settings)}
    for name, raw in values.items():
        if name not in types:
            raise ValidationError(f"unknown setting {name!r} in {path}", field=name)
        setattr(settings, name, _coerce(name, raw, types[name]))
    if not 0.5 <= settings.service_level < 1:
        raise ValidationError("service_level must be in [0.5, 1)", field="service_level")
    return settings
'''

STORAGE_PY = '''\
"""SQLite persistence. One Repository per database file; all writes in transactions."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Iterator

from inventory.errors import StorageError, UnknownItemError
from inventory.models import Item, Location, Movement, MovementKind, Sku, StockLevel

SCHEMA_VERSION = 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    sku TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    unit_cost TEXT NOT NULL,
    currency TEXT NOT NULL,
    reorder_point INTEGER NOT NULL DEFAULT 0,
    lead_time_days INTEGER NOT NULL DEFAULT 14,
    active INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS locations (code TEXT PRIMARY KEY, description TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS movements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sku TEXT NOT NULL REFERENCES items(sku),
    location TEXT NOT NULL REFERENCES locations(code),
    quantity INTEGER NOT NULL,
    kind TEXT NOT NULL,
    reference TEXT NOT NULL DEFAULT '',
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS movements_by_item ON movements (sku, location);
CREATE TABLE IF NOT EXISTS reservations (
    sku TEXT NOT NULL,
    location TEXT NOT NULL,
    order_ref TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    PRIMARY KEY (sku, location, order_ref)
);
"""


class Repository:
    def __init__(self, path: Path | str = ":memory:") -> None:
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, timeout=5.0)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.executescript(SCHEMA)
        self._check_version()

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row["value"]) != SCHEMA_VERSION:
            raise StorageError(f"database schema {row['value']} but this version needs {SCHEMA_VERSION}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    # ---- items and locations ----

    def upsert_item(self, item: Item) -> None:
        self._db.execute(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(sku) DO UPDATE SET "
            "name = excluded.name, unit_cost = excluded.unit_cost, currency = excluded.currency, "
            "reorder_point = excluded.reorder_point, lead_time_days = excluded.lead_time_days, "
            "active = excluded.active",
            (str(item.sku), item.name, str(item.unit_cost), item.currency, item.reorder_point,
             item.lead_time_days, int(item.active)),
        )

    def get_item(self, sku: Sku | str) -> Item:
        row = self._db.execute("SELECT * FROM items WHERE sku = ?", (str(sku),)).fetchone()
        if row is None:
            raise UnknownItemError(str(sku))
        return _item(row)

    def items(self, active_only: bool = True) -> list[Item]:
        query = "SELECT * FROM items" + (" WHERE active = 1" if active_only else "") + " ORDER BY sku"
        return [_item(row) for row in self._db.execute(query)]

    def add_location(self, location: Location) -> None:
        self._db.execute("INSERT OR IGNORE INTO locations VALUES (?, ?)", (location.code, location.description))

    def locations(self) -> list[Location]:
        return [Location(r["code"], r["description"]) for r in self._db.execute("SELECT * FROM locations")]

    # ---- movements and levels ----

    def record(self, movement: Movement) -> int:
        cursor = self._db.execute(
            "INSERT INTO movements (sku, location, quantity, kind, reference, at) VALUES (?, ?, ?, ?, ?, ?)",
            (str(movement.sku), movement.location, movement.quantity, movement.kind.value,
             movement.reference, movement.at.isoformat()),
        )
        movement.id = cursor.lastrowid
        return movement.id

    def movements(self, sku: Sku | str | None = None, since: datetime | None = None) -> list[Movement]:
        query = "SELECT * FROM movements WHERE 1 = 1"
        args: list[object] = []
        if sku is not None:
            query += " AND sku = ?"
            args.append(str(sku))
        if since is not None:
            query += " AND at >= ?"
            args.append(since.isoformat())
        return [_movement(row) for row in self._db.execute(query + " ORDER BY id", args)]

    def level(self, sku: Sku | str, location: str) -> StockLevel:
        on_hand = self._db.execute(
            "SELECT COALESCE(SUM(quantity), 0) FROM movements WHERE sku = ? AND location = ?",
            (str(sku), location),
        ).fetchone()[0]
        reserved = self._db.execute(
            "SELECT COALESCE(SUM(quantity), 0) FROM reservations WHERE sku = ? AND location = ?",
            (str(sku), location),
        ).fetchone()[0]
        return StockLevel(Sku.parse(str(sku)), location, on_hand, reserved)

    def levels(self) -> list[StockLevel]:
        rows = self._db.execute(
            "SELECT m.sku, m.location, SUM(m.quantity) AS on_hand, "
            "(SELECT COALESCE(SUM(r.quantity), 0) FROM reservations r "
            " WHERE r.sku = m.sku AND r.location = m.location) AS reserved "
            "FROM movements m GROUP BY m.sku, m.location ORDER BY m.sku, m.location"
        )
        return [StockLevel(Sku.parse(r["sku"]), r["location"], r["on_hand"], r["reserved"]) for r in rows]

    def reserve(self, sku: Sku | str, location: str, order_ref: str, quantity: int) -> None:
        self._db.execute(
            "INSERT INTO reservations VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET quantity = excluded.quantity",
            (str(sku), location, order_ref, quantity),
        )

    def release(self, sku: Sku | str, location: str, order_ref: str) -> None:
        self._db.execute("DELETE FROM reservations WHERE sku = ? AND location = ? AND order_ref = ?",
                         (str(sku), location, order_ref))


def _item(row: sqlite3.Row) -> Item:
    return Item(Sku.parse(row["sku"]), row["name"], Decimal(row["unit_cost"]), row["currency"],
                row["reorder_point"], row["lead_time_days"], bool(row["active"]))


def _movement(row: sqlite3.Row) -> Movement:
    return Movement(Sku.parse(row["sku"]), row["location"], row["quantity"], MovementKind(row["kind"]),
                    row["reference"], datetime.fromisoformat(row["at"]), row["id"])
'''

STOCK_PY = '''\
"""StockService: every change of stock goes through here, as movements, in a transaction."""

from __future__ import annotations

import logging

from inventory.errors import InsufficientStockError, UnknownLocationError, ValidationError
from inventory.models import Movement, MovementKind, Sku, StockLevel
from inventory.storage import Repository

log = logging.getLogger(__name__)


class StockService:
    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    def _check_location(self, code: str) -> None:
        if code not in {loc.code for loc in self.repo.locations()}:
            raise UnknownLocationError(code)

    @staticmethod
    def _positive(quantity: int) -> None:
        if quantity <= 0:
            raise ValidationError(f"quantity must be positive, got {quantity}", field="quantity")

    def receive(self, sku: Sku | str, location: str, quantity: int, reference: str = "") -> StockLevel:
        """Goods arrived (a purchase order, a return)."""
        self._positive(quantity)
        self._check_location(location)
        item = self.repo.get_item(sku)
        with self.repo.transaction():
            self.repo.record(Movement(item.sku, location, quantity, MovementKind.RECEIPT, reference))
        log.info("received %s x %d at %s (%s)", item.sku, quantity, location, reference)
        return self.repo.level(item.sku, location)

    def ship(self, sku: Sku | str, location: str, quantity: int, reference: str = "") -> StockLevel:
        """Goods left. Refuses to go below what is reserved for other orders."""
        self._positive(quantity)
        item = self.repo.get_item(sku)
        with self.repo.transaction():
            level = self.repo.level(item.sku, location)
            own_reservation = self._reserved_for(item.sku, location, reference)
            available = level.available + own_reservation
            if quantity > available:
                raise InsufficientStockError(str(item.sku), location, quantity, available)
            self.repo.record(Movement(item.sku, location, -quantity, MovementKind.SHIPMENT, reference))
            if own_reservation:
                self.repo.release(item.sku, location, reference)
        return self.repo.level(item.sku, location)

    def transfer(self, sku: Sku | str, source: str, target: str, quantity: int) -> tuple[StockLevel, StockLevel]:
        """Move stock between locations: two movements, one transaction."""
        self._positive(quantity)
        if source == target:
            raise ValidationError("source and target are the same location", field="location")
        self._check_location(target)
        item = self.repo.get_item(sku)
        reference = f"transfer {source}->{target}"
        with self.repo.transaction():
            level = self.repo.level(item.sku, source)
            if quantity > level.available:
                raise InsufficientStockError(str(item.sku), source, quantity, level.available)
            self.repo.record(Movement(item.sku, source, -quantity, MovementKind.TRANSFER_OUT, reference))
            self.repo.record(Movement(item.sku, target, quantity, MovementKind.TRANSFER_IN, reference))
        return self.repo.level(item.sku, source), self.repo.level(item.sku, target)

    def adjust(self, sku: Sku | str, location: str, counted: int, reason: str) -> StockLevel:
        """A stock count: record the difference between counted and on hand."""
        if counted < 0:
            raise ValidationError("a count cannot be negative", field="counted")
        if not reason.strip():
            raise ValidationError("an adjustment needs a reason", field="reason")
        item = self.repo.get_item(sku)
        with self.repo.transaction():
            level = self.repo.level(item.sku, location)
            delta = counted - level.on_hand
            if delta:
                self.repo.record(Movement(item.sku, location, delta, MovementKind.ADJUSTMENT, reason))
                log.warning("adjusted %s at %s by %+d: %s", item.sku, location, delta, reason)
        return self.repo.level(item.sku, location)

    def reserve(self, sku: Sku | str, location: str, order_ref: str, quantity: int) -> StockLevel:
        """Hold stock for an order so other shipments cannot take it."""
        self._positive(quantity)
        item = self.repo.get_item(sku)
        with self.repo.transaction():
            level = self.repo.level(item.sku, location)
            already = self._reserved_for(item.sku, location, order_ref)
            if quantity > level.available + already:
                raise InsufficientStockError(str(item.sku), location, quantity, level.available + already)
            self.repo.reserve(item.sku, location, order_ref, quantity)
        return self.repo.level(item.sku, location)

    def _reserved_for(self, sku: Sku, location: str, order_ref: str) -> int:
        if not order_ref:
            return 0
        row = self.repo._db.execute(
            "SELECT quantity FROM reservations WHERE sku = ? AND location = ? AND order_ref = ?",
            (str(sku), location, order_ref),
        ).fetchone()
        return row[0] if row else 0
'''

PRICING_PY = '''\
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
'''

ORDERS_PY = '''\
"""Purchase orders and reorder suggestions.

Safety stock = z * sigma(daily demand) * sqrt(lead time); the order quantity is the
economic order quantity (EOQ), rounded up to the supplier's pack size.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum

from inventory.config import Settings
from inventory.errors import ValidationError
from inventory.models import Item, MovementKind
from inventory.storage import Repository

# z-scores for common service levels (one-sided normal quantiles)
Z_SCORES = {0.90: 1.2816, 0.95: 1.6449, 0.975: 1.9600, 0.99: 2.3263}


class OrderStatus(str, Enum):
    DRAFT = "draft"
    SENT = "sent"
    RECEIVED = "received"
    CANCELLED = "cancelled"


@dataclass
class OrderLine:
    sku: str
    quantity: int
    unit_cost: Decimal

    @property
    def total(self) -> Decimal:
        return self.unit_cost * self.quantity


@dataclass
class PurchaseOrder:
    reference: str
    supplier: str
    lines: list[OrderLine] = field(default_factory=list)
    status: OrderStatus = OrderStatus.DRAFT
    expected: date | None = None

    @property
    def total(self) -> Decimal:
        return sum((line.total for line in self.lines), Decimal(0))

    def add(self, sku: str, quantity: int, unit_cost: Decimal) -> None:
        if self.status is not OrderStatus.DRAFT:
            raise ValidationError(f"order {self.reference} is {self.status.value}, not a draft")
        if quantity <= 0:
            raise ValidationError("order quantity must be positive", field="quantity")
        for line in self.lines:
            if line.sku == sku:
                line.quantity += quantity
                return
        self.lines.append(OrderLine(sku, quantity, unit_cost))

    def send(self, today: date) -> None:
        if not self.lines:
            raise ValidationError(f"order {self.reference} has no lines")
        self.status = OrderStatus.SENT
        self.expected = self.expected or today + timedelta(days=14)


@dataclass
class Suggestion:
    item: Item
    available: int
    safety_stock: int
    reorder_point: int
    quantity: int
    reason: str


def daily_demand(repo: Repository, sku: str, days: int, now: datetime | None = None) -> list[int]:
    """Units shipped per day over the last ``days`` days (0 for days without shipments)."""
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(days=days)
    per_day = [0] * days
    for movement in repo.movements(sku, since=since):
        if movement.kind is MovementKind.SHIPMENT:
            index = min(days - 1, (movement.at - since).days)
            per_day[index] += -movement.quantity
    return per_day


def safety_stock(demand: list[int], lead_time_days: int, service_level: float) -> int:
    z = Z_SCORES.get(round(service_level, 3))
    if z is None:
        raise ValidationError(f"no z-score for service level {service_level}", field="service_level")
    sigma = statistics.pstdev(demand) if len(demand) > 1 else 0.0
    return math.ceil(z * sigma * math.sqrt(lead_time_days))


def economic_order_quantity(yearly_demand: float, order_cost: Decimal, unit_cost: Decimal,
                            holding_rate: float, pack_size: int = 1) -> int:
    if yearly_demand <= 0:
        return 0
    holding = float(unit_cost) * holding_rate
    if holding <= 0:
        raise ValidationError("holding cost must be positive", field="holding_rate")
    eoq = math.sqrt(2 * yearly_demand * float(order_cost) / holding)
    return max(pack_size, math.ceil(eoq / pack_size) * pack_size)


def suggest_reorders(repo: Repository, settings: Settings, days: int = 30,
                     now: datetime | None = None) -> list[Suggestion]:
    """Items whose available stock is at or below their reorder point (static or computed)."""
    suggestions = []
    levels = {}
    for level in repo.levels():
        levels[str(level.sku)] = levels.get(str(level.sku), 0) + level.available
    for item in repo.items():
        demand = daily_demand(repo, str(item.sku), days, now)
        mean = sum(demand) / days
        safety = safety_stock(demand, item.lead_time_days, settings.service_level)
        point = max(item.reorder_point, math.ceil(mean * item.lead_time_days) + safety)
        available = levels.get(str(item.sku), 0)
        if available > point:
            continue
        quantity = economic_order_quantity(mean * 365, Decimal(settings.order_cost), item.unit_cost,
                                           settings.holding_rate)
        quantity = max(quantity, point - available)
        reason = "below static reorder point" if available <= item.reorder_point else "below computed reorder point"
        suggestions.append(Suggestion(item, available, safety, point, quantity, reason))
    return sorted(suggestions, key=lambda s: s.available - s.reorder_point)


def draft_orders(suggestions: list[Suggestion], supplier_of: dict[str, str], prefix: str = "PO") -> list[PurchaseOrder]:
    """One draft order per supplier; items without a known supplier go to 'unassigned'."""
    orders: dict[str, PurchaseOrder] = {}
    for number, suggestion in enumerate(suggestions, start=1):
        supplier = supplier_of.get(str(suggestion.item.sku), "unassigned")
        if supplier not in orders:
            orders[supplier] = PurchaseOrder(f"{prefix}-{len(orders) + 1:05d}", supplier)
        orders[supplier].add(str(suggestion.item.sku), suggestion.quantity, suggestion.item.unit_cost)
    return list(orders.values())
'''

IMPORTER_PY = '''\
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
'''

REPORTS_PY = '''\
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
        writer = csv.writer(out, lineterminator="\\n")
        writer.writerow(table.columns)
        writer.writerows(table.rows)
        return out.getvalue()
    if fmt == "markdown":
        lines = [f"### {table.title}", "", "| " + " | ".join(table.columns) + " |",
                 "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in table.rows]
        if table.footer:
            lines += ["", f"**{table.footer}**"]
        return "\\n".join(lines) + "\\n"
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
    return "\\n".join(out) + "\\n"
'''

CLI_PY = '''\
"""The inventory command line."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from inventory.config import load_settings
from inventory.errors import InventoryError
from inventory.importer import import_snapshot
from inventory.orders import draft_orders, suggest_reorders
from inventory.reports import low_stock, render, slow_movers, valuation
from inventory.stock import StockService
from inventory.storage import Repository


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inventory", description="Stock keeping from the command line")
    parser.add_argument("--db", type=Path, help="database file (default: from settings)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("import", help="import a CSV stock snapshot")
    p.add_argument("path", type=Path)

    p = sub.add_parser("stock", help="show stock levels")
    p.add_argument("sku", nargs="?")

    for name in ("receive", "ship"):
        p = sub.add_parser(name, help=f"{name} units of an item")
        p.add_argument("sku")
        p.add_argument("location")
        p.add_argument("quantity", type=int)
        p.add_argument("--ref", default="")

    p = sub.add_parser("report", help="valuation, low-stock or slow-movers report")
    p.add_argument("kind", choices=["valuation", "low-stock", "slow-movers"])
    p.add_argument("--format", choices=["text", "markdown", "csv"], default="text")

    p = sub.add_parser("reorder", help="suggest purchase orders")
    p.add_argument("--days", type=int, default=30, help="demand history to look at")
    p.add_argument("--draft", action="store_true", help="also draft purchase orders")
    return parser


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    repo = Repository(args.db or settings.database)
    service = StockService(repo)
    try:
        if args.command == "import":
            report = import_snapshot(repo, args.path)
            for error in report.errors:
                print(f"error: {error}", file=sys.stderr)
            if not report.ok:
                return 2
            print(f"imported {report.items} items, {report.units} units in {report.locations} locations")
        elif args.command == "stock":
            for level in repo.levels():
                if args.sku is None or str(level.sku) == args.sku.upper():
                    print(f"{level.sku}  {level.location}  on hand {level.on_hand}  reserved {level.reserved}")
        elif args.command == "receive":
            level = service.receive(args.sku, args.location, args.quantity, args.ref)
            print(f"{level.sku} at {level.location}: {level.on_hand} on hand")
        elif args.command == "ship":
            level = service.ship(args.sku, args.location, args.quantity, args.ref)
            print(f"{level.sku} at {level.location}: {level.on_hand} on hand")
        elif args.command == "report":
            table = {"valuation": lambda: valuation(repo, settings.currency), "low-stock": lambda: low_stock(repo),
                     "slow-movers": lambda: slow_movers(repo, settings.slow_mover_days)}[args.kind]()
            sys.stdout.write(render(table, args.format))
        elif args.command == "reorder":
            suggestions = suggest_reorders(repo, settings, args.days)
            for s in suggestions:
                print(f"{s.item.sku}: available {s.available}, reorder point {s.reorder_point}, "
                      f"order {s.quantity} ({s.reason})")
            if args.draft:
                for order in draft_orders(suggestions, {}):
                    print(f"drafted {order.reference} for {order.supplier}: {len(order.lines)} lines, {order.total}")
        return 0
    finally:
        repo.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        return run(args)
    except InventoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
'''

CONFTEST_PY = '''\
import pytest

from inventory.models import Item, Location, Sku
from inventory.stock import StockService
from inventory.storage import Repository
from decimal import Decimal


@pytest.fixture
def repo():
    repository = Repository(":memory:")
    repository.add_location(Location("A-01", "front shelf"))
    repository.add_location(Location("B-02", "back bin"))
    repository.upsert_item(Item(Sku.parse("BLT-M8-0042"), "M8 bolt, zinc", Decimal("0.18"), reorder_point=50))
    repository.upsert_item(Item(Sku.parse("NUT-M8-0043"), "M8 nut, zinc", Decimal("0.05"), reorder_point=100))
    yield repository
    repository.close()


@pytest.fixture
def service(repo):
    return StockService(repo)
'''

TEST_MODELS_PY = '''\
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
'''

TEST_STOCK_PY = '''\
import pytest

from inventory.errors import InsufficientStockError, UnknownLocationError


def test_receive_then_ship(service):
    service.receive("BLT-M8-0042", "A-01", 100, "PO-00001")
    level = service.ship("BLT-M8-0042", "A-01", 30, "SO-1")
    assert level.on_hand == 70


def test_cannot_ship_reserved_stock(service):
    service.receive("BLT-M8-0042", "A-01", 10)
    service.reserve("BLT-M8-0042", "A-01", "SO-7", 8)
    with pytest.raises(InsufficientStockError):
        service.ship("BLT-M8-0042", "A-01", 5, "SO-8")
    assert service.ship("BLT-M8-0042", "A-01", 8, "SO-7").on_hand == 2


def test_transfer_moves_stock(service):
    service.receive("NUT-M8-0043", "A-01", 40)
    source, target = service.transfer("NUT-M8-0043", "A-01", "B-02", 15)
    assert (source.on_hand, target.on_hand) == (25, 15)


def test_unknown_location(service):
    with pytest.raises(UnknownLocationError):
        service.receive("NUT-M8-0043", "Z-99", 1)


def test_adjust_records_the_difference(service, repo):
    service.receive("NUT-M8-0043", "A-01", 40)
    assert service.adjust("NUT-M8-0043", "A-01", 37, "cycle count").on_hand == 37
    assert repo.movements("NUT-M8-0043")[-1].quantity == -3
'''

TEST_PRICING_PY = '''\
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
'''

TEST_ORDERS_PY = '''\
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from inventory.config import Settings
from inventory.orders import PurchaseOrder, economic_order_quantity, safety_stock, suggest_reorders


def test_eoq_rounds_up_to_pack_size():
    assert economic_order_quantity(1200, Decimal("25"), Decimal("2"), 0.2, pack_size=50) == 400


def test_safety_stock_is_zero_without_variation():
    assert safety_stock([5] * 30, 14, 0.95) == 0


def test_order_lines_merge_by_sku():
    order = PurchaseOrder("PO-00001", "Acme")
    order.add("BLT-M8-0042", 100, Decimal("0.18"))
    order.add("BLT-M8-0042", 50, Decimal("0.18"))
    assert len(order.lines) == 1 and order.total == Decimal("27.00")


def test_low_item_is_suggested(service, repo):
    service.receive("BLT-M8-0042", "A-01", 60)
    now = datetime.now(timezone.utc) + timedelta(seconds=1)
    service.ship("BLT-M8-0042", "A-01", 20)
    names = [str(s.item.sku) for s in suggest_reorders(repo, Settings(), days=30, now=now)]
    assert "BLT-M8-0042" in names
'''

DESIGN_MD = """\
# Design notes

## Why movements, not counters

The first version kept one `on_hand` counter per item and location and updated it
in place. Two problems followed: a crash between "ship" and "update counter" left
the counter wrong with no way to tell, and nobody could answer "how many did we have
on the 3rd?". Since 1.0 every change is an append-only `Movement` row and the stock
level is `SUM(quantity)` over the movements of an item at a location. Counting the
shelf (`StockService.adjust`) records the difference as an adjustment, with a reason.

The cost is a `GROUP BY` per report. With the index `movements_by_item` this stays
under 50 ms for a million movements on a laptop; if it ever does not, add a nightly
snapshot table rather than going back to counters.

## Reservations

An order that is confirmed but not yet picked reserves stock (`reservations` table).
`available = on_hand - reserved`. A shipment that carries the order's reference may
use that order's own reservation, and releases it; any other shipment can only take
what is available. Transfers never touch reserved stock.

## Money

Prices and costs are `Decimal` stored as text in SQLite (SQLite has no decimal type
and a REAL column would round 0.1 + 0.2 the way floats do). Rounding happens once, at
the end of a calculation, half-up to the currency's minor unit (`pricing.quantize`).
JPY has no minor unit, KWD has three.

## Reorder suggestions

`orders.suggest_reorders` looks at the last N days of shipments per item:

- mean daily demand d and its standard deviation s,
- safety stock = z(service level) * s * sqrt(lead time),
- reorder point = max(the item's static reorder point, d * lead time + safety stock),
- order quantity = the economic order quantity, sqrt(2 * yearly demand * order cost / holding cost),
  at least enough to get back over the reorder point.

Suppliers are not modelled yet: `draft_orders` groups by a supplier map the caller
passes in, and everything else lands on an "unassigned" draft.

## Import

`importer.import_snapshot` is all-or-nothing: the whole file is validated first and
every invalid row is reported with its row number and field, so a user fixes the file
in one pass. A valid file is imported in one transaction, as adjustments against the
current levels, so importing the same snapshot twice changes nothing the second time.

## Known gaps

- No multi-currency valuation: reports assume every item is in the settings' currency.
- `StockService._reserved_for` reaches into the repository's connection; it should be a
  `Repository` method.
- The CLI opens the database per command; a long-running service would want a pool.
"""

CHANGELOG_MD = """\
# Changelog

## 1.4.2
- Fix: `ship` with an order reference could use more than that order's reservation.
- Fix: importing a row with a lower-case location code created a second location.

## 1.4.0
- Reorder suggestions use computed safety stock (service level from settings).
- `inventory reorder --draft` drafts purchase orders grouped by supplier.
- Reports render as Markdown (`--format markdown`).

## 1.3.0
- Reservations: confirmed orders hold stock; shipments respect them.
- Settings from `inventory.toml` and `INVENTORY_*` environment variables.

## 1.2.0
- Slow movers report.
- CSV import reports every invalid row instead of stopping at the first.

## 1.1.0
- Transfers between locations (two movements in one transaction).
- Schema version check: an old database is refused with a clear message.

## 1.0.0
- Stock levels are computed from an append-only movement log (see docs/design.md).
"""

SUPPLIERS_PY = '''\
\"\"\"Suppliers and what they sell: pack sizes, minimum order values, lead times, price lists.\"\"\"

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
    \"\"\"One supplier's terms for one item.\"\"\"

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
        \"\"\"Whole packs only: 130 units in packs of 50 is 150.\"\"\"
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
        \"\"\"Order date plus lead time, moved past weekends and the supplier's closed days.\"\"\"
        offer = self.offer_for(sku)
        if offer is None:
            raise ValidationError(f"{self.code} does not sell {sku}", field="sku")
        day = ordered + timedelta(days=offer.lead_time_days)
        while day.weekday() >= 5 or day in self.closed_days:
            day += timedelta(days=1)
        return day


class SupplierBook:
    \"\"\"All suppliers, and the cheapest way to buy each item.\"\"\"

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
        \"\"\"The supplier with the lowest total for ``quantity`` units (rounded to packs); ties: faster.\"\"\"
        best = None
        for supplier, offer in self.sellers(sku):
            units = offer.round_up(quantity)
            key = (offer.unit_cost * units, offer.lead_time_days)
            if best is None or key < best[0]:
                best = (key, supplier, offer, units)
        return None if best is None else (best[1], best[2], best[3])

    def supplier_map(self, skus: list[str], quantities: dict[str, int]) -> dict[str, str]:
        \"\"\"sku -> supplier code, for orders.draft_orders.\"\"\"
        result = {}
        for sku in skus:
            choice = self.cheapest(sku, quantities.get(sku, 1))
            if choice is not None:
                result[sku] = choice[0].code
        return result


def load_price_list(path: Path, supplier: Supplier) -> int:
    \"\"\"Read a supplier price list (sku, unit_cost, pack_size, lead_time_days); returns offers loaded.\"\"\"
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
'''

BARCODES_PY = '''\
\"\"\"Barcodes: EAN-13 check digits and the store's internal GTINs for SKUs.\"\"\"

from __future__ import annotations

from inventory.errors import ValidationError
from inventory.models import Sku

# The company prefix we were assigned (GS1); internal items use it with the SKU serial.
COMPANY_PREFIX = "4012345"
FAMILY_CODES = {"BLT": 1, "NUT": 2, "WSH": 3, "SCR": 4, "BRK": 5, "HNG": 6, "PIP": 7, "VLV": 8, "CBL": 9, "FLT": 0}


def check_digit(digits: str) -> int:
    \"\"\"EAN/GTIN check digit of the first 12 (EAN-13) or 7 (EAN-8) digits.\"\"\"
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
    \"\"\"The internal EAN-13 of a SKU: prefix, family code, serial, check digit.\"\"\"
    family = FAMILY_CODES.get(sku.family)
    if family is None:
        raise ValidationError(f"no barcode family for {sku.family}", field="sku")
    body = f"{COMPANY_PREFIX}{family}{sku.serial:04d}"
    if len(body) != 12:
        raise ValidationError(f"GTIN body {body} is not 12 digits", field="sku")
    return body + str(check_digit(body))


def sku_for(barcode: str, known: dict[str, Sku]) -> Sku:
    \"\"\"Look a scanned barcode up; internal GTINs are decoded, others must be in ``known``.\"\"\"
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
'''

AUDIT_PY = '''\
\"\"\"Audit: rebuild stock from the movement log and compare with what the shelves say.\"\"\"

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from inventory.models import Movement, MovementKind
from inventory.storage import Repository


@dataclass(frozen=True)
class Discrepancy:
    sku: str
    location: str
    expected: int
    counted: int

    @property
    def difference(self) -> int:
        return self.counted - self.expected


def replay(movements: list[Movement], until: datetime | None = None) -> dict[tuple[str, str], int]:
    \"\"\"Stock per (sku, location) as of ``until`` (default: now), from the movement log alone.\"\"\"
    levels: dict[tuple[str, str], int] = defaultdict(int)
    for movement in movements:
        if until is not None and movement.at > until:
            continue
        levels[(str(movement.sku), movement.location)] += movement.quantity
    return dict(levels)


def check_transfers(movements: list[Movement]) -> list[str]:
    \"\"\"Every transfer must have both halves with the same reference and opposite quantities.\"\"\"
    halves: dict[str, list[Movement]] = defaultdict(list)
    for movement in movements:
        if movement.kind in (MovementKind.TRANSFER_IN, MovementKind.TRANSFER_OUT):
            halves[movement.reference].append(movement)
    problems = []
    for reference, pair in sorted(halves.items()):
        if len(pair) != 2:
            problems.append(f"{reference}: {len(pair)} halves")
        elif pair[0].quantity + pair[1].quantity != 0:
            problems.append(f"{reference}: quantities {pair[0].quantity} and {pair[1].quantity} do not cancel")
    return problems


def compare_count(repo: Repository, counted: dict[tuple[str, str], int]) -> list[Discrepancy]:
    \"\"\"Differences between a physical count and the books, largest first.\"\"\"
    books = replay(repo.movements())
    found = []
    for key in sorted(set(books) | set(counted)):
        expected = books.get(key, 0)
        actual = counted.get(key, 0)
        if expected != actual:
            found.append(Discrepancy(key[0], key[1], expected, actual))
    return sorted(found, key=lambda d: abs(d.difference), reverse=True)


def negative_stock(repo: Repository) -> list[tuple[str, str, int]]:
    \"\"\"Any (sku, location) whose replayed stock went below zero at some point: a data error.\"\"\"
    running: dict[tuple[str, str], int] = defaultdict(int)
    worst: dict[tuple[str, str], int] = {}
    for movement in repo.movements():
        key = (str(movement.sku), movement.location)
        running[key] += movement.quantity
        if running[key] < 0:
            worst[key] = min(worst.get(key, 0), running[key])
    return [(sku, location, low) for (sku, location), low in sorted(worst.items())]
'''

API_PY = '''\
\"\"\"A tiny read-only JSON API over HTTP (standard library only), for the warehouse dashboard.\"\"\"

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from inventory.errors import InventoryError, UnknownItemError
from inventory.reports import low_stock, valuation
from inventory.storage import Repository

log = logging.getLogger(__name__)


def _level_json(level) -> dict:
    return {"sku": str(level.sku), "location": level.location, "on_hand": level.on_hand,
            "reserved": level.reserved, "available": level.available}


class Handler(BaseHTTPRequestHandler):
    repo: Repository  # set by serve()

    def _send(self, status: HTTPStatus, body: object) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        query = parse_qs(url.query)
        try:
            if url.path == "/health":
                self._send(HTTPStatus.OK, {"ok": True})
            elif url.path == "/stock":
                sku = query.get("sku", [None])[0]
                levels = [_level_json(l) for l in self.repo.levels() if sku is None or str(l.sku) == sku]
                self._send(HTTPStatus.OK, levels)
            elif url.path.startswith("/items/"):
                item = self.repo.get_item(url.path.removeprefix("/items/"))
                self._send(HTTPStatus.OK, {"sku": str(item.sku), "name": item.name,
                                           "unit_cost": item.unit_cost, "currency": item.currency})
            elif url.path == "/reports/valuation":
                table = valuation(self.repo)
                self._send(HTTPStatus.OK, {"rows": table.rows, "total": table.footer})
            elif url.path == "/reports/low-stock":
                self._send(HTTPStatus.OK, {"rows": low_stock(self.repo).rows})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})
        except UnknownItemError as exc:
            self._send(HTTPStatus.NOT_FOUND, {"error": str(exc)})
        except InventoryError as exc:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Exception:  # the dashboard gets a 500, the log gets the traceback
            log.exception("GET %s failed", self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s - %s", self.address_string(), format % args)


def serve(repo: Repository, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    \"\"\"Start the server (call serve_forever() on the result). Read-only: no writes over HTTP.\"\"\"
    handler = type("BoundHandler", (Handler,), {"repo": repo})
    server = ThreadingHTTPServer((host, port), handler)
    log.info("inventory API on http://%s:%d", host, server.server_address[1])
    return server
'''

TEST_BARCODES_PY = '''\
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
'''

TEST_AUDIT_PY = '''\
from inventory.audit import check_transfers, compare_count, negative_stock, replay


def test_replay_matches_the_books(service, repo):
    service.receive("BLT-M8-0042", "A-01", 100)
    service.transfer("BLT-M8-0042", "A-01", "B-02", 30)
    assert replay(repo.movements()) == {("BLT-M8-0042", "A-01"): 70, ("BLT-M8-0042", "B-02"): 30}
    assert check_transfers(repo.movements()) == []


def test_count_differences_largest_first(service, repo):
    service.receive("BLT-M8-0042", "A-01", 100)
    service.receive("NUT-M8-0043", "A-01", 10)
    found = compare_count(repo, {("BLT-M8-0042", "A-01"): 90, ("NUT-M8-0043", "A-01"): 9})
    assert [(d.sku, d.difference) for d in found] == [("BLT-M8-0042", -10), ("NUT-M8-0043", -1)]


def test_no_negative_stock_in_normal_use(service, repo):
    service.receive("BLT-M8-0042", "A-01", 5)
    service.ship("BLT-M8-0042", "A-01", 5)
    assert negative_stock(repo) == []
'''

PROJECT_FILES: dict[str, str] = {
    "README.md": README,
    "AGENTS.md": AGENTS_MD,
    "pyproject.toml": PYPROJECT,
    "CHANGELOG.md": CHANGELOG_MD,
    "docs/design.md": DESIGN_MD,
    "inventory/__init__.py": INIT_PY,
    "inventory/errors.py": ERRORS_PY,
    "inventory/models.py": MODELS_PY,
    "inventory/config.py": CONFIG_PY,
    "inventory/storage.py": STORAGE_PY,
    "inventory/stock.py": STOCK_PY,
    "inventory/pricing.py": PRICING_PY,
    "inventory/orders.py": ORDERS_PY,
    "inventory/importer.py": IMPORTER_PY,
    "inventory/reports.py": REPORTS_PY,
    "inventory/cli.py": CLI_PY,
    "inventory/suppliers.py": SUPPLIERS_PY,
    "inventory/barcodes.py": BARCODES_PY,
    "inventory/audit.py": AUDIT_PY,
    "inventory/api.py": API_PY,
    "tests/conftest.py": CONFTEST_PY,
    "tests/test_models.py": TEST_MODELS_PY,
    "tests/test_stock.py": TEST_STOCK_PY,
    "tests/test_pricing.py": TEST_PRICING_PY,
    "tests/test_orders.py": TEST_ORDERS_PY,
    "tests/test_barcodes.py": TEST_BARCODES_PY,
    "tests/test_audit.py": TEST_AUDIT_PY,
}


def project_files() -> dict[str, str]:
    """Relative path -> content of every file of the demo project (not app.log)."""
    files = dict(PROJECT_FILES)
    files["data/sample_stock.csv"] = _sample_stock_csv()
    return files


def _complete_log(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == _expected_log_bytes()


def create_demo_workspace(root: Path, log_cache: Path | None = None) -> Path:
    """Create (or complete) the demo workspace under ``root`` and return it.

    Idempotent: files that exist are left alone (the demo may have edited them
    in an earlier run of a resumed session); ``app.log`` is rewritten only when
    missing or not the expected size. With ``log_cache`` the 15 MB log is
    written once there and hard-linked into each new workspace, so opening the
    demo does not spend start-up time writing it again.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    log = root / LOG_NAME
    if not _complete_log(log):
        if log_cache is not None:
            log_cache.mkdir(parents=True, exist_ok=True)
            cached = log_cache / LOG_NAME
            if not _complete_log(cached):
                write_app_log(cached)
            log.unlink(missing_ok=True)
            try:
                os.link(cached, log)
            except OSError:  # another file system: copy instead
                shutil.copyfile(cached, log)
        else:
            write_app_log(log)
    for rel, content in project_files().items():
        target = root / rel
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    return root

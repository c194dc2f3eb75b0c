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

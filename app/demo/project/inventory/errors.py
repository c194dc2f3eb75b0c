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

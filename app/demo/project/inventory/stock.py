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

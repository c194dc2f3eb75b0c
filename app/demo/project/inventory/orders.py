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

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

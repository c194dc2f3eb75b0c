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

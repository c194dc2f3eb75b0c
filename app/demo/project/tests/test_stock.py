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

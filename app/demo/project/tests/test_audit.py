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

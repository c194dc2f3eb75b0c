"""Audit: rebuild stock from the movement log and compare with what the shelves say."""

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
    """Stock per (sku, location) as of ``until`` (default: now), from the movement log alone."""
    levels: dict[tuple[str, str], int] = defaultdict(int)
    for movement in movements:
        if until is not None and movement.at > until:
            continue
        levels[(str(movement.sku), movement.location)] += movement.quantity
    return dict(levels)


def check_transfers(movements: list[Movement]) -> list[str]:
    """Every transfer must have both halves with the same reference and opposite quantities."""
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
    """Differences between a physical count and the books, largest first."""
    books = replay(repo.movements())
    found = []
    for key in sorted(set(books) | set(counted)):
        expected = books.get(key, 0)
        actual = counted.get(key, 0)
        if expected != actual:
            found.append(Discrepancy(key[0], key[1], expected, actual))
    return sorted(found, key=lambda d: abs(d.difference), reverse=True)


def negative_stock(repo: Repository) -> list[tuple[str, str, int]]:
    """Any (sku, location) whose replayed stock went below zero at some point: a data error."""
    running: dict[tuple[str, str], int] = defaultdict(int)
    worst: dict[tuple[str, str], int] = {}
    for movement in repo.movements():
        key = (str(movement.sku), movement.location)
        running[key] += movement.quantity
        if running[key] < 0:
            worst[key] = min(worst.get(key, 0), running[key])
    return [(sku, location, low) for (sku, location), low in sorted(worst.items())]

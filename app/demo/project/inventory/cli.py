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

"""inventory: stock keeping as a library and a command line."""

from inventory.errors import InsufficientStockError, InventoryError, UnknownItemError, ValidationError
from inventory.models import Item, Location, Movement, MovementKind, Sku, StockLevel
from inventory.stock import StockService
from inventory.storage import Repository

__version__ = "1.4.2"

__all__ = [
    "InsufficientStockError",
    "InventoryError",
    "Item",
    "Location",
    "Movement",
    "MovementKind",
    "Repository",
    "Sku",
    "StockLevel",
    "StockService",
    "UnknownItemError",
    "ValidationError",
]

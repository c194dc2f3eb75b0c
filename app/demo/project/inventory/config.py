"""Settings: defaults, then inventory.toml, then INVENTORY_* environment variables."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from inventory.errors import ValidationError

CONFIG_FILE = "inventory.toml"


@dataclass
class Settings:
    database: Path = Path("inventory.sqlite3")
    currency: str = "EUR"
    default_lead_time_days: int = 14
    service_level: float = 0.95  # for safety stock
    order_cost: str = "25.00"  # fixed cost of placing one purchase order (Decimal text)
    holding_rate: float = 0.22  # yearly holding cost as a share of unit cost
    slow_mover_days: int = 90


def _coerce(name: str, raw: object, target: type) -> object:
    try:
        if target is Path:
            return Path(str(raw))
        if target is bool:
            return str(raw).lower() in ("1", "true", "yes", "on")
        return target(raw)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"setting {name}: {raw!r} is not a valid {target.__name__}", field=name) from exc


def load_settings(directory: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Settings for ``directory`` (default: the current one)."""
    directory = directory or Path.cwd()
    env = dict(os.environ) if env is None else env
    values: dict[str, object] = {}
    path = directory / CONFIG_FILE
    if path.exists():
        with open(path, "rb") as f:
            values.update(tomllib.load(f).get("inventory", {}))
    for f in fields(Settings):
        key = f"INVENTORY_{f.name.upper()}"
        if key in env:
            values[f.name] = env[key]
    settings = Settings()
    types = {f.name: type(getattr(settings, f.name)) for f in fields(Settings)}
    for name, raw in values.items():
        if name not in types:
            raise ValidationError(f"unknown setting {name!r} in {path}", field=name)
        setattr(settings, name, _coerce(name, raw, types[name]))
    if not 0.5 <= settings.service_level < 1:
        raise ValidationError("service_level must be in [0.5, 1)", field="service_level")
    return settings

"""What a model costs, USD per million tokens, from pydantic's ``genai-prices`` catalogue.

The catalogue (prices with tiers, cache read and write rates, context windows) is
maintained upstream and ships inside the package: only the bundled copy is read.
Its auto-update (``UpdatePrices``) fetches from the internet and is never started,
and a snapshot another library in the process may have fetched is not used either:
a session never phones home. The package costs ~0.2 s to import, so it is imported
on the first lookup of a model it could know, not with this module.

A lookup's answer (the entry, or that there is none) is kept in the data directory, keyed by
the installed catalogue's file and the day, so a run for a model looked up before does not
import the package at all (``remember_lookups_in``): a one-turn headless run is mostly start-up.
The answers are also kept beside this package's bytecode under the SHA-256 of the model's name
(``_KeptAnswers``), so a run in a new data directory (a first run, every test's) for a model this
installation looked up before does not import it either.

Users override a price in config (``[prices."model-prefix"]`` with input,
cached_input, cache_write, output); ``price_for`` merges the override over the
catalogue's entry, the longest matching prefix winning. A model nobody prices
has no cost (None), and ``assumed_price_warning`` says so once with the setting.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from importlib.util import find_spec

from app.kernel.private_files import read_kept_json, write_kept_json
from app.system.kept_files import path_beside_bytecode, read_kept, write_kept
from app.kernel.usage import Usage

if TYPE_CHECKING:  # the catalogue's types, for mypy only: importing them costs ~0.2 s
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelPrice


@dataclass(frozen=True)
class PriceTier:
    """Rates that replace the base ones for a call whose whole input (uncached, cache
    reads and cache writes) is above ``above_input_tokens`` (e.g. long-context rates
    above 200K): as the providers bill it, every token of that call at these rates."""

    above_input_tokens: int
    rates: Price


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    cached_input_per_mtok: float
    cache_write_per_mtok: float
    output_per_mtok: float
    tiers: tuple[PriceTier, ...] = ()  # ascending by above_input_tokens

    def rates_for(self, total_input_tokens: int) -> Price:
        """The flat rates a call with this much input is billed at: the highest tier it is above."""
        for tier in reversed(self.tiers):
            if total_input_tokens > tier.above_input_tokens:
                return tier.rates
        return replace(self, tiers=()) if self.tiers else self


# Longer names are no model of the catalogue's; bounding them keeps its regexes cheap.
MAX_MODEL_NAME = 200

_ALIASES = {
    "input": "input_per_mtok",
    "cached_input": "cached_input_per_mtok",
    "cache_read": "cached_input_per_mtok",
    "cache_write": "cache_write_per_mtok",
    "output": "output_per_mtok",
}
_FIELDS = {f.name for f in fields(Price)} - {"tiers"}


def model_key(model: str) -> str:
    """The name prices and windows are looked up by: lower case, a router prefix ("openai/...") dropped."""
    return model.strip().lower().rsplit("/", 1)[-1]


def _longest_prefix(name: str, keys: Any) -> str | None:
    best: str | None = None
    for key in keys:
        k = key.lower()
        if name.startswith(k) and (best is None or len(k) > len(best)):
            best = key
    return best


# ---- the catalogue ----

@dataclass(frozen=True)
class CatalogueModel:
    """What the catalogue says of one model (its figures at lookup time)."""

    provider_id: str
    model_id: str
    price: Price | None  # None: the catalogue has no token prices for it
    context_window: int | None


@functools.cache
def _bundled_catalogue() -> DataSnapshot:
    # The data shipped in the package, built here rather than through get_snapshot(), which
    # would return prices fetched by an UpdatePrices someone else started in this process.
    from genai_prices.data import providers
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=providers, from_auto_update=False)


@functools.lru_cache(maxsize=64)
def catalogue_model(model: str) -> CatalogueModel | None:
    """The catalogue's entry for ``model`` (matched as the catalogue matches names), or None."""
    name = model_key(model)
    if not name or len(name) > MAX_MODEL_NAME:
        return None
    if _lookups is not None:
        known, entry = _lookups.get(name)
        if known:
            return entry
        entry = _kept_or_look_up(name, _lookups)
        _lookups.put(name, entry)
        return entry
    return _look_up(name)


def _look_up(name: str) -> CatalogueModel | None:
    try:
        provider, info = _bundled_catalogue().find_provider_model(name, None, None, None)
        model_price = info.get_prices(datetime.now(UTC))
    except (LookupError, ValueError):  # not in the catalogue
        return None
    return CatalogueModel(provider_id=provider.id, model_id=info.id, price=_from_catalogue(model_price),
                          context_window=info.context_window)


# ---- lookups kept between runs ----

# Bounds on a file in the data directory: anything bigger or stranger is ignored and rebuilt.
LOOKUPS_MAX_BYTES = 256 * 1024
LOOKUPS_MAX_MODELS = 128


def _catalogue_identity() -> str | None:
    """Which catalogue is installed, without importing it: its data file's size and mtime.
    An upgrade (or any edit) of the package changes it, and with it every kept answer."""
    try:
        spec = find_spec("genai_prices")
        if spec is None or not spec.submodule_search_locations:
            return None
        info = (Path(next(iter(spec.submodule_search_locations))) / "data.py").stat()
    except (ImportError, OSError, ValueError, StopIteration):
        return None
    return f"{info.st_size}-{info.st_mtime_ns}"


def _price_from_json(value: Any) -> Price | None:
    if value is None:
        return None
    tiers = tuple(PriceTier(int(t["above_input_tokens"]), _flat_price(t["rates"])) for t in value.get("tiers", ()))
    return replace(_flat_price(value), tiers=tiers)


def _flat_price(value: Any) -> Price:
    return Price(float(value["input_per_mtok"]), float(value["cached_input_per_mtok"]),
                 float(value["cache_write_per_mtok"]), float(value["output_per_mtok"]))


class _KeptLookups:
    """The catalogue's answers of earlier runs, for this catalogue and this day (prices change
    on dates the catalogue knows). Written 0600, never through a symlink, like every file of ours;
    a file that does not parse as what we wrote is ignored (and replaced on the next lookup)."""

    def __init__(self, path: Path, identity: str, day: str) -> None:
        self.path, self.identity, self.day = path, identity, day
        self.models: dict[str, Any] = {}
        kept = read_kept_json(path, LOOKUPS_MAX_BYTES)
        if kept.get("catalogue") == identity and kept.get("day") == day and isinstance(kept.get("models"), dict):
            self.models = dict(list(kept["models"].items())[-LOOKUPS_MAX_MODELS:])

    def get(self, name: str) -> tuple[bool, CatalogueModel | None]:
        if name not in self.models:
            return False, None
        return _entry_from_json(self.models[name])

    def put(self, name: str, entry: CatalogueModel | None) -> None:
        self.models.pop(name, None)
        self.models[name] = None if entry is None else asdict(entry)
        self.models = dict(list(self.models.items())[-LOOKUPS_MAX_MODELS:])
        write_kept_json(self.path, {"catalogue": self.identity, "day": self.day, "models": self.models})


def _entry_from_json(value: Any) -> tuple[bool, CatalogueModel | None]:
    """A kept answer: (True, the entry or None), or (False, None) for anything we did not write."""
    if value is None:
        return True, None
    try:
        return True, CatalogueModel(provider_id=str(value["provider_id"]), model_id=str(value["model_id"]),
                                    price=_price_from_json(value["price"]),
                                    context_window=None if value["context_window"] is None
                                    else int(value["context_window"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return False, None  # not what we wrote: look it up again


# ---- answers kept beside the bytecode, for every data directory ----

ANSWERS_STEM = "catalogue-answers"


def kept_answers_path() -> str:
    """Where the installation's answers are kept: this package's bytecode folder (or under
    ``sys.pycache_prefix``), named for this interpreter."""
    return path_beside_bytecode(os.path.dirname(os.path.abspath(__file__)), ANSWERS_STEM, "json")


class _KeptAnswers:
    """The catalogue's answers any earlier run of this installation found, for this catalogue and
    day, kept beside the bytecode (``app/system/kept_files.py``): its trust is the ``.pyc`` files',
    and it is as readable as the installation, so a model's name (a fine-tune's may name an
    organisation) is not written there, only its SHA-256. Read if its header names this catalogue
    and day and it is at most LOOKUPS_MAX_BYTES of JSON; an answer that is not what we wrote is
    looked up again. Written only where Python writes bytecode."""

    def __init__(self, identity: str, day: str) -> None:
        self.path = kept_answers_path()
        self.header = f"tidegauge catalogue answers 1 {identity} {day}\n".encode()
        self.models: dict[str, Any] = {}
        data = read_kept(self.path, self.header, LOOKUPS_MAX_BYTES)
        try:
            kept = json.loads(data) if data is not None else None
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            kept = None
        if isinstance(kept, dict):
            self.models = dict(list(kept.items())[-LOOKUPS_MAX_MODELS:])

    @staticmethod
    def key(name: str) -> str:
        return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, name: str) -> tuple[bool, CatalogueModel | None]:
        key = self.key(name)
        return _entry_from_json(self.models[key]) if key in self.models else (False, None)

    def put(self, name: str, entry: CatalogueModel | None) -> None:
        key = self.key(name)
        self.models.pop(key, None)
        self.models[key] = None if entry is None else asdict(entry)
        self.models = dict(list(self.models.items())[-LOOKUPS_MAX_MODELS:])
        write_kept(self.path, self.header + json.dumps(self.models).encode("ascii"))


_answers: _KeptAnswers | None = None


def _kept_or_look_up(name: str, lookups: _KeptLookups) -> CatalogueModel | None:
    """The installation's kept answer for ``name``, else the catalogue's (then kept)."""
    global _answers
    if _answers is None:  # read on the first name the data directory does not know
        _answers = _KeptAnswers(lookups.identity, lookups.day)
    known, entry = _answers.get(name)
    if not known:
        entry = _look_up(name)
        _answers.put(name, entry)
    return entry


_lookups: _KeptLookups | None = None


def remember_lookups_in(path: Path | None) -> None:
    """Keep the catalogue's answers in ``path`` between runs (None: in this process only)."""
    global _lookups, _answers
    _answers = None
    identity = _catalogue_identity() if path is not None else None
    _lookups = None if path is None or identity is None else _KeptLookups(
        path, identity, datetime.now(UTC).date().isoformat())
    catalogue_model.cache_clear()


def _rate_at(value: Any, input_tokens: int | None) -> float | None:
    """A catalogue rate (a number or tiered prices) for a call with this much input (None: base)."""
    # genai-prices is slow to import: loaded when a catalogue price is read, off the start-up path.
    from genai_prices.types import TieredPrices

    if value is None:
        return None
    if not isinstance(value, TieredPrices):
        return float(value)
    rate = value.base
    if input_tokens is not None:
        for tier in value.tiers:
            if input_tokens > tier.start:
                rate = tier.price
    return float(rate)


def _from_catalogue(model_price: ModelPrice) -> Price | None:
    # genai-prices: loaded when a catalogue price is read (as above).
    from genai_prices.types import TieredPrices

    keys = ("input_mtok", "cache_read_mtok", "cache_write_mtok", "output_mtok")
    values = [getattr(model_price, key, None) for key in keys]
    if values[0] is None or values[3] is None:
        return None

    def rates(input_tokens: int | None) -> Price:
        inp, read, write, out = (_rate_at(value, input_tokens) for value in values)
        assert inp is not None and out is not None
        # No cache rate listed: cached tokens bill as plain input (OpenAI bills no cache writes).
        return Price(inp, inp if read is None else read, inp if write is None else write, out)

    starts = sorted({tier.start for value in values if isinstance(value, TieredPrices) for tier in value.tiers})
    # A tier's rates hold from just above its start: evaluate every field there.
    tiers = tuple(PriceTier(start, rates(start + 1)) for start in starts)
    return replace(rates(None), tiers=tiers)


# ---- overrides and lookup ----

def _apply(base: Price | None, override: dict[str, Any]) -> Price:
    values: dict[str, Any] = {}  # field name -> rate (Any: mypy would match it against tiers too)
    for key, value in override.items():
        name = _ALIASES.get(key, key)
        if name not in _FIELDS:
            raise ValueError(f"unknown price field {key!r} (expected one of {sorted(_FIELDS)})")
        values[name] = float(value)
    if base is not None:
        # The user's rate wins at every size: above a tier too (fields not given keep the catalogue's).
        tiers = tuple(replace(tier, rates=replace(tier.rates, **values)) for tier in base.tiers)
        return replace(replace(base, **values), tiers=tiers)
    if "input_per_mtok" not in values or "output_per_mtok" not in values:
        raise ValueError("a price for a new model needs at least input_per_mtok and output_per_mtok")
    inp = values["input_per_mtok"]
    return Price(
        input_per_mtok=inp,
        cached_input_per_mtok=values.get("cached_input_per_mtok", inp),
        cache_write_per_mtok=values.get("cache_write_per_mtok", inp),
        output_per_mtok=values["output_per_mtok"],
    )


def _known_price(name: str) -> Price | None:
    entry = catalogue_model(name)
    return entry.price if entry is not None else None


def price_for(model: str, overrides: dict[str, dict[str, Any]] | None = None, *,
              provider_price: dict[str, Any] | None = None) -> Price | None:
    """The price of ``model``: the user's override (by prefix) over the catalogue's entry, or
    over ``provider_price`` when the provider brings its own (a plug-in's model the catalogue
    cannot know; then the catalogue is not even imported).

    Override fields may use the full names or the short ones (input,
    cached_input, cache_write, output); missing fields keep the catalogue's value.
    Raises ValueError for a malformed override so config can name it.
    """
    name = model_key(model)
    base = _apply(None, provider_price) if provider_price is not None else _known_price(name)
    if overrides:
        over_key = _longest_prefix(name, overrides)
        if over_key is not None:
            return _apply(base, overrides[over_key])
    return base


def assumed_price_warning(model: str, overrides: dict[str, dict[str, Any]] | None = None, *,
                          provider_price: dict[str, Any] | None = None) -> str | None:
    """One line for the user when nobody prices ``model`` (say it once, at start-up), else None."""
    if price_for(model, overrides, provider_price=provider_price) is not None:
        return None
    name = json.dumps(model_key(model)[:MAX_MODEL_NAME])  # a TOML key as typed, control characters escaped
    return (f"model {name} has no price in the catalogue: its cost is shown as unknown "
            f"(set [prices.{name}] input = ... and output = ..., USD per million tokens, in config.toml)")


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """Cost of one call; None when the price or the usage is unknown."""
    if price is None or not usage.known:
        return None
    rates = price.rates_for(usage.total_input or 0)
    return (
        (usage.input_tokens or 0) * rates.input_per_mtok
        + (usage.cache_read_tokens or 0) * rates.cached_input_per_mtok
        + (usage.cache_write_tokens or 0) * rates.cache_write_per_mtok
        + (usage.output_tokens or 0) * rates.output_per_mtok
    ) / 1_000_000

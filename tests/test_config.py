"""Settings: priority of the sources, one-line errors, provider choice, the key file's mode."""

from __future__ import annotations

from collections.abc import Iterator

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.kernel import redact as redact_mod
from app.kernel.errors import ConfigError
from app.wiring.config import (
    Settings,
    api_key_for,
    load_settings,
    provider_key_env_names,
    resolve_provider,
)

KEY_VARS = ("OPENAI_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated config dir and an environment without tidegauge settings or keys."""
    for name in list(os.environ):
        if name.upper().startswith("TIDEGAUGE_") or name in KEY_VARS:
            monkeypatch.delenv(name, raising=False)
    directory = tmp_path / "config"
    directory.mkdir()
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(directory))
    yield directory
    redact_mod.clear_secrets()


def write_toml(config_dir: Path, text: str) -> Path:
    path = config_dir / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- priority

def test_cli_beats_env_beats_toml_beats_default(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(config_dir, 'max_steps = 3\nmodel = "toml-model"\nbudget = 1000\nwindow = 5000\n')
    monkeypatch.setenv("TIDEGAUGE_MAX_STEPS", "7")
    monkeypatch.setenv("TIDEGAUGE_MODEL", "env-model")

    settings = load_settings({"max_steps": 9, "budget": None})

    assert settings.max_steps == 9  # CLI over env and TOML
    assert settings.model == "env-model"  # env over TOML
    assert settings.budget == 1000  # TOML (a None override is "not given")
    assert settings.window == 5000
    assert settings.max_output == 40_000  # default


def test_env_beats_toml_when_cli_is_silent(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(config_dir, "max_steps = 3\n")
    monkeypatch.setenv("TIDEGAUGE_MAX_STEPS", "7")
    assert load_settings({"max_steps": None}).max_steps == 7


def test_defaults_without_any_source(config_dir: Path) -> None:
    settings = load_settings({})
    assert settings.provider is None
    assert settings.max_steps == 50
    assert settings.budget == 150_000
    assert settings.window is None
    assert settings.demo_speed == 40.0  # type: ignore[attr-defined]  # the demo plug-in's setting, added at run time
    assert settings.prices == {}
    assert settings.config_dir == config_dir


def test_data_dir_from_env_and_tilde_expanded(config_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("TIDEGAUGE_DATA_DIR", str(tmp_path / "data"))
    assert load_settings({}).data_dir == tmp_path / "data"
    monkeypatch.delenv("TIDEGAUGE_DATA_DIR")
    write_toml(config_dir, 'data_dir = "~/tg-data"\n')
    assert load_settings({}).data_dir == Path("~/tg-data").expanduser()


def test_prices_table_from_toml(config_dir: Path) -> None:
    write_toml(config_dir, '[prices."gpt-4o"]\ninput = 2.5\ncached_input = 1.25\noutput = 10\n')
    assert load_settings({}).prices == {"gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0}}


# ---------------------------------------------------------------- one-line errors

def config_error(overrides: dict) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(overrides)
    message = str(info.value)
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def test_max_steps_zero_from_cli(config_dir: Path) -> None:
    assert config_error({"max_steps": 0}) == "config: max_steps: must be >= 1 (got 0) [from --max-steps]"


def test_unknown_provider_from_env_names_setting_and_source(config_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_PROVIDER", "foo")
    message = config_error({})
    assert message.startswith("config: provider: must be one of ")
    assert "'anthropic'" in message and "'foo'" in message
    assert message.endswith("[from TIDEGAUGE_PROVIDER]")


def test_bad_toml_names_file_and_line(config_dir: Path) -> None:
    path = write_toml(config_dir, 'model = "x"\nmax_steps = 3\nbudget = = 4\n')
    message = config_error({})
    assert message.startswith(f"config: {path}: invalid TOML at line 3")


def test_bad_value_in_toml_names_the_file(config_dir: Path) -> None:
    path = write_toml(config_dir, "max_steps = 0\n")
    assert config_error({}) == f"config: max_steps: must be >= 1 (got 0) [from {path}]"


def test_misspelt_setting_in_toml_is_reported(config_dir: Path) -> None:
    path = write_toml(config_dir, "max_step = 3\n")
    assert config_error({}) == f"config: max_step: unknown setting [from {path}]"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"window": 500}, "config: window: must be >= 1000 (got 500) [from --window]"),
        ({"max_output": -1}, "config: max_output: must be >= 0 (got -1) [from --max-output]"),
        ({"demo_speed": -2.0}, "config: demo_speed: must be >= 0 (got -2.0) [from --demo-speed]"),
        ({"budget": "lots"}, "config: budget: must be a whole number (got 'lots') [from --budget]"),
    ],
)
def test_other_bad_values(config_dir: Path, overrides: dict, expected: str) -> None:
    assert config_error(overrides) == expected


def test_several_problems_still_one_line(config_dir: Path) -> None:
    write_toml(config_dir, 'max_steps = 0\nbudget = "a"\n')
    message = config_error({})
    assert "max_steps: must be >= 1" in message and "budget: must be a whole number" in message


def test_unknown_price_field(config_dir: Path) -> None:
    write_toml(config_dir, '[prices.gpt]\ninptu = 1\n')
    message = config_error({})
    assert message.startswith("config: prices: gpt: unknown price 'inptu'")


def test_env_json_that_does_not_parse(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_PRICES", "{not json")
    assert config_error({}) == "config: prices: not valid JSON [from TIDEGAUGE_PRICES]"


def test_cli_prints_the_line_not_a_traceback(config_dir: Path, tmp_path: Path) -> None:
    write_toml(config_dir, "max_steps = 0\n")
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARS}
    env["TIDEGAUGE_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-m", "app", "-p", "hello"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "max_steps: must be >= 1 (got 0)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- provider and keys

@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ((), "demo"),
        (("OPENAI_API_KEY",), "openai"),
        (("DEEPSEEK_API_KEY",), "deepseek"),
        (("OPENAI_API_KEY", "DEEPSEEK_API_KEY"), "openai"),
        (("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"), "anthropic"),
    ],
)
def test_auto_provider_by_env(config_dir: Path, monkeypatch: pytest.MonkeyPatch,
                              keys: tuple[str, ...], expected: str) -> None:
    for name in keys:
        monkeypatch.setenv(name, f"test-key-for-{name.lower()}")
    assert resolve_provider(load_settings({})) == expected


def test_explicit_provider_wins_over_keys(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key-1")
    assert resolve_provider(load_settings({"provider": "demo"})) == "demo"


def test_empty_key_variable_does_not_count(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    assert resolve_provider(load_settings({})) == "demo"


def test_api_key_lookup(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-0001")
    monkeypatch.setenv("MY_PROXY_KEY", "proxy-key-test-0002")
    settings = load_settings({})
    assert api_key_for(settings, "openai") == "sk-openai-test-0001"
    assert api_key_for(settings, "anthropic") is None
    assert api_key_for(settings, "demo") is None

    custom = load_settings({"api_key_env": "MY_PROXY_KEY"})
    assert api_key_for(custom, "openai") == "proxy-key-test-0002"
    # the key found is now a secret: it cannot be printed by accident
    assert redact_mod.redact("key=proxy-key-test-0002") == "key=[REDACTED]"


def test_provider_key_env_names(config_dir: Path) -> None:
    assert provider_key_env_names() >= {"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY"}
    assert "MY_PROXY_KEY" in provider_key_env_names(load_settings({"api_key_env": "MY_PROXY_KEY"}))


# ---------------------------------------------------------------- saving a key

def test_a_key_in_the_config_file_is_used_and_the_environment_wins(config_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(config_dir, '# my settings\nmax_steps = 12\n[api_keys]\ndeepseek = "sk-deepseek-saved-0005"\n'
                           'openai = "sk-openai-saved-0006"\n')
    settings = load_settings({})
    assert settings.max_steps == 12
    assert api_key_for(settings, "deepseek") == "sk-deepseek-saved-0005"
    assert "sk-deepseek-saved-0005" not in repr(settings)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-env-0007")
    assert api_key_for(load_settings({}), "openai") == "sk-openai-env-0007"


def test_settings_is_constructible_directly(config_dir: Path) -> None:
    assert Settings(max_steps=5).max_steps == 5


def test_settings_made_directly_read_the_environment_and_the_file_under_the_arguments(
        config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(config_dir, 'max_steps = 3\nbudget = 1000\nmodel = "toml-model"\n')
    monkeypatch.setenv("TIDEGAUGE_BUDGET", "2000")
    settings = Settings(max_steps=5)
    assert (settings.max_steps, settings.budget, settings.model) == (5, 2000, "toml-model")


def test_a_table_in_the_environment_adds_to_the_files_key_by_key(config_dir: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(config_dir, '[prices.m1]\ninput = 1\noutput = 2\n[prices.m2]\ninput = 5\noutput = 6\n')
    monkeypatch.setenv("TIDEGAUGE_PRICES", '{"m1": {"output": 3}, "m3": {"input": 7, "output": 8}}')
    assert load_settings({}).prices == {"m1": {"input": 1, "output": 3}, "m2": {"input": 5, "output": 6},
                                        "m3": {"input": 7, "output": 8}}


def test_environment_names_in_any_case_and_an_empty_value_is_none(config_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(config_dir, 'max_steps = 3\n')
    monkeypatch.setenv("tidegauge_model", "lower-case-model")
    monkeypatch.setenv("TIDEGAUGE_MAX_STEPS", "")  # empty: the file's value stands
    monkeypatch.setenv("TIDEGAUGE_ALLOWED_TOOLS", '["read_file"]')
    settings = load_settings({})
    assert (settings.model, settings.max_steps, settings.allowed_tools) == ("lower-case-model", 3, ["read_file"])


def test_a_list_setting_in_the_environment_must_be_json(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGAUGE_ALLOWED_TOOLS", "read_file")
    assert config_error({}) == "config: allowed_tools: not valid JSON [from TIDEGAUGE_ALLOWED_TOOLS]"
    monkeypatch.setenv("TIDEGAUGE_ALLOWED_TOOLS", '"read_file"')  # JSON, but not a list
    assert config_error({}).startswith("config: allowed_tools: ")
    assert config_error({}).endswith("[from TIDEGAUGE_ALLOWED_TOOLS]")



# ---------------------------------------------------------------- provider-side context management (issue 17)

def test_responses_provider_reads_the_openai_key(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-0003")
    settings = load_settings({"provider": "responses"})
    assert resolve_provider(settings) == "responses"
    assert api_key_for(settings, "responses") == "sk-openai-test-0003"


def test_server_context_settings_from_toml_and_their_bad_values(config_dir: Path) -> None:
    assert not load_settings({}).server_compaction  # off by default
    write_toml(config_dir, "server_compaction = true\nanthropic_clear_tool_uses = true\n"
                           "anthropic_clear_tool_uses_keep = 2\nanthropic_clear_tool_uses_exclude = [\"write_file\"]\n")
    settings = load_settings({})
    assert settings.server_compaction and settings.anthropic_clear_tool_uses
    assert settings.anthropic_clear_tool_uses_keep == 2
    assert settings.anthropic_clear_tool_uses_exclude == ["write_file"]
    path = write_toml(config_dir, "anthropic_clear_tool_uses_trigger = 0\n")
    assert config_error({}) == f"config: anthropic_clear_tool_uses_trigger: must be >= 1 (got 0) [from {path}]"


def test_settings_nested_thousands_deep_are_one_line_errors(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # json.loads and tomllib recurse once per level: past the interpreter's limit they raised a
    # RecursionError, a traceback instead of a line naming the setting.
    monkeypatch.setenv("TIDEGAUGE_ALLOWED_TOOLS", "[" * 100_000)
    assert config_error({}) == "config: allowed_tools: nests deeper than 16 levels [from TIDEGAUGE_ALLOWED_TOOLS]"
    monkeypatch.delenv("TIDEGAUGE_ALLOWED_TOOLS")
    write_toml(config_dir, "allowed_tools = " + "[" * 100_000 + "\n")
    assert config_error({}).endswith("config.toml: invalid TOML (nested too deeply)")

"""Choosing a provider by name: defaults, presets, the key variables, and a clear error."""

from __future__ import annotations

import pytest

from app.providers.anthropic import AnthropicProvider
from app.providers.factory import (
    PROVIDER_NAMES,
    PROVIDER_PLUGINS,
    create_provider,
    default_key_env,
    provider_plugin,
)
from app.providers.openai import OpenAIProvider
from app.providers.responses import ResponsesProvider


def test_openai_defaults() -> None:
    provider = create_provider("openai", None, None, "k")
    assert isinstance(provider, OpenAIProvider) and provider.name == "openai"
    assert provider.model == "gpt-4.1"
    assert provider.url == "https://api.openai.com/v1/chat/completions"
    assert not provider.deepseek_reasoning


def test_deepseek_is_an_openai_preset_with_reasoning() -> None:
    provider = create_provider("deepseek", None, None, "k")
    assert isinstance(provider, OpenAIProvider) and provider.name == "deepseek"
    assert provider.model == "deepseek-v4-flash"
    assert provider.url == "https://api.deepseek.com/chat/completions"
    assert provider.deepseek_reasoning


def test_anthropic_defaults_and_deepseek_compatible_base() -> None:
    provider = create_provider("anthropic", None, None, "k")
    assert isinstance(provider, AnthropicProvider) and provider.model == "claude-sonnet-4-5"
    assert provider.url == "https://api.anthropic.com/v1/messages"
    assert not provider.send_unsigned_thinking
    compatible = create_provider("anthropic", "deepseek-v4-flash", "https://api.deepseek.com/anthropic", "k")
    assert compatible.url == "https://api.deepseek.com/anthropic/v1/messages"  # type: ignore[attr-defined]
    assert compatible.send_unsigned_thinking  # type: ignore[attr-defined]


def test_responses_defaults_share_the_openai_key() -> None:
    provider = create_provider("responses", None, None, "k")
    assert isinstance(provider, ResponsesProvider) and provider.name == "responses"
    assert provider.model == "gpt-5"
    assert provider.url == "https://api.openai.com/v1/responses"
    assert provider.compact_threshold is None  # server compaction only when chosen
    assert default_key_env("responses") == default_key_env("openai") == "OPENAI_API_KEY"


def test_model_base_url_and_options_are_passed_through() -> None:
    provider = create_provider("openai", "qwen3", "http://127.0.0.1:8080/v1/", None,
                               timeout_read=5, max_tokens=123)
    assert (provider.model, provider.url) == ("qwen3", "http://127.0.0.1:8080/v1/chat/completions")  # type: ignore[attr-defined]
    assert (provider.timeout_read, provider.max_tokens) == (5, 123)  # type: ignore[attr-defined]
    assert "authorization" not in provider.headers()  # type: ignore[attr-defined]  # local servers often need no key


def test_unknown_provider_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown provider .gemini.: choose openai, deepseek, anthropic, responses or demo"):
        create_provider("gemini", None, None, None)


def test_key_environment_variables() -> None:
    assert [default_key_env(n) for n in ("openai", "deepseek", "anthropic")] == [
        "OPENAI_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY"]
    assert default_key_env("demo") == ""
    with pytest.raises(ValueError):
        default_key_env("nope")


def test_a_plug_in_is_named_by_module_and_attribute_and_loaded_only_when_chosen() -> None:
    assert "demo" in PROVIDER_NAMES and PROVIDER_PLUGINS["demo"] == "app.demo.plugin:DEMO_PLUGIN"
    assert provider_plugin("openai") is None  # built-in: no plug-in
    from app.demo.plugin import DEMO_PLUGIN

    assert provider_plugin("demo") is DEMO_PLUGIN
    with pytest.raises(ValueError, match="plug-in"):
        create_provider("demo", None, None, None)  # plug-ins are opened with their session


def test_every_real_provider_is_labelled_by_name_and_model_and_has_no_banner() -> None:
    for name in ("openai", "deepseek", "anthropic"):
        provider = create_provider(name, "some-model", None, "k")
        assert provider.label == f"{name} · some-model"
        assert provider.banner is None

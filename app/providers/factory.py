"""Provider by name: what the CLI and config resolve ``--provider`` with."""

from __future__ import annotations

from typing import Any

from app.providers.base import Provider

PROVIDER_NAMES = ("openai", "deepseek", "anthropic", "responses", "demo")

DEFAULT_MODELS = {
    "openai": "gpt-4.1",
    "deepseek": "deepseek-v4-flash",
    "anthropic": "claude-sonnet-4-5",
    "responses": "gpt-5",
}

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com",
    "anthropic": "https://api.anthropic.com",
    "responses": "https://api.openai.com/v1",
}

_KEY_ENVS = {
    "openai": "OPENAI_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "responses": "OPENAI_API_KEY",  # the same key as Chat Completions
}


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown provider {name!r}: choose openai, deepseek, anthropic, responses or demo")


def default_key_env(name: str) -> str:
    """The environment variable holding the API key for ``name`` ("" for demo: it needs none)."""
    if name == "demo":
        return ""
    try:
        return _KEY_ENVS[name]
    except KeyError:
        raise _unknown(name) from None


def create_provider(name: str, model: str | None, base_url: str | None, api_key: str | None,
                    **opts: Any) -> Provider:
    """Build a provider; ``opts`` go to its constructor (timeouts, max_tokens, extra headers...)."""
    if name == "openai":
        from app.providers.openai import OpenAIProvider

        return OpenAIProvider(model or DEFAULT_MODELS["openai"], base_url or DEFAULT_BASE_URLS["openai"],
                              api_key, **opts)
    if name == "deepseek":
        from app.providers.deepseek import deepseek_provider

        return deepseek_provider(model or DEFAULT_MODELS["deepseek"], api_key, base_url, **opts)
    if name == "anthropic":
        from app.providers.anthropic import AnthropicProvider

        return AnthropicProvider(model or DEFAULT_MODELS["anthropic"], base_url or DEFAULT_BASE_URLS["anthropic"],
                                 api_key, **opts)
    if name == "responses":
        from app.providers.responses import ResponsesProvider

        return ResponsesProvider(model or DEFAULT_MODELS["responses"], base_url or DEFAULT_BASE_URLS["responses"],
                                 api_key, **opts)
    if name == "demo":
        from app.providers.demo import DemoProvider  # written separately; imported only when asked for

        return DemoProvider(**opts)
    raise _unknown(name)

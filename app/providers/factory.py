"""Provider by name: what the CLI and config resolve ``--provider`` with."""

from __future__ import annotations

from typing import Any

from app.providers.base import Provider

PROVIDER_NAMES = ("openai", "deepseek", "anthropic", "demo")

DEFAULT_MODELS = {
    "openai": "gpt-4.1",
    "deepseek": "deepseek-v4-flash",
    "anthropic": "claude-sonnet-4-5",
}

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "deepseek": "https://api.deepseek.com",
    "anthropic": "https://api.anthropic.com",
}

_KEY_ENVS = {
    "openai": "OPENAI_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown provider {name!r}: choose openai, deepseek, anthropic or demo")


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
    if name == "demo":
        from app.providers.demo import DemoProvider  # written separately; imported only when asked for

        return DemoProvider(**opts)
    raise _unknown(name)


def provider_options(settings: Any, name: str) -> dict[str, Any]:
    """The model parameters from the settings that the provider ``name`` takes.

    The host passes them to ``create_provider``: ``create_provider(name, ..., **provider_options(settings, name))``.
    """
    if name == "anthropic":
        return {"thinking_budget": getattr(settings, "thinking_budget", 0) or 0,
                "prompt_caching": getattr(settings, "prompt_caching", None)}
    if name in ("openai", "deepseek"):
        return {"max_completion_tokens": getattr(settings, "max_completion_tokens", None)}
    return {}

"""Provider by name: what the CLI and config resolve ``--provider`` with.

Built-in wire protocols are constructed here; anything that brings more than
a wire protocol (a workspace, default limits, extra tools) is a plug-in named
in ``PROVIDER_PLUGINS`` and imported only when chosen (see ``plugin.py``).
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.providers.plugin import PluginContext, PluginOption, ProviderPlugin, ProviderSetup

if TYPE_CHECKING:  # the CLI reads the plug-ins' flags from here before anything heavy is imported
    from app.providers.base import Provider

BUILTIN_PROVIDERS = ("openai", "deepseek", "anthropic", "responses")

# name -> "module:attribute" of an object following ``ProviderPlugin``.
PROVIDER_PLUGINS: dict[str, str] = {
    "demo": "app.demo.plugin:DEMO_PLUGIN",
}

PROVIDER_NAMES = (*BUILTIN_PROVIDERS, *PROVIDER_PLUGINS)

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

# The one list of the providers' key variables (config.py and run_bash's environment use it).
PROVIDER_KEY_ENV: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "responses": "OPENAI_API_KEY",  # the same key as Chat Completions
}


# Model-name beginnings -> the provider that serves them: what `--model NAME` alone asks for.
MODEL_MAKERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("claude",), "anthropic"),
    (("deepseek",), "deepseek"),
    (("gpt-", "chatgpt", "o1", "o3", "o4", "codex"), "openai"),
)


def provider_for_model(model: str) -> str | None:
    """The built-in provider whose models are named like ``model`` (None: no maker's name matches)."""
    name = model.strip().lower()
    for beginnings, provider in MODEL_MAKERS:
        if name.startswith(beginnings):
            return provider
    return None


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown provider {name!r}: choose {', '.join(PROVIDER_NAMES[:-1])} or {PROVIDER_NAMES[-1]}")


def provider_plugin(name: str) -> ProviderPlugin | None:
    """The plug-in registered as ``name`` (imported now), or None for a built-in or unknown name."""
    target = PROVIDER_PLUGINS.get(name)
    if target is None:
        return None
    module_name, _, attribute = target.partition(":")
    try:
        plugin: ProviderPlugin = getattr(import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"provider plug-in {name!r} ({target}) could not be loaded: {exc}") from exc
    return plugin


def plugin_options() -> list[PluginOption]:
    """The settings every registered plug-in adds (a plug-in that cannot be loaded adds none:
    choosing it says why)."""
    options: list[PluginOption] = []
    for name in PROVIDER_PLUGINS:
        try:
            plugin = provider_plugin(name)
        except ValueError:
            continue
        if plugin is not None:
            options.extend(plugin.options)
    return options


def keyless_plugin() -> str | None:
    """The first registered plug-in that needs no API key (the choice when no key is set), or None."""
    for name in PROVIDER_PLUGINS:
        try:
            plugin = provider_plugin(name)
        except ValueError:
            continue
        if plugin is not None and not plugin.key_env:
            return name
    return None


def default_key_env(name: str) -> str:
    """The environment variable holding the API key for ``name`` ("": the provider needs none)."""
    plugin = provider_plugin(name)
    if plugin is not None:
        return plugin.key_env
    try:
        return PROVIDER_KEY_ENV[name]
    except KeyError:
        raise _unknown(name) from None


def create_provider(name: str, model: str | None, base_url: str | None, api_key: str | None,
                    **opts: Any) -> Provider:
    """Build a built-in provider; ``opts`` go to its constructor (timeouts, max_tokens, extra headers...)."""
    if name == "openai":
        # Only the provider asked for is imported: the others' wire protocols stay off the start-up path.
        from app.providers.openai import OpenAIProvider

        return OpenAIProvider(model or DEFAULT_MODELS["openai"], base_url or DEFAULT_BASE_URLS["openai"],
                              api_key, **opts)
    if name == "deepseek":
        # Only the provider asked for is imported (as above).
        from app.providers.deepseek import deepseek_provider

        return deepseek_provider(model or DEFAULT_MODELS["deepseek"], api_key, base_url, **opts)
    if name == "anthropic":
        # Only the provider asked for is imported (as above).
        from app.providers.anthropic import AnthropicProvider

        return AnthropicProvider(model or DEFAULT_MODELS["anthropic"], base_url or DEFAULT_BASE_URLS["anthropic"],
                                 api_key, **opts)
    if name in PROVIDER_PLUGINS:
        raise ValueError(f"provider {name!r} is a plug-in: open it with open_provider()")
    if name == "responses":
        # Only the provider asked for is imported (as above).
        from app.providers.responses import ResponsesProvider

        return ResponsesProvider(model or DEFAULT_MODELS["responses"], base_url or DEFAULT_BASE_URLS["responses"],
                                 api_key, **opts)
    raise _unknown(name)


class ProviderSettings(Protocol):
    """What opening a provider reads of the settings (``app.wiring.config.Settings``, which
    lives above providers; a plug-in's own options are read by name)."""

    @property
    def model(self) -> str | None: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def window(self) -> int | None: ...
    @property
    def timeout_connect(self) -> float: ...
    @property
    def timeout_read(self) -> float: ...
    @property
    def data_dir_path(self) -> Path: ...


def open_provider(name: str, settings: ProviderSettings, api_key: str | None, *,
                  session_dir: Path) -> ProviderSetup:
    """The provider for a session and what it brings, built-in or plug-in alike."""
    plugin = provider_plugin(name)
    if plugin is not None:
        options = {option.name: float(getattr(settings, option.name, option.default)) for option in plugin.options}
        return plugin.setup(PluginContext(options=options, window=settings.window, session_dir=session_dir,
                                          data_dir=settings.data_dir_path))
    return ProviderSetup(create_provider(name, settings.model, settings.base_url, api_key,
                                         timeout_connect=settings.timeout_connect,
                                         timeout_read=settings.timeout_read,
                                         **provider_options(settings, name)))


def provider_options(settings: Any, name: str) -> dict[str, Any]:
    """The model parameters from the settings that the provider ``name`` takes.

    The host passes them to ``create_provider``: ``create_provider(name, ..., **provider_options(settings, name))``.
    """
    if name == "anthropic":
        # The Anthropic provider's module: imported only when the anthropic provider is used.
        from app.providers.anthropic import CACHE_REFUSALS_FILE, CacheRefusals

        data_dir = getattr(settings, "data_dir_path", None)
        return {"thinking_budget": getattr(settings, "thinking_budget", 0) or 0,
                "prompt_caching": getattr(settings, "prompt_caching", None),
                # the servers that refused cache marks before, remembered in the data directory
                "cache_refusals": CacheRefusals(Path(data_dir) / CACHE_REFUSALS_FILE) if data_dir else None}
    if name in ("openai", "deepseek"):
        return {"max_completion_tokens": getattr(settings, "max_completion_tokens", None)}
    return {}

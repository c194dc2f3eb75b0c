"""Provider plug-ins: a provider that brings more than a wire protocol.

A plug-in is named in ``app.providers.factory.PROVIDER_PLUGINS`` by a
"module:attribute" string. It declares what it needs from the rest of the
program (the settings it adds, whether it needs a key) and, given those settings
and the session's directories, returns its provider plus what it changes around
it: the directory the tools work in, default window and budget, its model's price
and extra tools, each with its own output limit. The CLI, the settings and the
runtime apply these the same way for every plug-in; nothing outside the plug-in
knows its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol

if TYPE_CHECKING:  # types only: the CLI imports this module for the plug-ins' flags, before pydantic
    from app.providers.base import Provider
    from app.tools.base import Tool  # types only: a plug-in's tools are built by the plug-in


@dataclass(frozen=True)
class PluginOption:
    """A number setting a plug-in adds, set like any other: ``name`` in config.toml,
    ``TIDEGAUGE_<NAME>`` in the environment, ``--name-with-dashes`` on the command line."""

    name: str
    default: float
    help: str
    minimum: float | None = None
    metavar: str = "N"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass
class PluginContext:
    """What a plug-in may use to set itself up."""

    options: Mapping[str, float]  # its own options (``ProviderPlugin.options``), as the user set them
    window: int | None  # the context window the user asked for (--window), None when not given
    session_dir: Path  # the session's own directory (it may create a workspace in it)
    data_dir: Path  # the user data dir, shared by every session (for caches)


@dataclass
class ExtraTool:
    """A tool the plug-in adds. ``max_output``: its own character limit (0: never
    truncated; None: the registry's)."""

    tool: Tool
    max_output: int | None = None


@dataclass
class ProviderSetup:
    """A provider and what it brings. None/empty means "as for any provider"."""

    provider: Provider
    workspace: Path | None = None  # the tools' working directory instead of the user's
    default_window: int | None = None  # when the user gave no --window
    default_budget: int | None = None  # when the user gave no --budget
    # Its model's price, USD per million tokens, in config.toml's [prices] form (input,
    # cached_input, cache_write, output); the user's own [prices] entry wins over it.
    price: dict[str, float] | None = None
    tools: list[ExtraTool] = field(default_factory=list)


class ProviderPlugin(Protocol):
    """What a "module:attribute" entry of the plug-in table points at."""

    @property
    def key_env(self) -> str:
        """The API key variable the plug-in reads ("": it needs no key, and with no key for
        any built-in provider the first plug-in that needs none is chosen)."""

    @property
    def options(self) -> tuple[PluginOption, ...]:
        """The settings it adds (read at start-up, whichever provider is chosen: keep the
        module holding the plug-in object cheap to import)."""

    def setup(self, context: PluginContext) -> ProviderSetup: ...

"""Provider plug-ins: a provider that brings more than a wire protocol.

A plug-in is named in ``app.providers.factory.PROVIDER_PLUGINS`` by a
"module:attribute" string and imported only when chosen. Given the settings
and the session's directories, it returns its provider plus what it changes
around it: the directory the tools work in, default window and budget, and
extra tools, each with its own output limit. The runtime applies these the
same way for every plug-in; nothing outside the plug-in knows its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from app.providers.base import Provider

if TYPE_CHECKING:  # the settings module imports nothing from providers; keep it that way at run time
    from app.wiring.config import Settings
    from app.tools.base import Tool  # types only: providers sit below tools


@dataclass
class PluginContext:
    """What a plug-in may use to set itself up."""

    settings: Settings
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
    tools: list[ExtraTool] = field(default_factory=list)


class ProviderPlugin(Protocol):
    """What a "module:attribute" entry of the plug-in table points at."""

    # The API key variable the plug-in reads ("": it needs no key).
    key_env: str

    def setup(self, context: PluginContext) -> ProviderSetup: ...

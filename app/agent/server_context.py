"""Provider-side context management: the settings turned into the provider's switches.

Two APIs manage context themselves. OpenAI's Responses API compacts on the server when the
rendered input crosses a threshold and returns an encrypted ``compaction`` item; Anthropic's
Messages API has context editing (old tool uses and thinking cleared) and a compaction edit.
Both are off by default: our own engine is auditable and works with every provider.

Each provider turns what is asked into its own wire format behind ``Provider.server_context()``
(``app/providers/base.py``); this module knows no wire format and no provider by name.

The compaction threshold is the auto-compact line of ``compute_thresholds``, the same line the
gauge draws and our own compaction would trigger on, so the gauge means the same thing in both
modes. What the server then did comes back in the response and is handled by the engine
(``ContextEngine.append`` and ``record_usage``): the compaction item replaces the history before
it, applied edits become ``micro_compaction`` events with trigger "server".
"""

from __future__ import annotations

from typing import Protocol

from app.context.engine import ContextEngine
from app.providers.base import ContextEditing, Provider


class ServerContextSettings(Protocol):
    """The fields of ``app.wiring.config.Settings`` this module reads."""

    server_compaction: bool
    anthropic_clear_tool_uses: bool
    anthropic_clear_tool_uses_trigger: int | None
    anthropic_clear_tool_uses_keep: int | None
    anthropic_clear_tool_uses_clear_at_least: int | None
    anthropic_clear_tool_uses_exclude: list[str]
    anthropic_clear_thinking: bool
    anthropic_clear_thinking_keep: int | None


def context_editing(settings: ServerContextSettings) -> ContextEditing:
    """The context editing the settings ask the server for."""
    return ContextEditing(
        clear_tool_uses=settings.anthropic_clear_tool_uses,
        clear_tool_uses_trigger=settings.anthropic_clear_tool_uses_trigger,
        clear_tool_uses_keep=settings.anthropic_clear_tool_uses_keep,
        clear_tool_uses_clear_at_least=settings.anthropic_clear_tool_uses_clear_at_least,
        clear_tool_uses_exclude=tuple(settings.anthropic_clear_tool_uses_exclude),
        clear_thinking=settings.anthropic_clear_thinking,
        clear_thinking_keep=settings.anthropic_clear_thinking_keep,
    )


def _name(provider: Provider) -> str:
    return getattr(provider, "name", "") or "current"


def configure_server_context(provider: Provider, engine: ContextEngine, settings: ServerContextSettings) -> list[str]:
    """Switch the chosen provider-side management on for ``provider`` and tell ``engine``.

    Call once after the engine exists (its thresholds give the compaction line).
    Returns one line per setting that this provider cannot honour (to show as
    a warning notice); our own engine keeps doing that job.
    """
    problems: list[str] = []
    editing = context_editing(settings)
    server = provider.server_context()
    if editing.wanted and (server is None or not server.set_editing(editing)):
        problems.append(f"anthropic context editing is on but the provider is {_name(provider)}: it is not sent")
    if settings.server_compaction and switch_server_compaction(provider, engine, True)[1] is not None:
        problems.insert(0, f"server_compaction is on but the {_name(provider)} provider has no server-side "
                           "compaction (use responses or anthropic): tidegauge compacts as usual")
    return problems


def switch_server_compaction(provider: Provider, engine: ContextEngine, on: bool) -> tuple[int | None, str | None]:
    """Turn server-side compaction on or off (at start-up, and mid-session from the dashboard's
    palette), through the provider's ``ServerContext``.

    Returns (the threshold the server compacts at when on, None) or (None, why it cannot
    be switched on this provider). Our own auto-compaction stands down exactly while it is on.
    """
    server = provider.server_context()
    if server is None:
        if not on:
            engine.use_server_compaction(False)
            return None, None
        return None, (f"the {_name(provider)} provider has no server-side compaction (use responses or "
                      "anthropic); tidegauge compacts as usual")
    threshold = server.set_compaction(engine.thresholds.auto_compact_line if on else None)
    engine.use_server_compaction(on)
    return (threshold if on else None), None

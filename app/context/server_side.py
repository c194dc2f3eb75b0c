"""Provider-side context management: the settings turned into request options.

Two APIs manage context themselves. OpenAI's Responses API compacts on the
server when the rendered input crosses ``compact_threshold`` and returns an
encrypted ``compaction`` item; Anthropic's Messages API has context editing
(``clear_tool_uses_20250919``, ``clear_thinking_20251015``, beta
``context-management-2025-06-27``) and a compaction edit (``compact_20260112``,
beta ``compact-2026-01-12``). Both are off by default: our own engine is
auditable and works with every provider.

The compaction threshold is the auto-compact line of ``compute_thresholds``,
the same line the gauge draws and our own compaction would trigger on, so
the gauge means the same thing in both modes. What the server then did comes
back in the response and is handled by the engine (``ContextEngine.append``
and ``record_usage``): the compaction item replaces the history before it,
applied edits become ``micro_compaction`` events with trigger "server".
"""

from __future__ import annotations

from typing import Any, Protocol

from app.context.thresholds import Thresholds
from app.providers.anthropic import ANTHROPIC_MIN_COMPACT_TRIGGER, COMPACT_EDIT
from app.providers.base import ServerCompactingProvider

__all__ = ["ANTHROPIC_MIN_COMPACT_TRIGGER", "anthropic_context_edits", "configure_server_context",
           "switch_server_compaction"]


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


def anthropic_context_edits(settings: ServerContextSettings, thresholds: Thresholds) -> list[dict[str, Any]]:
    """``context_management.edits`` for the Messages API; [] when nothing is on.

    Thinking clearing comes first: the API wants it ahead of the other edits.
    """
    edits: list[dict[str, Any]] = []
    if settings.anthropic_clear_thinking:
        thinking: dict[str, Any] = {"type": "clear_thinking_20251015"}
        if settings.anthropic_clear_thinking_keep is not None:
            thinking["keep"] = {"type": "thinking_turns", "value": settings.anthropic_clear_thinking_keep}
        edits.append(thinking)
    if settings.anthropic_clear_tool_uses:
        tools: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
        if settings.anthropic_clear_tool_uses_trigger is not None:
            tools["trigger"] = {"type": "input_tokens", "value": settings.anthropic_clear_tool_uses_trigger}
        if settings.anthropic_clear_tool_uses_keep is not None:
            tools["keep"] = {"type": "tool_uses", "value": settings.anthropic_clear_tool_uses_keep}
        if settings.anthropic_clear_tool_uses_clear_at_least is not None:
            tools["clear_at_least"] = {"type": "input_tokens",
                                       "value": settings.anthropic_clear_tool_uses_clear_at_least}
        if settings.anthropic_clear_tool_uses_exclude:
            tools["exclude_tools"] = list(settings.anthropic_clear_tool_uses_exclude)
        edits.append(tools)
    if settings.server_compaction:
        trigger = max(ANTHROPIC_MIN_COMPACT_TRIGGER, thresholds.auto_compact_line)
        edits.append({"type": COMPACT_EDIT, "trigger": {"type": "input_tokens", "value": trigger}})
    return edits


def configure_server_context(provider: Any, engine: Any, settings: ServerContextSettings) -> list[str]:
    """Switch the chosen provider-side management on for ``provider`` and tell ``engine``.

    Call once after the engine exists (its thresholds give the compaction line).
    Returns one line per setting that this provider cannot honour (to show as
    a warning notice); our own engine keeps doing that job.
    """
    name = getattr(provider, "name", "")
    problems: list[str] = []
    wants_editing = settings.anthropic_clear_tool_uses or settings.anthropic_clear_thinking
    if name == "anthropic":
        provider.context_edits = anthropic_context_edits(settings, engine.thresholds)
    elif wants_editing:
        problems.append(f"anthropic context editing is on but the provider is {name or 'not anthropic'}: "
                        "it is not sent")
    if settings.server_compaction and switch_server_compaction(provider, engine, True)[1] is not None:
        problems.insert(0, f"server_compaction is on but the {name or 'current'} provider has no server-side "
                           "compaction (use responses or anthropic): tidegauge compacts as usual")
    return problems


def switch_server_compaction(provider: Any, engine: Any, on: bool) -> tuple[int | None, str | None]:
    """Turn server-side compaction on or off (at start-up, and mid-session from the dashboard's
    palette), through the provider's ``set_server_compaction`` (``ServerCompactingProvider``).

    Returns (the threshold the server compacts at when on, None) or (None, why it cannot
    be switched on this provider). Our own auto-compaction stands down exactly while it is on.
    """
    if not isinstance(provider, ServerCompactingProvider):
        if not on:
            engine.config.server_compaction = False
            return None, None
        name = getattr(provider, "name", "")
        return None, (f"the {name or 'current'} provider has no server-side compaction (use responses or "
                      "anthropic); tidegauge compacts as usual")
    threshold = provider.set_server_compaction(engine.thresholds.auto_compact_line if on else None)
    engine.config.server_compaction = on
    return (threshold if on else None), None

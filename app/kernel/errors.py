"""The setup errors the CLI turns into one line on stderr.

Kept apart from app.wiring.config and app.wiring.runtime (pydantic, the whole agent) so the
CLI can catch them without importing either before the dashboard's first frame.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A bad setting; ``str(err)`` is one line meant for the user."""


class SetupError(Exception):
    """A problem building the agent, with a one-line message for the user."""

"""What the tools share: the workspace boundary, argument checks, the per-call output limit."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any

from app.tools.base import ToolContext, ToolInputError

# The character limit the registry will apply to the call now running (0: none).
# Tools that must bound their memory (run_bash) size their buffers by it, so a
# call with truncation off still returns its whole output when it reasonably can.
output_limit: ContextVar[int] = ContextVar("output_limit", default=40_000)


def resolve_path(raw: str, ctx: ToolContext) -> Path:
    """Resolve ``raw`` against the workspace (symlinks followed); refuse escapes."""
    if not isinstance(raw, str) or not raw.strip():
        raise ToolInputError("path must be a non-empty string, relative to the workspace.")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = ctx.workspace / path
    resolved = path.resolve()
    workspace = ctx.workspace.resolve()
    if ctx.allow_outside or resolved == workspace or resolved.is_relative_to(workspace):
        return resolved
    raise ToolInputError(
        f"Refused: {raw!r} resolves to {resolved}, which is outside the workspace {workspace}. "
        "File tools only work inside the workspace (the directory tidegauge was started in; "
        "symlinks are followed before checking). Use a path inside the workspace. If the user "
        "wants files outside it, they can restart tidegauge with --allow-outside."
    )


def display_path(path: Path, ctx: ToolContext) -> str:
    """``path`` relative to the workspace when inside it, else absolute."""
    try:
        return str(path.relative_to(ctx.workspace.resolve())) or "."
    except ValueError:
        return str(path)


def str_arg(args: dict[str, Any], name: str, *, default: str | None = None) -> str:
    value = args.get(name, default)
    if not isinstance(value, str):
        raise ToolInputError(f"{name} must be a string, got {type(value).__name__}.")
    return value


def int_arg(args: dict[str, Any], name: str, default: int, *, minimum: int = 1) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)  # some models send numbers as strings
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolInputError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ToolInputError(f"{name} must be at least {minimum}, got {value}.")
    return value

"""app/mcp/bounded_stdio.py runs the MCP SDK's stdio transport with our own reader, through
the SDK's private helpers. Each one it uses is pinned here (its parameters, and that it is a
coroutine), so an SDK upgrade that renames or reshapes one fails here rather than in a session."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from mcp.client import stdio as sdk

SOURCE = Path(__file__).resolve().parent.parent / "app" / "mcp" / "bounded_stdio.py"

# name -> the parameter names bounded_stdio passes (None: a constant, not a function)
PINNED: dict[str, list[str] | None] = {
    "_get_executable_command": ["command"],
    "_create_platform_compatible_process": ["command", "args", "env", "errlog", "cwd"],
    "_drain_stdout": ["process"],
    "_terminate_process_tree": ["process"],
    "_stop_server_process": ["process"],
    "_aclose_all": ["streams"],
    "_WRITER_FLUSH_TIMEOUT": None,
}


def test_every_private_sdk_name_bounded_stdio_uses_is_pinned_here() -> None:
    used = set(re.findall(r"\bsdk\.(_\w+)", SOURCE.read_text(encoding="utf-8")))
    assert used == set(PINNED), "pin each private SDK name bounded_stdio uses (and only those)"


def test_the_private_sdk_helpers_still_have_the_shape_bounded_stdio_calls() -> None:
    for name, parameters in PINNED.items():
        assert hasattr(sdk, name), f"mcp.client.stdio.{name} is gone: bounded_stdio must change with the SDK"
        value = getattr(sdk, name)
        if parameters is None:
            assert isinstance(value, (int, float)) and value > 0, name
            continue
        assert inspect.iscoroutinefunction(value), f"{name} is no longer awaited"
        assert list(inspect.signature(value).parameters) == parameters, f"{name}'s parameters changed"

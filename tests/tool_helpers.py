"""What the tool tests share: a workspace and a tool context in a test's temp dir."""

from __future__ import annotations

import os
from pathlib import Path

from app.tools.base import ToolContext


def tool_context(tmp_path: Path, call_id: str) -> ToolContext:
    """A fresh workspace under ``tmp_path``, results saved beside it, a minimal environment."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext(
        workspace=workspace,
        tool_results_dir=tmp_path / "tool-results",
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        call_id=call_id,
    )

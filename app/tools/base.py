"""The tool contract. Tools return raw output; the registry truncates it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from app.messages import ToolSpec


class ToolInputError(Exception):
    """Bad arguments or a refused path; the message tells the model what to do next."""


@dataclass
class ToolContext:
    """What a tool may use. One per session; ``call_id`` is set per call."""

    workspace: Path
    tool_results_dir: Path  # <session>/tool-results: full outputs land here
    allow_outside: bool = False
    env: dict[str, str] = field(default_factory=dict)  # for run_bash: provider keys removed
    call_id: str = ""
    # Set by the engine: is the result of this earlier tool call still in the context?
    result_in_context: Callable[[str], bool] = lambda _id: False
    # app.context.file_cache.FileReadCache (typed loosely to keep tools free of the engine)
    file_cache: Any = None


@dataclass
class ToolOutput:
    """Raw output of one tool run, before the registry's truncation.

    A tool that already spilled a huge output to disk (run_bash) passes the
    path and the real size so the notice can name them.
    """

    text: str
    is_error: bool = False
    full_output_path: Path | None = None
    original_chars: int | None = None


class Tool(Protocol):
    spec: ToolSpec
    # Changes things (needs --yes or the user's approval): run_bash, write_file, edit_file.
    mutating: bool

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput: ...

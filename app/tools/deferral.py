"""Deferred tool definitions: many MCP schemas cost a share of the window on every request.

When the definitions of the deferrable tools (MCP tools; the built-ins are
always sent) would take more than ``share`` of the window, the biggest
servers' tools are deferred, whole servers at a time, until the rest fits:
for those the model gets only names and one-line descriptions, inside the
description of one ``load_tools`` tool. Calling ``load_tools`` with names sends those tools'
full definitions from the next request on. ``saved_tokens`` is what the
deferral saves on every request (the gauge shows it).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

from app.context.tokens import estimate_tools
from app.kernel.messages import ToolSpec
from app.tools.base import ToolContext, ToolInputError, ToolOutput

LOAD_TOOLS = "load_tools"
MAX_NAMES_PER_CALL = 50


def _one_line(description: str, limit: int = 100) -> str:
    """The first sentence of the first line: what the catalogue shows of a deferred tool."""
    line = next((part.strip() for part in description.splitlines() if part.strip()), "")
    end = line.find(". ")
    if end > 0:
        line = line[: end + 1]
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


@dataclass
class ToolDeferral:
    """Which definitions the model sees: the core ones, ``load_tools`` and what it loaded."""

    core: list[ToolSpec]  # always sent in full (the built-ins)
    deferrable: list[ToolSpec]  # MCP tools: sent in full only under the share, or once loaded
    window: int
    share: float
    # Called with the new list whenever what the model sees changes (the engine's tools).
    on_change: Callable[[list[ToolSpec]], None] = lambda _specs: None
    # Tool name -> its group (the MCP server): groups are deferred whole, biggest first,
    # until what is left fits the share, so a small server keeps its full definitions.
    group_of: Callable[[str], str | None] | None = None
    # The core tools as they are now (the registry's), so one registered later (task) is kept.
    core_source: Callable[[], list[ToolSpec]] | None = None
    loaded: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kept, self.deferred = self._split()
        self._by_name = {spec.name: spec for spec in self.deferred}
        self.active = bool(self.deferred)
        self._load_spec = self._make_load_spec() if self.active else None
        self._refresh()

    def _split(self) -> tuple[list[ToolSpec], list[ToolSpec]]:
        """(sent in full, deferred): nothing is deferred while all of it fits the share."""
        room = self.share * self.window
        if not self.deferrable or estimate_tools(self.deferrable) <= room:
            return list(self.deferrable), []
        groups: dict[str | None, list[ToolSpec]] = {}
        for spec in self.deferrable:
            groups.setdefault(self.group_of(spec.name) if self.group_of else None, []).append(spec)
        sizes = {key: estimate_tools(specs) for key, specs in groups.items()}
        left = sum(sizes.values())
        deferred_groups: set[str | None] = set()
        for key in sorted(groups, key=lambda k: sizes[k], reverse=True):
            if left <= room:
                break
            deferred_groups.add(key)
            left -= sizes[key]
        kept: list[ToolSpec] = []
        deferred: list[ToolSpec] = []
        for spec in self.deferrable:
            group = self.group_of(spec.name) if self.group_of else None
            (deferred if group in deferred_groups else kept).append(spec)
        return kept, deferred

    # ---- what the model sees ----

    def model_specs(self) -> list[ToolSpec]:
        return list(self._specs)

    @property
    def saved_tokens(self) -> int:
        return self._saved

    @property
    def deferred_names(self) -> list[str]:
        """Deferred and not loaded yet."""
        loaded = set(self.loaded)
        return [spec.name for spec in self.deferred if spec.name not in loaded]

    def _refresh(self) -> None:
        if self.core_source is not None:
            self.core = self.core_source()
        if not self.active:
            self._specs = self.core + self.deferrable
        else:
            assert self._load_spec is not None
            self._specs = self.core + self.kept + [self._load_spec] + [self._by_name[n] for n in self.loaded]
        self.full_tokens = estimate_tools(self.core + self.deferrable)
        self._saved = max(0, self.full_tokens - estimate_tools(self._specs))
        self.on_change(self.model_specs())

    def _make_load_spec(self) -> ToolSpec:
        catalogue = "\n".join(f"- {spec.name}: {_one_line(spec.description)}" for spec in self.deferred)
        return ToolSpec(
            name=LOAD_TOOLS,
            description=(
                "Load the full definitions of the tools below before calling them: these tools exist but "
                "only their names are sent, to save context. Pass the names you need; their definitions "
                "arrive with your next step, then call them normally.\n\nTools you can load:\n" + catalogue),
            input_schema={
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string"},
                                         "description": "tool names from the list, e.g. [\"git__git_log\"]"}},
                "required": ["names"],
            },
        )

    # ---- load_tools ----

    def load(self, names: list[str]) -> str:
        """Load these tools; the text is load_tools' result. Raises ToolInputError for bad names."""
        if not self.active:
            return "Every tool's full definition is already sent; call the tool directly."
        wanted = list(dict.fromkeys(str(n).strip() for n in names if str(n).strip()))
        if not wanted:
            raise ToolInputError("load_tools needs a non-empty list of tool names from its description.")
        if len(wanted) > MAX_NAMES_PER_CALL:
            raise ToolInputError(f"load_tools takes at most {MAX_NAMES_PER_CALL} names at a time; "
                                 "load only the tools this task needs.")
        in_full = {spec.name for spec in self.kept}
        unknown = [n for n in wanted if n not in self._by_name and n not in in_full]
        new = [n for n in wanted if n in self._by_name and n not in self.loaded]
        already = [n for n in wanted if n in self.loaded or n in in_full]
        self.loaded.extend(new)
        if new:
            self._refresh()
        lines: list[str] = []
        if new:
            lines.append(f"Loaded {len(new)} tool(s): {', '.join(new)}. Their full definitions are sent from "
                         "your next step; call them then.")
        if already:
            lines.append(f"Already loaded: {', '.join(already)}.")
        if unknown:
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, list(self._by_name), n=3, cutoff=0.5)
                hints.append(f"{name} (did you mean {', '.join(close)}?)" if close else name)
            lines.append(f"No such tool(s): {'; '.join(hints)}. Use names exactly as listed in load_tools.")
        return "\n".join(lines)


    def restore_loaded(self, names: list[str]) -> list[str]:
        """A resumed session's loads again, before its first request: the tools the model loaded stay
        declared, as they do through a compaction. Names no server offers now are skipped; returns the
        names loaded."""
        new = [n for n in dict.fromkeys(names) if n in self._by_name and n not in self.loaded]
        if new:
            self.loaded.extend(new)
            self._refresh()
        return new


class LoadToolsTool:
    """The registry face of ToolDeferral.load. Changes nothing outside the session: never asks."""

    mutating = False

    def __init__(self, deferral: ToolDeferral) -> None:
        self.deferral = deferral
        assert deferral._load_spec is not None, "load_tools exists only while tools are deferred"
        self.spec = deferral._load_spec

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        names = args.get("names")
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list):
            raise ToolInputError('load_tools: "names" must be a list of tool names, e.g. {"names": ["git__git_log"]}.')
        text = self.deferral.load(names)
        return ToolOutput(text, is_error=text.startswith("No such tool"))

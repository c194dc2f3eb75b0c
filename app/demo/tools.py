"""The demo's one extra tool: run_bash with the output limit off, for the flood experiment.

It is an ordinary tool registered with its own output limit (0: never
truncated) through the registry's general per-tool limit, so nothing in the
registry knows about the demo. The scripted model calls it once, in ``flood``;
the context engine then has to cut the 15 MB result before it is sent.
"""

from __future__ import annotations

from typing import Any

from app.kernel.messages import ToolSpec
from app.tools.base import ToolContext, ToolOutput
from app.tools.bash import RunBashTool

UNTRUNCATED_BASH = "run_bash_untruncated"


class UntruncatedBashTool:
    """``run_bash`` under another name; the plug-in registers it with no output limit."""

    mutating = True  # it runs commands: asks first, like run_bash

    def __init__(self) -> None:
        self._bash = RunBashTool()
        self.spec = ToolSpec(
            name=UNTRUNCATED_BASH,
            description=("run_bash with the registry's output limit off: the whole output comes back, "
                         "however large. Only for the demo's flood experiment; use run_bash otherwise."),
            input_schema=self._bash.spec.input_schema,
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return await self._bash.run(args, ctx)

"""Regenerate the dashboard screenshots from the real app on the offline demo provider.

Run from the repository root:  python screenshots/generate.py

It drives the real App (headless, 160x50) with Pilot and saves SVGs with
Textual's screenshot. Mid-task states are caught deterministically: the
agent's next request is held at the start (the engine's ``before_request``
is wrapped here, in this script only) while the screen is saved.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Callable

from app import events as ev
from app.config import load_settings
from app.runtime import build_agent
from app.tui import TidegaugeApp

OUT = Path(__file__).resolve().parent
SIZE = (160, 50)


class Holder:
    """Holds the agent before a model request when a condition on the UI's last events is met."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.last_context: ev.ContextEvent | None = None
        self.compactions = 0
        self.tool_results = 0
        self.pending: list[tuple[str, Callable[["Holder"], bool]]] = []
        self.waiting: str | None = None
        self.release = asyncio.Event()
        original_emit = agent.emit

        def watch(event) -> None:
            if isinstance(event, ev.ContextEvent):
                self.last_context = event
            elif isinstance(event, ev.CompactionEvent) and event.ok and event.trigger == "auto":
                self.compactions += 1
            elif isinstance(event, ev.ToolResultEvent):
                self.tool_results += 1
            original_emit(event)

        agent.emit = watch
        original_before = agent.engine.before_request

        async def before_request(summarize):
            await self._maybe_hold()
            return await original_before(summarize)

        agent.engine.before_request = before_request

    def hold_when(self, name: str, condition: Callable[["Holder"], bool]) -> None:
        self.pending.append((name, condition))

    async def _maybe_hold(self) -> None:
        if self.pending and self.pending[0][1](self):
            name, _ = self.pending.pop(0)
            self.waiting = name
            self.release.clear()
            await self.release.wait()
            self.waiting = None


async def settle(pilot, rounds: int = 6) -> None:
    for _ in range(rounds):
        await pilot.pause()


async def save(app: TidegaugeApp, pilot, name: str) -> None:
    await settle(pilot)
    path = app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
    print(f"saved {Path(path).relative_to(Path.cwd()) if Path(path).is_relative_to(Path.cwd()) else path}")


def make_app(data_dir: Path, **overrides) -> TidegaugeApp:
    settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(data_dir), "yes": True, **overrides})
    agent = build_agent(settings)
    return TidegaugeApp(agent, auto_approve=True, cursor_blink=False)


async def send(pilot, text: str) -> None:
    box = pilot.app.query_one("#prompt")
    box.value = text
    box.focus()
    await pilot.press("enter")


async def context_states(data_dir: Path) -> None:
    """summarize the project: the context climbs through the warning line into an auto-compaction."""
    app = make_app(data_dir)
    async with app.run_test(size=SIZE) as pilot:
        holder = Holder(app.agent)

        def level(name: str) -> Callable[[Holder], bool]:
            return lambda h: h.last_context is not None and h.last_context.level == name

        holder.hold_when(
            "gauge-under-warning",
            lambda h: level("ok")(h) and h.tool_results >= 6
            and h.last_context.projected_tokens >= 0.6 * h.last_context.thresholds.warning_line,
        )
        holder.hold_when("gauge-over-warning", level("warning"))
        holder.hold_when("after-auto-compaction", lambda h: h.compactions >= 1)
        await send(pilot, "summarize the project")
        while holder.pending or holder.waiting:
            if holder.waiting:
                await save(app, pilot, holder.waiting)
                holder.release.set()
            await pilot.pause()
            if not app.busy and not holder.waiting:
                break
        missing = [name for name, _ in holder.pending]
        await app.workers.wait_for_complete()
        if missing:
            print(f"warning: never reached {missing}", file=sys.stderr)


async def expanded_output(data_dir: Path) -> None:
    """find errors in app.log: the 15 MB cat is truncated; ctrl+o opens the full output."""
    app = make_app(data_dir)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "find errors in app.log")
        await app.workers.wait_for_complete()
        await settle(pilot)
        panel = app.tool_panel
        truncated = [cid for cid, info in panel.calls.items() if info.truncated and info.full_output_path]
        if not truncated:
            print("warning: no truncated output to expand", file=sys.stderr)
            return
        panel.select_call(truncated[0])
        await pilot.press("ctrl+o")
        for _ in range(400):
            if panel.expanded:
                break
            await pilot.pause(0.01)
        viewer = panel.viewer
        viewer.focus()
        viewer.scroll_end(animate=False, immediate=True)
        await save(app, pilot, "truncated-output-expanded")


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tidegauge-screens-") as tmp:
        await context_states(Path(tmp) / "a")
        await expanded_output(Path(tmp) / "b")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

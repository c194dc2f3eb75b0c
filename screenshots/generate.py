"""Regenerate every screenshot the README shows, from the real app on the offline demo provider.

Run from the repository root:  python screenshots/generate.py

It drives the real App (headless) with Pilot on a real session (demo provider) that
runs on its own thread, as ``tidegauge`` runs it, and saves SVGs with Textual's
screenshot, at the largest size people use (220x60) and the smallest (80x24).
Mid-task states are caught deterministically: the session's next model request is
held at the start (the engine's ``before_request`` is wrapped here, in this script
only) while the screen is saved.

Then ``web-dashboard.png``: ``tidegauge --web`` on the demo, in a temporary folder, in
Debian's Chromium (``/usr/bin/chromium``) through Playwright at 1280x800; the demo's task,
ctrl+o, the page saved. Every process it starts is ended before it returns.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from app.kernel import events as ev
from app.kernel.envelope import EventEnvelope
from app.session.agent_session import AgentSession
from app.wiring.config import load_settings
from app.surfaces.dashboard.app import TidegaugeApp
from app.wiring.runtime import build_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from session_thread import SessionThread  # noqa: E402  (tests/ is not a package; the Pilot tests' runner)
from web_support import CHROMIUM, BrowserTerminal, WebServer, browser_pages  # noqa: E402  (the browser tests' driver)

OUT = Path(__file__).resolve().parent
LARGEST = (220, 60)
SMALLEST = (80, 24)
BROWSER = (1280, 800)  # the page's size in pixels: a laptop's window


class Holder:
    """Holds the session before a model request when a condition on its last events is met."""

    def __init__(self, session: AgentSession) -> None:
        self.last_context: ev.ContextEvent | None = None
        self.compactions = 0
        self.tool_results = 0
        self.pending: list[tuple[str, Callable[["Holder"], bool]]] = []
        self.waiting: str | None = None
        self.release = threading.Event()  # the session runs on its own thread (and loop)

        def watch(envelope: EventEnvelope) -> None:
            event = envelope.event
            if isinstance(event, ev.ContextEvent):
                self.last_context = event
            elif isinstance(event, ev.CompactionEvent) and event.ok and event.trigger in ("auto", "memory"):
                self.compactions += 1
            elif isinstance(event, ev.ToolResultEvent):
                self.tool_results += 1

        session.subscribe(watch)
        engine = session.agent.engine
        original_before = engine.before_request

        async def before_request(summarize):
            await self._maybe_hold()
            return await original_before(summarize)

        engine.before_request = before_request

    def hold_when(self, name: str, condition: Callable[["Holder"], bool]) -> None:
        self.pending.append((name, condition))

    async def _maybe_hold(self) -> None:
        if self.pending and self.pending[0][1](self):
            name, _ = self.pending.pop(0)
            self.release.clear()
            self.waiting = name
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait)
            self.waiting = None


async def settle(pilot, rounds: int = 12) -> None:
    for _ in range(rounds):
        await pilot.pause(0.02)


async def save(app: TidegaugeApp, pilot, name: str) -> None:
    await settle(pilot)
    path = app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
    print(f"saved {Path(path).relative_to(Path.cwd()) if Path(path).is_relative_to(Path.cwd()) else path}")


def make_app(data_dir: Path, **overrides) -> tuple[TidegaugeApp, AgentSession]:
    settings = load_settings({"provider": "demo", "demo_speed": 0, "data_dir": str(data_dir), "yes": True, **overrides})
    # started in a project folder, as a user would be (the header names it)
    project = data_dir.parent / "my-project"
    project.mkdir(exist_ok=True)
    session = build_session(settings, approvals=False, cwd=project)
    return TidegaugeApp(session, cursor_blink=False), session


async def send(pilot, text: str) -> None:
    box = pilot.app.query_one("#prompt")
    box.value = text
    box.focus()
    await pilot.press("enter")


async def until_idle(app: TidegaugeApp, pilot, session: AgentSession) -> None:
    for _ in range(3_000):
        if not session.pending:
            break
        await pilot.pause(0.01)
    await settle(pilot)


async def context_states(data_dir: Path, size: tuple[int, int], names: dict[str, str]) -> None:
    """summarize the project: the context climbs through the warning line into an auto-compaction."""
    app, session = make_app(data_dir)
    holder = Holder(session)
    SessionThread(session).start()
    async with app.run_test(size=size) as pilot:

        def level(name: str) -> Callable[[Holder], bool]:
            return lambda h: h.last_context is not None and h.last_context.level == name

        conditions = {
            "under": lambda h: level("ok")(h) and h.tool_results >= 6
            and h.last_context.projected_tokens >= 0.6 * h.last_context.thresholds.warning_line,
            "over": level("warning"),
            "after": lambda h: h.compactions >= 1,
        }
        for state, condition in conditions.items():
            if state in names:
                holder.hold_when(names[state], condition)
        await send(pilot, "summarize the project")
        while holder.pending or holder.waiting:
            held = holder.waiting
            if held:
                await save(app, pilot, held)
                holder.release.set()
                while holder.waiting == held:  # (the next hold may come before this loop looks)
                    await pilot.pause(0.01)
            await pilot.pause(0.01)
            if not session.pending and not holder.waiting:
                break
        missing = [name for name, _ in holder.pending]
        holder.pending.clear()
        holder.release.set()
        await until_idle(app, pilot, session)
        if missing:
            print(f"warning: never reached {missing}", file=sys.stderr)


async def expanded_output(data_dir: Path, size: tuple[int, int], name: str) -> None:
    """find errors in app.log: the 15 MB cat is cut; ctrl+o (nothing picked) opens its full output."""
    app, session = make_app(data_dir)
    SessionThread(session).start()
    async with app.run_test(size=size) as pilot:
        await send(pilot, "find errors in app.log")
        await until_idle(app, pilot, session)
        await pilot.press("ctrl+o")
        panel = app.tool_panel
        for _ in range(1_000):
            if panel.expanded:
                break
            await pilot.pause(0.01)
        else:
            print("warning: no cut output opened", file=sys.stderr)
            return
        panel.viewer.scroll_end(animate=False, immediate=True)
        await save(app, pilot, name)


async def rewind_list(data_dir: Path, size: tuple[int, int], name: str) -> None:
    """add a changelog entry, then another prompt; escape escape opens the rewind list on the first."""
    from widgets.rewind_screen import RewindScreen

    app, session = make_app(data_dir)
    SessionThread(session).start()
    async with app.run_test(size=size) as pilot:
        for prompt in ("add a changelog entry", "what did I ask first?"):
            await send(pilot, prompt)
            await until_idle(app, pilot, session)
        app.clock = lambda: 0.0  # the two escapes count as one double press, however slow the machine
        await pilot.press("escape", "escape")
        for _ in range(1_000):
            if isinstance(app.screen, RewindScreen):
                break
            await pilot.pause(0.01)
        else:
            print("warning: the rewind list never opened", file=sys.stderr)
            return
        await pilot.press("down")  # the first message: the one that changed CHANGELOG.md
        await save(app, pilot, name)


async def inspector_diff(data_dir: Path, size: tuple[int, int], name: str) -> None:
    """summarize the project; ctrl+n, then back to the first request after its compaction and d: the diff."""
    from widgets.request_inspector import RequestInspectorScreen

    app, session = make_app(data_dir)
    requests: list[int] = []
    after_compaction: list[int] = []

    def watch(envelope: EventEnvelope) -> None:
        event = envelope.event
        if isinstance(event, ev.RequestRecordedEvent):
            requests.append(event.request)
        elif isinstance(event, ev.CompactionEvent) and event.ok:
            after_compaction.append(len(requests) + 1)  # the next request is the first after it

    session.subscribe(watch)
    SessionThread(session).start()
    async with app.run_test(size=size) as pilot:
        await send(pilot, "summarize the project")
        await until_idle(app, pilot, session)
        if not after_compaction or not requests:
            print("warning: no compaction to show in the inspector", file=sys.stderr)
            return
        await pilot.press("ctrl+n")
        for _ in range(1_000):
            if isinstance(app.screen, RequestInspectorScreen):
                break
            await pilot.pause(0.01)
        else:
            print("warning: the inspector never opened", file=sys.stderr)
            return
        for _ in range(requests[-1] - after_compaction[0]):
            await pilot.press("left")
        await pilot.press("d")
        await save(app, pilot, name)


async def evicted_and_pinned(data_dir: Path, size: tuple[int, int], name: str) -> None:
    """find errors in app.log; in the tool list, p pins the first call and d evicts the cut cat."""
    from widgets.confirm_screen import ForecastConfirmScreen
    from widgets.tool_call_list import ToolCallList

    app, session = make_app(data_dir)
    SessionThread(session).start()
    async with app.run_test(size=size) as pilot:
        await send(pilot, "find errors in app.log")
        await until_idle(app, pilot, session)
        tools = app.query_one(ToolCallList)
        tools.focus()
        await pilot.press("home")
        cut = next((i for i, call in enumerate(tools.calls) if call.truncated), None)
        if cut is None:
            print("warning: no cut output to evict", file=sys.stderr)
            return
        for _ in range(cut):
            await pilot.press("down")
        await pilot.press("d")
        for _ in range(1_000):
            if isinstance(app.screen, ForecastConfirmScreen) and app.screen.forecast is not None:
                break
            await pilot.pause(0.01)
        await pilot.press("y")
        await pilot.press("home")
        if cut == 0:
            await pilot.press("down")
        await pilot.press("p")
        for _ in range(1_000):
            if tools.calls[cut].evicted and any(call.pinned for call in tools.calls):
                break
            await pilot.pause(0.01)
        else:
            print("warning: the tool list never showed an evicted and a pinned result", file=sys.stderr)
        await save(app, pilot, name)


def web_dashboard(tmp: Path, name: str) -> None:
    """``tidegauge --web`` in Chromium: find errors in app.log, then ctrl+o on its cut output."""
    import psutil
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        print(f"warning: no Chromium at {CHROMIUM} (Debian: apt-get install chromium); {name}.png not made",
              file=sys.stderr)
        return
    server = WebServer.start(tmp / "web", "--web-port", "0", "--provider", "demo", "--demo-speed", "0", "--yes",
                             folder="../my-project")
    started: list[psutil.Process] = []
    try:
        server.wait_for_address()
        with sync_playwright() as playwright:
            for page in browser_pages(playwright, BROWSER):
                terminal = BrowserTerminal(page)
                terminal.open(server.url)
                terminal.wait_for_text("Ask tidegauge", "session ")
                started = server.descendants()  # the tab's dashboard and session processes
                terminal.type("find errors in app.log")
                terminal.press("Enter")
                terminal.wait_for_text("ERROR database connection refused", "truncated", "idle")
                terminal.press("Control+o")  # nothing picked: the newest cut output
                terminal.wait_for_text("300,002 lines")
                path = OUT / f"{name}.png"
                page.screenshot(path=str(path))
                print(f"saved {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    finally:
        started += server.descendants()
        server.stop()
        _, alive = psutil.wait_procs(started, timeout=30)
        for process in alive:  # a tab that outlived the server's ctrl+c: ours, so ended here
            process.kill()


async def svgs(tmp: str) -> None:
    # the largest size: every part of the dashboard, through a task's context states
    await context_states(Path(tmp) / "a", LARGEST, {"under": "gauge-under-warning",
                                                     "over": "gauge-over-warning",
                                                     "after": "after-auto-compaction"})
    await expanded_output(Path(tmp) / "b", LARGEST, "truncated-output-expanded")
    # the smallest: the chart folded away, the conversation keeps its rows
    await context_states(Path(tmp) / "c", SMALLEST, {"over": "dashboard-80x24"})
    await expanded_output(Path(tmp) / "d", SMALLEST, "truncated-output-expanded-80x24")
    await rewind_list(Path(tmp) / "e", SMALLEST, "rewind-80x24")
    await inspector_diff(Path(tmp) / "f", LARGEST, "inspector-diff-after-compaction")
    await evicted_and_pinned(Path(tmp) / "g", SMALLEST, "tool-list-evicted-pinned-80x24")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tidegauge-screens-") as tmp:
        # Every picture names the project "~/my-project" (not a new temporary path each run),
        # and no config of the user's is read: home and the config folder are in the temporary one.
        os.environ["HOME"] = tmp
        os.environ["TIDEGAUGE_CONFIG_DIR"] = str(Path(tmp) / "config")
        asyncio.run(svgs(tmp))
        # the same run, the same app: the browser's view of the demo's cut output
        web_dashboard(Path(tmp), "web-dashboard")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

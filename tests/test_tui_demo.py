"""The dashboard end to end on the real agent and the offline demo provider (no network)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from app.surfaces.dashboard.app import TidegaugeApp
from app.demo.scenarios import SCENARIOS, serves_sub_agent
from dashboard_helpers import demo_app, settle
from widgets.approval_screen import ApprovalScreen
from widgets.assistant_message import AssistantMessage
from widgets.engine_line import EngineLine
from widgets.header_bar import HeaderBar
from widgets.sub_agent_line import SubAgentLine
from widgets.tool_call_line import ToolCallLine
from widgets.tool_output_panel import ToolOutputPanel

SIZE = (160, 50)


def make_app(tmp_path: Path, **overrides) -> TidegaugeApp:
    return demo_app(tmp_path, **overrides)


async def send(pilot, text: str) -> None:
    box = pilot.app.query_one("#prompt")
    box.value = text
    box.focus()
    await pilot.press("enter")


async def until(pilot, condition, attempts: int = 2_000) -> None:
    for _ in range(attempts):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"condition never held after {attempts} pauses (screen: {type(pilot.app.screen).__name__}, "
                         f"busy: {getattr(pilot.app, 'busy', None)})")


def history_dump(agent) -> list[dict]:
    return [message.model_dump() for message in agent.history]


async def test_demo_find_errors_then_expand_the_15mb_output_without_touching_the_context(tmp_path: Path) -> None:
    app = make_app(tmp_path, yes=True)
    async with app.run_test(size=SIZE) as pilot:
        header = app.query_one(HeaderBar)
        assert header.provider_label.startswith("demo (scripted model)")
        await send(pilot, "find errors in app.log")
        await settle(pilot)
        panel = app.query_one(ToolOutputPanel)
        cat = [info for info in panel.calls.values() if info.truncated]
        assert cat and cat[0].original_chars > 10_000_000
        history, context = history_dump(app.session.agent), app.session.agent.context_event()

        panel.select_call(cat[0].id)
        await pilot.press("ctrl+o")
        await until(pilot, lambda: panel.expanded)
        assert panel.viewer.line_count >= 300_000
        assert panel.viewer.lines[-1].startswith("[exit code") or "ERROR" in panel.viewer.lines[-2]
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert not panel.expanded
        assert history_dump(app.session.agent) == history
        assert app.session.agent.context_event() == context


async def test_demo_summarize_climbs_through_the_warning_line_into_an_auto_compaction(tmp_path: Path) -> None:
    app = make_app(tmp_path, yes=True)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "summarize the project")
        await settle(pilot)
        kinds = [line.kind for line in app.conversation.query(EngineLine)]
        assert "warning" in kinds and "compaction" in kinds
        # every reply is drawn, also those that arrived in one burst (demo speed 0)
        for _ in range(50):
            replies = list(app.conversation.query(AssistantMessage))
            if replies and all(reply.blocks for reply in replies if reply.text.strip()):
                break
            await pilot.pause()
        drawn = [reply for reply in replies if reply.text.strip()]
        assert drawn and all(reply.blocks for reply in drawn)
        # the drop: a summary, or (the demo keeps a session memory) a compaction from the memory
        assert any(p.kind in ("compaction", "memory") for p in app.query_one("#context-history").points)  # type: ignore[attr-defined]


async def test_demo_approval_then_interrupt_leaves_a_valid_session(tmp_path: Path) -> None:
    app = make_app(tmp_path)  # no --yes: run_bash asks
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "find errors in app.log")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        app.action_interrupt()  # escape would answer the modal; interrupt the turn itself
        # The turn ends first and the modal is dismissed after it (a later message): wait for
        # both states, not for a pause that a loaded machine may not give it time to happen in.
        await until(pilot, lambda: not app.busy and not isinstance(app.screen, ApprovalScreen))
        history = app.session.agent.history
        uses = {b.id for m in history for b in m.tool_uses}
        results = {b.tool_use_id for m in history for b in m.tool_results}
        assert uses == results  # every call answered (a synthetic "interrupted" result)
        # and the dashboard keeps working: the next turn asks again, and "no" is respected
        await send(pilot, "find errors in app.log")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("n")
        await settle(pilot)
        await until(pilot, lambda: not app.busy and not isinstance(app.screen, ApprovalScreen))


async def test_demo_delegate_folds_the_sub_agent_under_the_task_call_and_the_reply_quotes_its_report(
        tmp_path: Path) -> None:
    app = make_app(tmp_path, yes=True)
    reached, release = threading.Event(), threading.Event()

    async with app.run_test(size=SIZE) as pilot:
        provider = app.session.agent.provider
        scripted = provider.stream

        async def held_mid_task(request):
            # The sub-agent's call after it listed and read the importer: held here (on the session's
            # thread) so the dashboard can be looked at while the sub-agent runs.
            if serves_sub_agent(request) and sum(len(m.tool_results) for m in request.messages) == 2:
                reached.set()
                await asyncio.to_thread(release.wait)
            async for event in scripted(request):
                yield event

        provider.stream = held_mid_task  # before the first prompt: the session is idle
        try:
            await send(pilot, SCENARIOS["delegate"].prompt)
            assert await asyncio.to_thread(reached.wait, 120)
            await until(pilot, lambda: any("inventory/importer.py" in sub.render().plain
                                           for sub in app.query(SubAgentLine)))
            children = list(app.conversation.children)
            (task_line,) = [w for w in children if isinstance(w, ToolCallLine)]
            (sub,) = app.query(SubAgentLine)
            assert children.index(sub) == children.index(task_line) + 1  # folded right under the task call
            running = sub.render().plain
            assert "find where the importer rejects rows" in running and "2 tool calls" in running
            assert "list_files ." in running and "read_file inventory/importer.py" in running
            assert "end_turn" not in running and "compacts at" in running  # running, with its own gauge
        finally:
            release.set()
        await settle(pilot)
        done = sub.render().plain
        assert "✓ end_turn" in done and "3 tool calls" in done
        assert "read_file inventory/models.py" not in done  # folded once it finished
        [report] = [b.content for m in app.session.agent.history for b in m.tool_results]
        replies = [reply.text for reply in app.conversation.query(AssistantMessage) if reply.text.strip()]
        assert replies and all(f"> {line}" in replies[-1] for line in report.splitlines() if line.strip())

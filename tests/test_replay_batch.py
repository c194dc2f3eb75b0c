"""A resumed session's tool calls and context figures reach the tool panel and the context panel
as one ``Replayed`` batch each, and what they draw after it is what one message at a time drew:
the same lines in the tool list, the same selection, the same gauge headline, chart and breakdown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from test_long_resume import until

# More calls than the tool list shows and two compactions (one every 50 turns): the list scrolls to
# its cursor, the chart has compaction points and the breakdown compaction calls.
TURNS = 120


def written_session(tmp_path: Path) -> tuple[Path, Path, str]:
    """A session of ``TURNS`` written once: (its data directory, its project, its id)."""
    from benchmarks._long_session import write_long_session

    project = tmp_path / "project"
    project.mkdir(parents=True)
    return tmp_path / "data", project, write_long_session(tmp_path / "data", project, TURNS)


def resumed_app_at_rest(written: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The dashboard on a resumed session whose loop is not started: what it draws is the replay
    alone. A running session emits a context event of its own once attached, whose estimate
    varies from run to run (7,243 to 7,303 tokens here), so two runs would not draw alike.
    Each run resumes its own copy of the written session's data directory."""
    import shutil

    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    written_data, project, session_id = written
    data = tmp_path / "data"
    shutil.copytree(written_data, data)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-replay-batch")
    settings = load_settings({"provider": "openai", "model": "fake-model", "base_url": "http://127.0.0.1:9/v1",
                              "data_dir": str(data)})
    return TidegaugeApp(build_session(settings, approvals=True, resume=session_id, cwd=project), cursor_blink=False)


async def drawn_after_resume(written: tuple[Path, Path, str], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the tool panel and the context panel show once a resumed session of ``TURNS`` is in."""
    from benchmarks._long_session import last_reply
    from widgets.assistant_message import AssistantMessage
    from widgets.context_breakdown import ContextBreakdown
    from widgets.context_history import ContextHistory
    from widgets.gauge_bar import GaugeBar

    app = resumed_app_at_rest(written, tmp_path, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        tool_panel, tool_list = app.tool_panel, app.tool_panel.tool_list
        history, gauge = app.query_one(ContextHistory), app.query_one(GaugeBar)

        def figures(event: Any) -> Any:
            return None if event is None else event.model_dump()

        def settled() -> bool:
            """Everything handed over: one by one, the context events of the turns come before the
            snapshot's, the last one the panel gets."""
            if app.session is None:
                return False
            restored = app.session.restored
            points = sum(event.type == "chart_point" for event in restored)
            replies = [widget.source for widget in app.conversation.query(AssistantMessage)]
            return (tool_list.call_count == TURNS and len(history.points) == min(points, history.max_points)
                    and figures(gauge.context) == figures(app.session.snapshot().context)
                    and bool(replies) and replies[-1] == last_reply(TURNS))

        await until(pilot, settled, lambda: (
            f"not settled: {tool_list.call_count} calls listed, {len(history.points)} chart points, "
            f"gauge context {figures(gauge.context)}, session {figures(app.session.snapshot().context) if app.session else None}"))
        for _ in range(3):  # the list scrolls to its cursor again after a refresh
            await pilot.pause()
        return {
            "tool list lines": [tool_list.render_line(y).text for y in range(tool_list.size.height)],
            "tool list cursor": (tool_list.cursor, tool_list.scroll_offset.y),
            "selected call": (tool_panel.selected_id, tool_panel.follow_new, tool_panel.user_picked,
                              str(tool_panel.border_subtitle)),
            "status line": str(tool_panel.status_line.render()),
            "output shown": [tool_panel.viewer.render_line(y).text for y in range(tool_panel.viewer.size.height)],
            "gauge headline": gauge.headline(gauge.size.width).plain,
            "gauge": gauge.render().plain,
            "chart": history.render().plain,
            "breakdown": app.query_one(ContextBreakdown).render().plain,
            "context panel": (str(app.context_panel.border_title), sorted(app.context_panel.classes)),
        }


async def test_a_replayed_batch_draws_what_one_message_at_a_time_drew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from widgets.context_panel import ContextPanel
    from widgets.session_messages import Replayed
    from widgets.tool_output_panel import ToolOutputPanel

    written = written_session(tmp_path / "written")
    batched = await drawn_after_resume(written, tmp_path / "batched", monkeypatch)
    with monkeypatch.context() as one_by_one:  # without Replayed listed, the bridge posts each message alone
        for panel in (ToolOutputPanel, ContextPanel):
            one_by_one.setattr(panel, "SESSION_MESSAGES",
                               tuple(kind for kind in panel.SESSION_MESSAGES if kind is not Replayed))
        alone = await drawn_after_resume(written, tmp_path / "alone", monkeypatch)
    assert f"call_{TURNS}" == batched["selected call"][0]
    assert any("read_file" in line for line in batched["tool list lines"]), batched["tool list lines"]
    for part in batched:
        assert batched[part] == alone[part], f"{part} differs:\nbatched: {batched[part]!r}\none by one: {alone[part]!r}"

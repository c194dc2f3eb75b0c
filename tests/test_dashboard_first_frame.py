"""What the first frame leaves out changes nothing a user sees.

The main screen's first resume does not style its widgets a second time (MainScreen.on_screen_resume):
at the first frame every widget, and each of its component classes, is styled as a full restyle
styles it, on a short terminal and a tall one, with the session given or built after the frame.
A folded context panel mounts its chart and breakdown after the first frame: what the session
said before that is in them when ctrl+g shows them."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.dom import DOMNode

from app.surfaces.dashboard.app import CSS_FILE, TidegaugeApp
from snapshot_apps.fake_agent import FakeSession, context
from widgets.context_panel import ContextPanel


def _styles(app: TidegaugeApp) -> dict[str, object]:
    seen: dict[str, object] = {}
    for index, node in enumerate(app.screen.walk_children(with_self=True)):
        components: set[str] = set()
        for cls in type(node).__mro__:
            components |= set(getattr(cls, "COMPONENT_CLASSES", ()))
        assert isinstance(node, DOMNode)
        seen[f"{index}:{type(node).__name__}#{node.id}"] = (
            node.styles.css, sorted(node.classes),
            {name: node.get_component_styles(name).css for name in sorted(components)})
    return seen


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
@pytest.mark.parametrize("given", [True, False])
async def test_the_first_frames_styles_are_those_a_full_restyle_gives(size: tuple[int, int], given: bool) -> None:
    kwargs: dict[str, Any] = ({"session": FakeSession({})} if given
                              else {"session_factory": lambda: FakeSession({})})
    app = TidegaugeApp(cursor_blink=False, **kwargs)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        first = _styles(app)
        app.screen.update_node_styles(animate=False)  # what Textual did on the first resume
        await pilot.pause()
        assert _styles(app) == first
        assert len(first) > 15


class FoldedHost(App[None]):
    """A context panel folded from the start, told the session's figures as it mounts."""

    CSS_PATH = str(CSS_FILE)

    def compose(self) -> ComposeResult:
        panel = ContextPanel(id="context-panel")
        panel.folded = True
        yield panel

    def on_mount(self) -> None:
        panel = self.query_one(ContextPanel)
        panel.update_context(context(60_000))
        for tokens in (20_000, 60_000, 110_000):
            panel.add_point(tokens)
        panel.add_compaction_usage(40_000, 2_000)


async def test_a_folded_panels_chart_and_breakdown_show_what_was_said_before_they_mounted() -> None:
    app = FoldedHost()
    async with app.run_test(size=(160, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(ContextPanel)
        assert panel.history.region.area == 0  # folded: not on screen
        panel.folded = False  # what ctrl+g does
        await pilot.pause()
        assert panel.history.is_mounted and panel.history.region.area > 0
        assert [point.tokens for point in panel.history.points] == [20_000, 60_000, 110_000]
        assert any("130.0K" in line for line in panel.history.render().plain.split("\n"))  # the warning line
        assert "compaction calls 1: in 40.0K · out 2.0K" in panel.breakdown.render().plain


async def test_a_start_draws_the_footer_and_the_breakdown_once_when_nothing_they_show_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Focus moving to the prompt refreshes the bindings, and the session says its info and its
    context once attached, after the snapshot already said them: the same keys and figures again.
    Each was drawn again (the footer three times), a start's largest cost after its first frame."""
    from widgets.context_breakdown import ContextBreakdown
    from widgets.key_footer import KeyFooter

    drawn: dict[str, list[str]] = {"footer": [], "breakdown": []}
    for name, widget_class in (("footer", KeyFooter), ("breakdown", ContextBreakdown)):
        def counted(self: Any, _render: Any = widget_class.render, _name: str = name) -> Any:
            text = _render(self)
            drawn[_name].append(text.plain)
            return text
        monkeypatch.setattr(widget_class, "render", counted)
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        assert app.session is not None
        context_panel = app.context_panel
        assert context_panel.last_context == app.session.snapshot().context  # said twice, drawn once
        assert len(drawn["footer"]) == 1, drawn["footer"]
        assert len(drawn["breakdown"]) == 1, drawn["breakdown"]
        assert "^q Quit" in drawn["footer"][0]
        # other keys (a region with its own) are drawn at once
        app.tool_panel.tool_list.focus()
        await pilot.pause()
        assert len(drawn["footer"]) == 2 and drawn["footer"][1] != drawn["footer"][0], drawn["footer"]


def count_restyles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The class names of the nodes Textual restyles from now on, in order, one per restyle."""
    from textual.css.stylesheet import Stylesheet

    restyled: list[str] = []
    update_nodes = Stylesheet.update_nodes

    def counted(self: Stylesheet, nodes: Any, animate: bool = False) -> None:
        nodes = list(nodes)
        restyled.extend(type(node).__name__ for node in nodes)
        update_nodes(self, nodes, animate)

    monkeypatch.setattr(Stylesheet, "update_nodes", counted)
    return restyled


async def test_closing_the_dashboard_does_not_restyle_the_prompt_it_is_removing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual prunes the screen at exit and first moved the focus off the prompt: the prompt was
    blurred, validated and restyled twice on its way out. While running, moving focus still does."""
    restyled = count_restyles(monkeypatch)
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.tool_panel.tool_list.focus()
        await pilot.pause()
        assert "PromptBox" in restyled  # blurred while running: restyled as ever
        app.prompt_box.focus()
        await pilot.pause()
        restyled.clear()
    assert restyled == []


async def test_an_engine_line_is_styled_as_it_mounts_not_as_it_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its kind's class was added with a style update while the line was in no DOM yet: a restyle of
    a line nobody could see, for every notice and warning in the conversation. Mounted, it has its
    kind's style all the same."""
    from widgets.engine_line import EngineLine

    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        restyled = count_restyles(monkeypatch)
        lines = [EngineLine(kind, f"a {kind} line") for kind in ("warning", "breaker", "info")]
        assert restyled == []
        await app.conversation.mount_all(lines)
        await pilot.pause()
        warning, breaker, info = lines
        assert warning.has_class("-warning") and warning.styles.text_style.bold
        assert breaker.styles.color != info.styles.color and breaker.styles.text_style.bold
        assert not info.styles.text_style.bold

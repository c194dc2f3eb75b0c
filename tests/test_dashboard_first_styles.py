"""The main screen's first resume does not style its widgets a second time (MainScreen.on_screen_resume):
at the first frame every widget, and each of its component classes, is styled as a full restyle
styles it, on a short terminal and a tall one, with the session given or built after the frame."""

from __future__ import annotations

from typing import Any

import pytest
from textual.dom import DOMNode

from app.surfaces.dashboard.app import TidegaugeApp
from snapshot_apps.fake_agent import FakeSession


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

"""The prompt's echo: a key typed into the prompt is drawn without laying out the screen, and text
wider than the box still scrolls in it (its cursor in view, its start back when it is short again)."""

from __future__ import annotations

from typing import Any

from app.surfaces.dashboard.app import TidegaugeApp
from snapshot_apps.fake_agent import FakeSession

SIZE = (80, 24)


def _prompt_text(app: TidegaugeApp) -> str:
    """What the prompt box shows on screen, as drawn."""
    prompt = app.prompt_box
    region = prompt.content_region
    line = app.screen._compositor.render_strips()[region.y]
    return line.crop(region.x, region.right).text


async def test_a_key_typed_in_the_prompt_is_drawn_without_laying_out_the_screen() -> None:
    # Input's scrollable width changes with each key, and Textual lays out every widget for it:
    # about a third of the frame that echoes the key. The box's size is fixed: a repaint does.
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        compositor = app.screen._compositor
        reflows: list[Any] = []
        reflow = compositor.reflow

        def counting_reflow(*args: Any) -> Any:
            reflows.append(args)
            return reflow(*args)

        compositor.reflow = counting_reflow  # type: ignore[method-assign,assignment]
        await pilot.press("h", "e", "l", "l", "o")
        await pilot.pause()
        assert app.prompt_box.value == "hello"
        assert _prompt_text(app).startswith("hello")
        assert reflows == [], f"{len(reflows)} layouts of the screen for 5 keys"


async def test_text_wider_than_the_prompt_scrolls_in_it_and_comes_back_when_short() -> None:
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        prompt = app.prompt_box
        prompt.value = "".join(f"w{n:03d} " for n in range(30)).rstrip()  # 149 characters: wider than the box
        prompt.cursor_position = len(prompt.value)
        await pilot.press("z")
        await pilot.pause()
        shown = _prompt_text(app)
        assert "w029z" in shown, f"the end typed is not in view: {shown!r}"
        assert "w000" not in shown
        await pilot.press("ctrl+u", "o", "k")  # everything left of the cursor deleted, then two keys
        await pilot.pause()
        assert prompt.value == "ok"
        assert _prompt_text(app).startswith("ok"), f"the short text is scrolled away: {_prompt_text(app)!r}"

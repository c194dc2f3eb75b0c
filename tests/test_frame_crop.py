"""A frame renders only the widgets it changes: a key typed while a reply streams is drawn without
rendering the header, the footer or the context panel, and what the frame writes is what Textual's
own compositor would have written there."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from textual import events
from textual._compositor import Compositor
from textual.geometry import Region

from app.surfaces.dashboard.app import TidegaugeApp
from app.surfaces.dashboard.cropped_compositor import CroppedCompositor
from snapshot_apps.fake_agent import FakeSession

SIZE = (160, 50)
REPLY = "The context engine keeps a running sum.\n\n- first point\n- second point\n\nAnd a last paragraph "


async def test_a_key_typed_while_a_reply_streams_renders_neither_header_footer_nor_context_panel() -> None:
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.conversation.append_assistant(REPLY)
        await pilot.pause()
        rendered: Counter[str] = Counter()
        widgets = [app.query_one("HeaderBar"), app.query_one("KeyFooter"), app.query_one("ContextPanel"),
                   app.prompt_box]
        for widget in widgets:
            original = widget.render_lines

            def counting(crop: Region, original: Any = original, name: str = type(widget).__name__) -> Any:
                rendered[name] += 1
                return original(crop)

            widget.render_lines = counting  # type: ignore[method-assign]
        for word in ("more ", "words ", "streaming "):
            app.conversation.append_assistant(word)
            await pilot.press(word[0])
        await pilot.pause()
        assert app.prompt_box.value == "mws"
        assert rendered["PromptBox"] >= 1, "the prompt was never drawn with the keys"
        assert {name: rendered[name] for name in ("HeaderBar", "KeyFooter", "ContextPanel")} == \
               {"HeaderBar": 0, "KeyFooter": 0, "ContextPanel": 0}


async def test_a_partial_update_writes_what_textuals_compositor_writes_in_the_changed_area() -> None:
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.conversation.append_assistant(REPLY * 3)
        await pilot.press("h", "i")
        await pilot.pause()
        compositor = app.screen._compositor
        assert isinstance(compositor, CroppedCompositor)
        prompt, reply = app.prompt_box.region, app.conversation.region
        for changed in ([prompt], [reply], [prompt, reply], [app.query_one("ContextPanel").region]):
            crop = Region.from_union(changed)
            spans = list(compositor._regions_to_spans(changed))
            lines = {y for y, _, _ in spans}
            ours = compositor._render_chops(crop, lines.__contains__)
            compositor._get_renders = Compositor._get_renders.__get__(compositor)  # type: ignore[method-assign]
            try:
                textuals = compositor._render_chops(crop, lines.__contains__)
            finally:
                del compositor._get_renders
            for y, x1, x2 in spans:
                for cut, strip in textuals[y].items():
                    end = cut + (strip.cell_length if strip is not None else 0)
                    if strip is None or end <= x1 or cut >= x2:
                        continue  # no cell of it in [x1, x2): the update writes none
                    drawn = ours[y].get(cut)
                    assert drawn is not None and list(drawn) == list(strip), (y, cut, changed)


async def test_a_key_is_echoed_without_waiting_for_the_frame_timer() -> None:
    # Textual draws on a 60 Hz timer; while a reply streams a key waited up to a tick for its echo.
    # Here the timer never ticks again (and the keys are sent as the terminal driver sends them:
    # the pilot's press draws a frame itself): the echo must come from the key's own frame.
    app = TidegaugeApp(FakeSession({}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.conversation.append_assistant(REPLY)
        await pilot.pause()
        timer = app.screen._update_timer
        timer.pause()
        timer.resume = lambda: None  # type: ignore[method-assign]
        prompt = app.prompt_box
        echoed = asyncio.Event()
        render_line = prompt.render_line

        def noting_render_line(y: int) -> Any:
            if prompt.value == "ok":
                echoed.set()
            return render_line(y)

        prompt.render_line = noting_render_line  # type: ignore[method-assign]
        app.conversation.append_assistant("more words ")  # the reply changes too: the frame is the timer's
        for char in "ok":
            key = events.Key(char, char)
            key.set_sender(app)
            assert app._driver is not None
            app._driver.send_message(key)
        await asyncio.wait_for(echoed.wait(), 10)
        assert not timer._active.is_set(), "the frame timer ran: the test proves nothing"
        assert prompt.value == "ok"
        # The echo's frame held the prompt alone: the reply's new words come on the timer's next tick.
        reply_drawn = asyncio.Event()
        display = app._display

        def noting_display(screen: Any, update: Any) -> None:
            display(screen, update)
            lines = [chop.values() for chop in getattr(update, "chops", [])]
            if any("more words" in "".join(strip.text for strip in line if strip is not None) for line in lines):
                reply_drawn.set()

        app._display = noting_display
        del timer.resume
        timer.resume()
        await asyncio.wait_for(reply_drawn.wait(), 10)

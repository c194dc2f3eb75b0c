"""Streaming replies: batched flushes, segments for long replies, code blocks cut only at line ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual.app import App
from textual.containers import VerticalScroll
from textual.selection import Selection

from app.surfaces.dashboard.app import CSS_FILE, late_still_fires
from dashboard_helpers import frame
from widgets._reply_markdown import FENCE_SPLIT_CHARS, FORCE_CHARS, SEGMENT_CHARS, cut_point, fence_reopening
from widgets.assistant_message import AssistantMessage


def test_cut_point_prefers_a_blank_line_and_never_cuts_a_code_block() -> None:
    assert cut_point(0, False, "short") is None
    text = "a" * SEGMENT_CHARS + "\n\nnext paragraph"
    assert text[: cut_point(0, False, text)].endswith("\n\n")
    fenced = "p" * (SEGMENT_CHARS - 10) + "\n\n```\n" + "code\n\n" * 20 + "```\n\nafter"
    cut = cut_point(0, False, fenced)
    assert cut is not None and fenced[:cut].count("```") == 2  # blank lines inside the block are not cuts
    one_paragraph = "word " * (FORCE_CHARS // 4)
    cut = cut_point(0, False, one_paragraph)
    assert cut is not None and FORCE_CHARS <= cut <= FORCE_CHARS + 5


def test_a_very_long_code_block_is_cut_at_a_line_end_and_reopened_with_its_language() -> None:
    block = "  ````python\n" + "value = compute(1)\n" * 3_000
    cut = cut_point(0, False, block)
    assert cut is not None and FENCE_SPLIT_CHARS <= cut <= FENCE_SPLIT_CHARS + 20
    assert block[:cut].endswith("\n")
    assert fence_reopening(block[:cut]) == ("  ````\n", "  ````python\n")
    assert cut_point(0, False, "```\n" + "x\n" * (FENCE_SPLIT_CHARS // 3)) is None  # long, but not that long
    # code is cut sooner than prose: the block being written is highlighted again on every flush
    assert FENCE_SPLIT_CHARS < SEGMENT_CHARS < FORCE_CHARS


def _code_lines(segments: list[str]) -> list[str]:
    """The lines inside code fences, across segments."""
    lines: list[str] = []
    for source in segments:
        inside = False
        for line in source.splitlines():
            if line.lstrip().startswith("```"):
                inside = not inside
            elif inside:
                lines.append(line)
    return lines


class Host(App):
    """An app with one reply: empty, to stream into, or recreated from ``text``."""

    CSS_PATH = str(CSS_FILE)

    def __init__(self, text: str = "") -> None:
        super().__init__()
        self.text = text

    def compose(self):
        yield AssistantMessage(self.text)


async def stream_all(pilot, text: str, step: int) -> AssistantMessage:
    """Stream ``text`` into the Host's reply in ``step``-character deltas and complete it."""
    message = pilot.app.query_one(AssistantMessage)
    for i in range(0, len(text), step):
        message.append_text(text[i : i + step])
    await message.finish()
    await pilot.pause()
    return message


async def test_a_long_streamed_reply_is_split_into_segments_without_losing_text() -> None:
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum " * 60 for i in range(60)]
    text = "\n\n".join(paragraphs) + "\n\n```python\n" + "x = 1\n" * 2_000 + "```\n"
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        message = await stream_all(pilot, text, 5)
        assert message.text == text
        assert message.segment_count > 5
        assert message.flushes < len(text) // 500  # batched, not one update per delta
        # prose is cut only between paragraphs; the code block's pieces are each a closed block
        assert all(s.endswith("\n\n") for s in message.segments if "```" not in s)
        assert _code_lines(message.segments) == ["x = 1"] * 2_000
        assert all(s.count("```") % 2 == 0 for s in message.segments)


async def test_a_reply_is_drawn_while_it_streams_not_only_when_it_ends() -> None:
    app = Host()
    async with app.run_test(size=(80, 20)) as pilot:
        message = app.query_one(AssistantMessage)
        for word in ("The ", "first ", "words ", "arrive."):
            message.append_text(word)
        for _ in range(20):  # the flush timer hands them over; finish() is never called here
            await pilot.pause()
            if message.flushes:
                break
        await pilot.pause()
        assert _drawn(message, 0, 1) == "The first words arrive."
        message.append_text(" More after a pause.")
        for _ in range(20):
            await pilot.pause()
            if message.flushes > 1:
                break
        await pilot.pause()
        assert _drawn(message, 0, 1) == "The first words arrive. More after a pause."


async def test_a_reply_goes_on_streaming_when_the_process_is_preempted_past_its_flush(preempted_clock: None) -> None:
    # A lost flush timer froze the reply until its end: later deltas saw a timer still set.
    app = Host()
    async with app.run_test(size=(80, 20)) as pilot:
        message = app.query_one(AssistantMessage)
        said = ""
        for words in ("The first words arrive.", " More after a pause.", " And the last."):
            message.append_text(words)
            said += words
            for _ in range(20):
                await pilot.pause()
                if _drawn(message, 0, 1) == said:
                    break
            assert _drawn(message, 0, 1) == said


async def test_recreated_from_its_text_it_shows_the_same_segments() -> None:
    text = "\n\n".join("para " * 400 for _ in range(10))
    app = Host(text)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        assert message.source == text and message.segment_count > 1


def _drawn(message: AssistantMessage, first: int, count: int) -> str:
    return "\n".join(message.render_line(y).text.rstrip() for y in range(first, first + count))


async def test_markdown_is_drawn_as_formatted_lines_with_one_blank_line_between_blocks() -> None:
    text = ("# Title\n\nSome **bold** and `code`.\n\n- first\n- second\n\n"
            "```python\ndef f():\n    return 1\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nEnd [link](https://x.org).")
    app = Host(text)
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        drawn = _drawn(message, 0, message.outer_size.height)
        assert drawn.splitlines()[:5] == ["Title", "", "Some bold and code.", "", " • first"]
        assert "**" not in drawn and "```" not in drawn and "|---" not in drawn
        assert " def f():" in drawn and "     return 1" in drawn
        assert "End link (https://x.org)." in drawn  # links as text: the conversation does not open them
        assert "\n\n\n" not in drawn
        assert message.outer_size.height == len(drawn.splitlines())


def _background_of(message: AssistantMessage, y: int, text: str) -> tuple[int, int, int]:
    (segment,) = [s for s in message.render_line(y) if s.text.strip() == text]
    assert segment.style is not None and segment.style.bgcolor is not None
    return segment.style.bgcolor.get_truecolor()


async def test_code_takes_the_theme_colours_and_a_theme_change_draws_the_reply_again() -> None:
    # Rich's own Markdown colours (inline code cyan on black, code blocks in monokai) ignore the
    # theme: on a light theme they were black boxes in a light conversation.
    app = Host("Some `inline` here.\n\n```python\nvalue = 1\n```")
    async with app.run_test(size=(60, 10)) as pilot:
        app.theme = "textual-dark"
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        dark_inline, dark_block = _background_of(message, 0, "inline"), _background_of(message, 2, "value")
        app.theme = "textual-light"
        await pilot.pause()
        light_inline, light_block = _background_of(message, 0, "inline"), _background_of(message, 2, "value")
        assert sum(dark_inline) < 3 * 80 and sum(dark_block) < 3 * 80  # dark boxes on the dark theme
        assert sum(light_inline) > 3 * 180 and sum(light_block) > 3 * 180  # light ones on the light theme
        renders = message.block_renders
        message.notify_style_update()  # as on hover or focus: the same theme, nothing rendered again
        await pilot.pause()
        assert message.block_renders == renders


async def test_a_mouse_selection_copies_the_text_as_drawn_and_is_shown() -> None:
    from textual.geometry import Offset
    from textual.selection import Selection

    app = Host("Some **bold** words.\n\n- first\n- second")
    async with app.run_test(size=(80, 20)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        plain = message.render_line(0)
        app.screen.selections = {message: Selection(Offset(5, 0), Offset(8, 2))}
        await pilot.pause()
        assert app.screen.get_selected_text() == "bold words.\n\n • first"
        marked = message.render_line(0)
        assert marked.text == plain.text and list(marked) != list(plain)  # same words, highlighted


async def test_a_long_reply_is_one_widget_whose_flushes_render_only_what_changed() -> None:
    from textual.containers import VerticalScroll

    class Scrolling(App):
        CSS_PATH = str(CSS_FILE)

        def compose(self):
            with VerticalScroll():
                yield AssistantMessage()

    # 40 short paragraphs show it as well as hundreds of long ones: rendering every block on each
    # flush would be ~flushes x paragraphs / 2 renders, ten times the bound below; each frame and
    # each render costs its characters.
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum " * 30 for i in range(40)]
    text = "\n\n".join(paragraphs) + "\n"
    app = Scrolling()
    async with app.run_test(size=(80, 20)) as pilot:
        scroller = app.query_one(VerticalScroll)
        scroller.anchor()
        message = app.query_one(AssistantMessage)
        for i in range(0, len(text), 200):
            message.append_text(text[i : i + 200])
            message._flush()  # one flush per delta here: each must render one or two blocks, not all
            await frame(pilot)
        assert message.source == text
        assert not message.children  # no widget per block: layout sees one widget
        assert message.block_renders <= message.flushes * 2 + len(paragraphs)
        height = message.outer_size.height
        assert "Paragraph 39" in _drawn(message, height - 10, 10)
        assert scroller.is_vertical_scroll_end  # anchored: the end is in view
        scroller.scroll_home(animate=False)
        await pilot.pause()
        assert _drawn(message, 0, 1).startswith("Paragraph 0:")
        # a narrower terminal: every block wrapped again at the new width, so the reply is longer
        await pilot.resize_terminal(60, 20)
        await pilot.pause()
        assert message.outer_size.height > height
        assert "Paragraph 0:" in _drawn(message, 0, 1) and len(message.render_line(1).text) == message.size.width


async def test_a_huge_streamed_code_block_stays_one_block_to_the_eye_and_each_segment_stays_small() -> None:
    # ~17 KB of code: seven pieces show the cut as well as fifty, each drawn line costs a render
    code = "".join(f"row_{i} = compute({i})\n" for i in range(750))
    text = "Here is the file:\n\n```python\n" + code + "```\n\nThat is all."
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        message = await stream_all(pilot, text, 400)
        sources = message.segments
        assert message.text == text  # what the model wrote is kept as written
        assert len(sources) >= 3
        assert max(len(source) for source in sources) <= FENCE_SPLIT_CHARS + 500
        assert all(source.count("```") % 2 == 0 for source in sources)  # every piece is a closed block
        assert all("```python" in source for source in sources[1:-1] if "```" in source)
        assert _code_lines(sources) == code.splitlines()  # no line lost, doubled or cut in two
        drawn = _drawn(message, 0, message.outer_size.height).splitlines()
        first = next(i for i, line in enumerate(drawn) if "row_0 = compute(0)" in line)
        last = next(i for i, line in enumerate(drawn) if "row_749 = compute(749)" in line)
        assert last - first == 749  # drawn as one block: no blank line where a piece ends

    restored = Host(text)
    async with restored.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        again = restored.query_one(AssistantMessage)
        assert _code_lines(again.segments) == code.splitlines()
        assert max(len(source) for source in again.segments) <= FENCE_SPLIT_CHARS + 500


# ------------------------------------------------------------------ a resize of a long reply


def _long_reply(paragraphs: int = 220) -> str:
    """Hundreds of blocks of different lengths (paragraphs, lists, headings), a code block cut in pieces
    half-way, and prose at the end (whose estimated heights are off by a line here and there).
    The paragraphs are one to six lines at 100 columns and the code block three pieces: what the
    tests count is blocks, and each character costs a render at every width."""
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split()
    code = "".join(f"row_{i} = compute({i}, k={i % 7})\n" for i in range(200))
    blocks: list[str] = []
    for i in range(paragraphs):
        if i == paragraphs // 2:
            blocks.append("```python\n" + code + "```")
        elif i % 25 == 0:
            blocks.append(f"## Part {i // 25}")
        elif i % 17 == 0:
            blocks.append("\n".join(f"- item {i}.{j}: " + " ".join(words[: 4 + 3 * j]) for j in range(4)))
        else:
            blocks.append(f"Paragraph {i}: " + " ".join(words[(i + j) % len(words)] for j in range(10 + (i * 37) % 70)))
    return "\n\n".join(blocks) + "\n\nThe end."


class ScrollingHost(App):
    """A reply in a scrolling container, as in the conversation; ``anchored``: its end kept in view."""

    CSS_PATH = str(CSS_FILE)

    def __init__(self, text: str, anchored: bool = False, theme: str = "textual-dark") -> None:
        super().__init__()
        self.text = text
        self.anchored = anchored
        self.theme = theme

    def compose(self):
        with VerticalScroll():
            yield AssistantMessage(self.text)

    def set_timer(self, *args: Any, **kwargs: Any) -> Any:
        return late_still_fires(super().set_timer(*args, **kwargs))  # (the resize debounce: as the dashboard)

    def on_mount(self) -> None:
        if self.anchored:
            self.query_one(VerticalScroll).anchor()


async def _settled(pilot: Any, message: AssistantMessage) -> None:
    """Return once every block is rendered at the reply's width and the screen has laid the reply
    out at its exact height (a loaded machine may take a few more frames for the second)."""
    try:
        await asyncio.wait_for(message.wait_rendered(), 30)  # (a hang's guard, not a speed bound)
    except TimeoutError:
        raise AssertionError(f"{message.estimated} blocks still wait to be rendered, and no slice is due") from None
    for _ in range(50):
        await pilot.pause()
        if message.size.height == message.line_count and message.estimated == 0:
            return
    raise AssertionError(f"laid out at {message.size.width}x{message.size.height}, the reply has"
                         f" {message.line_count} lines, {message.estimated} blocks estimated")


# What a fresh reply draws depends only on its text and size: the tests that compare against the
# same one (the long reply at 100x40) share it instead of rendering its 220 blocks each.
_FRESH: dict[tuple[str, tuple[int, int]], tuple[list[str], int, str]] = {}


async def _drawn_fresh(text: str, size: tuple[int, int]) -> tuple[list[str], int, str]:
    """What a reply newly made from ``text`` draws at ``size``: its lines, its height, a whole selection."""
    if (text, size) not in _FRESH:
        _FRESH[text, size] = await _draw_fresh(text, size)
    lines, height, selected = _FRESH[text, size]
    return list(lines), height, selected


async def _draw_fresh(text: str, size: tuple[int, int]) -> tuple[list[str], int, str]:
    app = ScrollingHost(text)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        await _settled(pilot, message)  # (laid out again once its scrollbar showed)
        lines = _drawn(message, 0, message.size.height).splitlines()
        selected = message.get_selection(Selection(None, None))
        assert selected is not None
        return lines, message.outer_size.height, selected[0]


def _first_frame_at_a_new_width(
    message: AssistantMessage, any_width: bool = False
) -> asyncio.Future[tuple[int, int, list[str]]]:
    """Resolved by the first frame that draws ``message`` at another width than now (``any_width``:
    the next frame): the blocks rendered by then (``block_renders``), the first line drawn, and the
    lines drawn (on screen)."""
    frame: asyncio.Future[tuple[int, int, list[str]]] = asyncio.get_running_loop().create_future()
    width = message.size.width
    render_lines = message.render_lines

    def spy(crop):
        strips = render_lines(crop)
        if (any_width or message.size.width != width) and not frame.done():
            frame.set_result((message.block_renders, crop.y, [strip.text.rstrip() for strip in strips]))
        return strips

    message.render_lines = spy  # type: ignore[method-assign]
    return frame


async def _resize_until_first_frame(
    pilot: Any, message: AssistantMessage, width: int, height: int = 40
) -> tuple[asyncio.Future[None], list[str]]:
    """Start a resize and return at its first frame (the resize itself may still be going on):
    the resize to await later, and the lines that frame drew."""
    frame = _first_frame_at_a_new_width(message)
    resizing = asyncio.ensure_future(pilot.resize_terminal(width, height))
    _, _, drawn = await frame
    return resizing, drawn


@pytest.mark.parametrize("anchored", [False, True], ids=["read-from-the-top", "anchored-at-the-end"])
async def test_a_resized_long_reply_renders_the_lines_in_view_for_the_frame_and_the_rest_after(anchored: bool) -> None:
    # Rendering every block again before the frame froze the UI for 0.7-1.7 s per resize step.
    text = _long_reply()
    expected, expected_height, _ = await _drawn_fresh(text, (100, 40))
    app = ScrollingHost(text, anchored)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        blocks = len(message.blocks)
        assert blocks > 200
        # The scroll bar's arrival narrowed the reply after its first frame: on a loaded machine
        # that pass may still be going; what is counted below starts when it is done.
        await _settled(pilot, message)
        before = message.block_renders
        frame = _first_frame_at_a_new_width(message)
        await pilot.resize_terminal(100, 40)
        rendered, first_line, drawn = await frame
        assert rendered - before <= 25  # the blocks in view and a margin, not all 220-odd
        assert len(drawn) == 40 if not anchored else len(drawn) == 39  # (the reply's margin line below it)
        if anchored:  # the reply's last lines, as rendered at 100 columns
            assert drawn == expected[-len(drawn):] and "The end." in drawn
        else:
            assert first_line == 0 and drawn == expected[: len(drawn)]

        await _settled(pilot, message)
        assert message.estimated == 0
        assert message.outer_size.height == expected_height  # the estimates are all gone
        assert _drawn(message, 0, message.size.height).splitlines() == expected
        assert message.block_renders - before == blocks  # each block rendered once at the new width


async def test_a_second_resize_during_the_background_work_ends_right_for_the_last_width() -> None:
    text = _long_reply()
    expected, expected_height, _ = await _drawn_fresh(text, (130, 40))
    app = ScrollingHost(text)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        first, _ = await _resize_until_first_frame(pilot, message, 100)
        assert message.estimated > 100  # most blocks still wait for the background
        second, drawn = await _resize_until_first_frame(pilot, message, 130)
        assert drawn == expected[: len(drawn)]
        await first
        await second
        await _settled(pilot, message)
        assert message.outer_size.height == expected_height
        assert _drawn(message, 0, message.size.height).splitlines() == expected


async def test_a_resized_reply_finishes_its_background_work_when_the_process_is_preempted(preempted_clock: None) -> None:
    # A lost slice timer left the reply at estimated heights for good, and wait_rendered hung.
    text = _long_reply()
    expected, _, _ = await _drawn_fresh(text, (100, 40))
    app = ScrollingHost(text)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        await pilot.resize_terminal(100, 40)
        await _settled(pilot, message)
        assert _drawn(message, 0, message.size.height).splitlines() == expected


async def test_a_selection_during_the_background_work_copies_the_whole_reply_as_drawn() -> None:
    text = _long_reply()
    _, _, expected = await _drawn_fresh(text, (100, 40))
    app = ScrollingHost(text)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        resizing, _ = await _resize_until_first_frame(pilot, message, 100)
        assert message.estimated > 100
        assert message.get_selection(Selection(None, None)) == (expected, "\n")
        assert message.estimated == 0  # (what was copied is what is drawn from now on)
        await resizing


async def test_a_reply_streamed_into_while_it_is_rendered_again_in_the_background_ends_right() -> None:
    text = _long_reply()
    more = "\n\n" + "\n\n".join(f"Streamed {i}: " + "more words here " * (5 + i) for i in range(20))
    expected, expected_height, _ = await _drawn_fresh(text + more, (100, 40))
    app = ScrollingHost(text, anchored=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        resizing, _ = await _resize_until_first_frame(pilot, message, 100)
        assert message.estimated > 100
        flushes = message.flushes
        before = message.block_renders
        for i in range(0, len(more), 97):
            message.append_text(more[i : i + 97])
            message.flush_now()
        # each flush rendered what it changed (the last block or two), not the blocks waiting
        assert message.block_renders - before <= 2 * (message.flushes - flushes)
        assert message.estimated > 100
        await resizing
        await _settled(pilot, message)
        assert message.text == text + more
        assert message.outer_size.height == expected_height
        assert _drawn(message, 0, message.size.height).splitlines() == expected


async def test_a_theme_change_draws_a_long_reply_again_from_the_lines_in_view_then_the_rest() -> None:
    text = _long_reply()
    fresh = ScrollingHost(text, theme="textual-light")
    async with fresh.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        message = fresh.query_one(AssistantMessage)
        await _settled(pilot, message)
        expected = [list(message.render_line(y)) for y in range(message.size.height)]
    app = ScrollingHost(text)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        await _settled(pilot, message)
        before = message.block_renders
        frame = _first_frame_at_a_new_width(message, any_width=True)
        app.theme = "textual-light"
        rendered, _, _ = await frame
        assert rendered - before <= 25  # the blocks in view and a margin, in the new colours
        await _settled(pilot, message)
        assert message.block_renders - before == len(message.blocks)
        assert [list(message.render_line(y)) for y in range(message.size.height)] == expected

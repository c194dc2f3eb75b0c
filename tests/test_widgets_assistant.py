"""Streaming replies: batched appends, segments for long replies, code blocks never cut."""

from __future__ import annotations

import asyncio

from textual.app import App

from app.dashboard.app import CSS_FILE
from widgets.assistant_message import (
    FENCE_SPLIT_CHARS,
    FORCE_CHARS,
    SEGMENT_CHARS,
    AssistantMessage,
    cut_point,
    fence_reopening,
)


def test_cut_point_prefers_a_blank_line_and_never_cuts_a_code_block() -> None:
    assert cut_point(0, False, "short") is None
    text = "a" * SEGMENT_CHARS + "\n\nnext paragraph"
    assert text[: cut_point(0, False, text)].endswith("\n\n")
    fenced = "```\n" + "code\n\n" * (SEGMENT_CHARS // 3) + "```\n\nafter"
    cut = cut_point(0, False, fenced)
    assert cut is not None and fenced[:cut].count("```") == 2  # cut after the block closed
    one_paragraph = "word " * (FORCE_CHARS // 4)
    cut = cut_point(0, False, one_paragraph)
    assert cut is not None and FORCE_CHARS <= cut <= FORCE_CHARS + 5


def test_a_very_long_code_block_is_cut_at_a_line_end_and_reopened_with_its_language() -> None:
    block = "  ````python\n" + "value = compute(1)\n" * 3_000
    cut = cut_point(0, False, block)
    assert cut is not None and FENCE_SPLIT_CHARS <= cut <= FENCE_SPLIT_CHARS + 20
    assert block[:cut].endswith("\n")
    assert fence_reopening(block[:cut]) == ("  ````\n", "  ````python\n")
    assert cut_point(0, False, "```\n" + "x\n" * (FORCE_CHARS // 2)) is None  # long, but not that long


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
        assert message.source == text
        assert message.segment_count > 5
        assert message.appends < len(text) // 5  # batched, not one append per delta
        # the code block sits whole in one segment
        assert sum(1 for seg in message.query(".assistant-segment") if "```python" in seg.source) == 1
        fence_segment = next(seg for seg in message.query(".assistant-segment") if "```python" in seg.source)
        assert fence_segment.source.count("```") == 2


async def test_recreated_from_its_text_it_shows_the_same_segments() -> None:
    text = "\n\n".join("para " * 400 for _ in range(10))
    app = Host(text)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        message = app.query_one(AssistantMessage)
        assert message.source == text and message.segment_count > 1


async def test_a_reply_completing_while_its_flush_timer_fires_is_drawn_whole_and_the_app_keeps_running() -> None:
    # The flush timer and finish() (the reply's completion, handled by the App) can run at
    # the same moment. Before flushes were serialised, finish() stopped the Markdown stream
    # the timer had just started, whose task had not run yet: stop() then raised
    # CancelledError, which ends the message loop of whoever awaited it (the App: it quits).
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for round_ in range(20):
            message = AssistantMessage()
            await app.mount(message)
            text = f"Reply {round_}: the **answer** is here."
            message.append_text(text)
            timer_flush = asyncio.create_task(message._flush())  # the timer fires ...
            await asyncio.sleep(0)  # ... and is inside its first append
            await message.finish()  # ... when the completion arrives
            await timer_flush
            await pilot.pause()
            assert app.is_running
            assert message.source == text
            assert "answer" in "".join(block.source or "" for block in message.blocks)


async def test_stopping_a_stream_whose_task_never_ran_does_not_cancel_the_caller() -> None:
    from textual.widgets import Markdown

    from widgets.assistant_message import stop_stream

    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        markdown = Markdown()
        await app.mount(markdown)
        stream = Markdown.get_stream(markdown)
        await stop_stream(stream)  # plain stream.stop() raises CancelledError here
        await markdown.append("still *usable*")
        await pilot.pause()
        assert app.is_running and "usable" in markdown.source


async def test_a_long_reply_parks_segments_far_from_view_and_draws_them_again_when_scrolled_to() -> None:
    from textual.containers import VerticalScroll

    from widgets.assistant_message import ParkedSegment

    class Scrolling(App):
        CSS_PATH = str(CSS_FILE)

        def compose(self):
            with VerticalScroll():
                yield AssistantMessage()

    paragraphs = [f"Paragraph {i}: " + "lorem ipsum " * 60 for i in range(120)]
    text = "\n\n".join(paragraphs) + "\n"
    app = Scrolling()
    async with app.run_test(size=(120, 40)) as pilot:
        scroller = app.query_one(VerticalScroll)
        scroller.anchor()
        message = app.query_one(AssistantMessage)
        for i in range(0, len(text), 200):
            message.append_text(text[i : i + 200])
        await message.finish()
        for _ in range(10):
            await pilot.pause()
        assert message.source == text
        # far above the view: parked, so the mounted widgets do not grow with the reply
        assert message.segment_count > 12 and message.segment_count - message.parked_count <= 6
        widgets_at_the_end = len(list(message.walk_children()))
        assert "Paragraph 119" in message.blocks[-1].source
        height = message.outer_size.height
        scroller.scroll_home(animate=False)
        for _ in range(10):
            await pilot.pause()
        # the top is drawn again, the end parked; nothing moved
        assert message.blocks and "Paragraph 0:" in (message.blocks[0].source or "")
        assert message.outer_size.height == height
        assert len(list(message.walk_children())) < widgets_at_the_end * 2
        segments = list(message.query_children(".assistant-segment"))
        assert not isinstance(segments[0], ParkedSegment) and isinstance(segments[-2], ParkedSegment)
        # a narrower terminal: parked heights were measured at the old width, so they are
        # measured again (the reply would otherwise leave gaps or overlap when scrolled)
        await pilot.resize_terminal(80, 40)
        for _ in range(10):
            await pilot.pause()
        width = message.outer_size.width
        parked = [s for s in message.query_children(".assistant-segment") if isinstance(s, ParkedSegment)]
        assert parked and all(s.parked_width == width for s in parked)
        assert message.outer_size.height > height  # narrower: longer


async def test_a_huge_streamed_code_block_stays_one_block_to_the_eye_and_each_segment_stays_small() -> None:
    code = "".join(f"row_{i} = compute({i})\n" for i in range(5_000))  # ~120 KB of code
    text = "Here is the file:\n\n```python\n" + code + "```\n\nThat is all."
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        message = await stream_all(pilot, text, 400)
        sources = [seg.source for seg in message._segments]
        assert message.text == text  # what the model wrote is kept as written
        assert len(sources) >= 3
        assert max(len(source) for source in sources) <= FENCE_SPLIT_CHARS + 500
        assert all(source.count("```") % 2 == 0 for source in sources)  # every piece is a closed block
        assert all("```python" in source for source in sources[1:-1] if "```" in source)
        assert _code_lines(sources) == code.splitlines()  # no line lost, doubled or cut in two

    restored = Host(text)
    async with restored.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        again = restored.query_one(AssistantMessage)
        assert _code_lines([seg.source for seg in again._segments]) == code.splitlines()
        assert max(len(seg.source) for seg in again._segments) <= FENCE_SPLIT_CHARS + 500

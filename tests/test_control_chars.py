"""Control characters from the model are drawn cheaply: 1 MB of BEL in a reply leaves the dashboard responsive.

Each BEL used to become a 4-character ``\\x07`` stand-in (a Markdown token for every
backslash) in one segment that never ended (no line or word break to cut at), parsed
again whole on every flush: a key typed meanwhile echoed after 33 s, at 785 MB.
"""

from __future__ import annotations

import time

import psutil
import pytest
from textual.app import App
from textual.widgets import Input

from app.surfaces.dashboard.app import CSS_FILE
from dashboard_helpers import frame
from app.kernel.sanitize import sanitize_for_display, sanitize_for_model
from widgets._reply_markdown import FORCE_CHARS, HARD_CHARS, cut_point
from widgets.assistant_message import AssistantMessage

MEGABYTE = 1024 * 1024
DELTA = 4096  # characters a streamed delta holds
DELTAS_PER_PAUSE = 8  # a flush is drawn this often, as the flush timer spaces them in a live stream
# Streaming 1 MB of controls may cost at most this many times what 1 MB of letters costs (it was >100x).
COST_FACTOR = 4


def test_a_run_of_one_control_character_is_shown_once_with_its_count() -> None:
    shown = sanitize_for_display("ring" + "\x07" * MEGABYTE + "done")
    assert shown == "ring\\x07\u00d71048576done"
    assert sanitize_for_display("a\x07\x07\x07b") == "a\\x07\\x07\\x07b"  # short runs: one stand-in each
    assert sanitize_for_display("\x1b" * 10 + "\x9b" * 5) == "\\x1b\u00d710\\x9b\u00d75"  # bare ESC, C1 CSI
    assert sanitize_for_model("\x07" * 5) == "\\x07" * 5  # the model still gets every character


def test_a_long_run_of_mixed_control_characters_is_shown_as_its_first_few_and_their_number() -> None:
    mixed = "\x00\x07\x9b\x1b\x01\x7f" * 50_000
    shown = sanitize_for_display("<" + mixed + ">")
    assert shown == "<\\x00\\x07\\x9b\\x1b\\x01\\x7f\\x00\\x07\u2026[300000 control characters]>"
    assert sanitize_for_display(shown) == shown  # nothing left to replace


def test_a_segment_with_no_line_or_word_break_is_cut_past_the_hard_limit() -> None:
    endless = "x" * (3 * HARD_CHARS)
    assert cut_point(0, False, endless) == HARD_CHARS
    assert cut_point(HARD_CHARS - 10, False, "y" * 20) == 10  # streamed: the segment ends at the limit
    assert cut_point(0, False, "w" * (FORCE_CHARS + 10) + " tail") == FORCE_CHARS + 11  # a break still wins


class _ReplyAndPrompt(App):
    CSS_PATH = str(CSS_FILE)

    def compose(self):
        yield AssistantMessage()
        yield Input(id="prompt")


async def _stream(text: str, budget: float | None) -> tuple[float, str, str, str, int]:
    """Stream ``text`` into a reply as a live stream would, then type a key in the prompt.

    Returns (CPU seconds spent streaming, the reply's text, its first line as drawn, the
    prompt's value, RSS growth in bytes). Gives up with an AssertionError once streaming has cost more than ``budget``.
    """
    app = _ReplyAndPrompt()
    process = psutil.Process()
    async with app.run_test(size=(100, 30)) as pilot:
        message = app.query_one(AssistantMessage)
        app.query_one(Input).focus()
        await pilot.pause()
        rss_before = process.memory_info().rss
        started = time.process_time()
        for count, start in enumerate(range(0, len(text), DELTA)):
            message.append_text(text[start : start + DELTA])
            if count % DELTAS_PER_PAUSE == 0:
                # A flush and its frame, as a live stream's flush timer makes them (about one per
                # eight deltas here), without waiting out the timer's interval in wall time.
                message.flush_now()
                await frame(pilot)
                spent = time.process_time() - started
                if budget is not None and spent > budget:
                    raise AssertionError(
                        f"streaming {start} of {len(text)} characters already took {spent:.1f} CPU s, "
                        f"more than {COST_FACTOR}x the {budget / COST_FACTOR:.1f} s of plain text "
                        f"({message.segment_count} segments, {message.block_renders} block renders)")
        await pilot.press("k")
        spent = time.process_time() - started
        await message.finish()
        await pilot.pause()
        return (spent, message.text, message.render_line(0).text, app.query_one(Input).value,
                process.memory_info().rss - rss_before)


@pytest.mark.timeout(60)  # the code before this change spent minutes in markdown-it here
async def test_a_megabyte_of_bel_streams_at_the_cost_of_plain_text_and_a_key_still_echoes() -> None:
    plain_cost, *_ = await _stream("a" * MEGABYTE, None)
    _, text, drawn, typed, rss_growth = await _stream("\x07" * MEGABYTE, max(COST_FACTOR * plain_cost, 1.0))
    assert typed == "k"
    assert rss_growth < 200 * MEGABYTE, f"RSS grew by {rss_growth / MEGABYTE:.0f} MB"
    assert text == "\x07" * MEGABYTE  # kept as received; only the drawing is collapsed
    assert "\\x07\u00d7" in drawn and "\x07" not in drawn, drawn[:80]


async def test_an_endless_line_in_a_code_block_is_cut_into_bounded_segments_each_a_closed_block() -> None:
    app = _ReplyAndPrompt()
    async with app.run_test(size=(100, 30)) as pilot:
        message = app.query_one(AssistantMessage)
        text = "```\n" + "\x07" * 20_000 + "y" * 3 * HARD_CHARS + "\n```\n\nafter"
        for start in range(0, len(text), DELTA):
            message.append_text(text[start : start + DELTA])
        await message.finish()
        await pilot.pause()
        segments = message.segments
        assert len(segments) > 3 and max(map(len, segments)) <= HARD_CHARS + 16, [len(s) for s in segments]
        for source in segments:  # each piece a closed code block: the fence closes on a line of its own
            fences = [line for line in source.splitlines() if "```" in line]
            assert len(fences) % 2 == 0 and all(line.strip() == "```" for line in fences), fences
        drawn = [message.render_line(y).text for y in range(message.line_count)]
        assert not any("```" in line for line in drawn)
        assert drawn[-1].strip() == "after"

"""Hostile output: escape sequences never survive, control characters become visible, markup stays literal."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from app.kernel.sanitize import decode_bytes, sanitize_for_display, sanitize_for_model

# Anything a terminal could act on: ESC, other C0 controls (not \t, \n), DEL, C1.
_ACTIONABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("hostile", "safe"),
    [
        ("\x1b[1;31mERROR\x1b[0m: failed", "ERROR: failed"),  # colours
        ("\x1b[38;5;208morange\x1b[39m", "orange"),
        ("\x1b]0;pwned title\x07after", "after"),  # OSC 0 title, BEL-terminated
        ("\x1b]2;title\x1b\\after", "after"),  # ST-terminated
        ("\x1b]52;c;ZWNobyBwd25lZCA+PiB+Ly5iYXNocmM=\x07text", "text"),  # OSC 52 clipboard write
        ("\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\", "link"),  # hyperlink
        ("a\x1b[2J\x1b[H\x1b[10;20Hb\x1b[3Ac\x1b[?25l", "abc"),  # clear, cursor moves, hide cursor
        ("x\x1b7y\x1b8z\x1bc", "xyz"),  # save/restore cursor, full reset
        ("\x1bP1$qm\x1b\\done", "done"),  # DCS
        ("\x1b]0;unterminated title\nnext line", "\nnext line"),  # swallowed only to the line end
        ("bell\x07 nul\x00 bs\x08 del\x7f", "bell\\x07 nul\\x00 bs\\x08 del\\x7f"),
        ("lone escape\x1b", "lone escape\\x1b"),
        ("\x1b\n", "\\x1b\n"),
        ("c1 \x9b31m csi", "c1 \\x9b31m csi"),  # 8-bit CSI cannot start a sequence
        ("tabs\tand\nnewlines\n", "tabs\tand\nnewlines\n"),
        ("windows\r\nlines\r\n", "windows\nlines\n"),
        ("progress 10%\rprogress 50%\rprogress 100%\ndone", "progress 100%\ndone"),
        ("spinner |\r", "spinner |"),
        ("[bold red]not markup[/] [link=http://x]y[/link]", "[bold red]not markup[/] [link=http://x]y[/link]"),
        ("中文日志 ✓", "中文日志 ✓"),
    ],
)
def test_sanitize_for_model(hostile: str, safe: str) -> None:
    assert sanitize_for_model(hostile) == safe


def test_invalid_utf8_is_replaced_never_raised() -> None:
    assert decode_bytes(b"ok \xff\xfe \xe4\xb8") == "ok \ufffd\ufffd \ufffd"
    assert decode_bytes("数据".encode()) == "数据"


def test_display_keeps_markup_literal_and_executes_nothing() -> None:
    hostile = "[bold]loud[/bold] \x1b]52;c;cHduZWQ=\x07[link=file:///etc/passwd]x[/link]\x1b[31m"
    shown = sanitize_for_display(hostile)
    assert shown == "[bold]loud[/bold] [link=file:///etc/passwd]x[/link]"
    console = Console(record=True, width=200, force_terminal=True, color_system=None)
    console.print(Text(shown))  # how the dashboard renders it: plain Text, no markup
    assert console.export_text().rstrip("\n") == shown


def test_display_defuses_bidi_overrides() -> None:
    assert sanitize_for_display("access\u202e level") == "access\\u202e level"
    assert sanitize_for_model("access\u202e level") == "access\u202e level"  # the model sees it as is


@given(st.text(alphabet=st.sampled_from(list("ab\x1b[];\x07\\\r\n\t\x00\x9b0P")) | st.characters(), max_size=200))
def test_nothing_actionable_survives_and_sanitizing_twice_changes_nothing(text: str) -> None:
    once = sanitize_for_model(text)
    assert not _ACTIONABLE.search(once)
    assert "\r" not in once
    assert sanitize_for_model(once) == once
    assert not _ACTIONABLE.search(sanitize_for_display(text))


def _best_time(func, arg: str) -> float:
    """The CPU time of this thread, not the clock's: on a loaded machine a long call is preempted
    many times where a short one may run whole, which made a linear cost read as far more."""
    best = float("inf")
    for _ in range(5):
        started = time.thread_time()
        func(arg)
        best = min(best, time.thread_time() - started)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "2026-10-18 12:00:00 INFO request handled id=1\n",  # the 15 MB log's shape
        "\x1b[32mok\x1b[0m \x1b]0;t\x07",  # escapes everywhere
        "x" * 50 + "\r",  # one endless progress line
        "\x1b]" + "y" * 30,  # unterminated OSCs on one line
        "\x00\x07",  # nothing but controls
    ],
)
def test_cost_grows_linearly(unit: str) -> None:
    """16x the input costs about 16x (shared machines make it noisy), never 256x (quadratic)."""
    # Plain ASCII takes the bytes.translate shortcut: at 250 KB it runs inside the CPU's cache and
    # 16x that does not, about 40x the time for no quadratic reason, so it starts at 1 MB.
    plain = all(c in "\t\n" or " " <= c <= "~" for c in unit)
    small = unit * ((1_000_000 if plain else 250_000) // len(unit))
    large = small * 16
    assert _best_time(sanitize_for_display, large) < 100 * _best_time(sanitize_for_display, small)


def _by_regex_only(text: str, for_display: bool) -> str:
    """The sanitizers without their plain-ASCII shortcut: every character through the regexes."""
    from app.kernel import sanitize

    text = sanitize._strip_escapes(text)
    if not for_display:
        return sanitize._CONTROL_RUN.sub(sanitize._escape_controls, text)
    text = sanitize.scrub_surrogates(sanitize._CONTROL_RUN.sub(sanitize._escape_control_run, text))
    return sanitize._BIDI_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@given(st.text(alphabet=st.sampled_from([chr(c) for c in range(0x80)] + ["\u202e", "\x9b", "\ud800", "é"]),
               max_size=120))
def test_the_plain_ascii_shortcut_changes_nothing_the_regexes_would_do(text: str) -> None:
    # Plain ASCII text skips the regexes (ten times faster on a big log); anything else, a control
    # character, a bidi override, a lone surrogate, must still come out as they make it.
    assert sanitize_for_model(text) == _by_regex_only(text, for_display=False)
    assert sanitize_for_display(text) == _by_regex_only(text, for_display=True)

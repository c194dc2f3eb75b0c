"""Make hostile text safe: for the model (plain text) and for the terminal (nothing executes).

Tool output and model text may carry ANSI/OSC/DCS escape sequences (colours,
title changes, OSC 52 clipboard writes, cursor moves), other control
characters, NUL bytes and invalid UTF-8. Escape sequences are stripped (they
only style or move things); every other control character becomes a visible
escape like ``\\x07`` so nothing silently changes meaning. Everything here is a
handful of compiled regexes with fast paths, so a 15 MB output costs little.
"""

from __future__ import annotations

import re

# One alternation, every branch starting with ESC (7-bit) so the regex engine
# scans for a literal prefix. Unterminated OSC/DCS strings end at a newline:
# a terminal would swallow text up to the terminator, we keep the rest visible.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b(?:"
    r"\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase, modes
    r"|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks, OSC 52 clipboard
    r"|[PX^_][^\x07\x1b\n]*(?:\x1b\\|\x07)?"  # DCS, SOS, PM, APC strings
    r"|[ -/]*[0-~]"  # two-byte escapes: ESC 7/8 save cursor, ESC c reset, ESC ( B
    r")"
)

# C0 controls except \t and \n (\r is handled before), DEL, and the C1 range
# (U+0080-U+009F: 8-bit CSI/OSC/DCS for terminals that honour them).
_CONTROL_RUN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]+")
_CONTROL_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)]}

# On the screen a run of one control character repeated is drawn once with its count
# (``\\x07×1048576``), and a long run of mixed ones as its first few and their number: 1 MB
# of BEL in a reply was 4 MB of stand-ins, a Markdown token for each backslash, and froze the
# dashboard. Shorter runs keep one stand-in per character.
_REPEATED_CONTROL = re.compile(r"([\x00-\x08\x0b-\x1f\x7f-\x9f])\1{3,}")
_SHOWN_OF_A_MIXED_RUN = 8


def _count_repeats(match: re.Match[str]) -> str:
    return f"{_CONTROL_ESCAPES[ord(match.group(1))]}\u00d7{len(match.group())}"


def _escape_control_run(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) < 4:
        return run.translate(_CONTROL_ESCAPES)
    if run.count(run[0]) == len(run) or len(run) <= 2 * _SHOWN_OF_A_MIXED_RUN:
        return _REPEATED_CONTROL.sub(_count_repeats, run).translate(_CONTROL_ESCAPES)
    shown = run[:_SHOWN_OF_A_MIXED_RUN].translate(_CONTROL_ESCAPES)
    return f"{shown}\u2026[{len(run)} control characters]"


# Bidirectional overrides can make displayed text read differently from what it
# is ("Trojan Source"); shown as escapes on the terminal only.
_BIDI_CONTROL = re.compile(r"[\u202a-\u202e\u2066-\u2069]")


def decode_bytes(data: bytes) -> str:
    """UTF-8 with invalid bytes replaced by U+FFFD; never raises."""
    return data.decode("utf-8", errors="replace")


def _collapse_carriage_returns(text: str) -> str:
    """CRLF -> LF; a line redrawn with lone CRs (progress bars) keeps its last drawing."""
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line:
            # What a terminal ends up showing is (roughly) the last non-empty redraw.
            segments = [s for s in line.split("\r") if s]
            lines[i] = segments[-1] if segments else ""
    return "\n".join(lines)


def _escape_controls(match: re.Match[str]) -> str:
    return match.group().translate(_CONTROL_ESCAPES)


def _strip_escapes(text: str) -> str:
    if "\x1b" in text:
        text = _ESCAPE_SEQUENCE.sub("", text)
    if "\r" in text:
        text = _collapse_carriage_returns(text)
    return text


# Plain ASCII: printable, tab and newline. ``bytes.translate`` deletes these in C at memory speed;
# whatever is left is a control character. The regexes below scan a character at a time, about
# ten times slower: a 5 MB log took 0.28 s to find no control character, 0.17 s more to find no
# bidi override, and most tool output is plain ASCII.
_PLAIN_ASCII = bytes([0x09, 0x0A, *range(0x20, 0x7F)])


def _plain_ascii(text: str) -> bool:
    """Nothing to make visible: ASCII (so no bidi override, no lone surrogate), no control character."""
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_ASCII)


def sanitize_for_model(text: str) -> str:
    """Strip escape sequences, normalise CRs, and make other control characters visible."""
    text = _strip_escapes(text)
    if _plain_ascii(text):
        return text
    return _CONTROL_RUN.sub(_escape_controls, text)


def sanitize_for_display(text: str) -> str:
    """Like :func:`sanitize_for_model`, and also defuse bidi overrides; a run of one control
    character repeated 4 times or more is one stand-in and its count (``\\x07×5000``), a run of
    more than 16 mixed ones its first 8 and their number (``\\x00\\x07…[5000 control characters]``).

    The result is meant for plain ``rich.text.Text`` (never markup parsing), so
    ``[bold]`` or ``[link=...]`` stay literal characters.
    """
    text = _strip_escapes(text)
    if _plain_ascii(text):
        return text
    text = scrub_surrogates(_CONTROL_RUN.sub(_escape_control_run, text))  # a terminal cannot be sent a lone surrogate
    return _BIDI_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# A lone surrogate: what a JSON "\ud800" escape or an undecodable byte of a file name
# (os.fsdecode's surrogateescape, U+DC80-U+DCFF) becomes. Such a str cannot be UTF-8.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _surrogate_stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    # an undecodable byte from the file system keeps its value, visibly: caf\xe9
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def scrub_surrogates(text: str) -> str:
    """Text that encodes as UTF-8: an escaped byte (``\\xe9``) or U+FFFD for each lone surrogate."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_surrogate_stand_in, text)


def scrub_surrogates_obj(value: object) -> object:
    """``scrub_surrogates`` over every string (keys included) of JSON-like data."""
    if isinstance(value, str):
        return scrub_surrogates(value)
    if isinstance(value, dict):
        return {scrub_surrogates_obj(k): scrub_surrogates_obj(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_surrogates_obj(v) for v in value]
    return value

"""The SSE decoder: framing rules, chunks split anywhere, and Retry-After parsing."""

from __future__ import annotations

import email.utils
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from app.providers.sse import SSEDecoder, SSEEvent, decode_sse, parse_retry_after


def feed_bytewise(data: bytes) -> list[SSEEvent]:
    return decode_sse(data[i:i + 1] for i in range(len(data)))


def test_event_and_data_lines_make_one_event_per_blank_line() -> None:
    stream = b'event: message_start\ndata: {"a": 1}\n\nevent: ping\ndata: {}\n\n'
    assert decode_sse([stream]) == [SSEEvent("message_start", '{"a": 1}'), SSEEvent("ping", "{}")]


def test_without_event_line_the_type_is_message() -> None:
    assert decode_sse([b"data: [DONE]\n\n"]) == [SSEEvent("message", "[DONE]")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode_sse([b"data: first\ndata: second\ndata:third\n\n"]) == [SSEEvent("message", "first\nsecond\nthird")]


def test_comment_lines_are_ignored() -> None:
    stream = b": keep-alive\n\ndata: x\n: another comment\n\n: keep-alive\n\n"
    assert decode_sse([stream]) == [SSEEvent("message", "x")]


def test_crlf_and_lone_cr_line_endings() -> None:
    assert decode_sse([b"event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\r"]) == [
        SSEEvent("a", "1"), SSEEvent("b", "2")]


def test_crlf_split_between_chunks_is_one_line_end_not_two() -> None:
    # were "\r" and "\n" counted apart, the empty "line" between them would dispatch "a" early
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"\n\r\n") == [SSEEvent("message", "a\nb")]


def test_utf8_character_split_across_chunks_arrives_whole() -> None:
    data = 'data: {"text": "上下文窗口 ✓ 🌊"}\n\n'.encode()
    events = feed_bytewise(data)
    assert events == [SSEEvent("message", '{"text": "上下文窗口 ✓ 🌊"}')]


def test_only_one_space_after_the_colon_is_stripped() -> None:
    assert decode_sse([b"data:  two spaces\n\n"]) == [SSEEvent("message", " two spaces")]


def test_an_event_with_no_data_is_not_dispatched() -> None:
    assert decode_sse([b"event: ping\n\nevent: x\ndata:\n\n"]) == [SSEEvent("x", "")]


def test_last_event_without_blank_line_still_counts() -> None:
    assert decode_sse([b"data: [DONE]\n"]) == [SSEEvent("message", "[DONE]")]


def test_a_last_line_without_newline_is_dispatched_marked_unterminated() -> None:
    # the SDKs accept a final event with no newline at EOF; whether it is whole (it parses)
    # or cut mid-line is for the assembler to judge, so the decoder says which it was
    assert decode_sse([b'data: {"a": 1}\n\ndata: {"cut mid-li']) == [
        SSEEvent("message", '{"a": 1}'), SSEEvent("message", '{"cut mid-li', unterminated=True)]
    assert decode_sse([b"event: message_stop\ndata: {}"]) == [SSEEvent("message_stop", "{}", unterminated=True)]


def test_byte_order_mark_at_start_is_skipped() -> None:
    assert decode_sse(["\ufeffdata: x\n\n".encode()]) == [SSEEvent("message", "x")]


def test_id_field_is_kept() -> None:
    assert decode_sse([b"id: 7\ndata: x\n\n"]) == [SSEEvent("message", "x", id="7")]


# ---- property: any chunking of a valid stream decodes to the same events ----

_line_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30)  # type: ignore[arg-type]
_event_name = st.one_of(st.none(), st.text("abcdefghij_", min_size=1, max_size=12))
_events = st.lists(st.tuples(_event_name, st.lists(_line_text, min_size=1, max_size=3)), max_size=6)


def _serialize(events: list[tuple[str | None, list[str]]], newlines: list[str], comments: bool) -> bytes:
    out: list[str] = []
    k = 0
    previous = ""

    def nl() -> str:
        nonlocal k, previous
        k += 1
        chosen = newlines[k % len(newlines)]
        if previous == "\r" and chosen == "\n":
            chosen = "\r\n"  # "\r" then "\n" would read as ONE line end (CRLF)
        previous = chosen
        return chosen

    for name, lines in events:
        if comments:
            out.append(": keep-alive" + nl())
        if name:
            out.append(f"event: {name}" + nl())
        for line in lines:
            out.append(f"data: {line}" + nl())
        out.append(nl())
    return "".join(out).encode("utf-8")


@settings(max_examples=100)
@given(
    events=_events,
    newlines=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=4),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_any_chunking_gives_the_same_events(events, newlines, comments, cuts) -> None:
    data = _serialize(events, newlines, comments)
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0] + points, points + [len(data)])]
    expected = [SSEEvent(name or "message", "\n".join(lines)) for name, lines in events]
    assert decode_sse([data]) == expected
    assert decode_sse(chunks) == expected


# ---- Retry-After ----

def test_retry_after_in_seconds() -> None:
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5


def test_retry_after_as_http_date_counts_from_now() -> None:
    now = 1_800_000_000.0
    header = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": header}, now=now) == 30.0
    # a date in the past means "now"
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0


def test_retry_after_ms_wins_and_garbage_is_ignored() -> None:
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_retry_after_date_without_injected_clock_uses_the_real_one() -> None:
    header = email.utils.formatdate(time.time() + 120, usegmt=True)
    value = parse_retry_after({"retry-after": header})
    assert value is not None and 60 < value <= 120

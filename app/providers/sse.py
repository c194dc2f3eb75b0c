"""Server-sent events: an incremental decoder, the thin httpx transport under the providers, and
what every protocol's stream assembler does first and last (read an event's JSON, judge a cut stream).

The decoder follows the WHATWG event-stream rules: lines end in ``\\n``,
``\\r\\n`` or ``\\r``; ``data:`` lines accumulate (joined by ``\\n``); a blank
line dispatches; lines starting with ``:`` are comments (``: keep-alive``).
Chunks may be split anywhere, including inside a CRLF pair or a UTF-8
multibyte character.

One leniency: at end of stream, an event that lacked the final blank line is
still dispatched (some servers end with ``data: [DONE]\\n``, others with no
newline at all after the last line, which the official SDKs accept). An event
whose last line had no newline is marked ``unterminated``: it may be cut
mid-line, so the assemblers accept it only when it parses. Whether the stream
*ended properly* is for the protocol assemblers to judge, not the decoder.
"""

from __future__ import annotations

import asyncio
import codecs
import dataclasses
import email.utils
import json
import time
import zlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, TypeVar

import httpx

from app.providers.base import (MAX_RETRY_AFTER, APIError, ConnectError, ContextTooLongError, ProviderError,
                                StreamCutError)
from app.providers.json_fields import fix_surrogate_escapes, json_object
from app.providers.too_long import parse_too_long
from app.kernel.sanitize import scrub_surrogates_obj


# Defaults of the stream limits (Settings carries the user's values; see StreamLimits).
DEFAULT_MAX_SSE_LINE = 8 * 1024 * 1024  # one SSE line / one event's data, in characters
DEFAULT_MAX_BODY = 64 * 1024 * 1024  # a whole non-streamed body, after decompression
DEFAULT_MAX_REPLY_CHARS = 32 * 1024 * 1024  # text + thinking + tool arguments of one reply
DEFAULT_REQUEST_DEADLINE = 900.0  # seconds for one model call, first byte to last


@dataclass(frozen=True)
class StreamLimits:
    """What one model call may cost at most: a server cannot make it use unbounded memory or time."""

    max_sse_line: int = DEFAULT_MAX_SSE_LINE
    max_body: int = DEFAULT_MAX_BODY
    max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS
    deadline_s: float = DEFAULT_REQUEST_DEADLINE

    @classmethod
    def from_settings(cls, settings: Any) -> "StreamLimits":
        return cls(max_sse_line=settings.max_sse_line, max_body=settings.max_response_body,
                   max_reply_chars=settings.max_reply_chars, deadline_s=settings.request_deadline)


class LimitExceededError(ProviderError):
    """The server sent more than a limit allows (a line, a body, a reply): retrying would do it again."""

    retryable = False


class DeadlineError(ProviderError):
    """The model call took longer than the total deadline (keep-alives do not extend it)."""

    retryable = False


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" when the server sent no ``event:`` line
    data: str
    id: str | None = None
    # The stream ended inside this event's last line (no newline at EOF): complete
    # only if its data parses.
    unterminated: bool = False

    def json(self) -> Any:
        return json.loads(self.data)


class SSEDecoder:
    """Feed it chunks (bytes or str) as they arrive; it returns the events completed so far."""

    def __init__(self, max_line: int | None = DEFAULT_MAX_SSE_LINE) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # The unterminated end of the stream, in pieces: one huge line arriving in many
        # chunks is joined once, when its end comes (linear, not quadratic).
        self._partial: list[str] = []
        self._partial_len = 0
        self._max_line = max_line
        self._data_len = 0
        self._pending_cr = False  # last chunk ended in "\r": a following "\n" belongs to it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self._id: str | None = None

    def feed(self, chunk: bytes | str) -> list[SSEEvent]:
        text = self._utf8.decode(chunk) if isinstance(chunk, (bytes, bytearray)) else chunk
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._pending_cr:
            self._pending_cr = False
            if text.startswith("\n"):
                text = text[1:]
        if "\n" not in text and "\r" not in text:
            self._partial.append(text)
            self._partial_len += len(text)
            self._check(self._partial_len + self._data_len)
            return []
        events: list[SSEEvent] = []
        buf = "".join(self._partial) + text if self._partial else text
        self._partial.clear()
        self._partial_len = 0
        n = len(buf)
        start = 0
        # find() over the buffer, keeping each terminator's next position: linear in the chunk
        lf = buf.find("\n")
        cr = buf.find("\r")
        while lf >= 0 or cr >= 0:
            if cr < 0 or (0 <= lf < cr):
                end, nxt = lf, lf + 1
            elif cr + 1 < n:
                end, nxt = cr, (cr + 2 if buf[cr + 1] == "\n" else cr + 1)
            else:
                end, nxt = cr, cr + 1
                self._pending_cr = True
            self._line(buf[start:end], events)
            start = nxt
            if 0 <= lf < start:
                lf = buf.find("\n", start)
            if 0 <= cr < start:
                cr = buf.find("\r", start)
        rest = buf[start:]
        if rest:
            self._partial.append(rest)
            self._partial_len = len(rest)
            self._check(self._partial_len + self._data_len)
        return events

    def _check(self, size: int) -> None:
        if self._max_line is not None and size > self._max_line:
            raise LimitExceededError(
                f"the server sent an SSE line (or event) over {self._max_line:,} characters; "
                "stopped reading (limit: max_sse_line)")

    def flush(self) -> list[SSEEvent]:
        """End of stream: dispatch the pending event, its last line included even without
        a newline (marked ``unterminated``: the assemblers keep it only if it parses)."""
        self._utf8.reset()  # a multibyte char cut at the very end never becomes data
        last_line = "".join(self._partial)
        self._partial.clear()
        self._partial_len = 0
        self._pending_cr = False
        events: list[SSEEvent] = []
        if last_line:
            self._line(last_line, events)
        self._dispatch(events)
        if last_line and events:
            events[-1] = dataclasses.replace(events[-1], unterminated=True)
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if line == "":
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # comment / keep-alive
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
            self._data_len += len(value) + 1
            self._check(self._data_len)
            self._has_data = True
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._id = value
        # "retry" and unknown fields are ignored

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._has_data:
            data = fix_surrogate_escapes("\n".join(self._data))
            events.append(SSEEvent(event=self._event or "message", data=data, id=self._id))
        self._event = ""
        self._data = []
        self._data_len = 0
        self._has_data = False


def decode_sse(chunks: Iterable[bytes | str]) -> list[SSEEvent]:
    """Decode a whole stream given as chunks (tests and fuzzing)."""
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.flush())
    return events


# ---- errors: server answers -> typed ProviderErrors ----

def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def scrub(text: str, secret: str | None) -> str:
    """Never let the API key leak into an error message."""
    if secret and len(secret) >= 4 and secret in text:
        text = text.replace(secret, "***")
    return text



# Error types that say "the request itself is wrong": retrying cannot help.
_PERMANENT_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                    "request_too_large", "billing_error", "insufficient_quota", "invalid_api_key",
                    "context_length_exceeded"}


def error_from_payload(payload: Any, *, status: int | None, fallback: str,
                       retry_after: float | None = None, secret: str | None = None,
                       in_stream: bool = False) -> APIError:
    """Build the typed error from an error JSON of either protocol.

    OpenAI: ``{"error": {"message", "type", "code"}}``; Anthropic:
    ``{"type": "error", "error": {"type", "message"}}``; some servers put a
    plain string in ``error`` or use ``{"message": ...}`` at the top level.
    """
    message: str | None = None
    error_type: str | None = None
    code: str | None = None
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            if isinstance(err.get("message"), str):
                message = err["message"]
            if isinstance(err.get("type"), str):
                error_type = err["type"]
            if err.get("code") is not None:
                code = str(err["code"])
            if status is None and isinstance(err.get("status"), int):
                status = err["status"]
        elif isinstance(err, str):
            message = err
    message = scrub(message or fallback, secret)
    if error_type is None and code is not None and not code.isdigit():
        error_type = code
    too_long = parse_too_long(message)
    if too_long is None and code == "context_length_exceeded":
        too_long = (None, None)
    if too_long is not None:
        actual, limit = too_long
        return ContextTooLongError(message, status=status, error_type=error_type or code,
                                   actual_tokens=actual, limit_tokens=limit)
    if retry_after is not None and retry_after > MAX_RETRY_AFTER:
        # said, not hidden: the retry line shows the capped wait and why it is not the server's
        message = (f"{message} (the server asked to wait {retry_after:,.0f} s, over the "
                   f"{MAX_RETRY_AFTER:g} s cap)")
    error = APIError(message, status=status, error_type=error_type, retry_after=retry_after)
    if in_stream and status is None and error_type not in _PERMANENT_TYPES and code not in _PERMANENT_TYPES:
        # the server accepted the request and failed while generating (overloaded, internal error)
        error.retryable = True
    return error


def error_from_response(status: int, body: bytes, headers: Mapping[str, str], reason: str,
                        *, secret: str | None = None) -> APIError:
    text = body.decode("utf-8", errors="replace")
    try:
        payload: Any = json.loads(text)
    except ValueError:
        payload = None
    snippet = " ".join(text.split())[:500]
    fallback = snippet or reason or "no message"
    return error_from_payload(payload, status=status, fallback=fallback,
                              retry_after=parse_retry_after(headers), secret=secret)


MAX_ERROR_BODY = 64 * 1024


def encode_body(body: dict[str, Any]) -> bytes:
    """The request JSON as UTF-8. A lone surrogate (an undecodable byte of a file name, a bad
    escape from a server) cannot be UTF-8: it is sent as an escaped byte or U+FFFD instead of
    failing the call, and on every later --continue."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(scrub_surrogates_obj(body), ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")


def describe_unexpected_body(raw: bytes, content_type: str) -> str:
    """What a 200 answer that was neither events nor JSON held, for the error line."""
    head = raw[:120]
    shown = head.decode("utf-8", errors="backslashreplace")
    shown = " ".join(shown.split())
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in shown)
    more = "..." if len(raw) > len(head) else ""
    kind = content_type.split(";")[0].strip() or "no content type"
    return f'the server answered 200 with {kind}, not an event stream: "{shown}{more}"'


# What a provider's assembler makes of one SSE event (its stream events).
StreamItem = TypeVar("StreamItem")


async def stream_sse_request(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    body: dict[str, Any],
    secret: str | None,
    read_timeout: float,
    on_event: Callable[[SSEEvent], Iterable[StreamItem]],
    non_sse_body: Callable[[bytes], Iterable[SSEEvent]] | None = None,
    is_complete: Callable[[], bool] = lambda: False,
    limits: StreamLimits | None = None,
) -> AsyncIterator[StreamItem]:
    """POST ``body`` and yield whatever ``on_event`` makes of each SSE event.

    Transport failures become typed errors: connect problems -> ConnectError,
    a read timeout or a dropped connection mid-stream -> StreamCutError,
    non-2xx -> APIError (ContextTooLongError when the message says so).
    ``non_sse_body`` turns a 200 answer that was not an event stream (some
    servers ignore ``stream: true``) into events. When ``is_complete()`` says
    the message already ended, a connection dropped or stalled afterwards
    (before ``[DONE]`` or the usage chunk) costs nothing: the stream just ends.

    ``limits`` bound what the server can make this call cost: one SSE line, a
    non-streamed body (after decompression) and the total time (a server
    sending ``: keep-alive`` forever never resets it) -> LimitExceededError,
    DeadlineError. A 200 answer that is neither events nor JSON (an HTML
    page, random bytes) says what it was and is not retried.
    """
    limits = limits or StreamLimits()
    deadline = asyncio.get_running_loop().time() + limits.deadline_s
    request_headers = {**dict(headers), "content-type": "application/json"}
    try:
        async with _until(deadline, limits, url):
            stream_cm = client.stream("POST", url, content=encode_body(body), headers=request_headers)
            response = await stream_cm.__aenter__()
        try:
            if response.status_code >= 300:
                async with _until(deadline, limits, url):
                    raw = await _read_capped(response)
                raise error_from_response(response.status_code, raw, response.headers,
                                          response.reason_phrase, secret=secret)
            content_type = response.headers.get("content-type", "")
            if "json" in content_type and non_sse_body is not None:
                async with _until(deadline, limits, url):
                    raw = await _read_capped(response, cap=limits.max_body, refuse_over=True)
                _raise_if_error_body(raw, response.status_code, secret)
                for sse in non_sse_body(raw):
                    for item in on_event(sse):
                        yield item
                return
            decoder = SSEDecoder(max_line=limits.max_sse_line)
            sniff = bytearray()
            saw_event = False
            chunks = _body_pieces(response, SSE_PIECE)
            while True:
                async with _until(deadline, limits, url):
                    chunk = await anext(chunks, None)
                if chunk is None:
                    break
                if not saw_event and len(sniff) < MAX_ERROR_BODY:
                    sniff.extend(chunk[: MAX_ERROR_BODY - len(sniff)])
                for sse in decoder.feed(chunk):
                    saw_event = True
                    for item in on_event(sse):
                        yield item
            for sse in decoder.flush():
                saw_event = True
                for item in on_event(sse):
                    yield item
            if not saw_event and sniff.strip():
                # a 200 whose body is a JSON error rather than events
                _raise_if_error_body(bytes(sniff), response.status_code, secret)
                # ...or an HTML page, a proxy's banner, random bytes: say what it was, once
                raise ProviderError(scrub(describe_unexpected_body(bytes(sniff), content_type), secret))
        finally:
            await stream_cm.__aexit__(None, None, None)
    except httpx.ConnectTimeout as exc:
        raise ConnectError(f"connect timeout: {_where(url)}") from exc
    except httpx.ConnectError as exc:
        raise ConnectError(scrub(f"cannot connect to {_where(url)}: {exc}", secret)) from exc
    except httpx.PoolTimeout as exc:
        raise ConnectError(f"no free connection to {_where(url)}") from exc
    except httpx.ReadTimeout as exc:
        if is_complete():
            return
        raise StreamCutError(f"stalled: no data from {_where(url)} for {read_timeout:g} s") from exc
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        if is_complete():
            return
        raise StreamCutError(scrub(f"stream cut: connection to {_where(url)} dropped ({exc})", secret)) from exc
    except (httpx.WriteError, httpx.WriteTimeout) as exc:
        raise ConnectError(scrub(f"could not send the request to {_where(url)}: {exc}", secret)) from exc
    except httpx.DecodingError as exc:
        raise ProviderError(scrub(f"the answer from {_where(url)} could not be decompressed ({exc})",
                                  secret)) from exc
    except httpx.HTTPError as exc:
        raise ProviderError(scrub(f"HTTP failure talking to {_where(url)}: {exc}", secret)) from exc


class _until:
    """``asyncio.timeout_at`` for one await, turned into a DeadlineError naming the limit.

    Used around each read only, never around a ``yield``: the consumer's own work between
    events is not interrupted from here (it is still counted in the elapsed time).
    """

    def __init__(self, deadline: float, limits: StreamLimits, url: str) -> None:
        self._timeout = asyncio.timeout_at(deadline)
        self._limits = limits
        self._url = url

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError:
            raise DeadlineError(
                f"the model call took longer than its deadline of {self._limits.deadline_s:g} s "
                f"({_where(self._url)}); stopped waiting (limit: request_deadline)") from None
        return False


def _raise_if_error_body(raw: bytes, status: int, secret: str | None) -> None:
    payload = json_object(raw)
    if payload is not None and (payload.get("error") or payload.get("type") == "error"):
        raise error_from_payload(payload, status=None, fallback="error in a 200 response", secret=secret)


# The encodings a capped body is inflated from here, a bounded piece at a time: httpx inflates each
# chunk the network gives whole, and 64 KiB of a gzip bomb is ~64 MiB before any cap can look.
_INFLATE_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


async def _inflated(response: httpx.Response, wbits: int, piece: int) -> AsyncIterator[bytes]:
    """The body decompressed at most ``piece`` bytes at a time, whatever one chunk inflates to.
    A deflate body that is not zlib-wrapped is read raw, as httpx's decoder reads it."""
    inflater = zlib.decompressobj(wbits)
    first = True
    try:
        async for raw in response.aiter_raw():
            pending = raw
            while True:
                try:
                    out = inflater.decompress(pending, piece)
                except zlib.error:
                    if not (first and wbits == zlib.MAX_WBITS):
                        raise
                    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                    first = False
                    continue
                first = False
                pending = inflater.unconsumed_tail
                if out:
                    yield out
                if not pending and len(out) < piece:
                    break
        tail = inflater.flush()
        if tail:
            yield tail
    except zlib.error as exc:
        raise httpx.DecodingError(str(exc)) from exc


# What one read of a compressed event stream inflates at most: the decoder's line cap then sees a
# bomb's line grow a piece at a time.
SSE_PIECE = 256 * 1024


def _body_pieces(response: httpx.Response, piece: int | None) -> AsyncIterator[bytes]:
    """The body's bytes decompressed; a gzip or deflate one at most ``piece`` bytes at a time."""
    wbits = _INFLATE_WBITS.get(response.headers.get("content-encoding", "").strip().lower())
    if piece is None or wbits is None:
        return response.aiter_bytes()
    return _inflated(response, wbits, piece)


async def _read_capped(response: httpx.Response, cap: int | None = MAX_ERROR_BODY,
                       refuse_over: bool = False) -> bytes:
    """The body up to ``cap`` bytes (decompressed); over it, cut (error bodies) or refused. A gzip
    or deflate body is inflated no further than the cap and one piece past it."""
    data = bytearray()
    async for chunk in _body_pieces(response, None if cap is None else cap + 1):
        data.extend(chunk)
        if cap is None:
            continue
        if refuse_over:
            if len(data) > cap:
                raise LimitExceededError(
                    f"the server's answer is over {cap:,} bytes (decompressed); stopped reading "
                    "(limit: max_response_body)")
        elif len(data) >= cap:
            del data[cap:]
            break
    return bytes(data)


def _where(url: str) -> str:
    """The URL without query string or credentials, for messages."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(query=None, userinfo=b""))


def event_object(data: str, *, unterminated: bool, what: str = "event") -> dict[str, Any] | None:
    """The JSON object one SSE event carries (``what`` names it in the error: event or chunk).

    None when the stream ended inside the event's last line and what arrived does not parse:
    the assembler skips it and its ``finish()`` judges the stream by what came before. Any
    other event that is not a JSON object is a malformed stream.
    """
    try:
        payload = json.loads(data)
    except ValueError:
        if unterminated:
            return None
        raise ProviderError(f"malformed stream {what} (not JSON): {data[:200]!r}", error_type="bad_response") from None
    if not isinstance(payload, dict):
        raise ProviderError(f"malformed stream {what}: {data[:200]!r}", error_type="bad_response")
    return payload


def stream_cut_error(events_seen: int, missing: str) -> StreamCutError:
    """Why a stream that ended before its message did is no reply: no event came at all, or
    the stream stopped before ``missing``, the protocol's end-of-message event."""
    if events_seen == 0:
        return StreamCutError("empty response: the server sent no events")
    return StreamCutError(f"stream cut: it ended without {missing}")


def assemble_stream(assembler: Any, chunks: Iterable[bytes | str]) -> list[Any]:
    """Decode and assemble a whole stream (tests, fuzzing); the last event is the Completed."""
    events: list[Any] = []
    for sse in decode_sse(chunks):
        events.extend(assembler.feed(sse))
    events.append(assembler.finish())
    return events

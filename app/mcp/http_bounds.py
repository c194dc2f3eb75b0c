"""Bounds on a url (Streamable HTTP) server's answers: memory, disk and time, whatever it sends.

The SDK's HTTP transport reads a JSON answer whole (``response.aread()``: a 3 GB body is
3 GB of memory), holds an SSE event up to 1 MiB and refuses a larger one outright. Here every
response body of a url server's HTTP client passes through a shaper at the transport (under
the SDK, over the socket), which looks at each chunk once:

- A JSON answer over ``MAX_MESSAGE_BYTES`` goes to a file as it arrives (0600, redacted, as
  the stdio reader does, ``app.mcp.bounded_stdio``), and the SDK gets in its place a small
  answer to the same request: the start of its text, the size, the file
  (``_meta[CUT_META_KEY]``, so the tool output's full-output path is that file).
- An SSE event over the cap: the same, its ``data`` saved; then the stream is closed.
- An answer still going after ``MAX_SAVED_ANSWER_BYTES`` (a body that never ends) is not read
  further: the connection is closed and the answer names what was saved.
- A request's SSE stream that carries more than ``MAX_MESSAGE_BYTES`` of other events
  (notifications, comments) without its answer ends with a JSON-RPC error for the request.
- Every saved answer counts toward the session's cap on saved outputs as it is written
  (``max_session_saved_output``); past it an answer is cut without being saved, and says so.
- A body in an encoding we did not ask for (we ask for ``identity``: a gzip bomb is small on
  the wire) is refused, as is any other body over the cap (OAuth metadata, error pages).

Memory stays near the cap (the SDK parses one message of at most the cap), and the call ends
on bytes, not on a timeout.
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2

from app.mcp.bounded_stdio import MAX_MESSAGE_BYTES, _Message, cut_answer
from app.mcp.bounded_stdio import MAX_SAVED_ANSWER_BYTES as MAX_SAVED_ANSWER_BYTES  # the url path's bound too
from app.mcp.settings import hide_url_secrets

if TYPE_CHECKING:
    from app.tools.base import SavedOutputBudget

logger = logging.getLogger(__name__)

# MAX_SAVED_ANSWER_BYTES (app.mcp.bounded_stdio, shared with the stdio reader): what is read of one
# answer over the cap before tidegauge stops reading and closes the connection; the saved file holds
# this much at most.
# The SDK's own bound on one SSE event, above ours: what reaches it is at most the cap plus its
# framing, or an answer tidegauge made (a cut answer's preview is at most 64 KiB of text).
SDK_MAX_SSE_EVENT_BYTES = MAX_MESSAGE_BYTES + 1024 * 1024
_END_OF_LINE = re.compile(rb"\r\n|\r|\n")
_INTERNAL_ERROR = -32603


class ResponseTooLarge(httpx2.ReadError):
    """A response that is no answer to a request (metadata, an error page, a GET) over the cap."""


def _request_id(request: httpx2.Request) -> int | str | None:
    """The JSON-RPC id of the request a POST carries (our own body), None for anything else."""
    if request.method != "POST":
        return None
    try:
        body = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    if not isinstance(body, dict) or "method" not in body:
        return None
    request_id = body.get("id")
    return request_id if isinstance(request_id, (int, str)) and not isinstance(request_id, bool) else None


def _error_answer(request_id: int | str, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id,
                       "error": {"code": _INTERNAL_ERROR, "message": message}}).encode()


def _sse_event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


class _Shaper:
    """What a body's chunks become: ``feed`` each, then ``end``; ``done`` when reading must stop."""

    done = False

    def feed(self, chunk: bytes) -> list[bytes]:
        raise NotImplementedError

    def end(self) -> list[bytes]:
        return []


class _RawCap(_Shaper):
    """Any body that answers no request: passed on as it comes, refused past the cap."""

    def __init__(self, server: str, what: str, max_bytes: int) -> None:
        self.server, self.what, self.max_bytes = server, what, max_bytes
        self.size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise ResponseTooLarge(f"MCP server {self.server!r}: the response to {self.what} was over "
                                   f"{self.max_bytes:,} bytes; not read further")
        return [chunk]


class _JsonAnswer(_Shaper):
    """A JSON answer to request ``request_id``: whole when under the cap, else saved and cut."""

    def __init__(self, request_id: int | str, max_bytes: int, max_saved: int, spill_dir: Path | None,
                 budget: SavedOutputBudget | None = None) -> None:
        self.request_id = request_id
        self.max_saved = max_saved
        self.message = _Message(max_bytes, spill_dir, budget)

    def feed(self, chunk: bytes) -> list[bytes]:
        self.message.add(chunk)
        if self.message.size <= self.max_saved:
            return []
        self.done = True
        return self._cut(unfinished=True)

    def end(self) -> list[bytes]:
        whole = self.message.finish()
        return [whole] if whole is not None else self._cut(unfinished=False)

    def _cut(self, unfinished: bool) -> list[bytes]:
        self.message.finish()
        return [json.dumps(cut_answer(self.message, self.request_id, unfinished)).encode()]


class _Refused(_Shaper):
    """A body not read at all: ``answer`` in its place."""

    done = True

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def feed(self, chunk: bytes) -> list[bytes]:
        return [self.answer]

    def end(self) -> list[bytes]:
        return [self.answer]


class _SseStream(_Shaper):
    """An SSE stream, event by event: each one under the cap passed on as it came (comments
    dropped); one over it saved and cut. With a ``request_id`` (a POST's answer stream) a cut
    event ends the request with its cut answer, and the other events are bounded in all; without
    one (the GET stream of the server's own messages) a cut event is dropped.

    Lines end at CR LF, LF or CR (the SSE grammar); each chunk is searched once.
    """

    def __init__(self, request_id: int | str | None, server: str, max_bytes: int, max_saved: int,
                 spill_dir: Path | None, budget: SavedOutputBudget | None = None) -> None:
        self.request_id = request_id
        self.budget = budget
        self.server = server
        self.max_bytes = max_bytes
        self.max_saved = max_saved
        self.spill_dir = spill_dir if request_id is not None else None
        self.line: list[bytes] = []
        self.line_size = 0
        self.event: list[bytes] = []
        self.event_size = 0
        self.after_cr = False
        self.passed = 0  # bytes of events and comments passed on (or dropped) before the answer
        # The event being cut: its data in a _Message; what kind of line is being read.
        self.cut: _Message | None = None
        self.cut_bytes = 0
        self.cut_line: str | None = None  # "data", "other", or None at the start of a line
        self.cut_line_head = b""
        self.cut_data_lines = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        if self.after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CR LF cut across two chunks
        self.after_cr = chunk.endswith(b"\r")
        start = 0
        for end_of_line in _END_OF_LINE.finditer(chunk):
            self._piece(chunk[start:end_of_line.start()], True, out)
            start = end_of_line.end()
            if self.done:
                return out
        if start < len(chunk):
            self._piece(chunk[start:], False, out)
        return out

    def end(self) -> list[bytes]:
        out: list[bytes] = []
        if self.cut is not None:
            self._finish_cut(out, unfinished=True)
        elif self.event or self.line:  # an event the body ended in: the SDK drops it, as the grammar says
            out.append(b"\n".join([*self.event, b"".join(self.line)]))
        return out

    # ---- lines, while no event is being cut ----

    def _piece(self, piece: bytes, ends_line: bool, out: list[bytes]) -> None:
        if self.cut is not None:
            self._cut_piece(piece, ends_line, out)
            return
        if not self.event and not self.line and self._over_budget(out):
            return
        self.line.append(piece)
        self.line_size += len(piece)
        if self.event_size + self.line_size > self.max_bytes:
            self._start_cut(ends_line, out)
            return
        if not ends_line:
            return
        line = b"".join(self.line)
        self.line, self.line_size = [], 0
        if not line:  # a blank line ends the event
            if self.event:
                event = b"\n".join(self.event) + b"\n\n"
                self.event, self.event_size = [], 0
                self.passed += len(event)
                out.append(event)
            return
        if line.startswith(b":"):  # a comment (a keep-alive): nobody reads it
            self.passed += len(line) + 1
            return
        self.event.append(line)
        self.event_size += len(line) + 1

    def _over_budget(self, out: list[bytes]) -> bool:
        """A request's stream that has passed more than the cap of other messages ends here."""
        if self.request_id is None or self.passed <= self.max_bytes:
            return False
        out.append(_sse_event(_error_answer(
            self.request_id, f"the server sent {self.passed:,} bytes of other messages on this request's stream "
                             f"without its answer (limit {self.max_bytes:,}); tidegauge closed the stream")))
        self.done = True
        return True

    # ---- an event over the cap ----

    def _start_cut(self, ends_line: bool, out: list[bytes]) -> None:
        self.cut = _Message(self.max_bytes, self.spill_dir, self.budget)
        self.cut_bytes = self.event_size
        for line in self.event:
            self._cut_line_start(line)
        partial = b"".join(self.line)
        self.event, self.event_size, self.line, self.line_size = [], 0, [], 0
        self.cut_line = None
        self._cut_piece(partial, ends_line, out)  # the line that went over, read like any after it
        if self.cut is not None:
            self.cut.spill()  # now, with the event's start in it: the preview is read from there

    def _cut_line_start(self, piece: bytes) -> None:
        assert self.cut is not None
        if piece.startswith(b"data:"):
            value = piece[5:]
            value = value[1:] if value.startswith(b" ") else value
            if self.cut_data_lines:
                self.cut.add(b"\n")
            self.cut_data_lines += 1
            self.cut_line = "data"
            self.cut.add(value)
        else:
            self.cut_line = "other"

    def _cut_piece(self, piece: bytes, ends_line: bool, out: list[bytes]) -> None:
        assert self.cut is not None
        self.cut_bytes += len(piece) + (1 if ends_line else 0)
        if self.cut_line is None:  # a line starts: hold it until its field name is known
            head = self.cut_line_head + piece
            if len(head) < 5 and not ends_line:
                self.cut_line_head = head
                return
            self.cut_line_head = b""
            if not head and ends_line:  # the blank line: the event is whole
                self._finish_cut(out, unfinished=False)
                return
            self._cut_line_start(head)
        elif self.cut_line == "data":
            self.cut.add(piece)
        if ends_line:
            self.cut_line = None
        self._check_saved(out)

    def _check_saved(self, out: list[bytes]) -> None:
        if self.cut is not None and self.cut_bytes > self.max_saved:
            self._finish_cut(out, unfinished=True)

    def _finish_cut(self, out: list[bytes], unfinished: bool) -> None:
        message, self.cut = self.cut, None
        assert message is not None
        message.finish()
        self.cut_line, self.cut_line_head, self.cut_data_lines = None, b"", 0
        if self.request_id is not None:
            out.append(_sse_event(json.dumps(cut_answer(message, self.request_id, unfinished)).encode()))
            self.done = True
            return
        logger.warning("MCP server %r sent a message of %d bytes on its event stream, over the %d-byte limit; "
                       "dropped", self.server, message.size, self.max_bytes)
        if unfinished:
            self.done = True  # an event without end: the stream is closed (the SDK opens it again)


class BoundedBody(httpx2.AsyncByteStream):
    """A response body through a ``_Shaper``: what the SDK reads instead of the socket's bytes."""

    def __init__(self, upstream: httpx2.AsyncByteStream, shaper: _Shaper) -> None:
        self.upstream = upstream
        self.shaper = shaper

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.upstream:
            parts = self.shaper.feed(chunk)
            if parts:
                yield b"".join(parts)  # one chunk in, at most one out: many small events cost one read
            if self.shaper.done:
                await self.upstream.aclose()  # stop reading: the server sees the connection close
                return
        parts = self.shaper.end()
        if parts:
            yield b"".join(parts)

    async def aclose(self) -> None:
        await self.upstream.aclose()


def bound_response(request: httpx2.Request, response: httpx2.Response, server: str, spill_dir: Path | None,
                   max_bytes: int = MAX_MESSAGE_BYTES, max_saved: int = MAX_SAVED_ANSWER_BYTES,
                   budget: SavedOutputBudget | None = None) -> httpx2.Response:
    """``response`` with its body bounded (see the module's docstring); the transport returns it.
    ``budget``: the session's cap on saved outputs, which a saved answer counts toward."""
    request_id = _request_id(request)
    what = f"{request.method} {hide_url_secrets(str(request.url))}"
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    shaper: _Shaper
    if encoding not in ("", "identity"):
        # We asked for identity; a compressed body could be any size once decoded.
        if request_id is None:
            raise ResponseTooLarge(f"MCP server {server!r}: the response to {what} came compressed "
                                   f"({encoding[:40]!r}), which tidegauge did not ask for; not read")
        refusal = _error_answer(request_id, f"the server sent its answer compressed ({encoding[:40]!r}), which "
                                            "tidegauge did not ask for; not read")
        del response.headers["content-encoding"]
        response.headers["content-type"] = "application/json"
        shaper = _Refused(refusal)
    elif request_id is not None and media_type == "application/json":
        shaper = _JsonAnswer(request_id, max_bytes, max_saved, spill_dir, budget)
    elif media_type == "text/event-stream":
        shaper = _SseStream(request_id, server, max_bytes, max_saved, spill_dir, budget)
    else:
        shaper = _RawCap(server, what, max_bytes)
    if request_id is not None or media_type == "text/event-stream":
        response.headers.pop("content-length", None)  # the body may be another length now
    response.stream = BoundedBody(response.stream, shaper)  # type: ignore[arg-type]
    return response


def identity_only(request: httpx2.Request) -> None:
    """Ask for the body as it is: a compressed one would be bounded only once decoded."""
    request.headers["accept-encoding"] = "identity"


# The certificate checks of a url server's client, built once per process for the CA settings in
# force: loading the CA bundle cost ~35 ms of CPU for every url server's connection and every
# reconnect. The checks are httpx2's default, the same for each client (the SDK's OAuth requests
# go through the same client, to an https authorization server too).
_verified_tls: tuple[tuple[str | None, str | None], ssl.SSLContext] | None = None


def verified_tls() -> ssl.SSLContext:
    """The TLS context httpx2 builds by default (the system's CAs, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` when set), shared: built again only when those variables change."""
    global _verified_tls
    where = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if _verified_tls is None or _verified_tls[0] != where:
        _verified_tls = (where, httpx2.create_ssl_context())
    return _verified_tls[1]


class BoundedTransport(httpx2.AsyncHTTPTransport):
    """A url server's transport: every request asks for the body as it is, every response body is
    bounded (``bound_response``), and a request that never reached the server (no connection) is
    reported to ``on_undelivered``, so the caller knows the server never saw it."""

    # The bounds on one body, as attributes so a test can show the same stops with a fraction of
    # the bytes (tests/test_mcp_url_bounds.py): every byte up to them is read, redacted and saved.
    max_bytes: int = MAX_MESSAGE_BYTES
    max_saved: int = MAX_SAVED_ANSWER_BYTES

    def __init__(self, server: str, spill_dir: Path | None, *, on_undelivered: Callable[[], None],
                 budget: SavedOutputBudget | None = None) -> None:
        super().__init__(verify=verified_tls())
        self.server = server
        self.spill_dir = spill_dir
        self.on_undelivered = on_undelivered
        self.budget = budget

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        identity_only(request)
        try:
            response = await super().handle_async_request(request)
        except httpx2.ConnectError:
            self.on_undelivered()
            raise
        return bound_response(request, response, self.server, self.spill_dir, self.max_bytes, self.max_saved,
                              budget=self.budget)

"""What the HTTP wire protocols share: settings, headers, one reused httpx client, the SSE call."""

from __future__ import annotations

import ssl
from typing import Any, AsyncIterator, ClassVar, Mapping, Protocol, TypedDict

import httpx

from app.providers.base import Completed, ModelRequest, ServerContext, StreamEvent, TextDelta, ThinkingDelta, ToolCallDelta
from app.providers.json_fields import json_object
from app.providers.sse import LimitExceededError, SSEEvent, StreamLimits, stream_sse_request
from app.kernel.redact import redact_obj

USER_AGENT = "tidegauge/0.1"


class StreamAssembler(Protocol):
    """Turns one call's SSE events into stream events and, at the end, the whole reply."""

    def feed(self, sse: SSEEvent) -> list[StreamEvent]: ...

    @property
    def complete(self) -> bool:
        """The message has ended (what may still come is usage or the terminator)."""
        ...

    def finish(self) -> Completed: ...


class StreamAssemblerFactory(Protocol):
    """An assembler class: one fresh assembler per call, told the key to keep out of errors."""

    def __call__(self, *, secret: str | None = None) -> StreamAssembler: ...


class HttpSettings(TypedDict, total=False):
    """The settings every protocol's provider takes and passes on to ``SseHttpProvider``: the
    subclasses take them as ``**settings``, so their defaults are written once, in the base."""

    timeout_connect: float
    timeout_read: float
    max_tokens: int | None
    extra_headers: dict[str, str] | None
    extra_body: dict[str, Any] | None


class SseHttpProvider:
    """Base of the Chat Completions, Responses and Anthropic Messages providers.

    Subclasses give ``url``, ``build_body(request)``, an ``assembler_class``
    (feed/complete/finish) and ``replay_reply``; where the protocol carries the
    key differently, ``key_headers`` and ``protocol_headers``.
    """

    name = ""
    assembler_class: StreamAssemblerFactory
    banner: str | None = None  # a real model needs no introduction
    # Headers this protocol sends on every call (the user's extra headers may override them).
    protocol_headers: ClassVar[Mapping[str, str]] = {}

    @property
    def label(self) -> str:
        return f"{self.name} · {self.model}"

    def __init__(self, model: str, base_url: str, api_key: str | None, *, timeout_connect: float = 10.0,
                 timeout_read: float = 120.0, max_tokens: int | None = None,
                 extra_headers: dict[str, str] | None = None, extra_body: dict[str, Any] | None = None) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_connect = timeout_connect
        self.timeout_read = timeout_read
        self.max_tokens = max_tokens  # None: the request decides
        self.extra_headers = dict(extra_headers or {})
        self.extra_body = dict(extra_body or {})
        self._client: httpx.AsyncClient | None = None
        # Caps and the total deadline of one call (Settings via StreamLimits.from_settings).
        self.limits = StreamLimits()

    @property
    def url(self) -> str:
        raise NotImplementedError

    def server_context(self) -> ServerContext | None:
        """None: the protocol has no server-side context management (those that do override it)."""
        return None

    def stop_prompt_caching(self) -> None:
        """Nothing: only a protocol that sends cache breakpoints has any to stop."""

    def headers(self) -> dict[str, str]:
        """JSON in, events out, the key as the protocol carries it; the user's extra headers win."""
        headers = {"content-type": "application/json", "accept": "text/event-stream",
                   **self.protocol_headers, "user-agent": USER_AGENT}
        if self.api_key:  # local servers often need no key
            headers.update(self.key_headers(self.api_key))
        headers.update(self.extra_headers)
        return headers

    def key_headers(self, api_key: str) -> dict[str, str]:
        """How the key goes with a call: a bearer token (OpenAI and the servers compatible with it)."""
        return {"authorization": f"Bearer {api_key}"}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def non_stream_to_events(self, raw: bytes) -> list[SSEEvent]:
        """A server that ignored ``stream: true`` answered with one JSON object: the events the
        stream would have carried; none for a body that is not this protocol's reply (the
        assembler then finds the stream empty)."""
        reply = json_object(raw)
        return [] if reply is None else self.replay_reply(reply)

    @staticmethod
    def replay_reply(reply: dict[str, Any], /) -> list[SSEEvent]:
        """This protocol's whole reply as the SSE events of a stream ([] when it is not one)."""
        raise NotImplementedError

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(verify=_tls_for(self.url), timeout=httpx.Timeout(
                connect=self.timeout_connect, read=self.timeout_read,
                write=self.timeout_read, pool=self.timeout_connect))
        return self._client

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        assembler = self.assembler_class(secret=self.api_key)
        reply_chars = 0
        # The last line of defence: whatever brought a secret tidegauge holds into the
        # request (a memory import, a tool result, a prompt), its bytes never leave the process.
        # Every protocol's body passes here, once, before it is serialized.
        body = redact_obj(self.build_body(request))
        async for event in stream_sse_request(
            self._http(), self.url, headers=self.headers(), body=body,
            secret=self.api_key, read_timeout=self.timeout_read,
            on_event=assembler.feed, non_sse_body=self.non_stream_to_events,
            is_complete=lambda: assembler.complete, limits=self.limits,
        ):
            if isinstance(event, (TextDelta, ThinkingDelta)):
                reply_chars += len(event.text)
            elif isinstance(event, ToolCallDelta):
                reply_chars += len(event.partial_json)
            if reply_chars > self.limits.max_reply_chars:
                raise LimitExceededError(
                    f"the reply is over {self.limits.max_reply_chars:,} characters; stopped reading "
                    "(limit: max_reply_chars)")
            yield event
        yield assembler.finish()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _tls_for(url: str) -> ssl.SSLContext | bool:
    """Certificate checks for an https server; for a plain-http one (a local model, a gateway on
    loopback) a context with no CA loaded: loading the bundle cost 80 ms of every run's start
    (0.5 s on a loaded machine), and this client never follows a redirect to another URL. Should
    a connection ever use TLS through it, it fails verification rather than skip it."""
    if not url.lower().startswith("http://"):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify_mode CERT_REQUIRED, hostnames checked, no CA

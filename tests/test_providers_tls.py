"""TLS for providers: an https server is verified; a plain-http one never loads the CA bundle.

Loading the bundle cost 80 ms of every run's start on a quiet machine (0.5 s on a loaded one)
for local models and loopback gateways, which have no certificate to check (issue 27).
"""

from __future__ import annotations

import ssl

import pytest

from app.providers.http_base import _tls_for
from fake_llm_server import FakeLLMServer, openai_text
from provider_helpers import request


async def test_a_plain_http_server_is_reached_without_loading_any_certificate(
        fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_bundle(*args: object, **kwargs: object) -> None:
        raise AssertionError("the CA bundle was loaded for a plain-http server")

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", no_bundle)
    provider = fake_llm.provider("openai")
    fake_llm.enqueue(openai_text("hello"))
    try:
        text = "".join([getattr(e, "text", "") async for e in provider.stream(request())])
    finally:
        await provider.aclose()
    assert text == "hello"


def test_an_https_server_is_verified_and_tls_through_the_http_context_fails_closed() -> None:
    assert _tls_for("https://api.openai.com/v1/chat/completions") is True
    assert _tls_for("HTTPS://gateway.example/v1") is True
    context = _tls_for("http://127.0.0.1:8080/v1")
    assert isinstance(context, ssl.SSLContext)
    # Should a TLS connection ever go through it: no CA is trusted and names are checked.
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs() == []

"""What the per-protocol provider tests share: a tool to offer, a request around it, the provider fixture."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable

import pytest

from app.kernel.messages import Message, ToolSpec
from app.providers.base import ModelRequest, Provider
from fake_llm_server import FakeLLMServer

READ_FILE = ToolSpec(name="read_file", description="Read a file", input_schema={
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})


def request(*messages: Message, tools: list[ToolSpec] | None = None, **kw: Any) -> ModelRequest:
    """A terse system prompt, ``messages`` (a lone "hi" when none) and read_file unless ``tools`` says otherwise."""
    return ModelRequest(system="You are terse.", messages=list(messages) or [Message.user("hi")],
                        tools=[READ_FILE] if tools is None else tools, **kw)


def provider_fixture(protocol: str) -> Callable[..., Any]:
    """A ``provider`` fixture for a test module: ``protocol``'s provider against the fake server,
    closed after the test. Bind it as ``provider = provider_fixture("openai")``."""

    @pytest.fixture
    async def provider(fake_llm: FakeLLMServer) -> AsyncIterator[Provider]:
        opened: Provider = fake_llm.provider(protocol)
        yield opened
        await opened.aclose()

    return provider

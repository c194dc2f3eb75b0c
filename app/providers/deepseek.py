"""DeepSeek: the OpenAI-compatible provider with DeepSeek's base URL and thinking rules."""

from __future__ import annotations

from typing import Any

from app.providers.openai import OpenAIProvider

DEEPSEEK_BASE_URL = "https://api.deepseek.com"


def deepseek_provider(model: str, api_key: str | None, base_url: str | None = None, **opts: Any) -> OpenAIProvider:
    """An OpenAIProvider that shows ``reasoning_content`` as thinking and sends it back on tool turns."""
    opts.setdefault("deepseek_reasoning", True)
    provider = OpenAIProvider(model, base_url or DEEPSEEK_BASE_URL, api_key, **opts)
    provider.name = "deepseek"
    return provider

"""Recognise "the request is too long" in any provider's words, and pull out the counts.

The overflow recovery drops old rounds to cover the gap between the two
numbers; when the server gives none, it drops a fixed share instead.
"""

from __future__ import annotations

import functools
import re

_NUM = r"(\d[\d,]*)"

# Compiled when a server first says no, not at every start (they are only read then).
@functools.cache
def _patterns() -> list[tuple[re.Pattern[str], str]]:
    """Each pattern yields (actual, limit) from its match; the order matters (most specific first)."""
    return [
        # Anthropic: "prompt is too long: 200251 tokens > 200000 maximum"
        (re.compile(rf"prompt is too long:\s*{_NUM}\s*tokens?\s*>\s*{_NUM}", re.I), "actual_limit"),
        # Anthropic: "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000"
        (re.compile(rf"exceed context limit:\s*{_NUM}\s*\+\s*{_NUM}\s*>\s*{_NUM}", re.I), "sum_limit"),
        # OpenAI / DeepSeek / vLLM: "maximum context length is 128000 tokens. However, your messages
        # resulted in 130000 tokens" or "... you requested 131134 tokens (122942 in the messages, ...)"
        (re.compile(rf"maximum context length is\s*{_NUM}\s*tokens.*?(?:resulted in|requested)\s*{_NUM}\s*tokens",
                    re.I | re.S), "limit_actual"),
        # llama.cpp: "request (8000 tokens) exceeds the available context size (4096 tokens)"
        (re.compile(rf"request\s*\(\s*{_NUM}\s*tokens\s*\)\s*exceeds the available context size\s*\(\s*{_NUM}",
                    re.I), "actual_limit"),
    ]


# Too long, but no usable numbers.
_NUMBERLESS = (r"exceeds the context window|prompt is too long|maximum context length|context_length_exceeded"
               r"|exceed(?:s|ed)? (?:the )?context limit|exceeds the available context size|input is too long")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_too_long(message: str | None) -> tuple[int | None, int | None] | None:
    """``(actual_tokens, limit_tokens)`` if ``message`` says the request is too long, else None.

    Either count may be None when the message does not give it.
    """
    if not message:
        return None
    for pattern, shape in _patterns():
        match = pattern.search(message)
        if match is None:
            continue
        groups = [_int(g) for g in match.groups()]
        if shape == "actual_limit":
            return groups[0], groups[1]
        if shape == "sum_limit":
            return groups[0] + groups[1], groups[2]
        if shape == "limit_actual":
            return groups[1], groups[0]
    if re.search(_NUMBERLESS, message, re.I):
        limit = re.search(rf"maximum context length is\s*{_NUM}", message, re.I)
        return None, (_int(limit.group(1)) if limit else None)
    return None

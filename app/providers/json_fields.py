"""Typed reads of a JSON object from a server: a whole body, and one field of it.

A server may send null, a string or nothing where an object, a list or a count belongs;
the wire code reads such a field as empty instead of failing, and the type checker knows
what it got.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

# A JSON \u escape of a lone surrogate (an unpaired \ud800): json.loads would turn it into a
# str that cannot be encoded as UTF-8 and would crash the printers and the transcript.
# Pairs are matched first and kept; the backslash count makes sure the escape is real.
_SURROGATE_ESCAPE = re.compile(
    r"(?<!\\)((?:\\\\)*)(\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|\\u[dD][89a-fA-F][0-9a-fA-F]{2})")


def _lone_surrogate_to_replacement(match: re.Match[str]) -> str:
    if len(match.group(2)) == 12:
        return match.group(0)
    return match.group(1) + "\\ufffd"


def fix_surrogate_escapes(data: str) -> str:
    """JSON text with every unpaired surrogate escape replaced by ``\\ufffd`` (fast when there is none)."""
    if "\\ud" not in data and "\\uD" not in data:
        return data
    return _SURROGATE_ESCAPE.sub(_lone_surrogate_to_replacement, data)


def json_object(raw: bytes) -> dict[str, Any] | None:
    """A body decoded as a JSON object (bytes that are not UTF-8, and lone surrogate escapes, read
    as U+FFFD, as in a stream); None when it is
    not JSON or is JSON of another kind: the caller decides what such a body means."""
    try:
        payload = json.loads(fix_surrogate_escapes(raw.decode("utf-8", errors="replace")))
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def object_field(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is a JSON object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_field(obj: Mapping[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a JSON array, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def int_field(obj: Mapping[str, Any], key: str) -> int:
    """``obj[key]`` when it is a whole number, else 0."""
    value = obj.get(key)
    return value if isinstance(value, int) else 0

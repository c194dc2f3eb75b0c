"""Typed reads of a JSON object from a server: a whole body, and one field of it.

A server may send null, a string or nothing where an object, a list or a count belongs;
the wire code reads such a field as empty instead of failing, and the type checker knows
what it got.
"""

from __future__ import annotations

import json
import re

from app.kernel.json_depth import json_too_deep
# The input of a call refused for its size or depth (with the markers: the registry reads it too).
from app.kernel.markers import BAD_ARGUMENTS_KEY as BAD_ARGUMENTS_KEY
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


# ---- a tool call's arguments: bounded before they are held or parsed ----

# A model's arguments are text it wrote: a whole file for write_file is a few hundred KB at
# most (output limits are ~128k tokens). Past this the call is refused, not run.
MAX_ARGUMENT_CHARS = 2 * 1024 * 1024
# Real schemas nest a few levels; 900 levels broke the event encoder and ended the turn.
MAX_ARGUMENT_DEPTH = 64



class ArgumentBuffer(list[str]):
    """The fragments of one tool call's arguments, held up to ``max_chars``.

    A list (``"".join(buffer)`` still works) whose ``append`` stops keeping
    fragments once the total passes the cap: a 30 MB argument costs its count,
    not 30 MB held and parsed. ``total_chars`` is what arrived.
    """

    def __init__(self, max_chars: int = MAX_ARGUMENT_CHARS) -> None:
        super().__init__()
        self.max_chars = max_chars
        self.total_chars = 0

    @property
    def over_cap(self) -> bool:
        return self.total_chars > self.max_chars

    def append(self, fragment: str) -> None:
        self.total_chars += len(fragment)
        if self.over_cap:
            super().clear()  # what was kept can no longer be used either
        else:
            super().append(fragment)

    def clear(self) -> None:
        super().clear()
        self.total_chars = 0

    def __bool__(self) -> bool:  # something arrived, even when it was not kept
        return self.total_chars > 0


def argument_problem(total_chars: int, raw: str | None, *, max_chars: int = MAX_ARGUMENT_CHARS,
                     max_depth: int = MAX_ARGUMENT_DEPTH) -> str | None:
    """Why arguments of ``total_chars`` characters (text ``raw`` when it was kept) must not be
    parsed, in words for the model; None when they may be."""
    if total_chars > max_chars:
        return f"they were {total_chars:,} characters, over the limit of {max_chars:,} characters for one call"
    if raw is not None and json_too_deep(raw, max_depth):
        return f"they nest arrays/objects more than {max_depth} levels deep (the limit)"
    return None

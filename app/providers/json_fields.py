"""Typed reads of one field of a decoded JSON object from a server.

A server may send null, a string or nothing where an object, a list or a count belongs;
the wire code reads such a field as empty instead of failing, and the type checker knows
what it got.
"""

from __future__ import annotations

from typing import Any, Mapping


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

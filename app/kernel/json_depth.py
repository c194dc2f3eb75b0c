"""How deep a JSON text nests, found without parsing it: ``json.loads`` recurses once per level, so
text from outside (a model's tool arguments, a browser tab's message) is measured first."""

from __future__ import annotations

import re

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


def json_too_deep(raw: str, max_depth: int) -> bool:
    """Does ``raw`` nest arrays/objects deeper than ``max_depth``? A scan of the brackets
    outside strings, stopped at the first level past the limit."""
    if raw.count("[") + raw.count("{") <= max_depth:
        return False
    depth = 0
    for bracket in _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", raw)):
        depth += 1 if bracket in "[{" else -1
        if depth > max_depth:
            return True
    return False

"""stream-json keeps every event type and field it had before the session contract (issue 11).

Scripts read ``tidegauge -p … --output-format stream-json`` line by line. The lines in
``stream_json_wave1.jsonl`` were made from the event models as they stood before issue 11
(commit 78999e3): one line per event type, and one more per value of each of its
``Literal`` fields. Every one must still be an event of the same type, and the line the
printer writes for it must carry every key of the old line with the same value. New types,
fields and values are fine; a removed or renamed one is a broken script.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from app.kernel.envelope import outside_log
from app.kernel.events import event_adapter
from app.surfaces.headless import JsonPrinter

WAVE1_LINES = [json.loads(line) for line in (Path(__file__).parent / "stream_json_wave1.jsonl").read_text().splitlines()]
WAVE1_TYPES = {
    "text_delta", "thinking_delta", "assistant_message", "user_message", "tool_start", "tool_result", "usage",
    "context", "compaction", "micro_compaction", "reset", "warning_crossed", "result_cut", "breaker", "retry",
    "state", "notice", "error", "result",
}


def _missing(old: Any, new: Any, path: str) -> list[str]:
    """Where ``new`` lacks a key of ``old`` or holds another value (nested objects key by key)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: was an object, now {new!r}"]
        return [gap for key, value in old.items()
                for gap in (_missing(value, new[key], f"{path}.{key}") if key in new else [f"{path}.{key}: missing"])]
    return [] if old == new else [f"{path}: {old!r} became {new!r}"]


def test_the_fixture_covers_every_wave1_event_type() -> None:
    assert {line["type"] for line in WAVE1_LINES} == WAVE1_TYPES


@pytest.mark.parametrize("old_line", WAVE1_LINES, ids=lambda line: f"{line['type']}")
def test_a_wave1_line_is_still_written_with_every_key(old_line: dict[str, Any]) -> None:
    event = event_adapter().validate_python(old_line)
    assert event.type == old_line["type"]
    out = io.StringIO()
    JsonPrinter(out)(outside_log(event))
    written = json.loads(out.getvalue().splitlines()[0])  # a legacy notice line may follow
    assert _missing(old_line, written, old_line["type"]) == []


def test_a_dropped_field_would_be_caught() -> None:
    """The check above can fail: a line without one of the old keys is reported."""
    old = {"type": "usage", "agent": "main", "input_tokens": 5}
    assert _missing(old, {"type": "usage", "agent": "main"}, "usage") == ["usage.input_tokens: missing"]

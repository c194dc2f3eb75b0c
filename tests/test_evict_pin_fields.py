"""The fields an evict and a pin share are defined once, and their lines say what they said before."""

from __future__ import annotations

import json

from app.kernel.events import EvictEvent, PinEvent, ToolResultPlanFields, event_adapter

SHARED = ("id", "name", "tokens_before", "tokens_after", "plan_id", "forecast_tokens_after",
          "cache_tokens_invalidated", "replanned", "reason")


def test_the_shared_fields_are_defined_once() -> None:
    for event in (EvictEvent, PinEvent):
        own = set(vars(event).get("__annotations__", {}))
        assert not own & set(SHARED), f"{event.__name__} defines {sorted(own & set(SHARED))} again"
        assert set(SHARED) <= set(event.model_fields)
    assert set(ToolResultPlanFields.model_fields) == {"type", *SHARED}


def test_an_evict_line_is_as_it_was() -> None:
    # A line as the transcript and stream-json wrote it before the fields were shared.
    written = {"type": "evict", "id": "call_1", "name": "read_file",
               "path": "/data/tool-results/call_1.txt", "tokens_before": 9000, "tokens_after": 1200,
               "plan_id": "plan-3", "forecast_tokens_after": 1190, "cache_tokens_invalidated": 7800,
               "replanned": True}
    event = event_adapter().validate_json(json.dumps(written))
    assert isinstance(event, EvictEvent)
    assert json.loads(event.model_dump_json()) == written
    assert next(iter(json.loads(event.model_dump_json()))) == "type"  # first, as on every line
    refused = EvictEvent(id="call_2", reason="that result is already out of the context")
    assert json.loads(refused.model_dump_json()) == {
        "type": "evict", "id": "call_2", "name": "", "path": None, "tokens_before": 0, "tokens_after": 0,
        "reason": "that result is already out of the context"}


def test_a_pin_line_is_as_it_was() -> None:
    written = {"type": "pin", "id": "call_1", "name": "read_file", "pinned": False,
               "call": "read_file(path='a.py')", "tokens": 420, "tokens_before": 5000, "tokens_after": 5000,
               "plan_id": "plan-4", "forecast_tokens_after": 5000}
    event = event_adapter().validate_json(json.dumps(written))
    assert isinstance(event, PinEvent)
    assert json.loads(event.model_dump_json()) == written

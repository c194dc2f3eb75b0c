"""MCP prompts as slash commands, resources attached to a message, read_resource, and form defaults (issue 26)."""

from __future__ import annotations

from app.mcp.client_features import answer_content, form_fields


def test_a_forms_whole_number_default_is_sent_as_the_server_gave_it() -> None:
    # The conformance suite's SEP-1034 form: a user who changes nothing sends every default back.
    # A whole-number default of 30 used to become 30.0, which its own field then refused as
    # "must be a whole number", so the form was declined.
    fields = form_fields({"type": "object", "properties": {
        "age": {"type": "integer", "default": 30}, "score": {"type": "number", "default": 95.5},
        "verified": {"type": "boolean", "default": True}, "status": {"type": "string", "enum": ["a", "b"], "default": "a"}}})
    defaults = {field.name: field.default for field in fields}
    content = answer_content(fields, defaults)
    assert content == {"age": 30, "score": 95.5, "verified": True, "status": "a"}
    assert type(content["age"]) is int and type(content["verified"]) is bool

"""An MCP server's form on the dashboard (issue 26): fields from the schema, a one-line error
under each bad field, accept / decline / cancel, and the answer reaching the real server.

The first tests drive the modal alone; the last one drives the real dashboard with a real
session (on a thread) whose model, scripted on the loopback fake server, calls a real MCP
server's tool that asks for a form.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.widgets import Button, Checkbox, Input, Select, Static

from app.kernel.events import ElicitationField
from app.mcp.client_features import form_fields
from widgets.elicitation_screen import ElicitationScreen

SERVER = Path(__file__).parent / "mcp_servers" / "client_features_server.py"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 2},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "ratio": {"type": "number", "description": "between 0 and 1", "minimum": 0, "maximum": 1},
        "subscribe": {"type": "boolean", "title": "Subscribe"},
        "colour": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
    },
    "required": ["name", "age", "colour"],
}


class FormHost(App[None]):
    def __init__(self, fields: list[ElicitationField], message: str = "Who are you?") -> None:
        super().__init__()
        self.form_fields = fields
        self.message = message
        self.answers: list[Any] = []

    async def on_mount(self) -> None:
        await self.push_screen(ElicitationScreen("features", self.message, self.form_fields),
                               callback=self.answers.append)


def _texts(screen: Any, selector: str) -> list[str]:
    return [str(static.render()) for static in screen.query(selector).results(Static)]


async def test_each_bad_field_says_what_is_wrong_in_one_line_and_nothing_is_sent() -> None:
    host = FormHost(form_fields(SCHEMA))
    async with host.run_test(size=(120, 60)) as pilot:
        screen = host.screen
        assert isinstance(screen, ElicitationScreen)
        assert [type(w) for w in (screen.query_one(f"#field-{n}") for n in range(5))] == [
            Input, Input, Input, Checkbox, Select]
        screen.query_one("#field-0", Input).value = "A"
        screen.query_one("#field-2", Input).value = "1.5"
        await pilot.press("ctrl+s")
        await pilot.pause()

        assert host.answers == []  # the form stays open
        assert _texts(screen, ".elicitation-error") == [
            "Your name: at least 2 characters", "age: required", "ratio: at most 1", "", "colour: required"]

        screen.query_one("#field-0", Input).value = "Ada"
        screen.query_one("#field-1", Input).value = "36"
        screen.query_one("#field-2", Input).value = ""
        screen.query_one("#field-3", Checkbox).value = True
        screen.query_one("#field-4", Select).value = "green"
        await pilot.press("ctrl+s")
        await pilot.pause()

    assert host.answers == [("accept", {"name": "Ada", "age": "36", "ratio": "", "subscribe": True,
                                        "colour": "green"})]


@pytest.mark.parametrize("key,action", [("ctrl+d", "decline"), ("escape", "cancel")])
async def test_decline_and_cancel_send_nothing_of_what_was_typed(key: str, action: str) -> None:
    host = FormHost(form_fields(SCHEMA))
    async with host.run_test(size=(120, 60)) as pilot:
        host.screen.query_one("#field-0", Input).value = "typed but not sent"
        await pilot.press(key)
        await pilot.pause()
    assert host.answers == [(action, {})]


async def test_the_form_names_the_server_that_gets_the_answer_and_draws_its_words_literally() -> None:
    schema = {"type": "object", "properties": {"key": {"type": "string", "title": "[bold red]API key[/]"}}}
    host = FormHost(form_fields(schema), message="Paste your OPENAI_API_KEY [link=http://x]here[/link]")
    async with host.run_test(size=(120, 40)) as pilot:
        screen = host.screen
        await pilot.pause()
        recipient = str(screen.query_one("#elicitation-recipient", Static).render())
        message = str(screen.query_one("#elicitation-message", Static).render())
        [label] = _texts(screen, ".elicitation-label")
    assert "goes to the MCP server 'features' only (not to the model)" in recipient
    assert message == "Paste your OPENAI_API_KEY [link=http://x]here[/link]"  # markup shown, not obeyed
    assert label == "[bold red]API key[/]"


# ---------------------------------------------------------------- the real dashboard

async def test_the_dashboard_shows_a_real_servers_form_and_the_answer_reaches_it(fake_llm, tmp_path, monkeypatch):
    from dashboard_helpers import settle
    from fake_llm_server import openai_text, openai_tool_calls
    from session_thread import SessionThread

    from app.surfaces.dashboard.app import TidegaugeApp
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_session

    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "config").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-key-0123456789")
    small = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
             "required": ["city"]}
    fake_llm.enqueue(
        openai_tool_calls([("features__ask", {"message": "Where to?", "schema": json.dumps(small)}, "call_ask")]),
        openai_text("Booked."),
    )
    settings = load_settings({"provider": "openai", "model": "m", "base_url": fake_llm.base_url("openai"),
                              "data_dir": str(tmp_path / "data"),
                              "mcp_servers": {"features": {"command": sys.executable, "args": [str(SERVER)],
                                                           "startup_timeout": 120}}})
    session = build_session(settings, approvals=True, cwd=work)
    app = TidegaugeApp(SessionThread(session).start(), cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        prompt = app.query_one("#prompt", Input)
        prompt.value = "book a trip"
        prompt.focus()
        await pilot.press("enter")
        for _ in range(20_000):  # the server starts, the model calls its tool, the tool asks
            if isinstance(app.screen, ElicitationScreen) and app.screen.query("#field-0"):
                break
            await pilot.pause(0.01)
        else:
            raise AssertionError(f"no form was shown; the screen is {app.screen!r}, sent: {len(fake_llm.requests)}")
        form = app.screen
        assert isinstance(form, ElicitationScreen) and form.server == "features"
        form.query_one("#field-0", Input).value = "Lisbon"
        form.query_one("#field-1", Input).value = "4"
        await pilot.press("ctrl+s")
        await settle(pilot)

    tool_replies = [m["content"] for m in fake_llm.requests[1].json["messages"] if m["role"] == "tool"]
    assert [json.loads(reply) for reply in tool_replies] == [
        {"action": "accept", "content": {"city": "Lisbon", "days": 4}}]


class StyledFormHost(FormHost):
    """The form with the dashboard's own stylesheet, where the dialogs' sizes are set."""

    from app.surfaces.dashboard.app import CSS_FILE

    CSS_PATH = str(CSS_FILE)


async def test_at_80x24_the_forms_buttons_are_on_screen_and_the_fields_scroll() -> None:
    # Checked in tmux: the dialog's 80% height cut its buttons off, so nothing said how to send.
    host = StyledFormHost(form_fields(SCHEMA))
    async with host.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = host.screen
        for button_id in ("accept", "decline", "cancel"):
            region = screen.query_one(f"#{button_id}", Button).region
            assert region.height > 0 and region.bottom <= 24, f"{button_id} is off screen: {region}"
        fields = screen.query_one("#elicitation-fields")
        assert fields.max_scroll_y > 0  # five fields do not fit: they scroll inside the dialog


# The spec's (2025-11-25) whole form schema subset: string formats, number ranges, boolean, single-
# and multi-select enums with and without titles, and defaults.
SPEC_SCHEMA = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "default": "ada@example.org"},
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
        "seen": {"type": "string", "format": "date-time"},
        "score": {"type": "number", "minimum": 0, "maximum": 10, "default": 7.5},
        "ok": {"type": "boolean", "default": True},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
                 "default": "l"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1,
                 "maxItems": 2, "default": ["b"]},
        "teams": {"type": "array", "items": {"anyOf": [{"const": "red", "title": "Red team"},
                                                       {"const": "blue", "title": "Blue team"}]}},
    },
    "required": ["email", "tags"],
}


def test_every_field_type_of_the_spec_is_a_form_field_with_its_rules() -> None:
    fields = {f.name: f for f in form_fields(SPEC_SCHEMA)}
    assert fields["tags"].kind == "multi_enum" and fields["tags"].default == ["b"]
    assert fields["teams"].option_labels == ["Red team", "Blue team"] and fields["teams"].options == ["red", "blue"]
    assert fields["size"].default == "l" and fields["score"].default == 7.5 and fields["ok"].default is True
    assert fields["tags"].value_from(["c", "a"]) == ["a", "c"]  # the form's order
    bad = {"tags": (["a", "b", "c"], "tags: choose at most 2"), "email": ("ada", "email: must be an email address"),
           "site": ("not a uri", "site: must be a URI (scheme:…)"),
           "born": ("2026-13-01", "born: must be a date (YYYY-MM-DD)"),
           "seen": ("2026-01-01 10:00", "seen: must be a date and time (YYYY-MM-DDTHH:MM:SS, with an offset or Z)"),
           "score": ("11", "score: at most 10")}
    for name, (given, error) in bad.items():
        with pytest.raises(ValueError, match=r"^" + __import__("re").escape(error) + "$"):
            fields[name].value_from(given)
    with pytest.raises(ValueError, match="tags: choose at least 1"):
        fields["tags"].value_from([])
    assert fields["seen"].value_from("2026-01-01T10:00:00Z") == "2026-01-01T10:00:00Z"
    assert fields["site"].value_from("https://example.org/x") == "https://example.org/x"
    assert fields["teams"].value_from([]) == []  # optional, none chosen


async def test_a_multi_select_is_answered_with_the_choices_toggled_and_the_defaults_kept() -> None:
    from textual.widgets import SelectionList

    host = FormHost(form_fields(SPEC_SCHEMA))
    async with host.run_test(size=(100, 60)) as pilot:
        screen = host.screen
        assert isinstance(screen, ElicitationScreen)
        tags = screen.query_one("#field-7", SelectionList)
        assert list(tags.selected) == ["b"]  # the default, chosen
        tags.focus()
        await pilot.press("space")  # the highlighted first choice, "a"
        await pilot.pause()
        screen.query_one("#field-8", SelectionList).select("blue")
        await pilot.press("ctrl+s")
        await pilot.pause()

    [(action, values)] = host.answers
    assert action == "accept"
    assert sorted(values["tags"]) == ["a", "b"] and values["teams"] == ["blue"]
    assert values["email"] == "ada@example.org" and values["size"] == "l"

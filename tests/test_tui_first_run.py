"""The dashboard's keys and words at a first run, through the real widgets (Pilot, FakeSession).

ctrl+c as in Claude Code and Codex (interrupt, clear, twice quits); the palette's entries say the
state they change and offer only what can be done; each dialog's footer shows its own answers.
"""

from __future__ import annotations

from typing import Any

from app.surfaces.dashboard.app import QUIT_WINDOW_S, TidegaugeApp
from dashboard_helpers import engine_texts, send, settle
from snapshot_apps.fake_agent import Ask, FakeSession, Gate, Text

SIZE = (80, 24)


class StepClock:
    """The App's clock for ctrl+c's window: time moves only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _app(agent: Any) -> tuple[TidegaugeApp, StepClock]:
    app = TidegaugeApp(agent, cursor_blink=False)
    clock = StepClock()
    app.clock = clock
    return app, clock


def _notes(app: TidegaugeApp) -> list[str]:
    """The toasts shown now (Textual's "Do you want to quit?" was one, over the gauge)."""
    return [f"{note.title} {note.message}" for note in app._notifications]


async def test_ctrl_c_interrupts_a_running_turn_and_the_dashboard_stays() -> None:
    gate = Gate()
    agent = FakeSession({"slow": [Text("starting"), gate, Text("never shown")]})
    app, _clock = _app(agent)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "slow")
        await gate.reached.wait()
        await pilot.press("ctrl+c")
        await settle(pilot)
        assert agent.history == ["slow", "starting\n\n[interrupted by the user]"]
        assert any(t.startswith("interrupted by the user") for t in engine_texts(app, "interrupted"))
        assert app.is_running and app.return_code is None
        assert _notes(app) == []


async def test_ctrl_c_clears_the_prompt_when_idle_and_says_what_a_second_does() -> None:
    agent = FakeSession()
    app, clock = _app(agent)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"a draft")
        await pilot.press("ctrl+c")
        await pilot.pause()
        prompt = app.prompt_box
        assert prompt.value == ""
        assert "ctrl+c again quits" in str(prompt.border_subtitle)
        assert _notes(app) == []
        clock.now += QUIT_WINDOW_S + 0.5  # a second press later than the window does not quit
        await pilot.press(*"more", "ctrl+c")
        await pilot.pause()
        assert app.is_running and prompt.value == ""
        assert agent.calls == []  # nothing was sent or interrupted


async def test_ctrl_c_twice_within_a_second_quits() -> None:
    app, clock = _app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        clock.now += QUIT_WINDOW_S / 2
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0  # the App was asked to exit, as ctrl+q does


async def test_ctrl_c_with_a_selection_in_the_prompt_copies_it_and_keeps_the_text() -> None:
    app, _clock = _app(FakeSession())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"keep me", "shift+home")
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.prompt_box.value == "keep me"
        assert app.clipboard == "keep me"
        await pilot.press("ctrl+c")  # the first press only copied: this one clears, it does not quit
        await pilot.pause()
        assert app.is_running


def _palette(app: TidegaugeApp) -> list[str]:
    """The command palette's entries (ctrl+p lists these)."""
    return [command.title for command in app.get_system_commands(app.screen)]


async def test_the_palette_names_each_toggle_by_its_state_and_offers_interrupt_only_while_busy() -> None:
    gate = Gate()
    agent = FakeSession({"slow": [Text("starting"), gate, Text("done")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:  # tall enough: the chart is shown
        await pilot.pause()
        entries = _palette(app)
        assert "Hide context chart and breakdown" in entries
        assert "Interrupt" not in entries and "Open the full output" in entries
        assert not any("/" in entry for entry in entries)  # no "Show / hide": the entry says which
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert "Show context chart and breakdown" in _palette(app)
        await send(pilot, "slow")
        await gate.reached.wait()
        await pilot.pause()
        assert "Interrupt" in _palette(app)
        gate.open()
        await settle(pilot)
        assert "Interrupt" not in _palette(app)


def _footer_words(app: TidegaugeApp) -> tuple[set[str], str]:
    """The keys the open dialog's own footer draws, and its row as drawn."""
    from widgets.key_footer import KeyFooter

    (footer,) = app.screen.query(KeyFooter)
    return footer.shown_keys, footer.render().plain


async def _until(pilot: Any, condition: Any, what: str) -> None:
    for _ in range(2_000):
        if condition():
            return
        await pilot.pause()
    raise AssertionError(f"never happened: {what}")


async def test_the_compaction_dialog_footer_shows_its_own_answers_not_the_main_keys() -> None:
    from widgets.confirm_screen import ForecastConfirmScreen

    from snapshot_apps.fake_agent import context

    app = TidegaugeApp(FakeSession(start_context=context(40_000)), cursor_blink=False)  # something to compact
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        await _until(pilot, lambda: isinstance(app.screen, ForecastConfirmScreen), "the compaction dialog")
        keys, row = _footer_words(app)
        assert {"y", "n"} <= keys, row
        assert not keys & {"ctrl+s", "ctrl+o", "ctrl+g", "ctrl+r"}, row  # they do nothing while it is open
        await pilot.press("n")


async def test_the_approval_footer_lists_every_answer_the_call_offers_at_80_columns() -> None:
    from app.kernel.describe import approval_choices
    from app.kernel.events import ApprovalRequestEvent
    from widgets.approval_screen import ApprovalScreen

    request = ApprovalRequestEvent(request_id="r1", tool_id="t1", name="run_bash", input={"command": "git status"},
                                   summary="git status", choices={"exact": ["run_bash(git status)"],
                                                                  "prefix": ["run_bash(git:*)"]})
    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        answers: list[Any] = []
        app.push_screen(ApprovalScreen("run_bash", request.input, approval_choices(request)), answers.append)
        await _until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval dialog")
        await pilot.pause()
        keys, row = _footer_words(app)
        assert {"y", "n", "e", "p", "a", "escape"} <= keys, row
        await pilot.press("p")
        await _until(pilot, lambda: answers, "the answer")
        assert answers == [("always_prefix", False)]
        # a call that offers no exact or prefix rule: e and p are not listed, and do nothing
        app.push_screen(ApprovalScreen("write_file", {"path": "a"}), answers.append)
        await _until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the second dialog")
        await pilot.pause()
        keys, row = _footer_words(app)
        assert {"y", "n", "a"} <= keys and not keys & {"e", "p"}, row
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ApprovalScreen) and len(answers) == 1
        await pilot.press("n")


def test_help_lists_all_six_answers_of_the_approval_dialog() -> None:
    import re

    from app.surfaces.dashboard.app import HELP_KEYS
    from widgets.approval_screen import ANSWER_KEYS

    (approval,) = [words for key, words in HELP_KEYS if key == "approval"]
    said = {entry.split(" ", 1)[0] for entry in re.split(r" · |; ", approval)}
    answers = {*ANSWER_KEYS.values(), "escape"}
    assert len(answers) == 6
    assert answers | {"s"} <= said, approval


async def test_ctrl_t_on_a_call_that_was_not_cleared_names_the_call_not_its_id() -> None:
    # A provider's id (Anthropic's toolu_..., OpenAI's call_...) on a real read of the demo's
    # workspace: what the refusal names is the call as the tool list shows it, not the model's id.
    agent = FakeSession({"read it": [Ask("read_file", {"path": "README.md"}, id="toolu_01Xq7call_9"),
                                     Text("Read it.")]})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, "read it")
        await settle(pilot)
        assert agent.answers == ["yes"], agent.answers  # the read ran (a read is not asked)
        tool_list = app.tool_panel.tool_list
        tool_list.focus()
        await pilot.press("home", "ctrl+t")
        await _until(pilot, lambda: any("not cleared" in t for t in engine_texts(app)), "the refusal's line")
        (line,) = [t for t in engine_texts(app) if "not cleared" in t]
        assert "toolu" not in line and "call_" not in line, line
        assert "read_file README.md" in line, line


async def test_the_full_output_viewer_searches_as_less_does_and_says_where_it_is() -> None:
    from widgets.output_viewer import OutputViewer

    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        viewer = app.query_one(OutputViewer)
        lines = [f"{i:>6} INFO all is well" for i in range(3_000)]
        for row in (1_200, 2_500):
            lines[row] = f"{row:>6} ERROR database connection refused"
        viewer.set_text("\n".join(lines))
        viewer.reading = True  # as the panel says when a full output opens (ctrl+o)
        viewer.focus()
        await pilot.pause()
        assert viewer.position_text().startswith("line 1–")
        assert "of 3,000 (" in viewer.position_text()
        await pilot.press("slash", *"error", "enter")  # lower case: case-insensitive, as less -i
        await pilot.pause()
        assert viewer.matches == [1_200, 2_500]
        assert viewer.scroll_offset.y <= 1_200 < viewer.scroll_offset.y + viewer.size.height - 1
        assert "match 1 of 2" in viewer.position_text()
        assert app.prompt_box.value == ""  # the keys were the search's, not the prompt's
        await pilot.press("n")
        await pilot.pause()
        assert "match 2 of 2" in viewer.position_text()
        assert viewer.scroll_offset.y <= 2_500 < viewer.scroll_offset.y + viewer.size.height - 1
        await pilot.press("N")
        await pilot.pause()
        assert "match 1 of 2" in viewer.position_text()
        await pilot.press("end")
        await pilot.pause()
        assert "of 3,000 (100%)" in viewer.position_text()
        # escape while typing cancels the search and interrupts nothing; a miss says so
        await pilot.press("slash", *"Nowhere", "enter")
        await pilot.pause()
        assert "/Nowhere: not found" in viewer.position_text()
        await pilot.press("slash", "x", "escape")
        await pilot.pause()
        assert viewer.search_typed is None and viewer.search_query == "Nowhere"
        # other letters still go to the prompt
        await pilot.press("h", "i")
        await pilot.pause()
        assert app.prompt_box.value == "hi"


async def test_the_resume_picker_at_80x24_puts_the_title_first_and_fits_every_row(tmp_path: Any) -> None:
    from textual.widgets import OptionList

    from app.kernel.events import UsageEvent, UserMessageEvent
    from app.session.store import SessionStore, session_rows
    from snapshot_apps.fake_agent import context as context_event

    def _context_at(tokens: int) -> Any:
        return context_event(tokens)
    from widgets.session_picker import SessionPicker

    store = SessionStore(tmp_path / "data")
    for prompt in ("find errors in app.log", "summarize the project and say which module is the riskiest one"):
        session = store.create(tmp_path, "demo", "demo-scripted")
        with session.writer() as writer:
            writer.append_event(UserMessageEvent(text=prompt))
            for turn in range(11):  # the widest figures a row has: 12 turns, 150.0K tokens, $12.35
                writer.append_event(UserMessageEvent(text=f"and then {turn}"))
            writer.append_event(UsageEvent(input_tokens=1, cache_read_tokens=0, cache_write_tokens=0,
                                           output_tokens=1, context_tokens=2, cost_usd=12.3456))
            writer.append_event(_context_at(150_000))
    rows = session_rows(tmp_path / "data", tmp_path, choice=True)
    app = TidegaugeApp(resume_factory=lambda _id: FakeSession(), list_sessions=lambda: rows, pick_session=True,
                       cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, SessionPicker), "the picker")
        options = app.screen.query_one(OptionList)
        room = options.scrollable_content_region.width
        for index in range(options.option_count):
            lines = str(options.get_option_at_index(index).prompt).splitlines()
            assert lines[0] in ("find errors in app.log",
                                "summarize the project and say which module is the riskiest one"[:55] + "…")
            assert "12 turns" in lines[1] and "150.0K tokens" in lines[1] and "$12.35" in lines[1], lines
            assert "demo/demo-scripted" in lines[2]
            assert all(len(line) <= room for line in lines), (room, lines)  # nothing wraps


async def test_escape_in_the_resume_picker_at_start_says_that_nothing_was_resumed() -> None:
    from widgets.session_picker import SessionPicker

    app = TidegaugeApp(resume_factory=lambda _id: FakeSession(), list_sessions=lambda: [], pick_session=True,
                       cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: isinstance(app.screen, SessionPicker), "the picker")
        await pilot.press("escape")
        await _until(pilot, lambda: app.return_code == 0, "quit")
    assert app.exit_note is not None and "no session resumed" in app.exit_note
    assert "\n" not in app.exit_note and "tidegauge sessions" in app.exit_note


async def test_a_truncated_call_whose_result_was_cleared_keeps_both_badges_in_the_80x24_tool_list() -> None:
    from widgets.tool_call_line import ToolCallInfo

    app = TidegaugeApp(FakeSession(), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        tool_list = app.tool_panel.tool_list
        tool_list.add_call(ToolCallInfo(id="a", name="run_bash", summary="cat app.log", status="ok",
                                        original_chars=15_188_963, kept_chars=32_300, truncated=True,
                                        duration_ms=101, cleared=True))
        tool_list.add_call(ToolCallInfo(id="b", name="run_bash", summary="cat app.log", status="ok",
                                        original_chars=15_188_963, kept_chars=32_300, truncated=True,
                                        duration_ms=101))
        await pilot.pause()
        room = tool_list.scrollable_content_region.width
        both, one = (tool_list.render_line(y).text.rstrip() for y in (0, 1))
        assert both.endswith(" trunc   cleared") or both.endswith("truncated   cleared"), both
        assert len(both) <= room and both.startswith("✓ ")
        assert one.endswith("truncated"), one


async def test_at_80x24_the_header_names_the_provider_during_an_approval_and_the_placeholder_stays_whole(
        tmp_path: Any) -> None:
    from snapshot_apps.fake_agent import Ask, session_steps
    from widgets.header_bar import HeaderBar
    from widgets.prompt_box import PromptBox

    agent = FakeSession({"approve": [Ask("run_bash", {"command": "make"})]})
    agent.info = agent.info.model_copy(update={"provider_label": "demo (scripted model)"})
    app = TidegaugeApp(agent, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        header = app.query_one(HeaderBar)
        await send(pilot, "approve")
        await _until(pilot, lambda: "waiting for approval" in header.render().plain, "the approval's state")
        row = header.render().plain
        # the step count gave way: the provider keeps more than "demo …", the session id stays whole
        short_id = agent.info.session_id.rsplit("-", 1)[-1]
        assert "demo (sc" in row and f"session {short_id}" in row and "step" not in row, row
        await pilot.press("n")
        await settle(pilot)

    log = tmp_path / "call-1.txt"
    log.write_text("\n".join(f"line {i}" for i in range(500)))
    app = TidegaugeApp(FakeSession({"go": session_steps(str(log))[:13]}), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        await pilot.press("ctrl+o")
        await _until(pilot, lambda: app.tool_panel.expanded, "the full output opened")
        await pilot.pause()
        prompt = app.query_one(PromptBox)
        assert prompt.placeholder.endswith(")"), prompt.placeholder
        assert len(prompt.placeholder) < prompt.content_region.width


def test_the_sub_agent_line_says_how_much_of_its_report_it_has_written() -> None:
    from app.kernel.events import SubAgentEvent
    from app.surfaces.conversation_view import SubAgentState
    from widgets.sub_agent_line import sub_agent_text

    state = SubAgentState("task-1")
    state.apply(SubAgentEvent(call_id="task-1", status="started", summary="find the importer's rejects"))
    state.apply(SubAgentEvent(call_id="task-1", status="tool", tool="read_file", summary="importer.py", step=3))
    assert "writing" not in sub_agent_text(state, unfolded=True).plain
    state.apply(SubAgentEvent(call_id="task-1", status="writing", step=4, written_chars=1_400))
    assert "writing… 1,400 chars" in sub_agent_text(state, unfolded=True).plain.splitlines()[0]
    state.apply(SubAgentEvent(call_id="task-1", status="finished", summary="end_turn", step=4))
    assert "writing" not in sub_agent_text(state, unfolded=False).plain

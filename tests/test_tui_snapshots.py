"""Snapshots of the main screens (pytest-textual-snapshot).

The fake agent gives a fixed cwd, session id and durations, the prompt's
cursor does not blink and nothing animates, so the SVGs are the same on
every run. Update after an intended change with ``pytest --snapshot-update``
and look at the new SVGs before committing them.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from app.surfaces.dashboard.app import TidegaugeApp
from snapshot_apps.fake_agent import Ask, FakeSession, Text, context, session_steps

SIZE = (160, 50)
# The terminal sizes people use, smallest to largest: the layout is checked at each.
SIZES = {"80x24": (80, 24), "100x30": (100, 30), "160x50": (160, 50), "220x60": (220, 60)}
# A fixed path: it is shown on screen, so it must not vary between runs.
FULL_OUTPUT = Path("/tmp/tidegauge-snapshots/tool-results/call-1.txt")


@pytest.fixture(autouse=True)
def full_output_file() -> Path:
    """The file the snapshots show and open. Its path is fixed (it is drawn), so concurrent
    suites share it: it is written whole under a private name and renamed into place, and only
    when its content differs, so no run ever reads it half written or truncated by another."""
    lines = [f"2026-10-18 11:{(i // 60) % 60:02d}:{i % 60:02d} INFO request {i} handled" for i in range(3_000)]
    lines.append("2026-10-18 12:00:01 ERROR database connection refused")
    content = ("\n".join(lines) + "\n").encode()
    FULL_OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    try:
        if FULL_OUTPUT.read_bytes() == content:
            return FULL_OUTPUT
    except OSError:
        pass
    private = FULL_OUTPUT.with_name(f".{FULL_OUTPUT.name}.{os.getpid()}.{secrets.token_hex(4)}")
    private.write_bytes(content)
    os.replace(private, FULL_OUTPUT)
    return FULL_OUTPUT


# A conversation over the warning line (130K), under the auto-compact line (150K): the scripted
# tool events draw the calls, the real engine's figures the gauge.
OVER = 138_000


def make_app(start_tokens: int | None = None) -> tuple[TidegaugeApp, FakeSession]:
    """``start_tokens``: the conversation the session starts with is about that long."""
    steps = session_steps(str(FULL_OUTPUT))
    scripted = {
        "under": steps[:13],  # two tool calls, context well under the warning line
        "over": steps,  # nine more reads: the warning line is crossed
        "approve": [Ask("run_bash", {"command": "rm -rf build && make"})],
        # two real reads of the demo project's files: results in the real context, to evict or pin
        "read two files": [Ask("read_file", {"path": "README.md"}, id="call-1"),
                           Ask("read_file", {"path": "CHANGELOG.md"}, id="call-2"), Text("Read both.")],
    }
    agent = FakeSession(scripted, start_context=None if start_tokens is None else context(start_tokens))
    agent.named_the_same_every_run()
    return TidegaugeApp(agent, cursor_blink=False), agent


async def until(pilot, condition, attempts: int = 2_000) -> None:
    """Let the app run until ``condition()`` holds (state, not time, decides).

    It never gives up silently: a snapshot of a screen that had not reached its state
    would fail as a confusing image diff, so it fails here, saying what it waited for.
    """
    await pilot.app.workers.wait_for_complete()
    for _ in range(attempts):
        if condition():
            break
        await pilot.pause()
    else:
        raise AssertionError(f"until: the app never reached the state after {attempts} pauses "
                             f"(screen: {type(pilot.app.screen).__name__})")
    await pilot.pause()
    await pilot.pause()


def drive(*prompts: str, keys: tuple[str, ...] = (), wait_workers: bool = True):
    async def run_before(pilot) -> None:
        for prompt in prompts:
            box = pilot.app.query_one("#prompt")
            box.value = prompt
            box.focus()
            await pilot.press("enter")
            if wait_workers:
                # The turn has ended (its session says so), not just the App's workers: a next
                # prompt typed during it would be queued and drawn as such.
                await until(pilot, lambda: not pilot.app.session.pending)
            await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        await pilot.pause()

    return run_before


def test_snapshot_start(snap_compare) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=SIZE)


def test_snapshot_under_the_warning_line(snap_compare) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=SIZE, run_before=drive("under"))


@pytest.mark.parametrize("size", list(SIZES))
def test_snapshot_over_the_warning_line(snap_compare, size: str) -> None:
    app, _ = make_app(start_tokens=OVER)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=drive("over"))


def test_snapshot_truncated_output_opened_with_ctrl_o_at_80x24(snap_compare) -> None:
    """ctrl+o with nothing picked: the latest cut output, the viewer focused, its keys and file shown."""
    app, _ = make_app()

    async def run_before(pilot) -> None:
        await drive("under")(pilot)
        await pilot.press("ctrl+o")
        await until(pilot, lambda: pilot.app.tool_panel.expanded)

    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=run_before)


def test_snapshot_chart_brought_back_at_100x30(snap_compare) -> None:
    app, _ = make_app(start_tokens=OVER)
    assert snap_compare(app, terminal_size=SIZES["100x30"], run_before=drive("over", keys=("ctrl+g",)))


def test_snapshot_after_auto_compaction(snap_compare) -> None:
    """A conversation past the auto-compact line: the real engine compacts it (its summary call to
    the scripted model) before the next prompt's request, and the gauge drops to what is left.
    The prompt has no script of its own: the reply is the scripted model's default."""
    app, agent = make_app(start_tokens=152_000)

    async def run_before(pilot) -> None:
        await drive("compact")(pilot)
        await until(pilot, lambda: agent.context_event().projected_tokens < 20_000)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_truncated_output_expanded(snap_compare) -> None:
    app, _ = make_app()

    async def run_before(pilot) -> None:
        await drive("under")(pilot)
        pilot.app.tool_panel.select_call("call-1")
        await pilot.press("ctrl+o")
        await until(pilot, lambda: pilot.app.tool_panel.expanded)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_approval_modal(snap_compare) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=SIZE, run_before=drive("approve", wait_workers=False))


def test_snapshot_reset_confirmation(snap_compare) -> None:
    app, _ = make_app()
    assert snap_compare(app, terminal_size=SIZE, run_before=drive("under", keys=("ctrl+r",)))


@pytest.mark.parametrize("size", ["80x24", "142x40"])
def test_snapshot_start_footer_and_header(snap_compare, size: str) -> None:
    """The first screen at the widths the footer cut a word at ("^o F▏" at 80, "^s C▏" at 142):
    every key drawn whole, the project and the session's short id in the header."""
    app, _ = make_app()
    width, height = (int(n) for n in size.split("x"))
    assert snap_compare(app, terminal_size=(width, height))


def test_snapshot_help_at_80x24(snap_compare) -> None:
    """/help laid out for the 80-column conversation: one entry per row, the words under their column."""
    app, _ = make_app()
    assert snap_compare(app, terminal_size=SIZES["80x24"], run_before=drive("/help"))


def test_snapshot_palette_server_compaction_toggle(snap_compare) -> None:
    """A provider that compacts on its server: one palette entry, saying the state it is in."""
    agent = FakeSession({}, server_compaction=False).named_the_same_every_run()
    app = TidegaugeApp(agent, cursor_blink=False)

    async def run_before(pilot) -> None:
        await pilot.press("ctrl+p")
        await until(pilot, lambda: type(pilot.app.screen).__name__ == "CommandPalette")
        for key in "server":
            await pilot.press(key)
        await until(pilot, lambda: "Server-side compaction: off (turn on)" in pilot.app.screen.query_one(
            "CommandList").get_option_at_index(0).prompt.plain if pilot.app.screen.query_one(
            "CommandList").option_count else False)

    assert snap_compare(app, terminal_size=SIZES["100x30"], run_before=run_before)

"""Issue 25: "plans are what runs", and the turns-to-compact figure.

What the user saw: a forecast describing another compaction than the one that ran, a reset
dialog with a cache figure from before the last compaction, and "auto-compact next turn"
right after a compaction with a figure that jumped. Everything here goes through the real
engine (and, where it says so, the real session and the fake server).
"""

from __future__ import annotations

from typing import Any

from agent_helpers import make_agent
from test_engine_support import counted, summary_text, text_reply, tool_reply, write_words

# A large line: no auto-compaction gets in the way of measuring the pace.
ROOMY = dict(window=1_000_000, budget=200_000)


def reads_then_done(provider: str, names: list[str]) -> list[Any]:
    steps = [counted(provider, lambda u, n=n: tool_reply(provider, [("read_file", {"path": n})], usage=u))
             for n in names]
    return [*steps, counted(provider, lambda u: text_reply(provider, "read them", usage=u))]


# ---- turns to compact: one figure, the engine's, restarted by every compaction, smoothed ----

async def test_right_after_a_compaction_the_turns_figure_starts_afresh(fake_llm, tmp_path, monkeypatch):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider="openai", **ROOMY)
    names = [f"f{i}.txt" for i in range(4)]
    for i, name in enumerate(names):
        write_words(agent.workspace / name, 1_500, f"tag{i}")
    fake_llm.enqueue(*reads_then_done("openai", names))
    try:
        await agent.run_turn("read f0.txt to f3.txt")
        assert agent.context_event().turns_to_compact is not None  # growing: a pace is known
        fake_llm.enqueue(counted("openai", lambda u: text_reply("openai", summary_text("R"), usage=u)))
        compaction = await agent.compact()
        assert compaction.ok, compaction.reason
        after = agent.context_event()
        # the old conversation's pace says nothing about the summary's: no figure until a call is seen
        assert after.projected_tokens < after.thresholds.auto_compact_line // 10
        assert after.turns_to_compact is None, (
            f"~{after.turns_to_compact} turns right after a compaction, at {after.projected_tokens:,} of "
            f"{after.thresholds.auto_compact_line:,}: the pace of the context before it")
    finally:
        await agent.aclose()


async def test_one_big_read_does_not_make_the_turns_figure_jump(fake_llm, tmp_path, monkeypatch):
    agent, _events = make_agent(fake_llm, tmp_path, monkeypatch, provider="openai", **ROOMY)
    small = [f"s{i}.txt" for i in range(5)]
    for i, name in enumerate(small):
        write_words(agent.workspace / name, 300, f"small{i}")
    write_words(agent.workspace / "big.txt", 12_000, "big")
    fake_llm.enqueue(*reads_then_done("openai", small))
    try:
        await agent.run_turn("read the small files")
        steady = agent.context_event()
        assert steady.turns_to_compact is not None
        fake_llm.enqueue(*reads_then_done("openai", ["big.txt"]))
        await agent.run_turn("now read big.txt")
        after = agent.context_event()
        grew = after.projected_tokens - steady.projected_tokens
        assert grew > 10_000  # the outlier is there: the big file is in the context
        # The typical call still adds what the small reads added; at that pace the remaining room
        # lasts nearly as long as before (a mean over the window would have cut it to a fraction).
        assert after.turns_to_compact is not None and after.turns_to_compact >= steady.turns_to_compact * 0.8, (
            f"~{steady.turns_to_compact} turns before one read of ~{grew:,} tokens, ~{after.turns_to_compact} after")
    finally:
        await agent.aclose()


async def test_the_gauge_draws_the_engines_turns_figure_as_it_is() -> None:
    """The gauge smoothed the engine's figure once more: readings from before a compaction
    kept it at "next turn" after one (the engine smooths and restarts it; the gauge only draws)."""
    from dashboard_helpers import send, settle
    from snapshot_apps.fake_agent import FakeSession, context

    from app.kernel import events as ev
    from app.surfaces.dashboard.app import TidegaugeApp
    from widgets.gauge_bar import GaugeBar

    near = [context(140_000, turns=1), context(144_000, turns=1), context(148_000, turns=1)]
    compacted = [ev.CompactionEvent(trigger="auto", ok=True, messages_before=40, messages_after=1,
                                    tokens_before=148_000, tokens_after=15_000),
                 context(19_000, turns=17)]
    app = TidegaugeApp(FakeSession({"go": [*near, *compacted]}), cursor_blink=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await send(pilot, "go")
        await settle(pilot)
        figures = app.query_one(GaugeBar).render().plain.split("\n")[0]
        assert "auto-compact in ~17 turns" in figures, figures

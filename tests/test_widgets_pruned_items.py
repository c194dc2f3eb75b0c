"""Pruned conversation items let go of what they rendered (textual 8.2.8, Textualize/textual#6665)."""

from __future__ import annotations

import gc

from textual.strip import Strip

from app.surfaces.dashboard.app import TidegaugeApp
from snapshot_apps.fake_agent import FakeSession


def _strips_alive() -> int:
    gc.collect()
    return sum(1 for thing in gc.get_objects() if isinstance(thing, Strip))


async def test_strips_of_pruned_items_are_released_as_the_session_grows() -> None:
    app = TidegaugeApp(FakeSession(), cursor_blink=False, max_mounted=20)
    async with app.run_test(size=(120, 40)) as pilot:
        conversation = app.conversation

        async def add(count: int) -> None:
            for number in range(count):
                conversation.add_engine("info", f"item {number} " + "x" * 100 + "\n" + "y" * 90)
                if number % 20 == 0:
                    await pilot.pause()  # drawn, so each item rendered its lines before it is pruned
            await pilot.pause()
            await pilot.pause()

        await add(60)
        after_first = _strips_alive()
        # 120 more items drawn and pruned: what they rendered must not stay. Kept, they leave ~1.6
        # strips each (195 here without the refresh before removal); released, none (0 to -67).
        await add(120)
        after_more = _strips_alive()
        assert conversation.mounted_count <= 20 + conversation.slack
        assert after_more - after_first < 75, (
            f"{after_more - after_first:,} more strips alive after 120 more pruned items ({after_first:,} before)")

"""A compositor that renders, for a partial update, only the widgets the update touches.

Textual's compositor picks the widgets to render for an update by their *clip* (the visible
area of their parent), not by where they are: every child of the screen has the whole screen
as its clip, and every child of a container the container's area. So a key typed in the prompt
(three lines at the bottom of the conversation column) rendered the header, the footer, the
context panel with its gauge and chart, the conversation's frame and the output panel as well,
each in full, on every frame: most of a frame's time while a reply streams, and the key's echo
waited for it. Here a widget is rendered only when the part of it on screen (its region inside
its clip) meets the area being updated. A widget outside that area puts no cell into the update
(the update writes only the dirty spans, all inside it), so what is drawn is unchanged; only
the work that was thrown away is not done.

Written against Textual's ``Compositor._get_renders`` (textual is pinned in pyproject.toml):
same arguments, same results, in the same order, for the widgets it keeps.
"""

from __future__ import annotations

from typing import Iterable

from textual._compositor import Compositor
from textual.geometry import Region
from textual.strip import Strip


class CroppedCompositor(Compositor):
    """``Compositor`` whose partial updates skip widgets wholly outside the updated area."""

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not shown.area or (crop is not None and not crop.overlaps(shown)):
                continue
            if clip.contains_region(region):
                yield region, clip, widget.render_lines(Region(0, 0, region.width, region.height))
            else:
                yield region, clip, widget.render_lines(
                    Region(shown.x - region.x, shown.y - region.y, shown.width, shown.height))

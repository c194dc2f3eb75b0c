"""The footer: the keys that work now, on one row, the ones that matter most kept.

Textual's footer lays its keys out in a row that overflows: at 80 columns the last key
visible was cut mid-word ("^o F▏") and compact, reset and the chart were never seen. This
one orders the keys by the ranks the App gives (``ranks``: action name → rank, lower shown
first and kept longer; a region's keys it does not name come after) and, when they do not
all fit, leaves the least important out whole. The palette key stays at
the right. A click on a key presses it, as in Textual's footer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.binding import Binding
    from textual.screen import Screen

UNRANKED = 100  # an action the App did not rank (a region's own keys): kept after the ranked ones


def action_name(action: str) -> str:
    """"app.scroll_conversation(-1)" → "scroll_conversation": what ``ranks`` is keyed by."""
    return action.split("(", 1)[0].rsplit(".", 1)[-1]


@dataclass(frozen=True)
class FooterItem:
    """One entry: its keys as shown and pressed, its label, how much it matters."""

    keys: tuple[str, ...]  # as pressed (a click presses the first)
    actions: tuple[str, ...]  # their action names (as ``ranks`` names them)
    shown: tuple[str, ...]  # as displayed ("^o")
    label: str
    rank: int
    enabled: bool = True

    @property
    def width(self) -> int:
        return cell_len(" ".join(self.shown)) + (1 + cell_len(self.label) if self.label else 0)


class KeyFooter(Widget):
    """One row of keys; what does not fit is left out whole, least important first."""

    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    KeyFooter > .key-footer--key { color: $footer-key-foreground; text-style: bold; }
    KeyFooter > .key-footer--label { color: $footer-description-foreground; }
    KeyFooter > .key-footer--disabled { text-style: dim; }
    """

    COMPONENT_CLASSES = {"key-footer--key", "key-footer--label", "key-footer--disabled"}
    GAP = 2  # cells between two entries

    def __init__(self, ranks: dict[str, int] | None = None, *, drawn_last: tuple[str, ...] = (),
                 **kwargs: Any) -> None:
        """``drawn_last``: actions drawn after the others kept, whatever their rank (quit)."""
        super().__init__(**kwargs)
        self.ranks = dict(ranks or {})
        self.drawn_last = drawn_last
        self._spans: list[tuple[int, int, str]] = []  # where each drawn key is, for clicks
        self.shown_items: list[FooterItem] = []  # what the last render drew, palette included
        self._drawn_for: tuple[list[FooterItem], FooterItem | None, int] | None = None

    @property
    def shown_keys(self) -> set[str]:
        return {key for item in self.shown_items for key in item.keys}

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: "Screen[Any]") -> None:
        # Bindings are refreshed after every focus change and many key presses, mostly to the same
        # keys: a row drawn again for the same entries cost a start three renders of the footer.
        if self.is_attached and screen is self.screen and self._drawn_for != self._would_draw():
            self.refresh()

    def _would_draw(self) -> tuple[list[FooterItem], FooterItem | None, int]:
        kept, palette = self.fitting(self.size.width)
        return kept, palette, self.size.width

    # ------------------------------------------------------------------ items

    def _rank(self, binding: "Binding") -> int:
        return self.ranks.get(action_name(binding.action), UNRANKED)

    def items(self) -> tuple[list[FooterItem], FooterItem | None]:
        """The entries in the order Textual lists the bindings (focused region first), and the
        palette's. Bindings of one action are one entry; consecutive ones of a group too."""
        active = self.screen.active_bindings
        palette_key = self.app.COMMAND_PALETTE_BINDING
        by_action: dict[str, list[tuple[Binding, bool]]] = {}
        for key, (_node, binding, enabled, _tooltip) in active.items():
            if binding.show and key != palette_key:
                by_action.setdefault(binding.action, []).append((binding, enabled))
        items: list[FooterItem] = []
        pending: list[tuple[Binding, bool]] = []  # one group's bindings, to be one entry

        def flush() -> None:
            if not pending:
                return
            first, enabled = pending[0]
            group = first.group
            label = group.description if group is not None and len(pending) > 1 else first.description
            items.append(FooterItem(
                keys=tuple(b.key for b, _ in pending), actions=tuple(action_name(b.action) for b, _ in pending),
                shown=tuple(self.app.get_key_display(b) for b, _ in pending),
                label=label, rank=min(self._rank(b) for b, _ in pending), enabled=enabled))
            pending.clear()

        for bindings in by_action.values():
            binding, enabled = bindings[0]  # one key per action is shown (the first bound)
            if pending and (binding.group is None or binding.group != pending[0][0].group):
                flush()
            pending.append((binding, enabled))
            if binding.group is None:
                flush()
        flush()
        palette: FooterItem | None = None
        if self.app.ENABLE_COMMAND_PALETTE and palette_key in active:
            _node, binding, enabled, _tooltip = active[palette_key]
            palette = FooterItem(keys=(binding.key,), actions=(action_name(binding.action),), shown=(self.app.get_key_display(binding),),
                                 label=binding.description, rank=0, enabled=enabled)
        return items, palette

    def fitting(self, width: int) -> tuple[list[FooterItem], FooterItem | None]:
        """The entries that fit in ``width`` cells, least important left out first."""
        items, palette = self.items()
        room = width - 1 - (palette.width + self.GAP if palette is not None else 0)
        kept = list(items)

        def used() -> int:
            return sum(item.width for item in kept) + self.GAP * max(0, len(kept) - 1)

        kept.sort(key=lambda item: item.rank)  # stable: equal ranks keep Textual's order
        while kept and used() > room:
            kept.pop()  # the least important (of equal ranks, the one listed last)
        if palette is not None and palette.width + 1 > width:
            palette = None
        kept.sort(key=lambda item: any(action in self.drawn_last for action in item.actions))
        return kept, palette

    # ------------------------------------------------------------------ drawing

    def render(self) -> Text:
        width = self.size.width
        kept, palette = self.fitting(width)
        self._drawn_for = (list(kept), palette, width)
        key_style = self.get_component_rich_style("key-footer--key")
        label_style = self.get_component_rich_style("key-footer--label")
        disabled = self.get_component_rich_style("key-footer--disabled")
        text = Text(no_wrap=True, overflow="crop", end="")
        spans: list[tuple[int, int, str]] = []

        def draw(item: FooterItem) -> None:
            start = text.cell_len
            for index, (key, shown) in enumerate(zip(item.keys, item.shown)):
                if index:
                    text.append(" ")
                key_start = text.cell_len
                text.append(shown, key_style if item.enabled else key_style + disabled)
                spans.append((key_start, text.cell_len, key))
            if item.label:
                text.append(" ")
                text.append(item.label, label_style if item.enabled else label_style + disabled)
            if len(item.keys) == 1:  # a click on the label presses the key too
                spans[-1] = (start, text.cell_len, item.keys[0])

        text.append(" ")
        for index, item in enumerate(kept):
            if index:
                text.append(" " * self.GAP)
            draw(item)
        if palette is not None:
            text.append(" " * max(self.GAP, width - text.cell_len - palette.width - 1))
            draw(palette)
        self._spans = spans
        self.shown_items = [*kept, *([palette] if palette is not None else [])]
        return text

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                event.stop()
                self.app.simulate_key(key)
                return

"""The footer: Textual's, recomposed only when the keys it shows change, and fitted to
its width.

Textual's `Footer` rebuilds all its key widgets whenever the screen's bindings
are refreshed (each change of focus), three times while the dashboard starts,
though the keys shown stay the same; each rebuild costs about 20 ms of the UI
thread. This one compares what it would show with what it shows.

Where the keys do not all fit (80 columns), Textual's footer cuts the last ones
mid-word. This one keeps the keys that matter most (`keys.FOOTER_FIRST`, `?` first:
help lists the rest), in their usual order, and leaves the others out whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from carl_tui.ui.keys import FOOTER_FIRST

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import ComposeResult
    from textual.screen import Screen

PALETTE_ROOM = 12  # "▏^p palette" and its padding, docked right


def shown_keys(screen: Screen) -> tuple:
    """(key, description, enabled, tooltip) of each binding the footer shows."""
    return tuple((b.key, b.description, enabled, tooltip)
                 for _node, b, enabled, tooltip in screen.active_bindings.values() if b.show)


def key_width(key: FooterKey) -> int:
    """The cells a (non-compact) footer key takes: " k " and "Description "."""
    return len(key.key_display) + 2 + (len(key.description) + 1 if key.description else 0)


def fitted(keys: list[FooterKey], width: int) -> list[FooterKey]:
    """`keys` if they fit in `width` cells; else the most needed that fit (FOOTER_FIRST's
    order, then the footer's), shown in the footer's order."""
    if sum(key_width(k) for k in keys) <= width:
        return keys

    def need(item: tuple[int, FooterKey]) -> tuple[int, int]:
        at, key = item
        name = key.action.rpartition(".")[2]
        return (FOOTER_FIRST.index(name) if name in FOOTER_FIRST else len(FOOTER_FIRST), at)

    kept, used = set(), 0
    for at, key in sorted(enumerate(keys), key=need):
        if used + key_width(key) <= width:
            kept.add(at)
            used += key_width(key)
    return [k for at, k in enumerate(keys) if at in kept]


class KeyFooter(Footer):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._composed: tuple | None = None  # the keys of the last rebuild asked for
        self._width = 0  # the width the keys were fitted to

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        keys = [w for w in widgets if isinstance(w, FooterKey)
                and not w.has_class("-command-palette")]
        if any(not isinstance(w, FooterKey) for w in widgets):  # binding groups: as is
            yield from widgets
            return
        self._width = self.app.size.width
        room = self._width - (PALETTE_ROOM if len(widgets) > len(keys) else 0)
        shown = fitted(keys, room)
        yield from (w for w in widgets if w not in keys or w in shown)

    def on_resize(self) -> None:
        if self.app.size.width != self._width and self._bindings_ready:
            self.refresh(recompose=True)

    def bindings_changed(self, screen: Screen) -> None:
        will_compose = screen.app.app_focus and self.is_attached and screen is self.screen
        if will_compose:
            keys = shown_keys(screen)
            if keys == self._composed:
                self._bindings_ready = True
                return
            self._composed = keys
        super().bindings_changed(screen)

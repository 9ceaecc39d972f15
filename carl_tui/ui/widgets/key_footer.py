"""The footer: Textual's, recomposed only when the keys it shows change.

Textual's `Footer` rebuilds all its key widgets whenever the screen's bindings
are refreshed (each change of focus), three times while the dashboard starts,
though the keys shown stay the same; each rebuild costs about 20 ms of the UI
thread. This one compares what it would show with what it shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer

if TYPE_CHECKING:  # pragma: no cover
    from textual.screen import Screen


def shown_keys(screen: Screen) -> tuple:
    """(key, description, enabled, tooltip) of each binding the footer shows."""
    return tuple((b.key, b.description, enabled, tooltip)
                 for _node, b, enabled, tooltip in screen.active_bindings.values() if b.show)


class KeyFooter(Footer):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._composed: tuple | None = None  # the keys of the last rebuild asked for

    def bindings_changed(self, screen: Screen) -> None:
        will_compose = screen.app.app_focus and self.is_attached and screen is self.screen
        if will_compose:
            keys = shown_keys(screen)
            if keys == self._composed:
                self._bindings_ready = True
                return
            self._composed = keys
        super().bindings_changed(screen)

"""The runs overlaid on the dashboard's plots: picked (`c`), every run of the project
(`o`), or the fleet table's selection. A part the dashboard holds (`comparison`): it
keeps the choice and asks for the runs' snapshots (`CompareChanged`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from carl_tui.ui.messages import CompareChanged

if TYPE_CHECKING:  # pragma: no cover
    from textual.screen import Screen

    from carl_tui.events import RunRef
    from carl_tui.store import RunSnapshot


class Compared(Protocol):
    """What the part reads of the screen that holds it (`DashboardScreen`)."""

    snapshot: RunSnapshot | None  # the run shown
    runs: tuple[RunRef, ...]  # every run known

    def redraw(self, note: str | None = None) -> None: ...


class Comparison:
    def __init__(self, screen: Screen | Compared) -> None:
        self.screen = screen
        self.keys: list[str] = []  # run keys overlaid on every plot, in the order chosen
        self.overlay = False  # every run of the project overlaid

    def pick(self) -> None:
        """`c`: tick the runs to compare with the run shown."""
        from carl_tui.ui.screens.pickers import ComparePicker

        screen = self.screen
        current = screen.snapshot.run.key if screen.snapshot else None
        runs = [r for r in screen.runs if r.key != current]
        if not runs:
            screen.notify("no other runs to compare with yet", severity="warning")
            return
        items = [(r.key, f"{r.label}  [{r.source}: {r.project}]", r.key in self.keys)
                 for r in runs]

        def chosen(keys: set[str] | None) -> None:
            if keys is None:
                return
            self.keys = [r.key for r in runs if r.key in keys]
            self._ask(f"comparing with {len(self.keys)} run(s)" if self.keys
                      else "comparison off")

        screen.app.push_screen(ComparePicker(items), chosen)

    def toggle_overlay(self) -> None:
        self.overlay = not self.overlay
        self._ask("overlay: " + ("every run of the project" if self.overlay else "off"))

    def select(self, keys: tuple[str, ...]) -> None:
        """The fleet table's selection: overlaid on every plot of the run shown."""
        self.keys = list(keys)
        self.screen.post_message(CompareChanged(tuple(self.keys), self.overlay))
        self.screen.redraw()

    def _ask(self, note: str) -> None:
        """The runs to overlay change: the next update brings their snapshots."""
        self.screen.post_message(CompareChanged(tuple(self.keys), self.overlay))
        self.screen.notify(note, timeout=2)

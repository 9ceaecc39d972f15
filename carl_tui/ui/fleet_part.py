"""The app's part that opens the fleet table (`r`, `carl-tui fleet`) and run cards (`i`):
it gives each screen what it reads (the store, the clock, the Hub's prices), so the
screens never reach into the app."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from textual import on
from textual.app import App

from carl_tui.ui.messages import CardWanted, CompareSelected

if TYPE_CHECKING:  # pragma: no cover  (the store loads numpy: after the first frame)
    from carl_tui.store import RunStore
    from carl_tui.ui.screens.dashboard import DashboardScreen
    from carl_tui.ui.settings import Services


class FleetPart(App[None]):
    """Opens the fleet table and the run cards of `CarlApp`."""

    store: RunStore
    services: Services
    current_run: str | None

    @property
    def dashboard(self) -> DashboardScreen:
        raise NotImplementedError

    def switch_run(self, key: str) -> None:
        raise NotImplementedError

    def open_fleet(self, selected: Iterable[str] = ()) -> None:
        """The fleet table over the dashboard (once: `r` there again does nothing)."""
        from carl_tui.ui.screens.fleet_table import FleetScreen

        if isinstance(self.screen, FleetScreen):
            return
        services = self.services

        def prices() -> Mapping[str, float]:
            from carl_tui.hub import job_prices

            return job_prices(services.hub_api())

        def opened(key: str | None) -> None:  # enter on a row: that run, on the dashboard
            if key:
                self.switch_run(key)

        self.push_screen(FleetScreen(self.store, clock=self.services.clock,
                                     current=self.current_run, selected=selected,
                                     prices_of=prices), opened)

    @on(CompareSelected)
    def _compare_selected(self, selected: CompareSelected) -> None:
        self.dashboard.compare_with(selected.keys)

    @on(CardWanted)
    def _card_wanted(self, wanted: CardWanted) -> None:
        from carl_tui.ui.screens.run_card import RunCardScreen

        if wanted.key is None:
            self.notify("no run yet", severity="warning")
            return
        self.push_screen(RunCardScreen(self.store, wanted.key, wanted.compared,
                                       now=self.services.clock()))

"""The app's part that opens the fleet table (`r`, `carl-tui fleet`) and run cards (`i`):
it gives each screen what it reads (the store, the clock, the Hub's prices), so the
screens never reach into the app."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING

from textual import on
from textual.app import App

from carl_tui.errors import describe
from carl_tui.ui.messages import CardWanted, CompareSelected

if TYPE_CHECKING:  # pragma: no cover  (the store loads numpy: after the first frame)
    from carl_tui.store import RunStore
    from carl_tui.ui.follower import Follower
    from carl_tui.ui.screens.dashboard import DashboardScreen
    from carl_tui.ui.screens.fleet_table import FleetScreen
    from carl_tui.ui.settings import Services


#: The longest the sources wait for the fleet's first rows read ahead (`start_reading`).
AHEAD_WAIT_S = 1.0


class FleetPart(App[None]):
    """Opens the fleet table and the run cards of `CarlApp`."""

    store: RunStore
    services: Services
    current_run: str | None
    follower: Follower
    _prices: Mapping[str, float] | None = None  # the Hub's, once asked
    _fleet: FleetScreen | None = None  # the fleet table, while open

    @property
    def dashboard(self) -> DashboardScreen:
        raise NotImplementedError

    def switch_run(self, key: str) -> None:
        raise NotImplementedError

    def start_reading(self) -> None:
        """Start the sources; where the fleet table's first rows are read ahead, once they
        are drawn or none will come (`FleetScreen(ahead_done=)`), AHEAD_WAIT_S at most:
        drawn while the sources read, they take twice as long to the screen."""
        if self.services.first_rows is None:
            self.follower.start()
        else:
            self.set_timer(AHEAD_WAIT_S, self.follower.start)

    def open_fleet(self, selected: Iterable[str] = ()) -> None:
        """The fleet table over the dashboard (once: `r` there again does nothing)."""
        from carl_tui.ui.screens.fleet_table import FleetScreen

        if isinstance(self.screen, FleetScreen):
            return

        def opened(key: str | None) -> None:  # enter on a row: that run, on the dashboard
            self._fleet = None
            if key:
                self.switch_run(key)
            self.follower.reveal()  # the dashboard's run is in view: its stream opens

        self.follower.hidden = True  # no run opened meanwhile (a job's log: none read)

        self._fleet = FleetScreen(self.store, clock=self.services.clock,
                                  current=self.current_run, selected=selected,
                                  prices_of=self.job_prices,
                                  reading_history=lambda: self.follower.catching_up,
                                  painted=self.follower.painted.set,
                                  first_rows=self.services.first_rows,
                                  ahead_done=self.follower.start)
        self.services.first_rows = None  # the first table's only
        self.push_screen(self._fleet, opened)

    def fleet_store_changed(self) -> None:
        """The store changed: the fleet table, when open, looks at once (not at its next
        poll: a tenth of a second to its first rows)."""
        if self._fleet is not None and self._fleet.is_mounted:
            self._fleet.poll()

    def job_prices(self) -> Mapping[str, float]:
        """Each Jobs flavor's price per hour, asked of the Hub once (in a worker thread:
        the fleet table's, or the card's) and kept for the session's cards."""
        if self._prices is None:
            from carl_tui.hub import job_prices

            self._prices = job_prices(self.services.hub_api())
        return self._prices

    @on(CompareSelected)
    def _compare_selected(self, selected: CompareSelected) -> None:
        self.dashboard.compare_with(selected.keys)

    @on(CardWanted)
    def _card_wanted(self, wanted: CardWanted) -> None:
        if wanted.key is None:
            self.notify("no run yet", severity="warning")
            return
        from carl_tui.identity import HF_JOB

        snap = self.store.snapshot(wanted.key, max_points=2)
        if (self._prices is None and snap is not None and snap.job is not None
                and snap.run.source == HF_JOB):  # a Hugging Face job: its cost needs prices
            self.run_worker(partial(self._card_with_prices, wanted), thread=True,
                            group="card", exit_on_error=False, description="opening the card")
            return
        self._push_card(wanted)

    def _card_with_prices(self, wanted: CardWanted) -> None:
        try:
            self.job_prices()
        except Exception as exc:  # noqa: BLE001 - a missing price is a missing cost, said
            self.call_from_thread(self.notify, f"job cost unknown: {describe(exc)}",
                                  severity="warning")
        self.call_from_thread(self._push_card, wanted)

    def _push_card(self, wanted: CardWanted) -> None:
        from carl_tui.ui.screens.run_card import RunCardScreen

        self.push_screen(RunCardScreen(self.store, wanted.key or "", wanted.compared,
                                       now=self.services.clock(), prices=self._prices))

"""The part of the app that opens the fleet table (`r`, `carl-tui fleet`) and run cards
(`i`): it gives each screen what it reads (the store, the clock, the Hub's prices), so
the screens never reach into the app."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Protocol

from carl_tui.errors import describe

if TYPE_CHECKING:  # pragma: no cover  (the store loads numpy: after the first frame)
    from textual.app import App

    from carl_tui.store import RunStore
    from carl_tui.ui.follower import Follower
    from carl_tui.ui.messages import CardWanted
    from carl_tui.ui.screens.dashboard import DashboardScreen
    from carl_tui.ui.screens.fleet_table import FleetScreen
    from carl_tui.ui.settings import Services


class FleetHost(Protocol):
    """What the part reads of the app that holds it (`CarlApp`)."""

    services: Services
    store: RunStore
    follower: Follower
    dashboard: DashboardScreen
    current_run: str | None

    def switch_run(self, key: str) -> None: ...


class FleetPart:
    """Opens the fleet table and the run cards over `app`'s dashboard (`CarlApp.fleet`)."""

    def __init__(self, app: App | FleetHost) -> None:
        self.app = app
        self.prices: Mapping[str, float] | None = None  # the Hub's, once asked
        self.screen: FleetScreen | None = None  # the fleet table, while open

    def open(self, selected: Iterable[str] = ()) -> None:
        """The fleet table over the dashboard (once: `r` there again does nothing)."""
        from carl_tui.ui.screens.fleet_table import FleetScreen

        app, follower = self.app, self.app.follower
        if isinstance(app.screen, FleetScreen):
            return

        def opened(key: str | None) -> None:  # enter on a row: that run, on the dashboard
            self.screen = None
            if key:
                app.switch_run(key)
            follower.reveal()  # the dashboard's run is in view: its stream opens

        follower.hidden = True  # no run opened meanwhile (a job's log: none read)

        self.screen = FleetScreen(app.store, clock=self.app.services.clock,
                                  current=app.current_run, selected=selected,
                                  prices_of=self.job_prices,
                                  reading_history=lambda: follower.catching_up,
                                  painted=follower.painted.set)
        app.push_screen(self.screen, opened)

    def pick_run(self) -> None:
        """`r`: the fleet table, the runs compared on the dashboard selected in it."""
        if not self.app.store.runs():
            self.app.notify("no runs yet", severity="warning")
            return
        self.open(self.app.dashboard.compare)

    def store_changed(self) -> None:
        """The store changed: the fleet table, when open, looks at once (not at its next
        poll: a tenth of a second to its first rows)."""
        if self.screen is not None and self.screen.is_mounted:
            self.screen.poll()

    def job_prices(self) -> Mapping[str, float]:
        """Each Jobs flavor's price per hour, asked of the Hub once (in a worker thread:
        the fleet table's, or the card's) and kept for the session's cards."""
        if self.prices is None:
            from carl_tui.hub import job_prices

            self.prices = job_prices(self.app.services.hub_api())
        return self.prices

    def open_card(self, wanted: CardWanted) -> None:
        """`i`: the run's card (a Hugging Face job's asks the Hub's prices first, in a
        worker thread)."""
        app = self.app
        if wanted.key is None:
            app.notify("no run yet", severity="warning")
            return
        from carl_tui.identity import HF_JOB

        snap = app.store.snapshot(wanted.key, max_points=2)
        if (self.prices is None and snap is not None and snap.job is not None
                and snap.run.source == HF_JOB):  # a Hugging Face job: its cost needs prices
            app.run_worker(partial(self._card_with_prices, wanted), thread=True,
                           group="card", exit_on_error=False, description="opening the card")
            return
        self._push_card(wanted)

    def _card_with_prices(self, wanted: CardWanted) -> None:
        try:
            self.job_prices()
        except Exception as exc:  # noqa: BLE001 - a missing price is a missing cost, said
            self.app.call_from_thread(self.app.notify, f"job cost unknown: {describe(exc)}",
                                      severity="warning")
        self.app.call_from_thread(self._push_card, wanted)

    def _push_card(self, wanted: CardWanted) -> None:
        from carl_tui.ui.screens.run_card import RunCardScreen

        self.app.push_screen(RunCardScreen(self.app.store, wanted.key or "", wanted.compared,
                                           now=self.app.services.clock(), prices=self.prices))

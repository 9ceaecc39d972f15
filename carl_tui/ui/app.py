"""The dashboard app: layout, keys, and showing snapshots.

Data flow: the `Follower` (`follower.py`) runs the sources in background
threads that apply events to the thread-safe `RunStore` and wake the UI with
one collapsing message (`StoreChanged`); on the UI thread it takes an immutable
snapshot of the run on screen and posts it (`SnapshotUpdated`, with the notices to
raise). The app raises the notices and hands the message down to the dashboard,
which hands each widget its part. The dashboard asks for things with messages of
its own (`DashboardReady`, `CompareChanged`). The keys that act (launch, stop, push,
diagnose, jobs) are the `ActionController`'s (`controller.py`); what they learn
reaches the store through the follower, like the sources' events. Threads never
touch widgets. The app is one class built of parts it holds, not of mixins: the
fleet table and cards (`fleet_part.FleetPart`), the keys listed in the help and the
palette (`help.KeyHelp`), the guards (`guard.GuardKeeper`) and the controller.

The first frame comes first: importing this module, and building and drawing the
dashboard, loads neither numpy nor plotext nor any reader. Once that frame is on
screen (`screen_ready`) the sources are built and started, and the store, the
plots and the keys that act load as they are first used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.worker import Worker, WorkerState

from carl_tui.errors import describe
from carl_tui.redact import redact
from carl_tui.ui.attention import announce, load_alert_config
from carl_tui.ui.fleet_part import FleetPart
from carl_tui.ui.guard import GuardKeeper, start_guard
from carl_tui.ui.keys import (
    ACTION_KEYS,
    APP_KEYS,
    SCREEN_KEYS,
    normalize_keymap,
)
from carl_tui.ui.messages import (
    CardWanted,
    CompareChanged,
    CompareSelected,
    DashboardReady,
    SnapshotUpdated,
    StatusTick,
    StoreChanged,
    failure,
)
from carl_tui.ui.projects import pick_project
from carl_tui.ui.save import save_and_say
from carl_tui.ui.screens.dashboard import DashboardScreen
from carl_tui.ui.screens.help import HelpScreen, KeyHelp
from carl_tui.ui.settings import DEFAULT_THEME, Services, Settings
from carl_tui.ui.themes import cycle_theme, install_themes, plot_variables, with_status_colors

if TYPE_CHECKING:  # pragma: no cover
    from textual.screen import Screen

    from carl_tui.actions.local_job import LocalJob
    from carl_tui.events import RunRef
    from carl_tui.sources.base import Source
    from carl_tui.store import RunSnapshot, RunStore
    from carl_tui.ui.controller import ActionController
    from carl_tui.ui.follower import Follower

__all__ = ["DEFAULT_THEME", "CarlApp", "DashboardConfig", "Services", "Settings", "build_app"]

@dataclass
class DashboardConfig:
    """What the app is given, built by the CLI or by tests: the sources (or what builds
    them), the user's `Settings` and the `Services` it talks to."""

    # The sources, or what builds them (the CLI's: called after the first frame).
    sources: Sequence[Source] | Callable[[], Sequence[Source]] = ()
    settings: Settings = field(default_factory=Settings)
    services: Services = field(default_factory=Services)
    store: RunStore | None = None  # None: one with the settings' vocab_size and gate_metric
    local_jobs: Sequence[tuple[RunRef, LocalJob]] = ()  # started before the app
    on_exit: Callable[[], None] | None = None


class CarlApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "carl-tui"
    theme_variables: dict[str, str]  # set by get_css_variables: the plots, the status bar
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(k.key, k.action, k.description, id=k.id, tooltip=k.tooltip, show=k.show)
        for k in APP_KEYS + ACTION_KEYS + SCREEN_KEYS
    ]

    def __init__(self, config: DashboardConfig):
        super().__init__()
        self.config = config
        self.settings, self.services = config.settings, config.services
        self.keymap = normalize_keymap(config.settings.keymap)
        self._store: RunStore | None = config.store
        self._follower: Follower | None = None  # made on first use (after the first frame)
        self._controller: ActionController | None = None  # made on first use
        self._source_problem = ""
        alerts = config.settings.alerts
        self.alert_config, self._alert_problem = (
            (alerts, "") if alerts is not None else load_alert_config())
        # The theme is chosen before the first frame (its CSS is then worked out once).
        self._theme_names, self._theme_problem = install_themes(self, config.settings.theme,
                                                                DEFAULT_THEME)
        self._screen_built = self._quitting = False
        self._completion_logs: dict[str, Any] = {}  # run key -> SharedLog
        self.title = config.settings.title
        self.keys = KeyHelp(self, self.settings, self.keymap)
        self.fleet = FleetPart(self)
        self._guard: GuardKeeper | None = None  # started at the first update raised

    @property
    def store(self) -> RunStore:
        """The run store (numpy: made after the first frame, unless asked for earlier)."""
        if self._store is None:
            from carl_tui.store import RunStore  # lazy: numpy, after the first frame

            self._store = RunStore(vocab_size=self.settings.vocab_size,
                                   gate_metric=self.settings.gate_metric)
        return self._store

    @property
    def follower(self) -> Follower:
        """What reads the sources into the store (built, not started, on first use)."""
        if self._follower is None:
            # lazy: the store and the sources' base (numpy), after the first frame
            from carl_tui.ui.follower import Follower

            sources, self._source_problem = open_sources(self.config.sources)
            self._follower = Follower(self.post_message, self.store, sources,
                                      self.settings.run, self.services.clock)
        return self._follower

    @property
    def controller(self) -> ActionController:
        """The keys that act, and the local jobs they watch (made and started when first
        needed: at once for local jobs started before the app, else on the first key)."""
        if self._controller is None:
            # lazy: the job backends and orjson, loaded on the first key that acts
            from carl_tui.ui.controller import ActionController

            self._controller = ActionController(self, self.follower, self.settings,
                                                self.services)
            self._controller.start(self.config.local_jobs)
        return self._controller

    # -- what tests and the controller read ------------------------------------

    @property
    def snapshot(self) -> RunSnapshot | None:
        """The snapshot on screen: the dashboard's, once it has shown it."""
        return self.dashboard.snapshot if self.screen_stack else None

    @property
    def current_run(self) -> str | None:
        return None if self._follower is None else self._follower.current_run

    @property
    def dashboard(self) -> DashboardScreen:
        """The dashboard screen, whatever dialog is on top of it."""
        return self.screen_stack[0]  # type: ignore[return-value]

    def get_default_screen(self) -> DashboardScreen:
        s = self.settings
        return DashboardScreen(s.chart, s.plot_metrics, s.save_dir, self.services.clock)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return with_status_colors(self.current_theme, super().get_theme_variable_defaults())

    def get_css_variables(self) -> dict[str, str]:
        """The theme's CSS variables with readable plot and status colours."""
        self.theme_variables = plot_variables(super().get_css_variables())
        return self.theme_variables

    def on_resize(self, event: events.Resize) -> None:
        # Rich's console told the screen's size: else it asks the terminal (three system
        # calls) for every cell it measures (a thousand runs' rows: 17,000 cells).
        self.console.size = (event.size.width, event.size.height)

    def on_mount(self) -> None:
        self.console.size = (self.size.width, self.size.height)  # as on_resize
        if self._theme_problem:
            self.notify(self._theme_problem, severity="warning")
        if self.keymap:
            self.set_keymap(self.keymap)
        if self._alert_problem:
            self.notify(self._alert_problem, severity="warning", timeout=10)
        self.set_interval(self.settings.refresh_interval, self.pull)
        self.set_interval(1.0, self._refresh_status)
        self.theme_changed_signal.subscribe(self, lambda _theme: self.dashboard.redraw())
        if self.settings.fleet:  # the table is the first frame: the dashboard waits under it
            self.screen_ready()

    def on_dashboard_ready(self, _message: DashboardReady) -> None:
        if not self._screen_built:
            self.screen_ready()

    def screen_ready(self) -> None:
        """The dashboard's first frame is on screen (`carl-tui fleet`: the app mounted): start
        reading (the sources, the store and numpy load now) and show what arrives."""
        self._screen_built = True
        self.follower.hidden = self.settings.fleet  # no run in view under the table yet
        self.follower.start()
        if self.config.local_jobs:  # adopted now (a key that acts sooner adopts them first)
            _ = self.controller
        if self._source_problem:
            self.notify(self._source_problem, severity="error", timeout=15)
        self.pull()
        if self.settings.fleet:  # the table at once: its rows arrive as the sources read
            self.fleet.open()

    def on_unmount(self) -> None:
        self._quitting = True
        if self._follower is not None:
            self._follower.stop(timeout=0.3)
        for shared in self._completion_logs.values():
            shared.close()  # the completions view's readers (a Trackio database)
        if self.config.on_exit is not None:
            self.config.on_exit()

    async def action_quit(self) -> None:
        self._quitting = True  # keys pressed after q must not reach widgets being removed
        self.exit()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.keys.allowed(action)  # read-only, a replay, the demo: not in the footer

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        if self._quitting:
            return False
        why = self.keys.refusal(action) if default_namespace in (None, self) else None
        if why:  # a key left out of the footer, pressed anyway: say why
            self.notify(why, severity="warning", timeout=6)
            return True
        return await super().run_action(action, default_namespace, namespaces)

    # -- moving data to the screen -------------------------------------------

    def on_store_changed(self, _message: StoreChanged) -> None:
        self.pull()
        self.fleet.store_changed()

    @property
    def _showing(self) -> bool:
        """The dashboard is there to show data (built, and not going away)."""
        return self._screen_built and not self._quitting and bool(self.screen_stack)

    def pull(self) -> None:
        """Have the follower post the run on screen if the store changed."""
        if self._showing:
            dash = self.dashboard
            self.follower.pull(dash.plot_points, dash.render_cost)

    @on(SnapshotUpdated)
    def _updated(self, update: SnapshotUpdated) -> None:
        """Raise the notices, hand the update down to the dashboard."""
        if not self._showing:
            return
        for notice in update.notices:
            announce(self, notice, self.alert_config)
        if self._guard is None:
            self._guard = start_guard(self)
        self._guard.check(update.snapshot, self.services.clock())
        if self.follower.hidden:
            # Under the fleet table: nothing of the dashboard is seen, and a change drawn
            # there has Textual draw the whole table again (`reveal` brings it up to date).
            return
        dash = self.dashboard
        dash.post_message(update)
        if update.snapshot is not None and not self.follower.first_snapshot_shown.is_set():
            # Sources hold a long history back until this frame is drawn.
            dash.call_after_refresh(self.follower.first_snapshot_shown.set)
        self._refresh_status()

    @on(CompareSelected)
    def _compare_selected(self, selected: CompareSelected) -> None:
        self.dashboard.compare_with(selected.keys)

    @on(CardWanted)
    def _card_wanted(self, wanted: CardWanted) -> None:
        self.fleet.open_card(wanted)

    @on(CompareChanged)
    def _compare(self, message: CompareChanged) -> None:
        self.follower.compare_with(message.keys, message.overlay)
        self.pull()

    def notify(self, message: str, *, title: str = "", **kw: Any) -> None:  # type: ignore[override]
        """Every notice is secret-free, whatever put its text together."""
        kw.setdefault("markup", False)  # run names and messages are text, never markup
        super().notify(redact(str(message)), title=redact(title), **kw)

    def _refresh_status(self) -> None:
        """The status bar and the job line (ages tick every second)."""
        if self._showing and not self.follower.hidden:
            # After any update queued before it: the follower's snapshot is the one shown.
            now = self.services.clock()
            self.dashboard.post_message(StatusTick(self.store.summary(), self.follower.snapshot,
                                                   now, self.follower.history_line(now)))

    # -- what other parts call -------------------------------------------------------

    def follow(self, run_key: str) -> None:
        self.follower.follow(run_key)
        self.pull()

    def switch_run(self, key: str) -> None:
        self.follower.switch_run(key)
        self.pull()

    # -- workers -------------------------------------------------------------------

    @on(Worker.StateChanged)
    def _worker_state(self, event: Worker.StateChanged) -> None:
        """The one place a failed background job that no dialog shows becomes a notice:
        never a traceback, never a secret; worded as the dialogs word theirs."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            what = event.worker.description or event.worker.name
            self.notify(failure(what[:1].upper() + what[1:], event.worker.error),
                        severity="error", timeout=10)

    # -- keys: the action controller's -------------------------------------------------

    def action_launch(self) -> None:
        self.controller.launch()

    def action_stop_job(self) -> None:
        self.controller.stop()

    def action_push_checkpoint(self) -> None:
        self.controller.push()

    def action_diagnose(self) -> None:
        self.controller.diagnose()

    def action_jobs(self) -> None:
        self.controller.jobs()

    # -- keys: help, pickers and panels ---------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.keys.rows()))

    def key_help(self) -> list[tuple[str, str, str, str]]:
        """(key, description, tooltip, id) of every key the help lists."""
        return self.keys.rows()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every dashboard action is in the command palette."""
        yield from super().get_system_commands(screen)
        yield from self.keys.commands(self.dashboard)

    def action_skipped(self) -> None:
        # lazy: the screen imports the store (numpy): not before the first frame
        from carl_tui.ui.screens.skipped_input import SkippedScreen

        self.push_screen(SkippedScreen(self.store.summary()))

    def action_completions(self) -> None:
        # lazy: the completions model loads numpy: not before the first frame
        from carl_tui.ui.screens.completions_table import open_completions

        open_completions(self, self._completion_logs, self.services.completions)

    def action_pick_run(self) -> None:
        self.fleet.pick_run()

    def action_pick_project(self) -> None:
        pick_project(self)

    def action_save_screen(self) -> None:
        """ctrl+s where the dashboard's own is not (help, the fleet table, a card)."""
        save_and_say(self, self.settings.save_dir)

    def action_cycle_theme(self) -> None:
        cycle_theme(self, self._theme_names)


def open_sources(sources: Sequence[Source] | Callable[[], Sequence[Source]]
                 ) -> tuple[Sequence[Source], str]:
    """The sources (built now, where given what builds them), and why none opened ("")."""
    if not callable(sources):
        return sources, ""
    try:
        return sources(), ""
    except Exception as exc:  # noqa: BLE001  (said on screen, never a traceback)
        return [], f"could not open the source: {describe(exc)}"


def build_app(config: DashboardConfig) -> CarlApp:
    """The factory the CLI and the tests use."""
    return CarlApp(config)

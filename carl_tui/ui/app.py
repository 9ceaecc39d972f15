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
touch widgets.

The first frame comes first: importing this module, and building and drawing the
dashboard, loads neither numpy nor plotext nor any reader. Once that frame is on
screen (`screen_ready`) the sources are built and started, and the store, the
plots and the keys that act load as they are first used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on
from textual.binding import Binding, BindingType
from textual.worker import Worker, WorkerState

from carl_tui.errors import describe
from carl_tui.redact import redact
from carl_tui.ui.attention import announce, load_alert_config
from carl_tui.ui.fleet_part import FleetPart
from carl_tui.ui.guard import GuardPart
from carl_tui.ui.keys import (
    ACTION_KEYS,
    APP_KEYS,
    SCREEN_KEYS,
    hidden_actions,
    normalize_keymap,
    why_hidden,
)
from carl_tui.ui.messages import (
    CompareChanged,
    DashboardReady,
    SnapshotUpdated,
    StatusTick,
    StoreChanged,
    failure,
)
from carl_tui.ui.screens.dashboard import DashboardScreen
from carl_tui.ui.screens.help import KeyHelp
from carl_tui.ui.settings import DEFAULT_THEME, Services, Settings
from carl_tui.ui.themes import ReadablePlots, install_themes

if TYPE_CHECKING:  # pragma: no cover
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


class CarlApp(ReadablePlots, KeyHelp, FleetPart, GuardPart):
    CSS_PATH = "app.tcss"
    TITLE = "carl-tui"
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

    @property
    def store(self) -> RunStore:
        """The run store (numpy: made after the first frame, unless asked for earlier)."""
        if self._store is None:
            from carl_tui.store import RunStore

            self._store = RunStore(vocab_size=self.settings.vocab_size,
                                   gate_metric=self.settings.gate_metric)
        return self._store

    @property
    def follower(self) -> Follower:
        """What reads the sources into the store (built, not started, on first use)."""
        if self._follower is None:
            from carl_tui.ui.follower import Follower

            sources = self.config.sources
            if callable(sources):
                try:
                    sources = sources()
                except Exception as exc:  # noqa: BLE001  (said on screen, never a traceback)
                    self._source_problem = f"could not open the source: {describe(exc)}"
                    sources = []
            self._follower = Follower(self.post_message, self.store, sources,
                                      self.settings.run, self.services.clock)
        return self._follower

    @property
    def controller(self) -> ActionController:
        """The keys that act, and the local jobs they watch (made and started when first
        needed: at once for local jobs started before the app, else on the first key)."""
        if self._controller is None:
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
    def local_jobs(self):
        return self.controller.local_jobs

    @property
    def dashboard(self) -> DashboardScreen:
        """The dashboard screen, whatever dialog is on top of it."""
        return self.screen_stack[0]  # type: ignore[return-value]

    def get_default_screen(self) -> DashboardScreen:
        s = self.settings
        return DashboardScreen(s.chart, s.plot_metrics, s.save_dir, self.services.clock)

    def on_resize(self, event: events.Resize) -> None:
        self._size_console(event.size.width, event.size.height)

    def _size_console(self, width: int, height: int) -> None:
        """Tell Rich's console the screen's size: otherwise it asks the terminal (three
        system calls) for every cell it measures, and Textual's DataTable measures every
        cell of the rows it is given (a thousand runs' rows: 17,000 cells)."""
        self.console.size = (width, height)

    def on_mount(self) -> None:
        self._size_console(*self.size)
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
        self.start_reading()
        if self.config.local_jobs:  # adopted now (a key that acts sooner adopts them first)
            _ = self.controller
        if self._source_problem:
            self.notify(self._source_problem, severity="error", timeout=15)
        self.pull()
        if self.settings.fleet:  # the table at once: its rows arrive as the sources read
            self.open_fleet()

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
        # Read-only: no key that acts (absent from the footer, refused); a replay, the demo:
        # none that cannot act there (keys.hidden_actions).
        s = self.settings
        return action not in hidden_actions(read_only=s.read_only, recording=s.recording,
                                            demo=s.demo)

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        if self._quitting:
            return False
        if isinstance(action, str) and default_namespace in (None, self):
            # A key left out of the footer of a replay or the demo, pressed anyway: say why.
            why = why_hidden(action.removeprefix("app."), recording=self.settings.recording,
                             demo=self.settings.demo)
            if why:
                self.notify(why, severity="warning", timeout=6)
                return True
        return await super().run_action(action, default_namespace, namespaces)

    # -- moving data to the screen -------------------------------------------

    def on_store_changed(self, _message: StoreChanged) -> None:
        self.pull()
        self.fleet_store_changed()

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
        self.guard_check(update.snapshot)
        if self.follower.hidden:
            # Under the fleet table: nothing of the dashboard is seen, and a change drawn
            # there has Textual draw the whole table again (`reveal` brings it up to date).
            return
        dash = self.dashboard
        dash.post_message(update)
        if update.snapshot is not None and not self.follower.painted.is_set():
            # Sources hold a long history back until this frame is drawn.
            dash.call_after_refresh(self.follower.painted.set)
        self._refresh_status()

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

    # -- keys: pickers and panels ------------------------------------------------------

    def action_skipped(self) -> None:
        from carl_tui.ui.screens.skipped_input import SkippedScreen

        self.push_screen(SkippedScreen(self.store.summary()))

    def action_completions(self) -> None:
        from carl_tui.ui.screens.completions_table import open_completions

        open_completions(self, self._completion_logs, self.services.completions)

    def action_pick_run(self) -> None:
        if not self.store.runs():
            self.notify("no runs yet", severity="warning")
            return
        self.open_fleet(self.dashboard.compare)

    def action_pick_project(self) -> None:
        from carl_tui.ui.projects import pick_project

        pick_project(self)

    def action_save_screen(self) -> None:
        """ctrl+s where the dashboard's own is not (help, the fleet table, a card)."""
        from carl_tui.ui.save import save_screen

        try:
            svg = save_screen(self, self.settings.save_dir)
        except OSError as exc:
            self.notify(f"could not save: {describe(exc)}", severity="error")
            return
        self.notify(f"saved the screen to {svg}", timeout=8)

    def action_cycle_theme(self) -> None:
        names = self._theme_names or ["textual-dark", "textual-light"]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)


def build_app(config: DashboardConfig) -> CarlApp:
    """The factory the CLI and the tests use."""
    return CarlApp(config)

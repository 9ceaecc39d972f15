"""The dashboard app: layout, keys, and showing snapshots.

Data flow: the `Follower` (`follow.py`) runs the sources in background
threads that apply events to the thread-safe `RunStore` and wake the UI with
one collapsing message; the UI thread takes an immutable snapshot of the run
on screen and hands it to the widgets. The keys that act (launch, stop, push,
diagnose, jobs) are the `ActionController`'s (`controller.py`). Threads never
touch widgets.

The first frame comes first: importing this module, and building and drawing the
dashboard, loads neither numpy nor plotext nor any reader. Once that frame is on
screen (`screen_ready`) the sources are built and started, and the store, the
plots and the keys that act load as they are first used.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from carl_tui import metric_names as mn
from carl_tui.errors import describe
from carl_tui.redact import redact
from carl_tui.ui.alerts import AlertConfig, desktop_sequences, load_alert_config
from carl_tui.ui.keys import ACTION_KEYS, APP_KEYS, READ_ONLY_HIDDEN
from carl_tui.ui.messages import StoreChanged
from carl_tui.ui.plot_view import ChartSettings
from carl_tui.ui.screens.dashboard import DashboardScreen
from carl_tui.ui.themes import ReadablePlots, install_themes

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.events import RunRef
    from carl_tui.sources.base import Source
    from carl_tui.store import Notice, RunSnapshot, RunStore
    from carl_tui.ui.controller import ActionController
    from carl_tui.ui.follow import Follower

DEFAULT_THEME = "carl-dark"


@dataclass
class DashboardConfig:
    """Everything the app needs; built by the CLI, or by tests."""

    # The sources, or what builds them (the CLI's: called after the first frame).
    sources: Sequence[Source] | Callable[[], Sequence[Source]] = ()
    store: RunStore | None = None  # None: one with vocab_size and gate_metric
    theme: str = DEFAULT_THEME
    run: str | None = None  # preferred run: run_id, name or key
    vocab_size: int | None = None
    gate_metric: str = mn.ACCURACY
    keymap: dict[str, str] = field(default_factory=dict)
    refresh_interval: float = 0.25
    on_exit: Callable[[], None] | None = None
    # Project picker (P): list project names (may do I/O: runs in a worker) and open one.
    list_projects: Callable[[], list[str]] | None = None
    open_project: Callable[[str], Source] | None = None
    # Actions (l, s, p, d, j). The factories make the clients; tests point them at fakes.
    local_jobs: Sequence[tuple[RunRef, Any]] = ()  # (run, LocalJob) started before the app
    output_dir: str | None = None  # where the run's checkpoints are (p), unless its meta says
    push_repo: str | None = None  # default target repo of p
    hub_endpoint: str | None = None  # None: HF_ENDPOINT or the Hub
    jobs_client_factory: Callable[[], Any] | None = None  # default: JobsClient(endpoint=...)
    diagnoser_factory: Callable[[], Any] | None = None  # default: Diagnoser()
    job_source_factory: Callable[[str, str], Source] | None = None  # (job id, namespace)
    local_starter: Callable[..., Any] | None = None  # (spec, stream path) -> LocalJob
    launch_defaults: Any = None  # the launch form's LaunchSpec; None: LaunchSpec()
    clock: Callable[[], float] = time.time  # for "updated 3s ago"; fixed in snapshot tests
    title: str = "carl-tui"
    chart: ChartSettings = field(default_factory=ChartSettings)
    plot_metrics: Sequence[str] = ()  # metrics plotted in the grid from the start
    alerts: AlertConfig | None = None  # None: read the config file
    save_dir: str = "."  # where ctrl+s writes the screen and the plotted data
    read_only: bool = False  # no key that acts on the world, nor ctrl+s (READ_ONLY_HIDDEN)
    # The completions view (a): (run, its meta) -> the readers of its completions.
    completions: Callable[[RunRef, Any], list] | None = None
    fleet: bool = False  # open on the fleet table (`carl-tui fleet`), the dashboard under it


class CarlApp(ReadablePlots, App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "carl-tui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(k.key, k.action, k.description, id=k.id, tooltip=k.tooltip, show=k.show)
        for k in APP_KEYS + ACTION_KEYS
    ]

    def __init__(self, config: DashboardConfig):
        super().__init__()
        self.config = config
        self._store: RunStore | None = config.store
        self._follower: Follower | None = None  # made on first use (after the first frame)
        self._controller: ActionController | None = None  # made on first use
        self._source_problem = ""
        self.alert_config, self._alert_problem = (
            (config.alerts, "") if config.alerts is not None else load_alert_config())
        self.notices_shown: list[str] = []  # texts of notifications raised, for tests/help
        # The theme is chosen before the first frame (its CSS is then worked out once).
        self._theme_names, self._theme_problem = install_themes(self, config.theme,
                                                                DEFAULT_THEME)
        self._screen_built = False
        self._quitting = False
        self._completion_logs: dict[str, Any] = {}  # run key -> SharedLog
        self.title = config.title

    @property
    def store(self) -> RunStore:
        """The run store (numpy: made after the first frame, unless asked for earlier)."""
        if self._store is None:
            from carl_tui.store import RunStore

            self._store = RunStore(vocab_size=self.config.vocab_size,
                                   gate_metric=self.config.gate_metric)
        return self._store

    @property
    def follower(self) -> Follower:
        """What reads the sources into the store (built, not started, on first use)."""
        if self._follower is None:
            from carl_tui.ui.follow import Follower

            sources = self.config.sources
            if callable(sources):
                try:
                    sources = sources()
                except Exception as exc:  # noqa: BLE001  (said on screen, never a traceback)
                    self._source_problem = f"could not open the source: {describe(exc)}"
                    sources = []
            self._follower = Follower(self, self.store, sources, self.config.run)
        return self._follower

    @property
    def controller(self) -> ActionController:
        """The keys that act, and the local jobs they watch (made and started when first
        needed: at once for local jobs started before the app, else on the first key)."""
        if self._controller is None:
            from carl_tui.ui.controller import ActionController

            self._controller = ActionController(self, self.store, self.follower, self.config)
            self._controller.start()
        return self._controller

    # -- what tests and the controller read ------------------------------------

    @property
    def snapshot(self) -> RunSnapshot | None:
        return None if self._follower is None else self._follower.snapshot

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
        return DashboardScreen(self.config.chart, self.config.plot_metrics, self.config.save_dir)

    def on_mount(self) -> None:
        if self._theme_problem:
            self.notify(self._theme_problem, severity="warning")
        if self.config.keymap:
            self.set_keymap(self.config.keymap)
        if self._alert_problem:
            self.notify(self._alert_problem, severity="warning", timeout=10)
        self.set_interval(self.config.refresh_interval, self.pull)
        self.set_interval(1.0, self._refresh_status)
        self.theme_changed_signal.subscribe(self, lambda _theme: self._show(self.snapshot))

    def screen_ready(self) -> None:
        """The dashboard's first frame is on screen: start reading (the sources, the
        store and numpy load now) and show what arrives."""
        self._screen_built = True
        self.follower.start()
        if self.config.local_jobs:  # adopted now (a key that acts sooner adopts them first)
            _ = self.controller
        if self._source_problem:
            self.notify(self._source_problem, severity="error", timeout=15)
        self.dashboard.prepare_plots()  # while the sources read their first rows
        self.pull()
        if self.config.fleet:  # the table at once: its rows arrive as the sources read
            from carl_tui.ui.screens.fleet import open_fleet

            open_fleet(self)

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
        # Read-only: no key that acts (absent from the footer, refused).
        return not (self.config.read_only and action in READ_ONLY_HIDDEN)

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        if self._quitting:
            return False
        return await super().run_action(action, default_namespace, namespaces)

    # -- moving data to the screen -------------------------------------------

    def on_store_changed(self, _message: StoreChanged) -> None:
        self.pull()

    @property
    def _showing(self) -> bool:
        """The dashboard is there to show data (built, and not going away)."""
        return self._screen_built and not self._quitting and bool(self.screen_stack)

    def pull(self) -> None:
        """Show the run on screen if the store changed."""
        if not self._showing:
            return
        dash = self.dashboard
        if self.follower.pull(dash.plot_points, self._show, self._announce,
                              lambda: dash.render_cost):
            self._refresh_status()

    def _show(self, snap: RunSnapshot | None) -> None:
        if snap is not None and self._showing:
            self.dashboard.show(snap)

    def _announce(self, notice: Notice) -> None:
        """A notice from the store; alerts also ring and reach the desktop."""
        text = notice.text
        self.notices_shown.append(text)
        cfg = self.alert_config
        alert = notice.kind in cfg.kinds
        if not alert or cfg.notice:
            self.notify(text, title=notice.run.label, severity=notice.severity,  # type: ignore[arg-type]
                        timeout=10 if alert else 5)
        if alert and cfg.bell:
            self.bell()
        if alert and cfg.desktop and not self.is_headless and self._driver is not None:
            self._driver.write(desktop_sequences(f"carl-tui · {notice.run.label}", text))

    def notify(self, message: str, *, title: str = "", **kw: Any) -> None:  # type: ignore[override]
        """Every notice is secret-free, whatever put its text together."""
        kw.setdefault("markup", False)  # run names and messages are text, never markup
        super().notify(redact(str(message)), title=redact(title), **kw)

    def _refresh_status(self) -> None:
        """The status bar and the job line (ages tick every second)."""
        if not self._showing:
            return
        self.dashboard.show_status(self.store.summary(), self.snapshot, self.config.clock())

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
        """The one place a failed background job becomes a notice: never a traceback,
        never a secret."""
        if event.state == WorkerState.ERROR:
            what = event.worker.description or event.worker.name
            self.notify(describe(event.worker.error), title=f"{what} failed",
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

    def action_help(self) -> None:
        from carl_tui.ui.screens.help import HelpScreen

        self.push_screen(HelpScreen(self.key_help()))

    def key_help(self) -> list[tuple[str, str, str, str]]:
        """(key, description, tooltip, id) of every dashboard binding, keymap applied."""
        from carl_tui.ui.screens.fleet import screen_keys

        rows = []
        for b in (*self._all_bindings(), *screen_keys(self.screen)):
            if b.id:
                key = self.config.keymap.get(b.id, b.key)
                display = ", ".join(self.get_key_display(b.with_key(k)) for k in key.split(","))
                rows.append((display, b.description, b.tooltip, b.id))
        rows.append(("ctrl+p", "Commands", "Command palette: every action", "app.command_palette"))
        return rows

    def action_skipped(self) -> None:
        from carl_tui.ui.screens.skipped import SkippedScreen

        self.push_screen(SkippedScreen(self.store.summary()))

    def action_completions(self) -> None:
        from carl_tui.ui.screens.completions import open_completions

        open_completions(self, self._completion_logs)

    def action_pick_run(self) -> None:
        from carl_tui.ui.screens.fleet import open_fleet

        if not self.store.runs():
            self.notify("no runs yet", severity="warning")
            return
        open_fleet(self)

    def action_pick_project(self) -> None:
        if self.config.list_projects is None or self.config.open_project is None:
            self.notify("this source has no projects to choose from", severity="warning")
            return
        self.run_worker(self._load_projects, thread=True, exclusive=True, group="projects",
                        exit_on_error=False, description="listing projects")

    def _load_projects(self) -> None:
        names = self.config.list_projects()  # type: ignore[misc]
        self.call_from_thread(self._show_project_picker, names)

    def _show_project_picker(self, names: list[str]) -> None:
        from carl_tui.ui.screens.pickers import pick_project

        pick_project(self, names)

    def action_cycle_theme(self) -> None:
        names = self._theme_names or ["textual-dark", "textual-light"]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def _all_bindings(self) -> list[Binding]:
        """The app's keys, the dashboard's and the actions' (read-only: less READ_ONLY_HIDDEN)."""
        hidden = READ_ONLY_HIDDEN if self.config.read_only else frozenset()
        return [b for b in (*self.BINDINGS, *DashboardScreen.BINDINGS)
                if isinstance(b, Binding) and b.action not in hidden]

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every dashboard action is in the command palette."""
        yield from super().get_system_commands(screen)
        dash = self.dashboard
        for b in self._all_bindings():
            if b.id and b.action not in ("quit", "help"):
                target = dash if b in DashboardScreen.BINDINGS else self
                yield SystemCommand(b.description, b.tooltip,
                                    lambda a=b.action, t=target: t.run_action(a))
        yield SystemCommand("Help", "List every key", self.action_help)


def build_app(config: DashboardConfig) -> CarlApp:
    """The factory the CLI and the tests use."""
    return CarlApp(config)

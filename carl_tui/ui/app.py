"""The dashboard app: layout, keys, and showing snapshots.

Data flow: the `Follower` (`follow.py`) runs the sources in background
threads that apply events to the thread-safe `RunStore` and wake the UI with
one collapsing message; the UI thread takes an immutable snapshot of the run
on screen and hands it to the widgets. The keys that act (launch, stop, push,
diagnose, jobs) are the `ActionController`'s (`controller.py`). Threads never
touch widgets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header
from textual.worker import Worker, WorkerState

from carl_tui import metric_names as mn
from carl_tui.errors import describe
from carl_tui.events import RunRef
from carl_tui.redact import redact
from carl_tui.sources.base import Source
from carl_tui.store import Notice, RunSnapshot, RunStore
from carl_tui.ui import chart
from carl_tui.ui.alerts import AlertConfig, desktop_sequences, load_alert_config
from carl_tui.ui.controller import ActionController
from carl_tui.ui.follow import Follower
from carl_tui.ui.keys import ALL_KEYS
from carl_tui.ui.messages import StoreChanged
from carl_tui.ui.themes import load_themes
from carl_tui.ui.widgets.job_bar import JobBar
from carl_tui.ui.widgets.log_panel import LogPanel
from carl_tui.ui.widgets.metrics_table import MetricsTable
from carl_tui.ui.widgets.phase_panel import PhasePanel
from carl_tui.ui.widgets.plots import MetricPlot
from carl_tui.ui.widgets.status_bar import StatusBar

DEFAULT_THEME = "carl-dark"
MAX_GRID = 6  # chosen metrics plotted beside phi and entropy
PLOT_MIN_HEIGHT = 9  # rows a plot needs to be read (frame, ticks, axis label, legend)
OVERLAY_COLORS = tuple(f"plot-overlay-{i}" for i in range(4))


@dataclass
class DashboardConfig:
    """Everything the app needs; built by the CLI, or by tests."""

    sources: Sequence[Source] = ()
    store: RunStore | None = None
    theme: str = DEFAULT_THEME
    run: str | None = None  # preferred run: run_id, name or key
    vocab_size: int | None = None
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
    chart: chart.ChartSettings = field(default_factory=chart.ChartSettings)
    plot_metrics: Sequence[str] = ()  # metrics plotted in the grid from the start
    alerts: AlertConfig | None = None  # None: read the config file
    save_dir: str = "."  # where ctrl+s writes the screen and the plotted data


class _Widgets:
    """The dashboard's widgets, held so that no code path depends on which screen is on
    top (a query from the app searches the active screen, a modal one included)."""

    def __init__(self) -> None:
        self.plots: Vertical | None = None
        self.phi = MetricPlot(mn.PHI, color_var="plot-phi", id="phi-plot", classes="panel")
        self.entropy = MetricPlot(mn.ENTROPY, color_var="plot-entropy", id="entropy-plot",
                                  classes="panel")
        self.grid = Vertical(id="grid")
        self.phase = PhasePanel(id="phase", classes="panel")
        self.table = MetricsTable(id="metrics", classes="panel")
        self.log = LogPanel(id="log", classes="panel -hidden")
        self.job_bar = JobBar(id="job-bar")
        self.status = StatusBar(id="status")

    def all_plots(self) -> list[MetricPlot]:
        return [self.phi, self.entropy, *self.grid.query(MetricPlot)]


class CarlApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "carl-tui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(k.key, k.action, k.description, id=k.id, tooltip=k.tooltip, show=k.show)
        for k in ALL_KEYS
    ]

    def __init__(self, config: DashboardConfig):
        super().__init__()
        self.config = config
        self.store = config.store or RunStore(vocab_size=config.vocab_size)
        self.follower = Follower(self, self.store, config.sources, config.run)
        self.controller = ActionController(self, self.store, self.follower, config)
        self.hidden_metrics: set[str] = set()
        self.grid_metrics: list[str] = list(config.plot_metrics)[:MAX_GRID]
        self.grid_hidden = 0  # chosen plots that do not fit the terminal
        self.compare: list[str] = []  # run keys overlaid on every plot
        self.overlay = False  # every run of the project overlaid
        self.chart = config.chart
        self.alert_config, self._alert_problem = (
            (config.alerts, "") if config.alerts is not None else load_alert_config())
        self.notices_shown: list[str] = []  # texts of notifications raised, for tests/help
        self._theme_names: list[str] = []
        self._log_auto_shown = False
        self._screen_built = False
        self._quitting = False
        self.title = config.title

    # -- what tests and the controller read ------------------------------------

    @property
    def snapshot(self) -> RunSnapshot | None:
        return self.follower.snapshot

    @property
    def current_run(self) -> str | None:
        return self.follower.current_run

    @property
    def local_jobs(self):
        return self.controller.local_jobs

    # -- layout ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        w = self.ui = _Widgets()
        yield Header(show_clock=False)
        with Horizontal(id="main"):
            with Vertical(id="plots") as w.plots:
                yield w.phi
                yield w.entropy
                yield w.grid
            with Vertical(id="side"):
                yield w.phase
                yield w.table
        yield w.log
        yield w.job_bar
        yield w.status
        yield Footer()

    def on_load(self) -> None:
        # Start reading before the screen is built: a long history loads meanwhile.
        self.follower.start()

    def on_mount(self) -> None:
        for theme in load_themes():
            self.register_theme(theme)
            self._theme_names.append(theme.name)
        wanted = self.config.theme
        if wanted not in self.available_themes:
            self.notify(f"unknown theme {wanted!r}; using {DEFAULT_THEME}", severity="warning")
            wanted = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        self.theme = wanted
        if self.config.keymap:
            self.set_keymap(self.config.keymap)
        self.ui.phase.border_title = "phase"
        self.ui.table.border_title = "metrics"
        self.ui.log.border_title = "log"
        if self._alert_problem:
            self.notify(self._alert_problem, severity="warning", timeout=10)
        self._sync_grid()
        self._layout_for(self.size.width, self.size.height)
        self.set_interval(self.config.refresh_interval, self.pull)
        self.set_interval(1.0, self._refresh_status)
        self.theme_changed_signal.subscribe(self, lambda _theme: self._show(self.snapshot))
        self.controller.start()
        self._screen_built = True  # data may have arrived before the screen was built
        self.pull()

    def on_unmount(self) -> None:
        self.follower.stop(timeout=0.3)
        if self.config.on_exit is not None:
            self.config.on_exit()

    def on_resize(self, event) -> None:
        self._layout_for(event.size.width, event.size.height)
        self.call_after_refresh(self._fit_grid)

    def _layout_for(self, width: int, height: int) -> None:
        """80x24 stacks the essentials; 120x36 narrows the side; 200x60 plots two columns."""
        screen = self.screen_stack[0]  # the dashboard's, whatever dialog is on top
        compact = width < 110 or height < 30
        screen.set_class(compact, "-compact")
        screen.set_class(not compact and width < 150, "-medium")
        screen.set_class(width >= 180 and height >= 50, "-wide")

    async def action_quit(self) -> None:
        self._quitting = True  # keys pressed after q must not reach widgets being removed
        self.exit()

    async def run_action(self, action, default_namespace=None) -> bool:
        if self._quitting:
            return False
        return await super().run_action(action, default_namespace)

    # -- moving data to the screen -------------------------------------------

    def on_store_changed(self, _message: StoreChanged) -> None:
        self.pull()

    def pull(self) -> None:
        """Show the run on screen if the store changed."""
        if not self._screen_built or self._quitting:
            return
        if self.follower.pull(self._plot_points(), self._show, self._announce,
                              self._render_cost):
            self._refresh_status()

    def _render_cost(self) -> float:
        return sum(p.render_cost for p in self.ui.all_plots() if p.display)

    def _plot_points(self) -> int:
        """Points per series worth drawing: a few per braille dot of the widest plot."""
        return 4 * max(self.ui.phi.size.width, 40)

    def _show(self, snap: RunSnapshot | None) -> None:
        if snap is None or self._quitting:
            return
        self.sub_title = f"{snap.run.label} · {snap.meta.get('model', snap.run.source)}"
        self._show_plots(snap)
        phase_panel = self.ui.phase
        phase_panel.show(snap)
        phase_panel.set_class(snap.gate.fired, "-crystallised")
        self.ui.table.show(snap, self.hidden_metrics, self.chart.smoothing)
        log = self.ui.log
        if snap.log_total and log.has_class("-hidden") and not self._log_auto_shown:
            # A run with log lines (a job) shows its log once; v hides it.
            self._log_auto_shown = True
            log.remove_class("-hidden")
        log.show(snap)

    def _overlays(self, snap: RunSnapshot, metric: str) -> list[chart.Overlay]:
        """The same metric of the runs compared with this one (or of its whole project)."""
        if self.compare:
            keys = [k for k in self.compare if k != snap.run.key]
        elif self.overlay:
            keys = [r.key for r in self.store.runs()
                    if r.project == snap.run.project and r.key != snap.run.key]
        else:
            return []
        out = []
        for i, key in enumerate(keys[:7]):
            other = self.store.snapshot(key, max_points=500)
            s = other.series.get(metric) if other else None
            if s is not None:
                out.append(chart.Overlay(other.run.label, s,
                                         chart.x_map_for(other, self.chart.x_axis),
                                         OVERLAY_COLORS[i % len(OVERLAY_COLORS)]))
        return out

    def _show_plots(self, snap: RunSnapshot) -> None:
        compared = (tuple(self.compare), self.overlay, self.store.version if (
            self.compare or self.overlay) else None)
        with self.batch_update():
            for plot in self.ui.all_plots():
                if not plot.display:
                    continue
                plot.show_run(snap, self._overlays(snap, plot.metric), self.chart,
                              key=(snap.run.key, snap.version, self.theme, compared))

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
        super().notify(redact(str(message)), title=redact(title), **kw)

    def _refresh_status(self) -> None:
        """The status bar and the job line (ages tick every second)."""
        if self._quitting or not self._screen_built:
            return
        snap = self.snapshot
        self.ui.status.show(self.store.summary(), snap, self.config.clock())
        self.ui.job_bar.show(snap.job if snap else None, snap.usage if snap else None)

    # -- what other parts call -------------------------------------------------------

    def add_source(self, source: Source, *, follow: str | None = None):
        runner = self.follower.add_source(source, follow=follow)
        self.pull()
        return runner

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

    # -- keys: the view ----------------------------------------------------------------

    def _redraw(self, note: str | None = None) -> None:
        if self.snapshot is not None:
            self._show(self.snapshot)
        if note:
            self.notify(note, timeout=2)

    def action_cycle_x_axis(self) -> None:
        axes = chart.X_AXES
        self.chart = replace(self.chart, x_axis=axes[(axes.index(self.chart.x_axis) + 1)
                                                    % len(axes)])
        self._redraw(self.chart.describe())

    def action_cycle_smoothing(self) -> None:
        steps = chart.SMOOTHING_STEPS
        i = steps.index(self.chart.smoothing) if self.chart.smoothing in steps else 0
        self.chart = replace(self.chart, smoothing=steps[(i + 1) % len(steps)])
        self._redraw(self.chart.describe())

    def action_cycle_range(self) -> None:
        ranges = chart.RANGES
        i = ranges.index(self.chart.last_n) if self.chart.last_n in ranges else 0
        self.chart = replace(self.chart, last_n=ranges[(i + 1) % len(ranges)])
        self._redraw(self.chart.describe())

    def action_toggle_log(self) -> None:
        metric = self.ui.table.selected_metric
        if not metric:
            self.notify("select a metric in the table first", severity="warning")
            return
        self.chart = replace(self.chart, log_y=self.chart.log_y ^ {metric})
        on = metric in self.chart.log_y
        if on and metric not in (mn.PHI, mn.ENTROPY) and metric not in self.grid_metrics:
            self.grid_metrics.append(metric)
            self._sync_grid()
        self._redraw(f"{metric}: {'log' if on else 'linear'} scale")

    def action_toggle_grid_metric(self) -> None:
        metric = self.ui.table.selected_metric
        if not metric:
            self.notify("select a metric in the table first", severity="warning")
            return
        if metric in (mn.PHI, mn.ENTROPY):
            self.notify(f"{metric} always has its own plot", timeout=2)
            return
        if metric in self.grid_metrics:
            self.grid_metrics.remove(metric)
        elif len(self.grid_metrics) >= MAX_GRID:
            self.notify(f"at most {MAX_GRID} plots in the grid: press f on one to remove it",
                        severity="warning")
            return
        else:
            self.grid_metrics.append(metric)
        self._sync_grid()
        self._redraw()
        self.call_after_refresh(self._say_hidden)

    def _say_hidden(self) -> None:
        if self._fit_grid():
            self.notify(f"{self.grid_hidden} chosen plot(s) wait for a taller terminal "
                        "(f on a metric removes it from the grid)", timeout=4)

    def _sync_grid(self) -> None:
        """One plot per chosen metric in the grid, in the order chosen."""
        grid = self.ui.grid
        have = {p.metric: p for p in grid.query(MetricPlot)}
        for metric, plot in have.items():
            if metric not in self.grid_metrics:
                plot.remove()
        for metric in self.grid_metrics:
            if metric not in have:
                grid.mount(MetricPlot(metric, color_var="plot-extra", classes="panel"))
        self.call_after_refresh(self._fit_grid)

    def _fit_grid(self) -> int:
        """Show as many grid plots as fit at a readable height (the rest wait for a bigger
        terminal); every plot gets the same height. Returns how many are hidden."""
        grid = self.ui.grid
        plots = [p for p in grid.query(MetricPlot) if p.metric in self.grid_metrics]
        plots.sort(key=lambda p: self.grid_metrics.index(p.metric))
        main = self.screen_stack[0]
        compact = main.has_class("-compact")
        cols = 2 if main.has_class("-wide") else 1
        height = self.ui.plots.size.height
        rows_fit = 0 if compact else max(0, height // PLOT_MIN_HEIGHT - 2)
        shown = min(len(plots), rows_fit * cols)
        for i, plot in enumerate(plots):
            plot.display = i < shown
        rows = -(-shown // cols)
        grid.display = rows > 0
        grid.styles.height = f"{rows}fr" if rows else 0
        grid.styles.grid_size_columns = cols
        self.grid_hidden = len(plots) - shown
        return self.grid_hidden

    # -- keys: pickers and panels ------------------------------------------------------

    def action_help(self) -> None:
        from carl_tui.ui.screens.help import HelpScreen

        self.push_screen(HelpScreen(self.key_help()))

    def key_help(self) -> list[tuple[str, str, str, str]]:
        """(key, description, tooltip, id) of every dashboard binding, keymap applied."""
        rows = []
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.id:
                key = self.config.keymap.get(b.id, b.key)
                display = ", ".join(self.get_key_display(b.with_key(k)) for k in key.split(","))
                rows.append((display, b.description, b.tooltip, b.id))
        rows.append(("ctrl+p", "Commands", "Command palette: every action", "app.command_palette"))
        return rows

    def action_skipped(self) -> None:
        from carl_tui.ui.screens.skipped import SkippedScreen

        self.push_screen(SkippedScreen(self.store.summary()))

    def action_pick_run(self) -> None:
        from carl_tui.ui.screens.pickers import RunPicker

        runs = [(r.key, f"{r.label}  [{r.source}: {r.project}]") for r in self.store.runs()]
        if not runs:
            self.notify("no runs yet", severity="warning")
            return
        self.push_screen(RunPicker(runs, self.current_run),
                         lambda key: self.switch_run(key) if key else None)

    def action_compare(self) -> None:
        from carl_tui.ui.screens.pickers import ComparePicker

        runs = [r for r in self.store.runs() if r.key != self.current_run]
        if not runs:
            self.notify("no other runs to compare with yet", severity="warning")
            return
        items = [(r.key, f"{r.label}  [{r.source}: {r.project}]", r.key in self.compare)
                 for r in runs]

        def chosen(keys: set[str] | None) -> None:
            if keys is None:
                return
            self.compare = [r.key for r in runs if r.key in keys]
            self._redraw(f"comparing with {len(self.compare)} run(s)" if self.compare
                         else "comparison off")

        self.push_screen(ComparePicker(items), chosen)

    def action_pick_metrics(self) -> None:
        from carl_tui.ui.screens.pickers import MetricPicker

        snap = self.snapshot
        if snap is None:
            self.notify("no metrics yet", severity="warning")
            return
        names = sorted(snap.series, key=mn.display_order)

        def chosen(shown: set[str] | None) -> None:
            if shown is not None:
                self.hidden_metrics = {m for m in names if m not in shown}
                self._redraw()

        self.push_screen(MetricPicker([(m, m, m not in self.hidden_metrics) for m in names]),
                         chosen)

    def action_toggle_overlay(self) -> None:
        self.overlay = not self.overlay
        self._redraw("overlay: " + ("every run of the project" if self.overlay else "off"))

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
        from carl_tui.ui.screens.pickers import ProjectPicker

        if not names:
            self.notify("no projects found", severity="warning")
            return
        current = self.snapshot.run.project if self.snapshot else None

        def chosen(name: str | None) -> None:
            if not name:
                return
            runs = [r for r in self.store.runs() if r.project == name]
            if runs:  # already open: just show it
                self.switch_run(runs[0].key)
                return
            self.follower.add_source(self.config.open_project(name))  # type: ignore[misc]
            self.follower.follow_project(name)
            self.notify(f"opening project {name}", timeout=3)

        self.push_screen(ProjectPicker([(n, n) for n in names], current), chosen)

    def action_toggle_log_panel(self) -> None:
        log = self.ui.log
        log.toggle_class("-hidden")
        if not log.has_class("-hidden"):
            log.show(self.snapshot)

    def action_toggle_follow(self) -> None:
        log = self.ui.log
        log.set_follow(not log.follow)
        self.notify("log: " + ("following" if log.follow else "paused"), timeout=2)

    def action_cycle_theme(self) -> None:
        names = self._theme_names or ["textual-dark", "textual-light"]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_save_view(self) -> None:
        from carl_tui.ui.save import save_view

        try:
            svg, csv_path = save_view(self, self.config.save_dir)
        except OSError as exc:
            self.notify(f"could not save: {describe(exc)}", severity="error")
            return
        self.notify(f"saved the screen to {svg} and the plotted data to {csv_path}", timeout=8)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every dashboard action is in the command palette."""
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.id and b.action not in ("quit", "help"):
                yield SystemCommand(b.description, b.tooltip,
                                    lambda a=b.action: self.run_action(a))
        yield SystemCommand("Help", "List every key", self.action_help)


def build_app(config: DashboardConfig) -> CarlApp:
    """The factory the CLI and the tests use."""
    return CarlApp(config)

"""The dashboard app: layout, keys, and the loop that moves store snapshots to widgets.

Data flow: source runners (worker threads) apply events to the thread-safe
`RunStore`; a UI timer compares the store's version and, when it changed,
takes an immutable snapshot of the current run and hands it to the widgets.
Threads never touch widgets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header
from textual.worker import Worker, WorkerState

from carl_tui import metric_names as mn
from carl_tui.events import RunRef
from carl_tui.sources.base import Source, SourceRunner
from carl_tui.store import RunSnapshot, RunStore
from carl_tui.ui.actions import ActionsMixin
from carl_tui.ui.keys import ALL_KEYS
from carl_tui.ui.messages import StoreChanged
from carl_tui.ui.screens.help import HelpScreen
from carl_tui.ui.screens.pickers import MetricPicker, ProjectPicker, RunPicker
from carl_tui.ui.screens.skipped import SkippedScreen
from carl_tui.ui.themes import load_themes
from carl_tui.ui.widgets.job_bar import JobBar
from carl_tui.ui.widgets.log_panel import LogPanel
from carl_tui.ui.widgets.metrics_table import MetricsTable
from carl_tui.ui.widgets.phase_panel import PhasePanel
from carl_tui.ui.widgets.plots import Line, MetricPlot, phi_plot_decorations
from carl_tui.ui.widgets.status_bar import StatusBar

DEFAULT_THEME = "carl-dark"


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


class CarlApp(ActionsMixin, App[None]):
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
        self.runners = [SourceRunner(s, self._emit) for s in config.sources]
        self.current_run: str | None = None
        self.hidden_metrics: set[str] = set()
        self.focus_metric: str | None = None
        self.snapshot: RunSnapshot | None = None
        self._seen_version = -1
        self._seen_store_version = -1
        self._theme_names: list[str] = []
        self._log_auto_shown = False
        self._pending_follow: str | None = None
        self._follow_project: str | None = None
        self.overlay = False
        self._next_pull = 0.0
        self._pull_posted = False
        self._screen_built = False
        self.notices_shown: list[str] = []  # texts of notifications raised, for tests/help
        self.title = config.title

    # -- layout ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="main"):
            with Vertical(id="plots"):
                yield MetricPlot("phi (order parameter)", id="phi-plot", classes="panel")
                yield MetricPlot("entropy (nats)", id="entropy-plot", classes="panel")
                yield MetricPlot("", id="focus-plot", classes="panel -hidden")
            with Vertical(id="side"):
                yield PhasePanel(id="phase", classes="panel")
                yield MetricsTable(id="metrics", classes="panel")
        yield LogPanel(id="log", classes="panel -hidden")
        yield JobBar(id="job-bar")
        yield StatusBar(id="status")
        yield Footer()

    def on_load(self) -> None:
        # Start reading before the screen is built: a long history loads meanwhile.
        for runner in self.runners:
            self._start_runner(runner)

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
        self.query_one("#phase").border_title = "phase"
        self.query_one("#metrics").border_title = "metrics"
        self.query_one("#log").border_title = "log"
        self.set_interval(self.config.refresh_interval, self.pull)
        self.set_interval(1.0, self._refresh_status)
        # Colours of the phase panel come from the theme: redraw on a change.
        self.theme_changed_signal.subscribe(self, lambda _theme: self._show(self.snapshot))
        self._screen_built = True  # data may have arrived before the screen was built
        self.pull()

    def on_unmount(self) -> None:
        for runner in self.runners:
            runner.stop(timeout=0.5)
        if self.config.on_exit is not None:
            self.config.on_exit()

    # -- moving data to the screen -------------------------------------------

    def _emit(self, events) -> None:
        """Called from source threads: store the events, wake the UI once."""
        self.store.apply(events)
        if not self._pull_posted:
            self._pull_posted = True
            self.post_message(StoreChanged())

    def on_store_changed(self, _message: StoreChanged) -> None:
        self._pull_posted = False
        self.pull()

    def pull(self) -> None:
        """Take a snapshot of the current run if the store changed, and show it."""
        store = self.store
        if not self._screen_built or self._seen_store_version == store.version:
            return
        if time.perf_counter() < self._next_pull and any(r.catching_up for r in self.runners):
            # Loading a backlog of history: show progress about once a second and
            # leave the CPU to the loading; the moment it is done, paint.
            return
        self._seen_store_version = store.version
        if self._pending_follow and self.store.run_version(self._pending_follow) >= 0:
            self.current_run, self._pending_follow = self._pending_follow, None
            self._seen_version = -1
        if self._follow_project:
            runs = [r for r in store.runs() if r.project == self._follow_project]
            if runs:
                self.current_run, self._follow_project = runs[0].key, None
                self._seen_version = -1
        if self.current_run is None:
            self._choose_initial_run()
        for notice in store.take_notices():
            # Other runs only interrupt for what matters: crystallisation, a job's state.
            mine = self.current_run is None or notice.run.key == self.current_run
            if mine or notice.kind in ("phase_transition", "job"):
                self.notices_shown.append(notice.text)
                self.notify(
                    notice.text,
                    title=notice.run.label,
                    severity=notice.severity,  # type: ignore[arg-type]
                    timeout=10 if notice.kind == "phase_transition" else 5,
                )
        if self.current_run is not None:
            version = store.run_version(self.current_run)
            if version != self._seen_version:
                self._seen_version = version
                t0 = time.perf_counter()
                self.snapshot = store.snapshot(self.current_run, max_points=self._plot_points())
                self._show(self.snapshot)
                # Plots render later, in the compositor: count their last render too.
                cost = time.perf_counter() - t0
                cost += sum(p.render_cost for p in self.query(MetricPlot) if p.display)
                self._next_pull = time.perf_counter() + max(10 * cost, 1.0)
        self._refresh_status()

    def _plot_points(self) -> int:
        """Points per series worth drawing: a few per braille dot of the widest plot."""
        width = max(self.query_one("#phi-plot").size.width, 40)
        return 4 * width  # min and max for each of the 2 braille dots of a cell

    def _choose_initial_run(self) -> None:
        runs = self.store.runs()
        if not runs:
            return
        want = self.config.run
        if want:
            for r in runs:
                if want in (r.key, r.run_id, r.name):
                    self.current_run = r.key
                    return
        self.current_run = runs[0].key

    def _show(self, snap: RunSnapshot | None) -> None:
        if snap is None:
            return
        self.sub_title = f"{snap.run.label} · {snap.meta.get('model', snap.run.source)}"
        self._show_plots(snap)
        phase_panel = self.query_one(PhasePanel)
        phase_panel.show(snap)
        phase_panel.set_class(snap.gate.fired, "-crystallised")
        self.query_one(MetricsTable).show(snap, self.hidden_metrics)
        log = self.query_one(LogPanel)
        if snap.log_total and log.has_class("-hidden") and not self._log_auto_shown:
            # A run with log lines (a job) shows its log once; v hides it.
            self._log_auto_shown = True
            log.remove_class("-hidden")
        log.show(snap)

    def _overlay_lines(self, snap: RunSnapshot, metric: str) -> list[Line]:
        """The same metric of the other runs of this project (at most 7), when overlaid."""
        if not self.overlay:
            return []
        lines = []
        others = [r for r in self.store.runs() if r.project == snap.run.project and r.key != snap.run.key]
        for i, run in enumerate(others[:7]):
            other = self.store.snapshot(run.key, max_points=500)
            s = other.series.get(metric) if other else None
            if s is not None:
                lines.append(Line(run.label, s.steps, s.values, f"plot-overlay-{i % 4}"))
        return lines

    def _show_plots(self, snap: RunSnapshot) -> None:
        phi = snap.series.get(mn.PHI)
        ent = snap.series.get(mn.ENTROPY)
        overlay_key = self.store.version if self.overlay else None
        gate_step = snap.gate.trigger_step if snap.gate.fired else None
        phi_title = "phi (derived from entropy)" if snap.phi_derived else "phi (order parameter)"
        if phi is None and ent is not None and snap.vocab_size is None:
            phi_title = "phi: needs the vocabulary size (--vocab-size)"
        with self.batch_update():
            self.query_one("#phi-plot", MetricPlot).show(
                self._overlay_lines(snap, mn.PHI)
                + ([Line(snap.run.label, phi.steps, phi.values, "plot-phi")] if phi else []),
                title=phi_title,
                key=(snap.run.key, snap.version, self.theme, overlay_key),
                **phi_plot_decorations(gate_step),
            )
            points, ent_title = [], "entropy (nats)"
            if snap.gate.peak_entropy is not None and snap.gate.peak_entropy_step is not None:
                peak, at = float(snap.gate.peak_entropy), snap.gate.peak_entropy_step
                points.append((float(at), peak, "", "plot-peak"))
                ent_title = f"entropy (nats) · peak {peak:.3g} at step {at} (●)"
            self.query_one("#entropy-plot", MetricPlot).show(
                self._overlay_lines(snap, mn.ENTROPY)
                + ([Line(snap.run.label, ent.steps, ent.values, "plot-entropy")] if ent else []),
                vlines=phi_plot_decorations(gate_step)["vlines"],
                points=points,
                title=ent_title,
                key=(snap.run.key, snap.version, self.theme, overlay_key),
            )
            focus_plot = self.query_one("#focus-plot", MetricPlot)
            if self.focus_metric and not focus_plot.has_class("-hidden"):
                s = snap.series.get(self.focus_metric)
                focus_plot.show(
                    [Line(self.focus_metric, s.steps, s.values, "plot-extra")] if s else [],
                    title=self.focus_metric,
                    key=(snap.run.key, snap.version, self.focus_metric, self.theme),
                )

    def _refresh_status(self) -> None:
        """The status bar and the job line (ages tick every second)."""
        self.query_one(StatusBar).show(self.store.summary(), self.snapshot, self.config.clock())
        self._refresh_job_bar()

    def add_source(self, source: Source, *, follow: str | None = None) -> SourceRunner:
        """Start polling another source (a launched job, a chosen project); with
        `follow`, switch to that run key as soon as it has data."""
        runner = SourceRunner(source, self._emit)
        self.runners.append(runner)
        self._start_runner(runner)
        if follow:
            self.follow(follow)
        return runner

    def _start_runner(self, runner: SourceRunner) -> None:
        self.run_worker(
            runner.run,
            name=runner.source.name,
            group="sources",
            description=f"polling {runner.source.name}",
            thread=True,
            exit_on_error=False,
        )

    def follow(self, run_key: str) -> None:
        """Show this run now, or as soon as its first event arrives."""
        self._pending_follow = run_key
        self._seen_store_version = -1
        self.pull()

    def switch_run(self, key: str) -> None:
        self.current_run = key
        self._seen_version = -1
        self._seen_store_version = -1
        self.pull()

    # -- workers -----------------------------------------------------------------

    @on(Worker.StateChanged)
    def _worker_state(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(
                f"{event.worker.description or event.worker.name} failed: {error}",
                severity="error",
                timeout=10,
            )

    # -- actions -----------------------------------------------------------------

    def action_help(self) -> None:
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
        self.push_screen(SkippedScreen(self.store.summary()))

    def action_pick_run(self) -> None:
        runs = [(r.key, f"{r.label}  [{r.source}: {r.project}]") for r in self.store.runs()]
        if not runs:
            self.notify("no runs yet", severity="warning")
            return

        def chosen(key: str | None) -> None:
            if key:
                self.switch_run(key)

        self.push_screen(RunPicker(runs, self.current_run), chosen)

    def action_pick_metrics(self) -> None:
        if self.snapshot is None:
            self.notify("no metrics yet", severity="warning")
            return

        def chosen(hidden: set[str] | None) -> None:
            if hidden is not None:
                self.hidden_metrics = hidden
                self.query_one(MetricsTable).show(self.snapshot, hidden)

        self.push_screen(MetricPicker(sorted(self.snapshot.series), self.hidden_metrics), chosen)

    def action_toggle_focus_plot(self) -> None:
        plot = self.query_one("#focus-plot", MetricPlot)
        metric = self.query_one(MetricsTable).selected_metric
        if plot.has_class("-hidden") or (metric and metric != self.focus_metric):
            if not metric:
                self.notify("select a metric in the table first", severity="warning")
                return
            self.focus_metric = metric
            plot.remove_class("-hidden")
        else:
            plot.add_class("-hidden")
        if self.snapshot is not None:
            self._show_plots(self.snapshot)

    def action_toggle_overlay(self) -> None:
        self.overlay = not self.overlay
        if self.snapshot is not None:
            self._show_plots(self.snapshot)
        self.notify("overlay: " + ("all runs of the project" if self.overlay else "off"), timeout=2)

    def action_pick_project(self) -> None:
        if self.config.list_projects is None or self.config.open_project is None:
            self.notify("this source has no projects to choose from", severity="warning")
            return
        self._load_projects()

    @work(thread=True, exclusive=True, exit_on_error=False, group="projects",
          description="listing projects")
    def _load_projects(self) -> None:
        names = self.config.list_projects()  # type: ignore[misc]
        self.call_from_thread(self._show_project_picker, names)

    def _show_project_picker(self, names: list[str]) -> None:
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
            self.add_source(self.config.open_project(name))  # type: ignore[misc]
            self._follow_project = name
            self.notify(f"opening project {name}", timeout=3)

        self.push_screen(ProjectPicker([(n, n) for n in names], current), chosen)

    def action_toggle_log(self) -> None:
        log = self.query_one(LogPanel)
        log.toggle_class("-hidden")
        if not log.has_class("-hidden"):
            log.show(self.snapshot)

    def action_toggle_follow(self) -> None:
        log = self.query_one(LogPanel)
        log.set_follow(not log.follow)
        self.notify("log: " + ("following" if log.follow else "paused"), timeout=2)

    def action_cycle_theme(self) -> None:
        names = self._theme_names or ["textual-dark", "textual-light"]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every dashboard action is in the command palette."""
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.id and b.action not in ("quit", "help"):
                yield SystemCommand(b.description, b.tooltip, lambda a=b.action: self.run_action(a))
        yield SystemCommand("Help", "List every key", self.action_help)


def build_app(config: DashboardConfig) -> CarlApp:
    """The factory the CLI and the tests use."""
    return CarlApp(config)

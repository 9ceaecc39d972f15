"""The dashboard screen: plots, phase panel, metrics table, log, job line, status bar,
and the keys that change how the run is viewed (which metrics, the plot grid:
`widgets/plot_grid.py`, chart controls: `chart_keys.py`, comparisons, the log panel,
saving the view).

It never reads the store nor reaches into the app: the app hands it each update as a
`SnapshotUpdated` message (the run on screen, the runs compared with it, the run list)
and the status as `StatusTick`; it hands each widget its part. What it asks for goes up
as messages: `DashboardReady` (its first frame is on screen), `CompareChanged`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Header

from carl_tui import metric_names as mn
from carl_tui.ui.crosshair import Crosshair
from carl_tui.ui.keys import VIEW_KEYS
from carl_tui.ui.messages import (
    CardWanted,
    DashboardReady,
    SnapshotUpdated,
    StatusTick,
)
from carl_tui.ui.metric_filter import MetricFilter
from carl_tui.ui.plot_view import ChartSettings
from carl_tui.ui.save import save_view_and_say
from carl_tui.ui.screens import chart_keys
from carl_tui.ui.screens.comparison import Comparison
from carl_tui.ui.screens.metric_grid import MetricGridScreen
from carl_tui.ui.widgets.job_bar import JobBar
from carl_tui.ui.widgets.key_footer import KeyFooter
from carl_tui.ui.widgets.log_panel import LogPanel
from carl_tui.ui.widgets.metrics_table import MetricsTable
from carl_tui.ui.widgets.phase_panel import PhasePanel
from carl_tui.ui.widgets.plot_grid import MAX_GRID, PlotGrid
from carl_tui.ui.widgets.plots import MetricPlot, align_y_labels
from carl_tui.ui.widgets.status_bar import StatusBar
from carl_tui.ui.widgets.system_panel import SystemPanel

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.events import RunRef
    from carl_tui.store import Notice, RunSnapshot
    from carl_tui.ui.chart import Overlay

OVERLAY_COLORS = tuple(f"plot-overlay-{i}" for i in range(8))  # 7 compared runs at most


def compared_runs(compared: Sequence[RunSnapshot | None]) -> list[tuple[RunSnapshot, str]]:
    """The runs compared with this one (or the rest of its project), each with its
    colour; one snapshot per run, whatever the number of plots."""
    return [(other, OVERLAY_COLORS[i % len(OVERLAY_COLORS)])
            for i, other in enumerate(compared) if other is not None]


def overlays(compared: list[tuple[RunSnapshot, str]], metric: str,
             x_axis: str) -> list[Overlay]:
    """The same metric of the compared runs."""
    from carl_tui.ui.chart import Overlay, x_map_for  # lazy: numpy, with the run's data

    return [Overlay(other.run.label, s, x_map_for(other, x_axis), color)
            for other, color in compared if (s := other.series.get(metric)) is not None]


class DashboardScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(k.key, k.action, k.description, id=k.id, tooltip=k.tooltip, show=k.show)
        for k in VIEW_KEYS
    ]

    def __init__(self, settings: ChartSettings, plot_metrics=(), save_dir: str = ".",
                 clock: Callable[[], float] = time.time):
        super().__init__()
        self.phi = MetricPlot(mn.PHI, color_var="plot-phi", id="phi-plot", classes="panel")
        self.entropy = MetricPlot(mn.ENTROPY, color_var="plot-entropy", id="entropy-plot",
                                  classes="panel")
        self.grid = PlotGrid(plot_metrics, id="grid")  # the chosen metrics' plots
        self.plots = Vertical(id="plots")
        self.phase = PhasePanel(id="phase", classes="panel")
        self.system = SystemPanel(id="system", classes="panel -hidden")
        self.table = MetricsTable(id="metrics", classes="panel")
        self.log_panel = LogPanel(id="log", classes="panel -hidden")
        self.job_bar = JobBar(id="job-bar")
        self.status = StatusBar(id="status")
        self.chart = settings
        self.save_dir = save_dir
        self.hidden_metrics: set[str] = set()
        self.metric_filter = MetricFilter()  # `/`: the metrics whose names match
        self.crosshair = Crosshair()  # `,` `.`: one x on every plot, with its values
        self.comparison = Comparison(self)  # the runs overlaid on every plot
        self._log_auto_shown = False
        self._laid_out_for: Size | None = None  # the terminal size the layout follows
        self.snapshot: RunSnapshot | None = None
        self.compared: tuple[RunSnapshot | None, ...] = ()  # with the snapshot: compare, overlay
        self.runs: tuple[RunRef, ...] = ()  # every run known, as of the last update
        self.grouped: tuple[Notice, ...] = ()  # other runs' notices told only as a count
        self.clock = clock

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.app.check_action(action, parameters)  # read-only: no ctrl+s

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="main"):
            with self.plots:
                yield self.phi
                yield self.entropy
                yield self.grid
            with Vertical(id="side"):
                yield self.phase
                yield self.system
                yield self.table
        yield self.log_panel
        yield self.job_bar
        yield self.status
        yield KeyFooter()

    def on_mount(self) -> None:
        self.phase.border_title = "phase"
        self.table.border_title = "metrics"
        self.log_panel.border_title = "log"
        self.system.border_title = "system"
        self._sync_grid()
        self.layout_for(self.app.size.width, self.app.size.height)
        self.call_after_refresh(self.post_message, DashboardReady())  # data may flow in

    def on_resize(self, event) -> None:
        # The breakpoints follow the terminal's size, once per change of it. Not the
        # event's size: a stale Resize (TERM=dumb makes Rich report 80x25 at first) and
        # the real one would each re-lay out the screen, which posts the other again:
        # the screen flipped between two layouts at 100 % CPU and never read a key.
        size = self.app.size
        if size == self._laid_out_for:
            return
        self._laid_out_for = size
        self.layout_for(size.width, size.height)
        self.call_after_refresh(self._fit_grid)

    def layout_for(self, width: int, height: int) -> None:
        """80x24 stacks the essentials; 120x36 narrows the side; 200x60 plots two columns."""
        compact = width < 110 or height < 30
        self.set_class(compact, "-compact")
        self.set_class(not compact and width < 150, "-medium")
        self.set_class(width >= 180 and height >= 50, "-wide")

    # -- showing ---------------------------------------------------------------

    def all_plots(self) -> list[MetricPlot]:
        return [self.phi, self.entropy, *self.grid.query(MetricPlot)]

    @property
    def render_cost(self) -> float:
        return sum(p.render_cost for p in self.all_plots() if p.display)

    @property
    def plot_points(self) -> int:
        """Points per series worth drawing: a few per braille dot of the widest plot."""
        return 4 * max(self.phi.size.width, 40)

    @on(SnapshotUpdated)
    def _updated(self, update: SnapshotUpdated) -> None:
        self.runs, self.grouped = update.runs, update.grouped
        if update.snapshot is not None:
            self.compared = update.compared
            self.show(update.snapshot)

    @on(StatusTick)
    def _tick(self, tick: StatusTick) -> None:
        self.show_status(tick.summary, tick.snapshot, tick.now, tick.history)

    def show(self, snap: RunSnapshot | None) -> None:
        if snap is None:
            return
        self.snapshot = snap
        self.sub_title = f"{snap.run.label} · {snap.meta.get('model') or snap.run.source}"
        self.app.sub_title = self.sub_title
        self._show_plots(snap)
        self.phase.show(snap, self.clock())
        self.phase.set_class(snap.gate.fired, "-crystallised")
        hidden = self.hidden_metrics | self.metric_filter.left_out(snap.series)
        self.table.border_title = self.metric_filter.title()
        self.table.show(snap, hidden, self.chart.smoothing)
        if snap.log_total and self.log_panel.has_class("-hidden") and not self._log_auto_shown:
            # A run with log lines (a job) shows its log once; v hides it.
            self._log_auto_shown = True
            self.log_panel.remove_class("-hidden")
        self.log_panel.show(snap)

    def show_status(self, summary, snap, now: float, history: str = "") -> None:
        """The status bar and the job line (ages tick every second)."""
        self.status.show(summary, snap, now, history)
        self.job_bar.show(snap.job if snap else None, snap.usage if snap else None)
        if self.system.display:
            self.system.show(snap, now)

    def _show_plots(self, snap: RunSnapshot) -> None:
        from carl_tui.ui.chart import shared_xlim  # lazy: numpy, with the run's data

        runs = compared_runs(self.compared)
        compared = tuple((other.run.key, other.version) for other, _ in runs)
        key = (snap.run.key, snap.version, compared)  # a theme change: each plot redraws itself
        plots = [p for p in self.all_plots() if p.display]
        shown = [(plot, overlays(runs, plot.metric, self.chart.x_axis)) for plot in plots]
        xlim = shared_xlim(snap, [(p.metric, o) for p, o in shown], self.chart)
        with self.app.batch_update():
            for plot, others in shown:
                plot.show_run(snap, others, self.chart, key=(key, xlim), xlim=xlim)

    def redraw(self, note: str | None = None) -> None:
        if self.snapshot is not None:
            self.show(self.snapshot)
        if note:
            self.notify(note, timeout=2)

    # -- the chart's keys (their rules: `chart_keys.py`) ---------------------------

    def _set_chart(self, chart: ChartSettings, note: str | None = None) -> None:
        self.chart = chart
        self.redraw(note or chart.describe())

    def action_cycle_x_axis(self) -> None:
        self._set_chart(chart_keys.next_x_axis(self.chart))

    def action_cycle_smoothing(self) -> None:
        self._set_chart(chart_keys.next_smoothing(self.chart))

    def action_cycle_range(self) -> None:
        self._set_chart(chart_keys.next_range(self.chart))

    def action_toggle_log(self) -> None:
        metric = self.selected_metric()
        if not metric:
            return
        chart, note = chart_keys.log_toggled(self.chart, metric)
        if metric in chart.log_y and metric not in (mn.PHI, mn.ENTROPY) and self.grid.add(metric):
            self._sync_grid()  # a metric put on a log scale gets a plot
        self._set_chart(chart, note)

    def selected_metric(self) -> str | None:
        """The metric selected in the table; None (and the user told) when none is."""
        metric = self.table.selected_metric
        if not metric:
            self.notify("select a metric in the table first", severity="warning")
        return metric or None

    # -- the plot grid -------------------------------------------------------------

    def _sync_grid(self) -> None:
        """One plot per chosen metric in the grid; fitted once they are laid out."""
        self.grid.sync()
        self.call_after_refresh(self._fit_grid)

    def _fit_grid(self) -> int:
        """Show as many grid plots as fit (none in a compact screen, two columns in a
        wide one). Returns how many are hidden."""
        height = 0 if self.has_class("-compact") else self.plots.size.height
        return self.grid.fit(height, 2 if self.has_class("-wide") else 1)

    def on_metric_plot_zoom_wanted(self, event: MetricPlot.ZoomWanted) -> None:
        self.chart = replace(self.chart, x_window=event.window)  # z: unzoomed
        self.redraw()

    def on_metric_plot_crosshair_wanted(self, event: MetricPlot.CrosshairWanted) -> None:
        self.crosshair.place(event.x, [p for p in self.all_plots() if p.display])

    def on_metric_plot_axis_changed(self, _event: MetricPlot.AxisChanged) -> None:
        align_y_labels([p for p in self.all_plots() if p.display])

    def _say_hidden(self) -> None:
        if self._fit_grid():
            self.notify(f"{self.grid.hidden} chosen plot(s) wait for a taller terminal "
                        "(f on a metric removes it from the grid)", timeout=4)

    def action_toggle_grid_metric(self) -> None:
        metric = self.selected_metric()
        if not metric:
            return
        if metric in (mn.PHI, mn.ENTROPY):
            self.notify(f"{metric} always has its own plot", timeout=2)
            return
        if not self.grid.toggle(metric):
            self.notify(f"at most {MAX_GRID} plots in the grid: press f on one to remove it",
                        severity="warning")
            return
        self.redraw()
        self.call_after_refresh(self._say_hidden)  # fits the grid, and says what waits

    # -- what is compared, shown, saved ----------------------------------------------

    @property
    def compare(self) -> list[str]:
        return self.comparison.keys

    def action_compare(self) -> None:
        self.comparison.pick()

    def action_toggle_overlay(self) -> None:
        self.comparison.toggle_overlay()

    def compare_with(self, keys: tuple[str, ...]) -> None:
        self.comparison.select(keys)

    def action_pick_metrics(self) -> None:
        # lazy: the picker's list widgets (about 3 ms) are not on the first frame
        from carl_tui.ui.screens.pickers import MetricPicker

        snap = self.snapshot
        if snap is None:
            self.notify("no metrics yet", severity="warning")
            return
        names = self.metric_filter.kept(sorted(snap.series, key=mn.display_order))

        def chosen(shown: set[str] | None) -> None:  # those filtered out stay as they were
            if shown is not None:
                self.hidden_metrics = ({m for m in names if m not in shown}
                                       | (self.hidden_metrics - set(names)))
                self.redraw()

        self.app.push_screen(
            MetricPicker([(m, m, m not in self.hidden_metrics) for m in names]), chosen)

    def action_crosshair(self, delta: int) -> None:
        self.crosshair.move(delta, [p for p in self.all_plots() if p.display])

    def action_metric_grid(self) -> None:
        self.app.push_screen(MetricGridScreen(lambda: self.snapshot, self.metric_filter.kept))

    def action_filter_metrics(self) -> None:
        self.metric_filter.ask(self.app, self.redraw)

    def action_toggle_log_panel(self) -> None:
        self.log_panel.toggle_class("-hidden")
        if not self.log_panel.has_class("-hidden"):
            self.log_panel.show(self.snapshot)

    def action_toggle_system(self) -> None:
        self.system.toggle_class("-hidden")
        if not self.system.has_class("-hidden"):
            self.system.show(self.snapshot, self.clock())

    def action_toggle_evidence(self) -> None:
        self.phase.toggle_evidence()

    def action_events(self) -> None:
        from carl_tui.ui.screens.event_log import EventsScreen  # lazy: loads the store (numpy)

        if self.snapshot is None:
            self.notify("no run yet", severity="warning")
            return
        # with the other runs' notices that were told only as a count
        self.app.push_screen(EventsScreen(self.snapshot, list(self.grouped)))

    def action_run_card(self) -> None:
        key = self.snapshot.run.key if self.snapshot else None
        self.post_message(CardWanted(key, tuple(self.compare)))

    def action_toggle_follow(self) -> None:
        self.log_panel.set_follow(not self.log_panel.follow)
        self.notify("log: " + ("following" if self.log_panel.follow else "paused"), timeout=2)

    def action_save_view(self) -> None:
        save_view_and_say(self.app, self.snapshot, self.all_plots(), self.save_dir)

"""The dashboard's chart-control keys: the x axis, the smoothing, the range of steps
and the log scale of the selected metric (see `ui/keys.py` for the keys)."""

from __future__ import annotations

from dataclasses import replace

from carl_tui import metric_names as mn
from carl_tui.ui import plot_view


class ChartKeys:
    """Mixed into the dashboard screen: it changes the screen's `chart` settings and
    redraws. Uses the screen's `table` (the selected metric), `grid` (a metric put on a
    log scale gets a plot), `redraw`, `notify` and `_sync_grid`."""

    chart: plot_view.ChartSettings

    def _set_chart(self, **changes) -> None:
        self.chart = replace(self.chart, **changes)
        self.redraw(self.chart.describe())

    def action_cycle_x_axis(self) -> None:
        axes = plot_view.X_AXES
        self._set_chart(x_axis=axes[(axes.index(self.chart.x_axis) + 1) % len(axes)])

    def action_cycle_smoothing(self) -> None:
        steps = plot_view.SMOOTHING_STEPS
        i = steps.index(self.chart.smoothing) if self.chart.smoothing in steps else 0
        self._set_chart(smoothing=steps[(i + 1) % len(steps)])

    def action_cycle_range(self) -> None:
        ranges = plot_view.RANGES
        i = ranges.index(self.chart.last_n) if self.chart.last_n in ranges else 0
        if self.chart.x_window is not None:  # zoomed with the mouse: unzoom first
            self._set_chart(x_window=None)
            return
        self._set_chart(last_n=ranges[(i + 1) % len(ranges)])

    def selected_metric(self) -> str | None:
        """The metric selected in the table; None (and the user told) when none is."""
        metric = self.table.selected_metric
        if not metric:
            self.notify("select a metric in the table first", severity="warning")
        return metric or None

    def action_toggle_log(self) -> None:
        metric = self.selected_metric()
        if not metric:
            return
        log_y = self.chart.log_y ^ {metric}
        self.chart = replace(self.chart, log_y=log_y)
        if metric in log_y and metric not in (mn.PHI, mn.ENTROPY) and self.grid.add(metric):
            self._sync_grid()
        self.redraw(f"{metric}: {'log' if metric in log_y else 'linear'} scale")

"""The dashboard's grid of chosen metrics: one plot per metric, in the order chosen,
beside the phi and entropy plots. As many are shown as fit at a readable height
(the rest wait for a bigger terminal); every plot gets the same height."""

from __future__ import annotations

from collections.abc import Iterable

from textual.containers import Vertical

from carl_tui.ui.widgets.plots import MetricPlot

MAX_GRID = 6  # chosen metrics plotted beside phi and entropy
PLOT_MIN_HEIGHT = 9  # rows a plot needs to be read (frame, ticks, axis label, legend)


class PlotGrid(Vertical):
    """`metrics`: the chosen metrics, in order (at most MAX_GRID); `hidden`: how many of
    them do not fit (see `fit`). The layout is the stylesheet's `#grid` (a grid)."""

    def __init__(self, metrics: Iterable[str] = (), *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.metrics: list[str] = list(metrics)[:MAX_GRID]
        self.hidden = 0

    def toggle(self, metric: str) -> bool:
        """Take `metric` out of the grid, or add it; False when the grid is full."""
        if metric in self.metrics:
            self.metrics.remove(metric)
        elif not self.add(metric):
            return False
        self.sync()
        return True

    def add(self, metric: str) -> bool:
        """Add `metric` at the end unless it is there already or the grid is full (call
        `sync` then); whether it was added."""
        if metric in self.metrics or len(self.metrics) >= MAX_GRID:
            return False
        self.metrics.append(metric)
        return True

    def sync(self) -> None:
        """One plot per chosen metric in the grid, in the order chosen."""
        have = {p.metric: p for p in self.query(MetricPlot)}
        for metric, plot in have.items():
            if metric not in self.metrics:
                plot.remove()
        for metric in self.metrics:
            if metric not in have:
                self.mount(MetricPlot(metric, color_var="plot-extra", classes="panel"))

    def fit(self, height: int, columns: int) -> int:
        """Show as many plots as fit in `height` rows (the plot column's: phi and entropy
        take two plots' room) in `columns`, each at the same height. Returns how many
        chosen plots are hidden."""
        plots = [p for p in self.query(MetricPlot) if p.metric in self.metrics]
        plots.sort(key=lambda p: self.metrics.index(p.metric))
        rows_fit = max(0, height // PLOT_MIN_HEIGHT - 2)
        shown = min(len(plots), rows_fit * columns)
        for i, plot in enumerate(plots):
            plot.display = i < shown
        rows = -(-shown // columns)
        self.display = rows > 0
        self.styles.height = f"{rows}fr" if rows else 0
        self.styles.grid_size_columns = columns
        self.hidden = len(plots) - shown
        return self.hidden

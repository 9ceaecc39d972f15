"""The crosshair (a click on a plot places it, `,` and `.` move it, `escape` hides it): one
x on every stacked plot at once, each plot drawing it as a line and saying, in its bottom
border (`plots.py`: `readout`), the step (or time, or tokens) there and the value of each
of its series."""

from __future__ import annotations

from collections.abc import Sequence

from carl_tui.ui.widgets.plots import MetricPlot, nearest


class Crosshair:
    """Where the crosshair is (None: hidden), moved along the points of the first plot."""

    def __init__(self) -> None:
        self.x: float | None = None

    @staticmethod
    def _xs(plots: Sequence[MetricPlot]):
        """The x of each point of the first plot's first series (what the crosshair snaps
        to); None when nothing is drawn."""
        return next((t.xs for p in plots for t in p.view.traces if not t.faint and len(t.xs)),
                    None)

    def place(self, x: float, plots: Sequence[MetricPlot]) -> None:
        """At the point nearest `x` (where the plot was clicked)."""
        xs = self._xs(plots)
        if xs is not None:
            self.x = float(xs[nearest(xs, x)])
            for plot in plots:
                plot.set_crosshair(self.x)

    def move(self, delta: int, plots: Sequence[MetricPlot]) -> None:
        """`delta` columns to the right (left when negative); 0 hides it. It starts at the
        last point."""
        xs = self._xs(plots)
        if delta == 0 or xs is None:
            self.x = None
        else:
            width = max((p.size.width for p in plots), default=80) or 80
            stride = max(1, len(xs) // width)
            i = len(xs) - 1 if self.x is None else nearest(xs, self.x) + delta * stride
            self.x = float(xs[max(0, min(len(xs) - 1, i))])
        for plot in plots:
            plot.set_crosshair(self.x)

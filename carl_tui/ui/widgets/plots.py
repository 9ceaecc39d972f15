"""A plot of one metric of the run on screen, drawn with textual-plotext.

The plot builds what it shows from the snapshot (`ui/chart.py::build_view`:
traces, reference marks, the entropy peak, the gate and cascade steps, ticks)
and draws it. The title sits in the panel's border and the legend in its
bottom border, so nothing is ever drawn over the data. A plot redraws only
when what it shows changed, and not while it is hidden.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text
from textual.color import Color, ColorParseError
from textual_plotext import PlotextPlot

from carl_tui.store import RunSnapshot
from carl_tui.ui.chart import DEFAULT_SETTINGS, ChartSettings, Overlay, PlotView, build_view

FAINT = 0.35  # how much of a line's colour a faint (raw, under the smoothed) trace keeps


class MetricPlot(PlotextPlot):
    """Call `show_run(...)`; the plot rebuilds its view when the size or data change."""

    DEFAULT_CSS = """
    MetricPlot { height: 1fr; min-height: 6; }
    """

    def __init__(self, metric: str, *, color_var: str = "plot-extra", id: str | None = None,
                 classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.metric = metric
        self.color_var = color_var
        self.view = PlotView(title=metric, empty="waiting for data…")
        self._inputs: tuple | None = None
        self._key: object = None
        self._drawn: object = None
        self.render_cost = 0.0  # seconds the last render took (plotext is pure Python)

    def show_run(
        self,
        snap: RunSnapshot | None,
        overlays: Sequence[Overlay] = (),
        settings: ChartSettings = DEFAULT_SETTINGS,
        *,
        key: object = None,
    ) -> None:
        """What to show; `key` identifies the data (an equal key skips the work)."""
        if not self.wants(key, settings):
            return
        key = (key, settings, self.metric)
        self._key = key
        self._inputs = (snap, tuple(overlays), settings)
        self.redraw()

    def wants(self, key: object, settings: ChartSettings) -> bool:
        """Whether `show_run` with this key and settings would draw anything new."""
        full = (key, settings, self.metric)
        return not (full == self._key and self._drawn == (full, self.size))

    @property
    def lines(self) -> list[str]:
        """Labels of the traces drawn (one per run; smoothed runs count once)."""
        return [t.label for t in self.view.traces if not t.faint]

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def render(self):
        t0 = time.perf_counter()
        result = super().render()
        self.render_cost = time.perf_counter() - t0
        return result

    def redraw(self) -> None:
        if not self.is_mounted or self._inputs is None:
            if self.is_mounted:
                self.border_title = self.view.title
            return
        snap, overlays, settings = self._inputs
        w, h = self.size.width or 80, self.size.height or 20
        self.view = build_view(self.metric, snap, overlays, settings, color_var=self.color_var,
                               width=w, height=h)
        self._drawn = (self._key, self.size)
        self._draw(self.view)

    def _rgb(self, var: str, faint: bool = False):
        value = self.app.theme_variables.get(var)
        try:
            color = Color.parse(value) if value else Color.parse("white")
        except ColorParseError:
            color = Color.parse("white")
        if faint:
            bg = Color.parse(self.app.theme_variables.get("surface") or "black")
            color = bg.blend(color, FAINT)
        return color.rgb

    def _draw(self, view: PlotView) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        self.border_title = view.title
        self.border_subtitle = self._legend(view)
        if view.empty:
            plt.text(view.empty, x=0.5, y=0.5, alignment="center")
            plt.xlim(0, 1)
            plt.ylim(0, 1)
            plt.xticks([], [])
            plt.yticks([], [])
            self.refresh()
            return
        plt.xlabel(view.x_label)
        (x0, x1), (y0, y1) = view.xlim, view.ylim
        for t in sorted(view.traces, key=lambda t: not t.faint):  # faint ones underneath
            plt.plot(t.xs.tolist(), t.ys.tolist(), color=self._rgb(t.color_var, t.faint),
                     marker="braille")
        for m in view.marks:
            color = self._rgb(m.color_var)
            if m.kind == "hline":
                plt.plot([x0, x1], [m.y, m.y], color=color, marker="braille")
            elif m.kind == "vline":
                plt.plot([m.x, m.x], [y0, y1], color=color, marker="braille")
            else:
                plt.scatter([m.x], [m.y], color=color, marker="●")
        plt.xlim(x0, x1 if x1 > x0 else x0 + 1)
        plt.ylim(y0, y1)
        plt.xticks(list(view.xticks[0]), list(view.xticks[1]))
        plt.yticks(list(view.yticks[0]), list(view.yticks[1]))
        self.refresh()

    def _legend(self, view: PlotView) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        if view.log_y:
            t.append("log scale  ", style="dim")
        for i, item in enumerate(view.legend):
            if i:
                t.append("  ")
            t.append(item.symbol + " ", style=self._style(item.color_var))
            t.append(item.text)
        return t

    def _style(self, var: str) -> str:
        return self.app.theme_variables.get(var) or "bold"

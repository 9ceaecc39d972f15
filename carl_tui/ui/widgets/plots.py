"""A plot of one metric of the run on screen, drawn with textual-plotext.

The plot builds what it shows from the snapshot (`ui/chart.py::build_view`:
traces, reference marks, the entropy peak, the gate and cascade steps, ticks)
and draws it. The title sits in the panel's border and the legend in its
bottom border, so nothing is ever drawn over the data. A plot redraws only
when what it shows changed, and not while it is hidden.

plotext (and numpy, through the view) load with the first data to draw: until
then a plot is its panel and a line saying what it waits for, so the dashboard's
first frame needs neither. The figure is textual-plotext's, themed from the app's
theme as its `PlotextPlot` widget does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.align import Align
from rich.text import Text
from textual.color import Color, ColorParseError
from textual.widget import Widget

from carl_tui.ui.format import cut_middle
from carl_tui.ui.plot_view import DEFAULT_SETTINGS, WAITING, ChartSettings, PlotView

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store import RunSnapshot
    from carl_tui.ui.chart import Overlay

FAINT = 0.35  # how much of a line's colour a faint (raw, under the smoothed) trace keeps


class MetricPlot(Widget):
    """Call `show_run(...)`; the plot rebuilds its view when the size or data change."""

    DEFAULT_CSS = """
    MetricPlot { width: 1fr; height: 1fr; min-height: 6; }
    """

    def __init__(self, metric: str, *, color_var: str = "plot-extra", id: str | None = None,
                 classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.metric = metric
        self.color_var = color_var
        self.view = PlotView(title=metric, empty=WAITING)
        self._plot: Any = None  # textual-plotext's figure, made for the first data drawn
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
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    @property
    def plt(self):
        """The plotext figure (textual-plotext's `Plot`), made on first use."""
        if self._plot is None:
            from textual_plotext.plot import Plot

            self._plot = Plot()
        return self._plot

    def render(self):
        if self.view.empty or self._plot is None:
            return Align(Text(self.view.empty or WAITING, style="dim"), align="center",
                         vertical="middle")
        t0 = time.perf_counter()
        w, h = self.size.width, self.size.height
        plt = self._plot
        plt.plotsize(w, h)
        plt._set_size(w, h)  # as PlotextPlot.render does (textual-plotext issue 5)
        plt.theme(self._plotext_theme())
        result = Text.from_ansi(plt.build())
        self.render_cost = time.perf_counter() - t0
        return result

    def _plotext_theme(self) -> str:
        """The app's theme as a plotext theme (canvas and axes the panel's surface, ticks
        the foreground), registered with plotext once per theme."""
        from plotext._dict import themes
        from textual_plotext.plot import _rgbify_theme, _sequence

        name = f"textual-auto-{self.app.theme}"
        if name not in themes:
            surface = self._rgb("surface")
            themes[name] = _rgbify_theme(surface, surface, self._rgb("foreground"), "default",
                                         _sequence)
        return name

    def redraw(self) -> None:
        if not self.is_mounted or self._inputs is None:
            if self.is_mounted:
                self.border_title = self._fit_title(self.view.title)
            return
        from carl_tui.ui.chart import build_view  # numpy: here with the run's data

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
        self.border_title = self._fit_title(view.title)
        self.border_subtitle = self._legend(view)
        if view.empty:  # said in words (render), no figure
            self.refresh()
            return
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
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

    def _fit_title(self, title: str) -> str:
        """The title cut in the middle to fit the border (between its corners and their
        blanks), so that metrics named alike (TRL's `profiling/Time taken: ...`) keep the
        ends that tell them apart; Textual would cut the end."""
        width = self.outer_size.width
        return title if width <= 6 else cut_middle(title, width - 6)

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

"""A plot of one metric of the run on screen, drawn with textual-plotext.

The plot builds what it shows from the snapshot (`ui/chart.py::build_view`:
traces, reference marks, the entropy peak, the gate and cascade steps, ticks)
and draws it. The title sits in the panel's border and the legend in its
bottom border, so nothing is ever drawn over the data. A plot redraws only
when what it shows changed, and not while it is hidden.

plotext (and numpy, through the view) load with the first data to draw: until
then a plot is its panel and a line saying what it waits for, so the dashboard's
first frame needs neither. The first figure is drawn a frame after the data
arrived: the frame that brings a run's numbers (the metrics table, the phase
panel, the status bar) waits neither for plotext to load nor for the plots to be
drawn. The figure is textual-plotext's, themed from the app's
theme as its `PlotextPlot` widget does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.align import Align
from rich.text import Text
from textual import events
from textual.color import Color, ColorParseError
from textual.message import Message
from textual.widget import Widget

from carl_tui.ui.format import cut_middle, value_text
from carl_tui.ui.plot_view import DEFAULT_SETTINGS, WAITING, ChartSettings, PlotView

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store import RunSnapshot
    from carl_tui.ui.chart import Overlay

ZOOM_STEP = 0.8  # the share of the x range one notch of the wheel keeps (back: 1 / it)
FAINT = 0.35  # how much of a line's colour a faint (raw, under the smoothed) trace keeps


def align_y_labels(plots: Sequence[MetricPlot]) -> None:
    """Stacked plots sharing an x range also share the room their y tick labels take (the
    widest of them), so that their plot areas, and each step, line up column for column."""
    widths = [len(label) for p in plots if not p.view.empty for label in p.view.yticks[1]]
    width = max(widths, default=0)
    for plot in plots:
        if plot.y_label_width != width:
            plot.y_label_width = width
            if not plot.view.empty:
                plot._draw(plot.view)


def readout(view: PlotView, x: float) -> str:
    """`x` and, for each series drawn (not the faint raw traces under a smoothed one), its
    value at the point nearest `x`."""
    parts = [f"{view.x_label} {x:g}"]
    for t in view.traces:
        if t.faint or not len(t.xs):
            continue
        parts.append(f"{t.label} {value_text(float(t.ys[nearest(t.xs, x)]))}")
    return " · ".join(parts)


def nearest(xs, x: float) -> int:
    import numpy as np  # lazy: with the data, once the plot is drawn (not the first frame)

    return int(np.abs(np.asarray(xs, dtype=float) - x).argmin())


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
        self._first_due = False  # the first figure is drawn after the next refresh
        self._inputs: tuple | None = None
        self._key: object = None
        self._drawn: object = None
        self.render_cost = 0.0  # seconds the last render took (plotext is pure Python)
        # y tick labels padded to this width: stacked plots give their axes the same room
        self.y_label_width = 0
        self._label_room = 0  # the width its own widest y tick label takes
        self.crosshair: float | None = None  # the x of the crosshair (ui/crosshair.py)
        self._drag: tuple[int, tuple[float, float]] | None = None  # (column, xlim) at press
        self._dragged = False  # the press moved the pointer: a pan, not a click

    class AxisChanged(Message):
        """The plot's y tick labels changed width (see `align_y_labels`)."""

    class ZoomWanted(Message):
        """The mouse asks for this x range (the wheel zooms, a drag pans) on every plot."""

        def __init__(self, window: tuple[float, float]) -> None:
            super().__init__()
            self.window = window

    class CrosshairWanted(Message):
        """A click on the plot asks for the crosshair at this x on every plot."""

        def __init__(self, x: float) -> None:
            super().__init__()
            self.x = x

    def _fraction(self, x: int) -> float:
        """How far along the plot area (0: its left edge, 1: its right) column `x` lies,
        the y tick labels and the axis left of it."""
        left = max(self.y_label_width, self._label_room) + 2
        return min(1.0, max(0.0, (x - left) / max(1, self.size.width - left - 1)))

    def _zoom(self, event: events.MouseEvent, factor: float) -> None:
        if self.view.empty:
            return
        event.stop()
        x0, x1 = self.view.xlim
        at = x0 + self._fraction(event.x) * (x1 - x0)  # stays under the pointer
        self.post_message(self.ZoomWanted((at - (at - x0) * factor, at + (x1 - at) * factor)))

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._zoom(event, ZOOM_STEP)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._zoom(event, 1 / ZOOM_STEP)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        if not self.view.empty:
            self._drag = (event.x, self.view.xlim)
            self._dragged = False
            self.capture_mouse()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self._drag is None:
            return
        start, (x0, x1) = self._drag
        shift = (start - event.x) / max(1, self.size.width) * (x1 - x0)
        if shift:
            self._dragged = True
            self.post_message(self.ZoomWanted((x0 + shift, x1 + shift)))

    def on_mouse_up(self, event: events.MouseUp) -> None:
        if self._drag is not None and not self._dragged:  # a click: the crosshair there
            x0, x1 = self._drag[1]
            self.post_message(self.CrosshairWanted(x0 + self._fraction(event.x) * (x1 - x0)))
        self._drag = None
        self.release_mouse()

    def show_run(
        self,
        snap: RunSnapshot | None,
        overlays: Sequence[Overlay] = (),
        settings: ChartSettings = DEFAULT_SETTINGS,
        *,
        key: object = None,
        xlim: tuple[float, float] | None = None,
    ) -> None:
        """What to show; `key` identifies the data (an equal key skips the work); `xlim`:
        the x range shared with the plots stacked with this one."""
        if not self.wants(key, settings):
            return
        key = (key, settings, self.metric)
        self._key = key
        self._inputs = (snap, tuple(overlays), settings, xlim)
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
            from textual_plotext.plot import Plot  # lazy: plotext, after the first frame

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
        # lazy: plotext, after the first frame
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
        from carl_tui.ui.chart import build_view  # lazy: numpy, with the run's data

        snap, overlays, settings, xlim = self._inputs
        w, h = self.size.width or 80, self.size.height or 20
        self.view = build_view(self.metric, snap, overlays, settings, color_var=self.color_var,
                               width=w, height=h, xlim=xlim)
        self._drawn = (self._key, self.size)
        self._draw(self.view)
        room = max((len(t) for t in self.view.yticks[1]), default=0)
        if room != self._label_room:  # (new ticks: a new size or data)
            self._label_room = room
            self.post_message(self.AxisChanged())

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

    def set_crosshair(self, x: float | None) -> None:
        """Draw the crosshair at `x` (None: none), its readout in place of the legend."""
        self.crosshair = x
        if not self.view.empty:
            self._draw(self.view)

    def _draw(self, view: PlotView) -> None:
        self.border_title = self._fit_title(view.title)
        x = self.crosshair
        self.border_subtitle = self._legend(view) if x is None or view.empty else Text(
            readout(view, x), no_wrap=True, overflow="ellipsis")
        if view.empty:  # said in words (render), no figure
            self.refresh()
            return
        if self._plot is None:  # the first figure: after the frame that shows the numbers
            if not self._first_due:
                self._first_due = True
                self.call_after_refresh(self._first_figure)
            return
        self._figure(view)

    def _first_figure(self) -> None:
        """The first figure: plotext loads now, and the plot draws its latest view."""
        _ = self.plt
        if self.is_mounted and not self.view.empty:
            self._figure(self.view)

    def _figure(self, view: PlotView) -> None:
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
        if self.crosshair is not None:
            plt.plot([self.crosshair] * 2, [y0, y1], color=self._rgb("foreground"),
                     marker="braille")
        plt.xlim(x0, x1 if x1 > x0 else x0 + 1)
        plt.ylim(y0, y1)
        plt.xticks(list(view.xticks[0]), list(view.xticks[1]))
        width = self.y_label_width
        plt.yticks(list(view.yticks[0]), [label.rjust(width) for label in view.yticks[1]])
        self.refresh()

    def _fit_title(self, title: str) -> str:
        """The title cut in the middle to fit the border (between its corners and their
        blanks), so that metrics named alike (TRL's `profiling/Time taken: ...`) keep the
        ends that tell them apart; Textual would cut the end."""
        width = self.outer_size.width
        return title if width <= 6 else cut_middle(title, width - 6)

    def _legend(self, view: PlotView) -> Text:
        """The legend, fitted to the border: runs' names cut in the middle, and where even
        that does not fit, the last overlaid runs said as "+N runs" (the legend was cut at
        its end, and the run's own line, listed last, was never named)."""
        width = max(10, self.outer_size.width - 6)
        items = list(view.legend)
        runs = [i for i, item in enumerate(items) if item.run]
        for most in (40, 24, 16, 10):
            t = self._legend_text(view, items, most)
            if t.cell_len <= width or not runs:
                return t
        for keep in range(len(runs) - 1, 0, -1):  # the run's own (first) always stays
            dropped = set(runs[keep:])
            t = self._legend_text(view, [x for i, x in enumerate(items) if i not in dropped],
                                  10, more=len(dropped))
            if t.cell_len <= width:
                return t
        return t

    def _legend_text(self, view: PlotView, items: list, most: int, more: int = 0) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        if view.log_y:
            t.append("log scale  ", style="dim")
        for i, item in enumerate(items):
            if i:
                t.append("  ")
            t.append(item.symbol + " ", style=self._style(item.color_var))
            t.append(cut_middle(item.text, most) if item.run else item.text)
            if more and i == sum(1 for x in items if x.run) - 1:
                t.append(f"  +{more} run{'s' if more != 1 else ''}", style="dim")
        return t

    def _style(self, var: str) -> str:
        return self.app.theme_variables.get(var) or "bold"

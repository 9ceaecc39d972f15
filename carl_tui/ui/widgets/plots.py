"""Plots of phi, entropy and any chosen metric, drawn with textual-plotext."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from textual.color import Color, ColorParseError
from textual_plotext import PlotextPlot

from carl_tui.coherence.constants import SIGMA


@dataclass(frozen=True)
class Line:
    """One line to draw: a run's series, with its label and theme colour variable."""

    label: str
    steps: np.ndarray
    values: np.ndarray
    color_var: str = "plot-phi"


def _rgb(app, var: str, fallback: str = "white") -> tuple[int, int, int] | str:
    value = app.theme_variables.get(var)
    if not value:
        return fallback
    try:
        return Color.parse(value).rgb
    except ColorParseError:
        return fallback


class MetricPlot(PlotextPlot):
    """A line plot over steps. Call `show(...)` with the data; it redraws only
    when something changed and the widget is visible."""

    DEFAULT_CSS = """
    MetricPlot { height: 1fr; min-height: 6; }
    """

    def __init__(self, title: str, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.title = title
        self._lines: tuple[Line, ...] = ()
        self._hlines: tuple[tuple[float, str, str], ...] = ()
        self._vlines: tuple[tuple[float, str, str], ...] = ()
        self._points: tuple[tuple[float, float, str, str], ...] = ()
        self._key: object = None
        self.render_cost = 0.0  # seconds the last render took (plotext is pure Python)

    def show(
        self,
        lines: Sequence[Line],
        *,
        hlines: Sequence[tuple[float, str, str]] = (),
        vlines: Sequence[tuple[float, str, str]] = (),
        points: Sequence[tuple[float, float, str, str]] = (),
        title: str | None = None,
        key: object = None,
    ) -> None:
        """Set what to draw. hlines/vlines: (position, label, colour var);
        points: (x, y, label, colour var). `key` identifies the data: an equal
        key skips the redraw."""
        if key is not None and key == self._key and title in (None, self.title):
            return
        self._key = key
        if title is not None:
            self.title = title
        self._lines, self._hlines = tuple(lines), tuple(hlines)
        self._vlines, self._points = tuple(vlines), tuple(points)
        self.redraw()

    def render(self):
        t0 = time.perf_counter()
        result = super().render()
        self.render_cost = time.perf_counter() - t0
        return result

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())
        self.redraw()

    def redraw(self) -> None:
        if not self.is_mounted:
            return
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        plt.xlabel("step")
        app = self.app
        any_data = False
        for line in self._lines:
            if line.steps.size:
                any_data = True
                plt.plot(
                    line.steps.tolist(),
                    line.values.tolist(),
                    label=line.label,
                    color=_rgb(app, line.color_var),
                    marker="braille",
                )
        if any_data:
            xs = [x for ln in self._lines if ln.steps.size for x in (ln.steps[0], ln.steps[-1])]
            ys = [y for ln in self._lines if ln.values.size for y in (ln.values.min(), ln.values.max())]
            ys += [y for y, _, _ in self._hlines] + [y for _, y, _, _ in self._points]
            x0, x1 = float(min(xs)), float(max(xs))
            y0, y1 = float(min(ys)), float(max(ys))
            # Reference lines are drawn as labelled series so the legend names them.
            for y, label, var in self._hlines:
                plt.plot([x0, x1], [y, y], label=label or None, color=_rgb(app, var), marker="braille")
            for x, label, var in self._vlines:
                plt.plot([x, x], [y0, y1], label=label or None, color=_rgb(app, var), marker="braille")
            for x, y, label, var in self._points:
                plt.scatter([x], [y], color=_rgb(app, var), marker="●")
                if label:
                    plt.text(label, x=x, y=y, color=_rgb(app, var), alignment="left")
        else:
            plt.text("waiting for data…", x=0.5, y=0.5, alignment="center")
            plt.xlim(0, 1)
            plt.ylim(0, 1)
        self.refresh()


def phi_plot_decorations(gate_step: int | None) -> dict:
    """SIGMA line and the crystallisation marker for the phi plot."""
    vlines = (
        [(float(gate_step), f"crystallised @ {gate_step}", "plot-gate")] if gate_step is not None else []
    )
    return {"hlines": [(SIGMA, f"σ = {SIGMA:g}", "plot-sigma")], "vlines": vlines}

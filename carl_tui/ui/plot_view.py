"""The chart controls and what a plot shows, as plain values: no numpy, no drawing.

`ChartSettings` are the controls every plot shares (x axis, smoothing, range,
log scale); `PlotView` is what one plot draws (its traces, marks and legend items),
built from a snapshot by `chart.build_view`. The dashboard's
first frame imports only this: its plots are empty panels until the run's data
(and numpy, and plotext) arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from carl_tui.ui.format import count_text

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

WAITING = "waiting for data…"  # what an empty plot says until its run has data

X_AXES = ("step", "time", "tokens")
SMOOTHING_STEPS = (0.0, 0.6, 0.8, 0.9, 0.95, 0.99)
RANGES: tuple[int | None, ...] = (None, 100, 1_000, 10_000, 100_000)
TOKENS = "num_tokens"


@dataclass(frozen=True)
class ChartSettings:
    x_axis: str = "step"
    smoothing: float = 0.0
    last_n: int | None = None
    log_y: frozenset[str] = frozenset()
    # the x range zoomed to with the mouse (wheel, drag), in the x axis' units; None: all
    x_window: tuple[float, float] | None = None

    def describe(self) -> str:
        parts = [f"x: {self.x_axis}"]
        parts.append(f"smoothing {self.smoothing:g}" if self.smoothing else "raw")
        parts.append(f"last {count_text(self.last_n)} steps" if self.last_n else "whole run")
        return " · ".join(parts)


DEFAULT_SETTINGS = ChartSettings()


@dataclass(frozen=True)
class Trace:
    label: str
    xs: np.ndarray
    ys: np.ndarray
    color_var: str
    faint: bool = False


@dataclass(frozen=True)
class Mark:
    kind: str  # "hline", "vline", "point"
    x: float
    y: float
    color_var: str


@dataclass(frozen=True)
class LegendItem:
    symbol: str
    text: str
    color_var: str
    run: bool = False  # a run's line (its name may be cut to fit; the others never are)


@dataclass(frozen=True)
class PlotView:
    title: str
    traces: tuple[Trace, ...] = ()
    marks: tuple[Mark, ...] = ()
    legend: tuple[LegendItem, ...] = ()
    xlim: tuple[float, float] = (0.0, 1.0)
    ylim: tuple[float, float] = (0.0, 1.0)
    xticks: tuple[tuple[float, ...], tuple[str, ...]] = ((), ())
    yticks: tuple[tuple[float, ...], tuple[str, ...]] = ((), ())
    x_label: str = "step"
    empty: str = ""  # shown instead of a plot when there is nothing to draw
    log_y: bool = False

"""The dashboard's chart-control keys as rules over its `ChartSettings`: the x axis, the
smoothing, the range of steps and the log scale of a metric (see `ui/keys.py` for the
keys). Each returns the settings to draw with; the dashboard sets them and redraws."""

from __future__ import annotations

from dataclasses import replace

from carl_tui.ui import plot_view
from carl_tui.ui.plot_view import ChartSettings


def _next(items: tuple, current: object) -> object:
    i = items.index(current) if current in items else 0
    return items[(i + 1) % len(items)]


def next_x_axis(chart: ChartSettings) -> ChartSettings:
    return replace(chart, x_axis=_next(plot_view.X_AXES, chart.x_axis))


def next_smoothing(chart: ChartSettings) -> ChartSettings:
    return replace(chart, smoothing=_next(plot_view.SMOOTHING_STEPS, chart.smoothing))


def next_range(chart: ChartSettings) -> ChartSettings:
    """The next range of steps shown; zoomed with the mouse: unzoomed first."""
    if chart.x_window is not None:
        return replace(chart, x_window=None)
    return replace(chart, last_n=_next(plot_view.RANGES, chart.last_n))


def log_toggled(chart: ChartSettings, metric: str) -> tuple[ChartSettings, str]:
    """`metric` on a log scale, or back to linear; and the note that says which."""
    log_y = chart.log_y ^ {metric}
    return (replace(chart, log_y=log_y),
            f"{metric}: {'log' if metric in log_y else 'linear'} scale")

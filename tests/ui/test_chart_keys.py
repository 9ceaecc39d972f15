"""The chart keys' rules (`ui/screens/chart_keys.py`): each returns the settings to draw
with, cycling through its values and back to the first."""

from __future__ import annotations

from dataclasses import replace

from carl_tui.ui.plot_view import RANGES, SMOOTHING_STEPS, X_AXES, ChartSettings
from carl_tui.ui.screens.chart_keys import log_toggled, next_range, next_smoothing, next_x_axis


def cycle(step, chart: ChartSettings, field: str, n: int) -> list:
    seen = []
    for _ in range(n):
        chart = step(chart)
        seen.append(getattr(chart, field))
    return seen


def test_each_key_cycles_through_its_values_and_back():
    chart = ChartSettings()
    assert cycle(next_x_axis, chart, "x_axis", len(X_AXES)) == [*X_AXES[1:], X_AXES[0]]
    assert cycle(next_smoothing, chart, "smoothing", len(SMOOTHING_STEPS)) == [
        *SMOOTHING_STEPS[1:], SMOOTHING_STEPS[0]]
    assert cycle(next_range, chart, "last_n", len(RANGES)) == [*RANGES[1:], RANGES[0]]


def test_a_zoomed_chart_is_unzoomed_before_its_range_changes():
    zoomed = replace(ChartSettings(), x_window=(10.0, 20.0), last_n=100)
    once = next_range(zoomed)
    assert (once.x_window, once.last_n) == (None, 100)
    assert next_range(once).last_n == 1_000


def test_the_log_scale_toggles_per_metric_and_says_which():
    chart, note = log_toggled(ChartSettings(), "loss")
    assert chart.log_y == {"loss"} and note == "loss: log scale"
    chart, note = log_toggled(chart, "reward")
    assert chart.log_y == {"loss", "reward"}
    chart, note = log_toggled(chart, "loss")
    assert chart.log_y == {"reward"} and note == "loss: linear scale"

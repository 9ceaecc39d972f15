"""Y axes tell the truth: each tick label sits on the row of its value, evenly spaced,
at every size and in both themes; a point is drawn above a label only when it is
greater. Read from the drawn screen (phi 0.0186 .. 0.9933, entropy likewise: the Trackio
SFT run's extremes, drawn above "1.0" and below "0" before)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from carl_tui.events import RunMeta, RunRef, ScalarBatch
from carl_tui.ui.app import build_app
from carl_tui.ui.widgets.plots import MetricPlot
from tests.conftest import ScriptedSource, dashboard_config, wait_for
from tests.store.test_run_age import screen_lines

LOW, HIGH = 0.0186, 0.9933


def plot_rows(app, plot: MetricPlot) -> tuple[dict[int, float], list[int]]:
    """({screen row: tick value}, [screen rows with braille dots]) of a drawn plot."""
    r = plot.content_region
    ticks: dict[int, float] = {}
    dots: list[int] = []
    for y, line in enumerate(screen_lines(app)[r.y:r.y + r.height], start=r.y):
        cells = line[r.x:r.x + r.width]
        axis = next((i for i, c in enumerate(cells) if c in "┤│┼"), None)
        if axis is None:
            continue
        if cells[axis] == "┤" and cells[:axis].strip():
            ticks[y] = float(cells[:axis])
        if any("\u2801" <= c <= "\u28ff" for c in cells[axis + 1:]):
            dots.append(y)
    return ticks, dots


@pytest.mark.parametrize("theme", ["carl-dark", "carl-light"])
@pytest.mark.parametrize("size", [(80, 24), (120, 36), (160, 45), (200, 60)])
async def test_tick_labels_sit_on_the_rows_of_their_values(size, theme):
    run = RunRef("jsonl", "p", "sft", "sft")
    n = 40
    plateau = np.where(np.arange(n) < n // 2, LOW, HIGH)  # two flat lines, nothing else
    src = ScriptedSource()
    src.push([RunMeta(run, {"name": "sft"}),
              ScalarBatch(run, np.arange(n, dtype=np.int64),
                          {"phi": plateau, "entropy": plateau[::-1].copy()})])
    app = build_app(dashboard_config([src], refresh_interval=0.05, theme=theme))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.last_step == n - 1, what="the run read")
        await pilot.pause(0.3)
        for plot in (app.query_one("#phi-plot", MetricPlot),
                     app.query_one("#entropy-plot", MetricPlot)):
            if not plot.display or plot.content_region.height < 6:
                continue
            ticks, dots = plot_rows(app, plot)
            assert len(ticks) >= 2, (size, plot.id, ticks)
            rows = sorted(ticks)
            gaps = {b - a for a, b in pairwise(rows)}
            assert len(gaps) == 1, (size, theme, plot.id, ticks)  # evenly spaced
            values = [ticks[r] for r in rows]
            step = values[0] - values[1]
            top, bottom = min(dots), max(dots)  # HIGH's row, LOW's row (σ between them)
            for row, value in ticks.items():
                if value > HIGH:  # HIGH is never drawn above a greater value's label
                    assert row <= top, (size, theme, plot.id, ticks, top)
                if value < LOW:  # nor LOW below a smaller one's
                    assert row >= bottom, (size, theme, plot.id, ticks, bottom)
                # the row of a value: a tick's row is where its value falls
                assert abs((row - rows[0]) - (values[0] - value) / step * next(iter(gaps))) \
                    < 1e-6


def test_a_small_plot_spends_its_rows_on_the_data():
    """A 4-row phi plot of 0.0143 .. 0.9756 (the demo at 80x24) spans at most 1.5, not -1 .. 2:
    the range is the data's rounded out to its ticks, with no padding on top."""
    from carl_tui.store import RunStore
    from carl_tui.ui.chart import build_view

    run = RunRef("jsonl", "p", "r", "r")
    n = 40
    phi = np.linspace(0.0143, 0.9756, n)
    store = RunStore()
    store.apply([RunMeta(run, {"name": "r"}),
                 ScalarBatch(run, np.arange(n, dtype=np.int64), {"phi": phi})])
    snap = store.snapshot(run.key)
    view = build_view("phi", snap, width=70, height=4 + 4)
    y0, y1 = view.ylim
    assert y0 <= 0.0143 and y1 >= 0.9756 and y1 - y0 <= 1.5, view.ylim
    assert len(view.yticks[0]) >= 2

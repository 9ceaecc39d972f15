"""`,` and `.` move a crosshair over every stacked plot at once; each plot says, in its
bottom border, the step there and the value of each of its series; `escape` hides it."""

from __future__ import annotations

import re

from carl_tui import metric_names as mn
from carl_tui.events import ScalarBatch
from tests.conftest import ScriptedSource, wait_for
from tests.store.test_run_age import screen_lines
from tests.ui.test_app import make_app

STEPS = 40


def _row(s: int) -> dict:
    return {mn.ENTROPY: 2.0 - s / 40, "reward": s / 100, "loss": 1.0 + s}


def _text(app) -> str:
    """The drawn screen, in the stacked plots' part of it only (the status bar says the
    step too)."""
    r = app.dashboard.plots.region
    return "\n".join(line[r.x:r.right] for line in screen_lines(app)[r.y:r.bottom])


async def test_the_crosshair_reads_every_plot_at_the_same_step(run_ref):
    src = ScriptedSource()
    src.push([ScalarBatch.from_rows(run_ref, [(s, _row(s)) for s in range(STEPS)])])
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await wait_for(pilot, lambda: not app.dashboard.entropy.view.empty, what="plots")
        await pilot.pause(0.2)
        assert "step 39 ·" not in _text(app)
        await pilot.press("full_stop")  # at the last point
        await wait_for(pilot, lambda: _text(app).count("step 39 ·") >= 2,
                       what="the crosshair's step on both plots")
        assert "1.0250" in _text(app)  # entropy at step 39: 2 - 39/40
        await pilot.press("comma", "comma", "comma")
        await wait_for(pilot, lambda: _text(app).count("step 36 ·") >= 2)
        assert "1.1000" in _text(app)  # entropy at step 36
        assert "step 39 ·" not in _text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: "step 36 ·" not in _text(app), what="hidden")


def _tick_columns(app, plot) -> dict[int, int]:
    """The screen column of each x tick drawn under `plot` -> the step its label says."""
    r = plot.region
    rows = screen_lines(app)[r.y:r.bottom]
    at = next(i for i, line in enumerate(rows) if "┬" in line[r.x:r.right])
    ticks = {}
    for c in (c for c, ch in enumerate(rows[at]) if ch == "┬" and r.x <= c < r.right):
        label = re.search(r"\d+", rows[at + 1][c - 3:c + 4])  # centred under its tick
        ticks[c] = int(label.group())
    return ticks


async def test_a_click_on_a_plot_places_the_crosshair_at_that_step(run_ref):
    """A click under an x tick puts the crosshair on the tick's step, on every plot; a
    drag pans and places none."""
    src = ScriptedSource()
    src.push([ScalarBatch.from_rows(run_ref, [(s, _row(s)) for s in range(STEPS)])])
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        board = app.dashboard
        await wait_for(pilot, lambda: not board.entropy.view.empty, what="plots")
        await pilot.pause(0.3)
        plot = board.entropy
        ticks = _tick_columns(app, plot)
        assert set(ticks.values()) >= {0, 10, 20, 30}, ticks
        for column, step in ticks.items():
            await pilot.click(plot, offset=(column - plot.region.x, plot.region.height // 2))
            await wait_for(pilot, lambda step=step: _text(app).count(f"step {step} ·") >= 2,
                           what=f"the crosshair at step {step} on both plots")
        assert f"{2.0 - 30 / 40:.4f}" in _text(app)  # entropy at step 30, the last clicked
        await pilot.press("escape")
        await wait_for(pilot, lambda: "step 30 ·" not in _text(app), what="hidden")
        await pilot.mouse_down(plot, offset=(20, 5))
        await pilot.hover(plot, offset=(40, 5))
        await pilot.mouse_up(plot, offset=(40, 5))
        await pilot.pause(0.2)
        assert not re.search(r"step \d+ ·", _text(app)), _text(app)  # a pan, no crosshair

"""`,` and `.` move a crosshair over every stacked plot at once; each plot says, in its
bottom border, the step there and the value of each of its series; `escape` hides it."""

from __future__ import annotations

from carl_tui import metric_names as mn
from carl_tui.events import ScalarBatch
from tests.conftest import ScriptedSource, wait_for
from tests.test_app import make_app
from tests.test_run_age import screen_lines

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

"""The mouse on a plot: the wheel zooms the x range of every stacked plot around the
pointer, a drag pans it; `z` shows the whole run again. Read off the drawn x ticks."""

from __future__ import annotations

from textual import events

from carl_tui import metric_names as mn
from carl_tui.events import ScalarBatch
from carl_tui.ui.chart import clamp_window
from tests.conftest import ScriptedSource, wait_for
from tests.store.test_run_age import screen_lines
from tests.ui.test_app import make_app

STEPS = 1001


def _row(s: int) -> dict:
    return {mn.ENTROPY: 2.0 - s / 1000, "reward": s / 1000}


def test_a_window_is_kept_within_the_data():
    assert clamp_window((-50.0, 50.0), (0.0, 1000.0)) == (0.0, 100.0)
    assert clamp_window((950.0, 1050.0), (0.0, 1000.0)) == (900.0, 1000.0)
    assert clamp_window((-10.0, 2000.0), (0.0, 1000.0)) == (0.0, 1000.0)


def _axis_labels(app, plot) -> set[str]:
    """The numbers written on the plot's x axis, as drawn on the screen."""
    r = plot.region
    rows = [line[r.x:r.right] for line in screen_lines(app)[r.y:r.bottom]]
    axis = next(i for i, row in enumerate(rows) if "step" in row and "·" not in row)
    return set(rows[axis - 1].split()) - {"│"}


def _mouse(cls, plot, x: int, y: int = 5, button: int = 0):
    return cls(plot, x, y, 0, 0, button, False, False, False, screen_x=plot.region.x + x,
               screen_y=plot.region.y + y)


async def test_the_wheel_zooms_every_plot_and_a_drag_pans(run_ref):
    src = ScriptedSource()
    src.push([ScalarBatch.from_rows(run_ref, [(s, _row(s)) for s in range(STEPS)])])
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        board = app.dashboard
        await wait_for(pilot, lambda: not board.entropy.view.empty, what="plots")
        await pilot.pause(0.3)
        assert "1k" in _axis_labels(app, board.entropy)
        right = board.phi.size.width - 2  # the pointer at the right end: the end stays
        for _ in range(8):
            board.phi.post_message(_mouse(events.MouseScrollUp, board.phi, right))
            await pilot.pause(0.05)
        await wait_for(pilot, lambda: "0" not in _axis_labels(app, board.entropy),
                       what="zoomed in on the entropy plot too")
        lo, hi = board.entropy.view.xlim
        assert hi > 950 and 700 < lo < 900  # 0.8 ** 8 of the run, its end under the pointer
        assert board.phi.view.xlim == board.entropy.view.xlim
        # a drag to the right shows earlier steps
        board.phi.post_message(_mouse(events.MouseDown, board.phi, 20, button=1))
        board.phi.post_message(_mouse(events.MouseMove, board.phi, 60, button=1))
        board.phi.post_message(_mouse(events.MouseUp, board.phi, 60, button=1))
        await wait_for(pilot, lambda: board.entropy.view.xlim[1] < hi - 20, what="panned")
        assert board.phi.view.xlim == board.entropy.view.xlim
        assert board.entropy.view.xlim[1] - board.entropy.view.xlim[0] == hi - lo
        await pilot.press("z")  # the range key: unzoomed, the whole run again
        await wait_for(pilot, lambda: {"0", "1k"} <= _axis_labels(app, board.entropy))

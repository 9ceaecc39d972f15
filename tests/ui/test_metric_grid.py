"""`M`: every metric at once, a small plot each with its name and last value, paged."""

from __future__ import annotations

from carl_tui.events import ScalarBatch
from carl_tui.ui.screens.metric_grid import block_chart
from tests.conftest import ScriptedSource, wait_for
from tests.store.test_run_age import screen_lines
from tests.ui.test_app import make_app

METRICS = {f"metric_{i:02d}": 0.5 + i for i in range(60)}


def test_a_block_chart_rises_with_its_values():
    rows = block_chart([0.0, 1.0, 2.0, 3.0], 8, 2)
    assert rows[-1][0] == "▁" and rows[0][-1] == "█" and rows[0][0] == " "
    assert rows[0][-2:] == "██"  # four points over eight columns
    assert block_chart([], 3, 2) == ["   ", "   "]


def _text(app) -> str:
    return "\n".join(screen_lines(app))


async def test_every_metric_is_drawn_with_its_last_value_and_paged(run_ref):
    src = ScriptedSource()
    rows = [(s, {k: v * (1 + s / 10) for k, v in METRICS.items()}) for s in range(11)]
    src.push([ScalarBatch.from_rows(run_ref, rows)])
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("M")
        await wait_for(pilot, lambda: "metric_00" in _text(app) and "1.0000" in _text(app),
                       what="the first cell, its last value in its border")
        text = _text(app)
        assert "every metric (60) · page 1/2" in text
        assert "metric_00" in text and "metric_59" not in text  # 60 do not fit on a page
        assert "█" in text  # the charts are drawn
        await pilot.press("pageup")  # back around to the last page
        await wait_for(pilot, lambda: "metric_59" in _text(app), what="the last page")
        assert "119.00" in _text(app)  # metric_59's last value: 59.5 * 2.0
        assert "metric_00" not in _text(app)
        # the / filter is followed
        await pilot.press("escape", "slash", *"metric_1", "enter")  # metric_10 to metric_19
        await pilot.press("M")
        await wait_for(pilot, lambda: "every metric (10)" in _text(app))
        assert "metric_12" in _text(app) and "metric_22" not in _text(app)


async def test_a_page_of_few_metrics_fills_the_screen_with_taller_charts(run_ref):
    """Nine metrics at 160x45 take two rows of cells: they share the height, no empty
    two thirds below them (each chart's last value sits on its cell's bottom border)."""
    src = ScriptedSource()
    nine = dict(list(METRICS.items())[:9])
    rows = [(s, {k: v * (1 + s / 10) for k, v in nine.items()}) for s in range(11)]
    src.push([ScalarBatch.from_rows(run_ref, rows)])
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("M")
        await wait_for(pilot, lambda: "metric_08" in _text(app) and "17.00" in _text(app),
                       what="the last cell, its last value in its border")
        await pilot.pause(0.2)
        lines = screen_lines(app)
        bottoms = [i for i, line in enumerate(lines) if "╰" in line]
        assert len(bottoms) == 2, bottoms  # two rows of cells
        assert bottoms[-1] >= len(lines) - 3, bottoms  # the last ends just above the footer
        assert "17.00" in lines[bottoms[-1]]  # metric_08's last value: 8.5 * 2.0
        chart_rows = [line for line in lines[bottoms[0] + 1:bottoms[1]] if "█" in line]
        assert len(chart_rows) >= 15  # taller charts: the row's height, not 5 lines

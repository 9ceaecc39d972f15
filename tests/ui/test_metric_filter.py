"""`/` filters the metrics by name (a substring or a regex) in the table and the picker."""

from __future__ import annotations

from carl_tui.events import ScalarBatch
from carl_tui.ui.metric_filter import name_matcher
from tests.conftest import ScriptedSource, wait_for
from tests.store.test_run_age import screen_lines
from tests.ui.test_app import make_app

METRICS = {"loss": 0.5, "reward": 0.25, "rewards/format/mean": 0.75, "grad_norm": 1.5}


def test_a_pattern_is_a_regex_or_else_a_substring_and_ignores_case():
    assert name_matcher("REWARD")("rewards/format/mean")
    assert name_matcher("^loss$|grad")("grad_norm")
    assert not name_matcher("^loss$")("eval_loss")
    assert name_matcher("rewards/(")("rewards/(x)")  # not a regex: a substring
    assert name_matcher("")("anything")


def _table_names(app) -> set[str]:
    """The metrics named on the drawn screen, in the table's part of it."""
    r = app.dashboard.table.region
    rows = [line[r.x:r.right] for line in screen_lines(app)[r.y:r.bottom]]
    return {m for m in METRICS if any(f" {m} " in row for row in rows)}


async def test_slash_filters_the_table_and_the_picker_on_screen(run_ref):
    src = ScriptedSource()
    src.push([ScalarBatch.from_rows(run_ref, [(s, dict(METRICS)) for s in range(3)])])
    app = make_app(src)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause(0.2)
        assert {"loss", "grad_norm", "rewards/format/mean"} <= _table_names(app)
        await pilot.press("slash")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "FilterPrompt")
        await pilot.press(*"rew", "enter")
        await wait_for(pilot, lambda: "metrics /rew" in "\n".join(screen_lines(app)),
                       what="the filter in the table's title")
        await pilot.pause(0.1)
        shown = _table_names(app)
        assert "loss" not in shown and "grad_norm" not in shown
        assert {"reward", "rewards/format/mean"} <= shown
        # the picker lists only the metrics that match
        await pilot.press("m")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "MetricPicker")
        await pilot.pause(0.1)
        picker = "\n".join(screen_lines(app))
        assert "rewards/format/mean" in picker and "grad_norm" not in picker
        await pilot.press("escape")
        # a regex; then empty: every metric again
        await pilot.press("slash", *"^loss$", "enter")
        await wait_for(pilot, lambda: "metrics /^loss$" in "\n".join(screen_lines(app)))
        await pilot.pause(0.1)
        assert _table_names(app) & {"grad_norm", "reward"} == set()
        await pilot.press("slash")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "FilterPrompt")
        await pilot.press("ctrl+a", "ctrl+k", "enter")
        await wait_for(pilot, lambda: "grad_norm" in _table_names(app))

"""Metric names cut to fit keep what tells them apart: TRL's GRPO trainer logs seven
timings that share the start `profiling/Time taken: GRPOTrainer.`; cut at the end they
all read the same. Cut in the middle (or wrapped), they differ on screen."""

from __future__ import annotations

import html

import pytest
from textual.app import App
from textual.containers import Horizontal
from textual.widgets import SelectionList

from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from carl_tui.ui.format import cut_middle, cut_names
from carl_tui.ui.screens.pickers import MetricPicker
from carl_tui.ui.widgets.metrics_table import METRIC_WIDTH, MetricsTable
from carl_tui.ui.widgets.plots import MetricPlot
from tests.conftest import ScriptedSource
from tests.conftest import wait_for as _wait

RUN = RunRef("test", "p", "grpo", "grpo-run")
# What TRL's profiling_decorator / profiling_context log (trl/extras/profiling.py,
# trl/trainer/grpo_trainer.py): "<prefix>: <trainer class>.<function or block>"
ENDS = ("_prepare_inputs", "compute_loss", "_calculate_rewards",
        "_get_per_token_logps_and_entropies", "transformers.generate", "vLLM.generate",
        "sync_weights")
PROFILING = [f"profiling/Time taken: GRPOTrainer.{end}" for end in ENDS]


def test_a_name_cut_in_the_middle_keeps_its_start_and_its_end():
    name = "profiling/Time taken: GRPOTrainer.compute_loss"
    assert cut_middle(name, 29) == "profiling…rainer.compute_loss"
    assert cut_middle(name, 22) == "profili…r.compute_loss"
    assert cut_middle("loss", 22) == "loss" and cut_middle(name, len(name)) == name
    assert all(len(cut_middle(name, w)) == w for w in range(1, len(name)))


def test_the_seven_profiling_timings_stay_seven_names_at_any_width():
    for width in (12, 16, 22, 30):
        cut = cut_names(PROFILING, width)
        assert len(set(cut.values())) == 7, (width, cut)
        assert all(len(label) <= width for label in cut.values())
    # where the default cuts clash, the cut moves: "…rate" / "…rate" differ further in
    clash = ["metric/vLLM.generate", "metric/transformers.generate"]
    labels = cut_names(clash, 10)
    assert len(set(labels.values())) == 2 and all(len(x) == 10 for x in labels.values())




def _screen(app) -> str:
    return html.unescape(app.export_screenshot()).replace("\xa0", " ")


async def test_the_table_and_the_metric_picker_tell_the_timings_apart():
    src = ScriptedSource()
    rows = [(s, {"loss": 0.5 - s / 100, **{n: 0.1 * (i + 1) + s / 1000
                                           for i, n in enumerate(PROFILING)}})
            for s in range(1, 6)]
    src.push([ScalarBatch.from_rows(RUN, rows)])
    app = build_app(DashboardConfig(sources=[src], settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=(160, 45)) as pilot:
        await _wait(pilot, lambda: app.snapshot is not None and app.snapshot.last_step == 5)
        table = app.query_one(MetricsTable)
        labels = [str(table.get_cell(n, "metric")) for n in PROFILING]
        assert len(set(labels)) == 7
        assert all(len(x) <= METRIC_WIDTH for x in labels)
        assert labels[1] == "profili…r.compute_loss"
        screen = _screen(app)
        assert all(label in screen for label in labels)
        # the metric picker: the same, at its width
        await pilot.press("m")

        def shown() -> list[str]:
            checklist = app.screen.query_one(SelectionList)
            return [str(checklist.get_option_at_index(i).prompt)
                    for i in range(checklist.option_count)]

        await _wait(pilot, lambda: isinstance(app.screen, MetricPicker)
                    and "…" in "".join(shown()), what="the picker's labels cut")
        checklist, shown = app.screen.query_one(SelectionList), shown()
        assert len(set(shown)) == 8 and shown[0] == "loss"
        assert all(any(x.endswith(end[-10:]) for x in shown) for end in ENDS)
        room = checklist.scrollable_content_region.width - 4
        assert any(len(n) > room for n in PROFILING) and all(len(x) <= room for x in shown)
        screen = _screen(app)
        assert all(x in screen for x in shown)


class _Plots(App):
    """Plots of the seven timings, side by side at 36 columns each (a 2-column grid)."""

    CSS = "MetricPlot { width: 36; border: round white; }"

    def __init__(self, snap):
        super().__init__()
        self.snap = snap

    def compose(self):
        with Horizontal():
            for name in PROFILING:
                yield MetricPlot(name)

    def on_mount(self):
        for plot in self.query(MetricPlot):
            plot.show_run(self.snap)


async def test_plot_titles_cut_in_the_middle_differ_and_refit_on_resize():
    store = RunStore()
    store.apply([ScalarBatch.from_rows(RUN, [(s, {n: 0.1 * s for n in PROFILING})
                                            for s in range(1, 6)])])
    app = _Plots(store.snapshot(RUN.key))
    async with app.run_test(size=(300, 20)) as pilot:
        plots = list(app.query(MetricPlot))
        await _wait(pilot, lambda: all(  # each drawn with its data at its own size
            not p.view.empty and p.size.width and p._drawn == (p._key, p.size)
            for p in plots), what="the plots drawn")
        titles = [str(p.border_title) for p in plots]
        assert len(set(titles)) == 7
        assert all(t.endswith((end, end[-12:])) for t, end in zip(titles, ENDS))
        assert titles[1] == cut_middle(PROFILING[1], 30) == "profiling…Trainer.compute_loss"
        screen = _screen(app)
        assert all(t in screen for t in titles)  # Textual does not cut them again
        plots[0].styles.width = 80  # room for the whole name: shown whole
        await _wait(pilot, lambda: str(plots[0].border_title) == PROFILING[0],
                    what="the title refitted")
        assert str(plots[0].border_title) == PROFILING[0]


@pytest.mark.parametrize(("ago_s", "text"), [
    (5, "5s ago"), (125, "2m ago"), (3 * 3600 + 720, "3.2h ago"), (2.5 * 86400, "2.5d ago"),
    (385.4 * 86400, "385d ago"), (12_000 * 86400, "12000d ago"),
])
def test_ages_fit_the_fleet_tables_updated_column(ago_s, text):
    """An age reads whole in the fleet table's 9-cell column up to 27 years: an old run's
    "385.4d ago" was cut to "385.4d ag"."""
    from carl_tui.ui.fleet_columns import base_columns
    from carl_tui.ui.format import age_text

    assert age_text(1_000_000_000.0, 1_000_000_000.0 + ago_s) == text
    width = next(c.width for c in base_columns() if c.key == "updated")
    assert len(text) <= width or ago_s > 27 * 365 * 86400, (text, width)


@pytest.mark.parametrize(("key", "value", "provisional"), [
    ("loss", -2.98e-08, False), ("loss", -2.98e-08, True), ("task", -123456.0, True),
    ("best", 1.5e-05, True), ("step", 12_345_678, True), ("gate", 1_234_567, True),
])
def test_a_fleet_tables_number_reads_whole(key, value, provisional):
    """Every number of the fleet table reads whole in its column: a tiny GRPO loss logged
    as -2.98e-08 read "-2.980e-" (another number), its column capped at 8 cells."""
    from dataclasses import replace

    from carl_tui.events import RunRef
    from carl_tui.store.fleet import FleetRow
    from carl_tui.ui.fleet_columns import base_columns, column_width

    field = {"step": "last_step", "gate": "gate_step", "task": "task_last",
             "best": "task_best", "loss": "loss"}[key]
    row = replace(FleetRow(RunRef("jsonl", "p", "r", "r"), "jsonl", "live"),
                  **{field: value}, provisional=provisional, newest_read=False)
    column = next(c for c in base_columns() if c.key == key)
    text = str(column.cell(row, 0.0, {}))
    assert text.lstrip("≈") in (str(value), f"{value:.3e}", f"{value:.2f}")
    assert len(text) <= column_width(column, [row], 0.0), (text, column.width)

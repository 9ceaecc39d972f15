"""The dashboard driven with Pilot: numbers on screen, the gate flag, the keys."""

from __future__ import annotations

import math

import numpy as np
import pytest

from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.events import RunRef, ScalarBatch, SourceStatus
from carl_tui.metric_names import display_order
from carl_tui.store import RunStore
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from carl_tui.ui.widgets.metrics_table import MetricsTable
from carl_tui.ui.widgets.phase_panel import PhasePanel
from carl_tui.ui.widgets.plots import MetricPlot
from carl_tui.ui.widgets.status_bar import StatusBar
from tests.conftest import (
    ScriptedSource,
    dashboard_config,
    notices_said,
    plain_text,
    spec_trajectory,
    wait_for,
)
from tests.ui.test_fleet_screen import choose_run

SIZE = (160, 45)


def make_app(source, **kw):
    return build_app(dashboard_config([source], refresh_interval=0.05, **kw))




def table_cell(app, metric, column):
    table = app.query_one(MetricsTable)
    return str(table.get_cell(metric, column))


async def test_panels_show_the_latest_numbers(spec_events, run_ref):
    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        rows = spec_trajectory()
        last_step, last = rows[-1]
        want = f"{last['mean_token_accuracy']:.4f}"
        assert table_cell(app, "mean_token_accuracy", "last") == want
        assert app.snapshot.series["entropy"].count == 46
        assert table_cell(app, "loss", "step") == str(last_step)
        # phi derived from entropy with the vocabulary size in the run's metadata
        phi = 1 - last["entropy"] / math.log(20)
        assert table_cell(app, "phi", "metric") == "phi (derived)"
        assert table_cell(app, "phi", "last") == f"{phi:.4f}"
        order = [k.value for k in app.query_one(MetricsTable).rows]
        assert order == ["phi", "entropy", "mean_token_accuracy", "loss"]  # watched ones first
        phase_text = plain_text(app.query_one(PhasePanel))
        assert "CONVERGED" in phase_text
        status = plain_text(app.query_one(StatusBar), 300)
        assert "spec-run" in status and "step 45" in status and "skipped 0" in status


async def test_crystallisation_is_flagged_at_the_gate_step(run_ref):
    rows = spec_trajectory()
    expected = PhaseTransitionGate()
    for step, vals in rows:
        expected.update(step, vals["mean_token_accuracy"], vals["entropy"])
    assert expected.fired
    src = ScriptedSource()
    app = make_app(src)
    said = notices_said(app)
    async with app.run_test(size=SIZE) as pilot:
        # Points arrive a few at a time, as from a live run: once each batch is on screen,
        # the panel is flagged exactly when the gate's step is among the steps shown.
        flagged = []
        for i in range(0, len(rows), 4):
            src.push([ScalarBatch.from_rows(run_ref, rows[i : i + 4])])
            last = rows[min(i + 3, len(rows) - 1)][0]
            await wait_for(pilot, lambda last=last: app.snapshot is not None
                           and app.snapshot.last_step == last, what=f"step {last} shown")
            await pilot.pause()
            flagged.append((last, app.query_one("#phase").has_class("-crystallised")))
        assert flagged == [(last, last >= expected.trigger_step) for last, _ in flagged]
        assert flagged[-1][1]
        flags = [t for t in said if t.startswith("Crystallised")]
        assert len(flags) == 1 and f"at step {expected.trigger_step}" in flags[0]
        # No vocabulary size: phi cannot be derived; the first plot is the task metric,
        # and says how to get phi (test_first_plot.py).
        first = app.query_one("#phi-plot", MetricPlot).view
        assert first.title == "mean_token_accuracy · phi: set --vocab-size" and first.traces
        ent_plot = app.query_one("#entropy-plot", MetricPlot)
        gate_lines = [m.x for m in ent_plot.view.marks if m.kind == "vline"]
        assert gate_lines == [float(expected.trigger_step)]
        assert f"crystallised @ {expected.trigger_step}" in str(ent_plot.border_subtitle)
        panel = plain_text(app.query_one(PhasePanel))
        assert f"CRYSTALLISED at step {expected.trigger_step}" in panel


async def test_status_bar_shows_source_trouble_and_skipped(run_ref):
    src = ScriptedSource()
    src.push([
        ScalarBatch.from_rows(run_ref, [(0, {"loss": 1.0})], wall_time=100.0),
        SourceStatus("remote", "retrying", "ConnectError: refused", last_good=100.0, skipped=3,
                     retry_in=4.0),
    ])
    app = make_app(src, clock=lambda: 130.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "remote" in plain_text(app.query_one(StatusBar), 300))
        status = plain_text(app.query_one(StatusBar), 300)
        assert "retrying" in status and "ConnectError: refused" in status
        assert "last good 30s ago" in status and "skipped 3" in status


async def test_keys_help_runs_metrics_theme_quit(spec_events, run_ref):
    other = RunRef("test", "proj", "run-2", "second-run")
    src = ScriptedSource()
    src.push(spec_events + [ScalarBatch.from_rows(other, [(0, {"loss": 9.5})])])
    app = make_app(src, run="run-1")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert app.snapshot.run.run_id == "run-1"
        # help lists every key with its id
        await pilot.press("question_mark")
        ids = {row[3] for row in app.key_help()}
        assert {"app.quit", "app.help", "app.pick_run", "view.pick_metrics", "app.theme"} <= ids
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        # switch run with the fleet table
        await choose_run(pilot, app, other.key)
        await wait_for(pilot, lambda: app.snapshot.run.run_id == "run-2")
        assert table_cell(app, "loss", "last") == "9.5000"
        assert [k.value for k in app.query_one(MetricsTable).rows] == ["loss"]
        await choose_run(pilot, app, run_ref.key)
        await wait_for(pilot, lambda: app.snapshot.run.run_id == "run-1")
        # hide a metric
        await pilot.press("m")
        assert type(app.screen).__name__ == "MetricPicker"
        metrics = sorted(app.snapshot.series, key=display_order)
        await pilot.press(*(["down"] * metrics.index("loss")), "space", "enter")
        assert app.dashboard.hidden_metrics == {"loss"}
        assert "loss" not in app.query_one(MetricsTable).rows
        # theme toggles between the project's themes
        first = app.theme
        await pilot.press("t")
        assert app.theme != first and app.theme in ("carl-dark", "carl-light")
        await pilot.press("q")
    assert app.return_code == 0


async def test_columns_widen_for_later_values(run_ref):
    src = ScriptedSource()
    src.push([ScalarBatch.from_rows(run_ref, [(0, {"loss": 1.0}), (1, {"loss": 1.0})])])
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        rows = [(s, {"loss": 1.0 + 0.0137 * s}) for s in range(2, 40)]
        src.push([ScalarBatch.from_rows(run_ref, rows)])
        await wait_for(pilot, lambda: app.snapshot.last_step == 39)
        table = app.query_one(MetricsTable)
        trend = str(table.get_cell("loss", "trend"))
        assert trend.startswith("↑ +") and len(trend) > 4
        assert table.columns["trend"].get_render_width(table) >= len(trend)


async def test_keymap_remaps_a_binding(spec_events):
    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src, keymap={"app.pick_run": "R"})
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("r")
        assert type(app.screen).__name__ != "FleetScreen"
        await pilot.press("R")
        assert type(app.screen).__name__ == "FleetScreen"


@pytest.mark.parametrize("bid", ["view.events", "app.events"])
async def test_keymap_remaps_a_dashboard_key_by_its_id_or_its_old_app_id(spec_events, bid):
    """The dashboard's keys are the screen's own (`view.*` ids); a keymap written for
    their old `app.*` ids still moves them, and says nothing is wrong."""
    from carl_tui.ui.keys import check_keymap

    assert check_keymap({bid: "E"}) is None
    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src, keymap={bid: "E"})
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("e")
        assert type(app.screen).__name__ != "EventsScreen"
        await pilot.press("E")
        assert type(app.screen).__name__ == "EventsScreen"
        assert ("E", "Events") in {(row[0], row[1]) for row in app.key_help()}


async def test_large_run_paints_decimated(run_ref):
    n = 200_000
    steps = np.arange(n)
    ent = np.linspace(5, 0.1, n)
    ent[123_456] = 42.0
    src = ScriptedSource()
    src.push([ScalarBatch(run_ref, steps, {"entropy": ent})])
    app = make_app(src, vocab_size=1000)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        s = app.snapshot.series["entropy"]
        assert s.count == n and len(s.steps) <= 2100
        assert s.values.max() == 42.0 and s.steps[s.values.argmax()] == 123_456
        assert app.snapshot.gate.peak_entropy == 42.0
        assert app.snapshot.gate.peak_entropy_step == 123_456


@pytest.fixture
def fixed_app(spec_events):
    src = ScriptedSource()
    src.push(spec_events)
    store = RunStore()
    return make_app(src, store=store, clock=lambda: 1_700_000_003.0)


async def test_project_picker_opens_and_follows_a_project(spec_events):
    src = ScriptedSource()
    src.push(spec_events)
    opened = []

    def open_project(name):
        other = ScriptedSource(f"project {name}")
        run = RunRef("test", name, "r-9", "from-other-project")
        other.push([ScalarBatch.from_rows(run, [(0, {"loss": 4.25})])])
        opened.append(name)
        return other

    app = make_app(src, list_projects=lambda: ["proj", "other"], open_project=open_project)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("P")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ProjectPicker")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.snapshot.run.project == "other")
        assert opened == ["other"]
        assert table_cell(app, "loss", "last") == "4.2500"


async def test_a_failed_background_job_is_one_plain_notice(spec_events):
    """A worker no dialog watches (here: listing the projects) fails: one notice, worded
    as the dialogs word theirs, no traceback."""
    def broken() -> list[str]:
        raise OSError("the disk went away")

    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src, list_projects=broken, open_project=lambda name: ScriptedSource())
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("P")
        said = lambda: [str(n.message) for n in app._notifications]
        await wait_for(pilot, lambda: any("failed" in t for t in said()), what="the notice")
        assert [t for t in said() if "failed" in t] == [
            "Listing projects failed: OSError: the disk went away"]
        assert type(app.screen).__name__ == "DashboardScreen"


async def test_overlay_draws_every_run_of_the_project(spec_events, run_ref):
    src = ScriptedSource()
    second = RunRef("test", "proj", "run-2", "second")
    elsewhere = RunRef("test", "elsewhere", "run-3", "third")
    src.push(spec_events + [
        ScalarBatch.from_rows(second, [(0, {"phi": 0.2, "entropy": 2.0})]),
        ScalarBatch.from_rows(elsewhere, [(0, {"phi": 0.3, "entropy": 1.0})]),
    ])
    app = make_app(src, run="run-1")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and len(app.store.runs()) == 3)
        phi_plot = app.query_one("#phi-plot", MetricPlot)
        assert phi_plot.lines == ["spec-run"]
        await pilot.press("o")  # the overlaid runs' snapshots come with the next update
        await wait_for(pilot, lambda: sorted(phi_plot.lines) == ["second", "spec-run"],
                       what="the project's other run overlaid")
        ent_plot = app.query_one("#entropy-plot", MetricPlot)
        assert sorted(ent_plot.lines) == ["second", "spec-run"]
        await pilot.press("o")
        await wait_for(pilot, lambda: phi_plot.lines == ["spec-run"], what="overlay off")


async def test_events_view_and_system_panel_keys(spec_events):
    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.gate.fired)
        await pilot.press("e")
        assert type(app.screen).__name__ == "EventsScreen"
        body = plain_text(app.screen.query_one("#events-body"), 200)
        gate = app.snapshot.gate.trigger_step
        assert "phase transition" in body and f"at step {gate}" in body
        await pilot.press("escape")
        system = app.dashboard.system
        assert not system.display
        await pilot.press("g")
        assert system.display and "no system metrics logged" in plain_text(system)


async def test_ctrl_s_saves_the_screen_and_the_plotted_data(spec_events, tmp_path):
    import csv

    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src, save_dir=str(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.last_step == 45)
        await pilot.press("w")  # smoothing on: the CSV holds raw and smoothed values
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        svg = list(tmp_path.glob("carl-tui-spec-run-*.svg"))
        data = list(tmp_path.glob("carl-tui-spec-run-*.csv"))
        assert len(svg) == len(data) == 1
        said = [str(n.message) for n in app._notifications]
        assert any(str(svg[0]) in m and str(data[0]) in m for m in said)
        assert "spec-run" in svg[0].read_text()
        rows = list(csv.DictReader(data[0].open()))
        ent = [r for r in rows if r["plot"] == "entropy (nats)"]
        plot = app.query_one("#entropy-plot", MetricPlot)
        raw = next(t for t in plot.view.traces if t.faint)
        assert [float(r["value"]) for r in ent] == raw.ys.tolist()
        assert [int(r["x"]) for r in ent] == raw.xs.astype(int).tolist()
        assert all(r["smoothed"] for r in ent)


async def test_log_panel_shown_by_itself_follows_the_newest_line(tmp_path):
    """A run with log lines shows its log once, at its end: the lines written while the
    panel had no size yet are scrolled to when it gets one."""
    import html
    import json

    from carl_tui.sources.open import open_file

    path = tmp_path / "run.jsonl"
    rows = [{"step": s, "loss": 2.0 / s} for s in range(1, 41)]
    logs = [{"event": "log", "text": f"log line {i:03d}"} for i in range(150)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + logs))
    app = make_app(open_file(path))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.log_total == 150)
        panel = app.screen.log_panel
        await wait_for(pilot, lambda: panel.region.height > 0 and panel.line_count == 150)
        await pilot.pause(0.2)
        text = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "log line 149" in text and "log line 000" not in text
        assert panel.is_vertical_scroll_end and panel.scroll_offset.y > 0


async def test_log_panel_follows_the_newest_line_of_the_run_switched_to(tmp_path):
    """From a run whose few lines fit (the panel has no scrollbar) to one with many: the
    panel shows the new run's newest lines, not its first ones."""
    import html
    import json

    from carl_tui.sources.open import open_file

    def write(name: str, n_logs: int):
        path = tmp_path / f"{name}.jsonl"
        rows = [{"step": s, "loss": 2.0 / s} for s in range(1, 21)]
        logs = [{"event": "log", "text": f"{name} line {i:03d}"} for i in range(n_logs)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows + logs))
        return open_file(path)

    app = build_app(DashboardConfig(sources=[write("short", 5), write("long", 150)],
                                    settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=SIZE) as pilot:
        store = app.store
        await wait_for(pilot, lambda: len(store.runs()) == 2)
        keys = {r.name: r.key for r in store.runs()}
        panel = app.screen.log_panel
        app.switch_run(keys["short"])
        # a run with log lines shows the panel once by itself (pressing v here could race
        # that showing and hide it again)
        await wait_for(pilot, lambda: not panel.has_class("-hidden"), what="the log panel")
        await wait_for(pilot, lambda: panel.region.height > 0 and panel.line_count == 5)
        app.switch_run(keys["long"])
        await wait_for(pilot, lambda: panel.line_count == 150 and panel.is_vertical_scroll_end
                       and panel.scroll_offset.y > 0)
        await pilot.pause(0.1)
        text = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "long line 149" in text and "long line 000" not in text


async def test_a_finished_runs_numbers_are_drawn_whole():
    """Every value of the table is on screen in full once the run stops changing (the
    columns are fitted before the cells are written, not when the table is next idle:
    a replayed run then kept "0.93" on screen for 0.9378)."""
    import html
    from pathlib import Path

    from carl_tui.sources.replay import ReplaySource

    recording = Path(__file__).resolve().parents[2] / "recordings" / "tiny-demo.jsonl"
    src = ReplaySource(recording, speed=float("inf"))
    app = make_app(src, plot_metrics=("reward", "loss"))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: src.finished and app.snapshot is not None
                       and app.snapshot.last_step == 394, timeout=10)
        await pilot.pause(0.3)
        text = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        for metric in ("phi", "entropy"):
            for column in ("last", "min", "max"):
                cell = table_cell(app, metric, column)
                assert len(cell) >= 6 and f" {cell} " in text, (metric, column, cell)


async def test_log_panel_follows_new_lines_unless_scrolled_back(tmp_path):
    """Follow mode shows new lines as they come while the panel shows its end; a panel
    the user scrolled back to older lines stays there."""
    import json

    from carl_tui.sources.open import open_file

    path = tmp_path / "run.jsonl"

    def append(start: int, n: int) -> None:
        with path.open("a") as fh:
            for i in range(start, start + n):
                fh.write(json.dumps({"event": "log", "text": f"log line {i:03d}"}) + "\n")

    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n"
                            for s in range(1, 11)))
    append(0, 150)
    app = make_app(open_file(path))
    async with app.run_test(size=SIZE) as pilot:
        panel = app.screen.log_panel
        await wait_for(pilot, lambda: panel.line_count == 150 and panel.region.height > 0
                       and panel.is_vertical_scroll_end and panel.scroll_offset.y > 0)
        append(150, 20)  # at the end: follows
        await wait_for(pilot, lambda: panel.line_count == 170 and panel.is_vertical_scroll_end)
        await pilot.pause(0.3)
        panel.scroll_to(y=40, animate=False, immediate=True)
        await pilot.pause(0.1)
        assert panel.scroll_offset.y == 40
        append(170, 20)  # scrolled back: stays
        await wait_for(pilot, lambda: panel.line_count == 190)
        await pilot.pause(0.3)
        assert panel.scroll_offset.y == 40 and panel.follow


async def test_the_footer_is_built_once_while_the_dashboard_starts(spec_events, monkeypatch):
    """Textual's footer rebuilds its keys on every change of focus (three times while the
    dashboard starts); ours only when the keys it shows change: once, with every key."""
    from textual.widgets import Footer

    from carl_tui.ui.keys import ACTION_KEYS, APP_KEYS, VIEW_KEYS

    built = []
    recompose = Footer.recompose

    async def counted(self):
        built.append(self)
        await recompose(self)
    monkeypatch.setattr(Footer, "recompose", counted)
    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause(0.2)
        footer = app.query_one(Footer)
        shown = [w.description for w in footer.children if getattr(w, "description", "")]
        want = [k.description for k in (*APP_KEYS, *VIEW_KEYS, *ACTION_KEYS) if k.show]
        want.append("palette")  # ctrl+p, the command palette
        assert len(built) == 1 and sorted(shown) == sorted(want)
        await pilot.press("question_mark")  # another screen and back: the same keys
        await pilot.pause(0.1)
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert app.screen is app.dashboard and len(built) == 1


async def test_a_source_that_cannot_be_built_is_said_not_raised():
    """The CLI's sources are built after the first frame: one that fails there is a
    notice on a dashboard that keeps running, not a traceback."""
    def build():
        raise OSError(13, "Permission denied", "/runs/locked.jsonl")

    app = build_app(DashboardConfig(sources=build, settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=SIZE) as pilot:
        said = lambda: [n.message for n in app._notifications]
        await wait_for(pilot, lambda: any("could not open the source" in m for m in said()))
        await pilot.press("r")  # keys still work: "no runs yet"
        await pilot.pause(0.2)
        assert app.is_running and app.snapshot is None
        assert any("Permission denied" in m and "/runs/locked.jsonl" in m for m in said())
        assert "no runs yet" in said()


async def test_the_overlay_legend_names_the_run_on_screen_first_and_fits(spec_events, run_ref):
    """Five long-named runs of a project overlaid at 80 columns: the drawn legend names
    the run on screen (its line's colour) first and says how many more it could not fit,
    never cut at its end (the run's own name, listed last, was never shown)."""
    from tests.store.test_run_age import screen_lines

    src = ScriptedSource()
    others = [RunRef("test", "proj", f"run-{i}", f"sweep-lr{i}e-4-seed-{i}-warmup-cosine")
              for i in range(2, 7)]
    src.push(spec_events + [ScalarBatch.from_rows(r, [(0, {"phi": 0.1 * i,
                                                           "entropy": 2.0})])
                            for i, r in enumerate(others)])
    app = make_app(src, run="run-1")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and len(app.store.runs()) == 6)
        phi_plot = app.query_one("#phi-plot", MetricPlot)
        await pilot.press("o")
        await wait_for(pilot, lambda: len(phi_plot.lines) == 6, what="the overlay drawn")
        await pilot.pause(0.2)
        r = phi_plot.region
        bottom = screen_lines(app)[r.y + r.height - 1][r.x:r.x + r.width]
        assert "━ spec-run" in bottom, bottom
        assert bottom.index("spec-run") < bottom.index("━ sw"), bottom  # an overlaid one
        assert "+4 runs" in bottom and "σ = " in bottom, bottom  # not cut at its end


async def test_the_plots_say_their_smoothing_and_range(spec_events):
    """w and z: the smoothing and the range are written on the plots (under the x axis),
    not only in a passing notice."""
    from tests.store.test_run_age import screen_lines

    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("w", "z")
        app.clear_notifications()
        drawn = "step · smoothed (EMA 0.6) · last 100 steps"
        await wait_for(pilot, lambda: any(drawn in line for line in screen_lines(app)),
                       what="the settings drawn on the plot")
        assert sum(drawn in line for line in screen_lines(app)) >= 1  # under a plot's axis


async def test_ctrl_s_saves_the_help_and_the_fleet_table(spec_events, tmp_path):
    """ctrl+s did nothing in help or in the fleet table: it saves the screen shown as SVG
    (the dashboard's own also writes the plotted data)."""
    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src, save_dir=str(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: list(tmp_path.glob("carl-tui-help-*.svg")),
                       what="the help saved")
        svg = next(tmp_path.glob("carl-tui-help-*.svg")).read_text(encoding="utf-8")
        assert "Close" in svg or "Help" in svg
        await pilot.press("escape", "r")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "FleetScreen")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: list(tmp_path.glob("carl-tui-fleet-*.svg")),
                       what="the fleet table saved")


async def test_a_recording_offers_no_key_that_acts_on_its_run(spec_events):
    """replay: the run played back has no job to stop and no checkpoint here to push: the
    drawn footer and the help leave s and p out, and the keys open nothing."""
    from tests.store.test_run_age import screen_lines

    src = ScriptedSource()
    src.push(spec_events)
    app = make_app(src, recording=True)
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause(0.1)
        footer = screen_lines(app)[-1]
        assert "Diagnose" in footer and "Stop" not in footer and "Push" not in footer, footer
        assert not {"actions.stop", "actions.push"} & {row[3] for row in app.key_help()}
        await pilot.press("s")
        await pilot.pause(0.1)
        assert app.screen is app.dashboard

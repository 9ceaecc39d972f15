"""What the drawn screen shows at 80x24, and the keys a replay or the demo leaves out of
its footer (read from the screen as drawn, not from widget state)."""

from __future__ import annotations

import re

import pytest

from carl_tui.events import RunMeta, ScalarBatch
from carl_tui.ui.app import build_app
from carl_tui.ui.keys import ALL_KEYS
from tests.conftest import (
    ScriptedSource,
    dashboard_config,
    notices_said,
    spec_trajectory,
    wait_for,
)
from tests.store.test_run_age import screen_lines

EXTRA = ("grad_norm", "learning_rate", "reward", "kl")  # with the spec's: 7 metrics, phi too


def many_metrics(run_ref):
    rows = [(step, {**row, **{name: 0.1 * (i + 1) + step / 1000
                              for i, name in enumerate(EXTRA)}})
            for step, row in spec_trajectory()]
    return [RunMeta(run_ref, {"model": "tiny-llama", "method": "sft", "vocab_size": 20}),
            ScalarBatch.from_rows(run_ref, rows, wall_time=1_700_000_000.0)]


def dashboard(run_ref, **kw):
    """The dashboard on a run of seven metrics (phi derived too)."""
    src = ScriptedSource()
    src.push(many_metrics(run_ref))
    return build_app(dashboard_config([src], refresh_interval=0.05, **kw))


FOOTER_ITEM = re.compile(r"(\S+) (\S.*?)(?=  |▏|$)")


def footer_items(line: str) -> list[tuple[str, str]]:
    """(key, description) of each key drawn on the footer line, the palette's left out."""
    keys_part = line.split("▏")[0]
    return [(m.group(1), m.group(2).strip()) for m in FOOTER_ITEM.finditer(keys_part.strip())]


async def test_at_80x24_the_metrics_table_shows_five_rows_and_the_footer_no_cut_key(run_ref):
    app = dashboard(run_ref)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause(0.2)
        lines = screen_lines(app)
        header = next(i for i, line in enumerate(lines) if re.match(r"\W*metric\s+last", line))
        names = {"phi (derived)", "entropy", "mean_token_accuracy", "loss", *EXTRA}
        rows = [line for line in lines[header + 1:]
                if any(line.strip(" │").startswith(name) for name in names)]
        assert len(rows) >= 5, "\n".join(lines)
        descriptions = {k.description for k in ALL_KEYS}
        items = footer_items(lines[-1])
        assert [d for _k, d in items if d not in descriptions] == [], lines[-1]  # none cut
        shown = [d for _k, d in items]
        for needed in ("Help", "Quit", "Runs", "Metrics", "Plot"):
            assert needed in shown, lines[-1]
        assert "palette" in lines[-1]


async def test_at_160_columns_the_footer_keeps_its_order_and_every_key(run_ref):
    app = dashboard(run_ref)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause(0.2)
        shown = [d for _k, d in footer_items(screen_lines(app)[-1])]
        assert shown[:3] == ["Metrics", "Plot", "X axis"]
        assert {"Launch", "Stop", "Push", "Diagnose", "Jobs", "Help"} <= set(shown)
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: "Jobs" not in screen_lines(app)[-1],
                       what="the footer fitted to 80 columns")
        shown = [d for _k, d in footer_items(screen_lines(app)[-1])]
        assert "Help" in shown and shown == [d for d in shown if d in
                                             {k.description for k in ALL_KEYS}]


@pytest.mark.parametrize("mode,gone,kept", [
    ("recording", {"Launch", "Stop", "Push", "Jobs"}, {"Diagnose"}),
    ("demo", {"Launch", "Push"}, {"Stop", "Jobs", "Diagnose"}),
])
async def test_a_replay_and_the_demo_leave_out_the_keys_that_cannot_act(run_ref, mode, gone,
                                                                        kept):
    app = dashboard(run_ref, **{mode: True})
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.pause(0.2)
        shown = {d for _k, d in footer_items(screen_lines(app)[-1])}
        assert not gone & shown and kept <= shown, screen_lines(app)[-1]
        said = notices_said(app)
        await pilot.press("l")  # pressed anyway: one line says why, nothing opens
        await wait_for(pilot, lambda: said, what="the reason said")
        start = ("A replay plays back a recording" if mode == "recording"
                 else "The demo is there to be watched")
        launch = "launch from a dashboard of your own runs (carl-tui --watch, --trackio, ...)."
        assert said == [f"{start}: {launch}"]
        await pilot.press("p")
        await wait_for(pilot, lambda: len(said) == 2, what="push's reason said")
        assert said[1].endswith(": its run has no checkpoint here to push.")
        await pilot.pause(0.1)
        assert app.screen is app.dashboard and len(app.screen_stack) == 1


async def test_at_80x24_the_metric_grid_footer_shows_whole_keys(run_ref):
    app = dashboard(run_ref)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("M")
        await wait_for(pilot, lambda: "every metric" in screen_lines(app)[0], what="the grid")
        await pilot.pause(0.2)
        items = footer_items(screen_lines(app)[-1])
        shown = [d for _k, d in items]
        assert shown[:3] == ["Back", "Next page", "Previous page"], shown
        known = {k.description for k in ALL_KEYS} | {"Back", "Next page", "Previous page"}
        assert [d for d in shown if d not in known] == [], screen_lines(app)[-1]
        assert "Help" in shown

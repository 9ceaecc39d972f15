"""SVG snapshots of the screens, at the sizes people use (pytest-textual-snapshot;
Textual is pinned). They play the recording of a real tiny demo run.

Update after an intended change with: pytest tests/ui/test_snapshots.py --snapshot-update
(and look at the new pictures before committing them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from carl_tui.sources.replay import ReplaySource
from carl_tui.ui.app import build_app
from carl_tui.ui.screens.help import HelpScreen
from tests.conftest import dashboard_config, notices_said, wait_for

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "tiny-demo.jsonl"
SIZE = (160, 45)


def replay_app(theme: str = "carl-dark", **kw):
    source = ReplaySource(RECORDING, speed=float("inf"))
    app = build_app(dashboard_config([source], theme=theme, refresh_interval=0.05,
                                     clock=lambda: 0.0, **kw))
    return app, source


def on_screen(app, source) -> bool:
    """The whole recording is read and the dashboard shows all of it."""
    snap = app.snapshot
    if not source.finished or snap is None or app.current_run is None:
        return False
    latest = app.store.snapshot(app.current_run)
    return latest is not None and snap.last_step == latest.last_step


async def idle(pilot) -> None:
    """Until nothing is left to do: animations done, every pending message handled."""
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


def settle(app, source, *keys, until=None):
    """`run_before` for `snap_compare`: wait (on conditions, never a fixed time) until
    the recording is on screen, press `keys`, wait until `until()` holds (the screen they
    open, its content), then until the app is idle."""
    async def run_before(pilot):
        await wait_for(pilot, lambda: on_screen(app, source), timeout=30.0,
                       what="the whole recording on screen")
        await idle(pilot)
        app.clear_notifications()
        for key in keys:
            await pilot.press(key)
        if until is not None:
            await wait_for(pilot, until, timeout=30.0, what="the screen the keys open")
        await idle(pilot)
        app.clear_notifications()
        await idle(pilot)

    return run_before


@pytest.mark.parametrize("theme", ["carl-dark", "carl-light"])
def test_main_screen(snap_compare, theme):
    app, source = replay_app(theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=settle(app, source))


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (200, 60)], ids=["80x24", "120x36",
                                                                        "200x60"])
def test_layout_at_each_size(snap_compare, size):
    """Nothing clipped or overlapping: stacked essentials at 80x24, a grid at 200x60."""
    app, source = replay_app(plot_metrics=("reward", "loss", "completions/mean_length"))
    assert snap_compare(app, terminal_size=size, run_before=settle(app, source))


def test_help_screen(snap_compare):
    app, source = replay_app()
    assert snap_compare(app, terminal_size=SIZE, run_before=settle(
        app, source, "question_mark", until=lambda: isinstance(app.screen, HelpScreen)))



def test_fleet_table(snap_compare, tmp_path):
    """The fleet table of a sweep of four runs (JSONL streams), sorted by name, at 120x36:
    the essential columns, the trend, the learning rate and seed that differ."""
    from carl_tui.sources.open import open_file
    from tests.ui.test_fleet_screen import NOW, SWEEP, column, row_count, write_run

    paths = []
    for name, lr, seed, steps, _ in SWEEP:
        write_run(tmp_path / f"{name}.jsonl", name, lr, seed, steps)
        paths.append(tmp_path / f"{name}.jsonl")
    app = build_app(dashboard_config([open_file(p) for p in paths], run="grpo-a",
                                     refresh_interval=0.05, clock=lambda: NOW, fleet=True))
    said = notices_said(app)

    async def run_before(pilot):
        await wait_for(pilot, lambda: row_count(app) == 4 and sorted(column(app, "step"))
                       == ["19", "29", "39", "45"], timeout=30.0, what="every run's rows")
        # the runs' crystallisation, written before the table opened, is history: kept
        # for the events view, never told
        await wait_for(pilot, lambda: sum(any(n.kind == "phase_transition" for n in kept)
                                          for kept in app.follower.history.values()) >= 2
                       and not app.follower.grouper.holding, timeout=30.0, what="history")
        assert not [t for t in said if "rystallised" in t]
        await pilot.press("o")  # sorted by name: the same order whichever source read first
        await wait_for(pilot, lambda: column(app, "name") == sorted(column(app, "name")))
        # the cursor on the first row, whichever run the screen showed when the table opened
        app.screen.query_one("#fleet-table").move_cursor(row=0)
        await wait_for(pilot, lambda: app.screen.query_one("#fleet-table").cursor_row == 0)
        await idle(pilot)
        app.clear_notifications()
        await idle(pilot)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)

"""SVG snapshots of the screens, at the sizes people use (pytest-textual-snapshot;
Textual is pinned). They play the recording of a real tiny demo run.

Update after an intended change with: pytest tests/test_snapshots.py --snapshot-update
(and look at the new pictures before committing them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from carl_tui.sources.replay import ReplaySource
from carl_tui.ui.app import DashboardConfig, build_app

RECORDING = Path(__file__).resolve().parents[1] / "recordings" / "tiny-demo.jsonl"
SIZE = (160, 45)


def replay_app(theme: str = "carl-dark", **kw):
    source = ReplaySource(RECORDING, speed=float("inf"))
    app = build_app(DashboardConfig(sources=[source], theme=theme, refresh_interval=0.05,
                                    clock=lambda: 0.0, **kw))
    return app, source


def settle(app, source, *keys):
    async def run_before(pilot):
        for _ in range(200):
            await pilot.pause(0.05)
            if source.finished and app.snapshot is not None and app.snapshot.last_step:
                break
        await pilot.pause(0.3)
        app.clear_notifications()
        for key in keys:
            await pilot.press(key)
        await pilot.pause(0.3)
        app.clear_notifications()

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
    assert snap_compare(app, terminal_size=SIZE, run_before=settle(app, source, "question_mark"))


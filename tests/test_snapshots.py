"""SVG snapshots of the main screens (pytest-textual-snapshot; Textual is pinned).

Update after an intended change with: pytest tests/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import pytest

from carl_tui.sources.replay import ReplaySource
from carl_tui.ui.app import DashboardConfig, build_app

RECORDING = Path(__file__).resolve().parents[1] / "carl_tui" / "data" / "demo_recording.jsonl"
SIZE = (160, 45)


def replay_app(theme: str = "carl-dark"):
    source = ReplaySource(RECORDING, speed=float("inf"))
    app = build_app(
        DashboardConfig(sources=[source], theme=theme, refresh_interval=0.05, clock=lambda: 0.0)
    )
    return app, source


def settle(app, source, *keys):
    async def run_before(pilot):
        for _ in range(200):
            await pilot.pause(0.05)
            if source.finished and app.snapshot is not None and app.snapshot.steps_logged == 46:
                break
        await pilot.pause(0.2)
        app.clear_notifications()
        for key in keys:
            await pilot.press(key)
        await pilot.pause(0.2)

    return run_before


@pytest.mark.parametrize("theme", ["carl-dark", "carl-light"])
def test_main_screen(snap_compare, theme):
    app, source = replay_app(theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=settle(app, source))


def test_help_screen(snap_compare):
    app, source = replay_app()
    assert snap_compare(app, terminal_size=SIZE, run_before=settle(app, source, "question_mark"))

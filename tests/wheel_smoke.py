"""Smoke test of an installed wheel (run by `make wheel-check` from a fresh environment
with only the base dependencies, outside the checkout): the package imports from the
wheel, its themes ship with it, a replay fills the dashboard and a theme switch works.

    python tests/wheel_smoke.py RECORDING.jsonl
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


async def main(recording: Path) -> None:
    import carl_tui
    from carl_tui.sources.replay import ReplaySource
    from carl_tui.ui.app import DashboardConfig, Settings, build_app
    from carl_tui.ui.themes import themes_dir

    assert "site-packages" in carl_tui.__file__, f"not the installed wheel: {carl_tui.__file__}"
    assert {p.stem for p in themes_dir().glob("*.toml")} >= {"carl-dark", "carl-light"}, (
        f"no themes in the wheel ({themes_dir()})")
    source = ReplaySource(recording, speed=float("inf"))
    app = build_app(DashboardConfig(sources=[source], settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=(120, 36)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if source.finished and app.snapshot is not None and app.snapshot.last_step:
                break
        assert app.snapshot is not None and app.snapshot.series, "the replay showed nothing"
        steps = app.snapshot.steps_logged  # the screen's: gone with it once the app quits
        assert app.theme == "carl-dark"
        await pilot.press("t")
        assert app.theme == "carl-light", app.theme
        await pilot.press("q")
    print(f"wheel smoke: {carl_tui.__file__}: replay of {steps} steps, "
          f"theme switched to {app.theme}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))

"""Regenerate the SVG screenshots the README shows: `python screenshots/make.py`.

Uses the recording of a real tiny demo run (recordings/tiny-demo.jsonl), played
back instantly, with a fixed clock so the pictures are reproducible.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

SIZE = (160, 45)


def recording() -> Path:
    real = ROOT / "recordings" / "tiny-demo.jsonl"
    return real if real.exists() else ROOT / "carl_tui" / "data" / "demo_recording.jsonl"


async def shoot(name: str, theme: str = "carl-dark", keys: tuple[str, ...] = ()) -> Path:
    from carl_tui.sources.replay import ReplaySource
    from carl_tui.ui.app import DashboardConfig, build_app

    source = ReplaySource(recording(), speed=float("inf"))
    app = build_app(DashboardConfig(sources=[source], theme=theme, refresh_interval=0.05,
                                    clock=lambda: 0.0))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if source.finished and app.snapshot is not None:
                break
        app.clear_notifications()
        await pilot.pause(0.2)
        for key in keys:
            await pilot.press(key)
        await pilot.pause(0.2)
        out = HERE / f"{name}.svg"
        app.save_screenshot(filename=out.name, path=str(HERE))
    return out


async def main() -> None:
    for args in (("dashboard",), ("dashboard-light", "carl-light"), ("help", "carl-dark", ("question_mark",))):
        print(await shoot(*args))


if __name__ == "__main__":
    asyncio.run(main())

"""One dashboard measurement in a fresh process; prints one JSON line.

    python -m benchmarks.dashboard_probe paint-jsonl PATH N
    python -m benchmarks.dashboard_probe paint-trackio ROOT N
    python -m benchmarks.dashboard_probe idle PATH
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import asyncio
import json
import sqlite3
import sys
from pathlib import Path

SIZE = (160, 45)


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def naive_read_jsonl(path: Path) -> float:
    t = time.perf_counter()
    rows = [json.loads(line) for line in path.open()]
    assert rows
    return time.perf_counter() - t


def naive_read_trackio(root: Path) -> float:
    t = time.perf_counter()
    con = sqlite3.connect(next(root.glob("*.db")))
    rows = [json.loads(m) for (m,) in con.execute("SELECT metrics FROM metrics ORDER BY id")]
    assert rows
    return time.perf_counter() - t


async def paint(source, n: int) -> float:
    from carl_tui.ui.app import DashboardConfig, build_app
    from carl_tui.ui.widgets.plots import MetricPlot

    app = build_app(DashboardConfig(sources=[source]))
    async with app.run_test(size=SIZE) as pilot:
        while not (app.snapshot and app.snapshot.steps_logged >= n):
            await pilot.pause(0.01)
        await pilot.pause()  # let the compositor draw the plots with the full data
        plot = app.query_one("#entropy-plot", MetricPlot)
        assert plot._lines and plot._lines[-1].steps[-1] == n - 1, "plot not showing the data"
        elapsed = time.perf_counter() - T0
        await pilot.press("q")
    return elapsed


async def idle(source, seconds: float = 5.0, empty: bool = False) -> float:
    from textual.app import App

    from carl_tui.ui.app import DashboardConfig, build_app

    app = App() if empty else build_app(DashboardConfig(sources=[source]))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(2.0)  # load and settle
        c0, w0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu = (time.process_time() - c0) / (time.perf_counter() - w0)
        app.exit()
    return 100 * cpu


def main(argv: list[str]) -> None:
    cmd = argv[0]
    if cmd == "paint-jsonl":
        from carl_tui.sources.jsonl import JsonlSource

        path, n = Path(argv[1]), int(argv[2])
        paint_s = asyncio.run(paint(JsonlSource(path), n))
        result = {"paint_s": paint_s, "rss_mb": rss_mb(), "naive_read_s": naive_read_jsonl(path)}
    elif cmd == "paint-trackio":
        from carl_tui.sources.trackio_local import TrackioLocalSource

        root, n = Path(argv[1]), int(argv[2])
        paint_s = asyncio.run(paint(TrackioLocalSource("bench", root=root), n))
        result = {"paint_s": paint_s, "rss_mb": rss_mb(), "naive_read_s": naive_read_trackio(root)}
    elif cmd == "idle":
        from carl_tui.sources.jsonl import JsonlSource

        path = Path(argv[1])
        result = {
            "app_cpu_pct": asyncio.run(idle(JsonlSource(path))),
            "empty_app_cpu_pct": asyncio.run(idle(None, empty=True)),
        }
    else:
        raise SystemExit(f"unknown probe {cmd}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])

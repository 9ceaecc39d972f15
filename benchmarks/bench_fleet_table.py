"""The fleet table on screen for the big Trackio project of `bench_fleet` (1,000 runs x
2,000 steps, written by trackio's `bulk_log`).

    python -m benchmarks fleet_table        (CARL_BENCH_FLEET=RUNSxSTEPS for another size)

Ours:

- `carl-tui fleet --project fleet` in a pseudo-terminal of 160x45, from the process's
  start: the time until the table's title counts every run ("fleet · 1000 runs") over
  the rows a screen holds, each with its name and state (the newest runs, from the app's
  first poll; the rows below them are added next), against a bare Textual app's first
  frame measured the same way
  (`bench_startup.measure_bare`, the floor of any screen);
- in a process of its own, the app with its fleet table under Textual's headless driver:
  the time to the first screen's rows, to every row in
  the table, and until every row shows its phase as the whole history says it (no preview's
  "≈" or "reading history" left), checked row by row against what `fleet --json` prints
  for the same project, and the process's CPU seconds (its reading helpers included);
  the reference: `fleet --json` itself, in a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_fleet import PROJECT, cpu_seconds, ensure_store, size
from benchmarks.common import Row
from benchmarks.trl_store import trackio_env

SIZE = (160, 45)
WAITING = ("≈", "reading")  # a phase cell that is the preview's, or none yet


async def _bare() -> float:
    from benchmarks.bare_app import BareApp

    t0 = time.perf_counter()
    async with BareApp().run_test(size=SIZE) as pilot:
        await pilot.pause()
        return time.perf_counter() - t0


async def _table(root: str, runs: int, url: str | None = None) -> dict:
    """The table of the project in `root` (or served at `url`: then only until every run's
    row is on screen, its step the run's last)."""
    from carl_tui.sources.trackio.local import TrackioLocalSource
    from carl_tui.sources.trackio.remote import TrackioRemoteSource
    from carl_tui.ui.app import DashboardConfig, Settings, build_app
    from carl_tui.ui.screens.fleet_table import FleetScreen

    bare = min([await _bare() for _ in range(3)])
    source = (TrackioRemoteSource(url, project=PROJECT) if url
              else TrackioLocalSource(PROJECT, root=Path(root)))
    app = build_app(DashboardConfig(sources=[source], settings=Settings(fleet=True)))

    def cells() -> dict[str, str] | None:
        if not isinstance(app.screen, FleetScreen) or not app.screen.query("#fleet-table"):
            return None
        table = app.screen.table
        if table.row_count != runs:
            return None
        names, phases = table.get_column("name"), table.get_column("phase")
        return {str(n): str(p) for n, p in zip(names, phases, strict=True)}

    out: dict = {"bare_s": bare}
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    async with app.run_test(size=SIZE):
        while time.perf_counter() - t0 < 300:
            if isinstance(app.screen, FleetScreen) and app.screen.rows:
                out.setdefault("first_s", time.perf_counter() - t0)
            shown = cells()
            if shown is not None:
                out.setdefault("rows_s", time.perf_counter() - t0)
                if url:
                    steps = [str(c) for c in app.screen.table.get_column("step")]
                    out["exact_steps"] = sum(x.isdigit() for x in steps)
                    break
                if not any(p.startswith(WAITING) or p == "–" for p in shown.values()):
                    out["phases_s"], out["cpu_s"] = time.perf_counter() - t0, cpu_seconds() - cpu0
                    out["phases"] = shown
                    break
            await asyncio.sleep(0.02)
    return out


def _pty_rows(root: Path, runs: int) -> tuple[float | None, float | None]:
    """(seconds until the fleet table's title counts every run, the bare app's frame),
    each from its process's start in a pseudo-terminal; medians of 3."""
    from benchmarks.bench_startup import _env, _median, carl_argv, measure_bare
    from benchmarks.pty_screen import Session

    env = _env(root) | {"TRACKIO_DIR": str(root)}
    title = f"fleet · {runs} runs"
    shown = []
    for _ in range(3):
        with Session(carl_argv() + ["fleet", "--project", PROJECT], env, size=SIZE,
                     cwd=str(root)) as s:
            shown.append(s.wait_until(lambda sc: title in sc.text(), 120))
    bare = [measure_bare(root)["frame"] for _ in range(3)]
    return _median(shown), _median(bare)


def _json(root: Path) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "carl_tui", "fleet", "--project", PROJECT,
                          "--json"], env=trackio_env(root), check=True, capture_output=True,
                         text=True)
    return time.perf_counter() - t0, json.loads(out.stdout)


def table_in_process(root: Path | str, runs: int, url: str | None = None) -> dict:
    """`_table` in a process of its own (its CPU seconds its own and its helpers')."""
    got = subprocess.run([sys.executable, "-m", "benchmarks.bench_fleet_table", str(root),
                          str(runs), *([url] if url else [])], env=trackio_env(root),
                         check=True, capture_output=True, text=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def run() -> list[Row]:
    runs, steps = size()
    root = ensure_store(runs, steps)
    ours = table_in_process(root, runs)
    json_s, printed = _json(root)
    want = {d["run"]: f"{d['phase']['phase']} · {d['phase']['stage']}" for d in printed}
    shown = ours.get("phases") or {}
    differ = sum(shown.get(k) != v for k, v in want.items())
    label = f"fleet table: {runs} Trackio runs x {steps} steps"
    rows_s, bare = _pty_rows(root, runs)
    return [
        Row(f"{label}, every row on screen", rows_s or float("nan"), bare, "s",
            "<= 4x bare frame", f"{(rows_s or float('nan')) / bare:.1f}x a bare Textual "
            "app's first frame (pty, from process start): the title counts every run, the "
            "rows a screen holds drawn (names, states; phases marked as the preview's); "
            f"headless, one process: first rows {ours.get('first_s', float('nan')):.2f} s, "
            f"every row in the table {ours['rows_s']:.2f} s, bare frame "
            f"{ours['bare_s']:.2f} s"),
        Row(f"{label}, every row's phase", ours.get("phases_s", float("nan")), json_s, "s",
            "<= 10 s", f"{ours.get('cpu_s', float('nan')):.1f} CPU s; {differ} of {runs} "
            "rows differ from fleet --json; ref: fleet --json, its own process"),
    ]


if __name__ == "__main__":
    url = sys.argv[3] if len(sys.argv) > 3 else None
    print(json.dumps(asyncio.run(_table(sys.argv[1], int(sys.argv[2]), url))))

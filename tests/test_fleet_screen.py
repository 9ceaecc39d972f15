"""The fleet table (`r`, `carl-tui fleet`) and the run card (`i`), driven with Textual's
pilot on a store fed by real files: JSONL streams a sweep wrote, a Trackio project written
by trackio itself. Asserts on what is on screen: the cells, their order after a sort, the
rows a filter leaves, its error, the card's content."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static

from carl_tui.sources.open import open_file
from carl_tui.ui.app import DashboardConfig, build_app
from carl_tui.ui.screens.fleet import FleetScreen
from carl_tui.ui.screens.run_card import RunCardScreen
from tests.conftest import plain_text, spec_trajectory, wait_for

NOW = 1_800_000_000.0
# The sweep: (run name, learning rate, seed, steps, crystallises); the model is the same.
SWEEP = (("grpo-a", 1e-4, 1, 46, True), ("grpo-b", 3e-4, 2, 30, False),
         ("sft-c", 1e-5, 3, 20, False), ("grpo-d", 1e-4, 4, 40, True))


def write_run(path: Path, name: str, lr: float, seed: int, steps: int, ages: float = 60.0):
    rows = spec_trajectory(n=46, seed=seed)[:steps]
    with open(path, "w") as f:
        f.write(json.dumps({"event": "meta", "run_id": name, "name": name, "project": "sweep",
                            "vocab_size": 151936, "config": {"lr": lr, "seed": seed,
                                                         "model": "tiny"}}) + "\n")
        for step, values in rows:
            t = NOW - ages - (steps - step)
            f.write(json.dumps({"step": step, "time": t, **values}) + "\n")


@pytest.fixture
def sweep(tmp_path) -> list[Path]:
    paths = []
    for name, lr, seed, steps, _ in SWEEP:
        path = tmp_path / f"{name}.jsonl"
        write_run(path, name, lr, seed, steps)
        paths.append(path)
    return paths


def fleet_app(paths, **kw):
    return build_app(DashboardConfig(sources=[open_file(p) for p in paths], run="grpo-a",
                                     refresh_interval=0.05, clock=lambda: NOW, **kw))


def table(app) -> DataTable:
    return app.screen.query_one("#fleet-table", DataTable)


def column(app, key: str) -> list[str]:
    """The text of column `key`, top to bottom, as on screen."""
    t = table(app)
    return [str(getattr(c, "plain", c)) for c in t.get_column(key)]


def headers(app) -> list[str]:
    return [str(c.label.plain).split(" ")[0] for c in table(app).columns.values()]


async def open_fleet(pilot, app, runs: int = len(SWEEP)) -> FleetScreen:
    await wait_for(pilot, lambda: app.snapshot is not None and len(app.store.runs()) == runs,
                   timeout=20, what="every run read")
    await wait_for(pilot, lambda: all(
        app.store.snapshot(r.key) and app.store.snapshot(r.key).last_step is not None
        for r in app.store.runs()), timeout=20, what="every run's rows")
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen), what="the fleet table")
    await wait_for(pilot, lambda: table(app).row_count == runs, timeout=10, what="its rows")
    return app.screen

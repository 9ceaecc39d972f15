"""A big fleet's first rows: `RunStore.newest_runs` and `fleet_rows(first=)` give the
first rows of the fleet's order without a snapshot of every run; `carl-tui fleet` reads
them from its one poller, as every other row (no child process reads them ahead: it
bought under 0.3 s on a 1,000-run project, see the README)."""

from __future__ import annotations

import os

import numpy as np

from carl_tui import cli
from carl_tui.events import RunMeta, RunRef, ScalarBatch
from carl_tui.sources.trackio.local import TrackioLocalSource
from carl_tui.store import RunStore
from carl_tui.store.fleet import fleet_rows
from tests.conftest import spec_trajectory
from tests.store.test_fleet import trackio_sweep  # noqa: F401  (a Trackio project, a fixture)

NOW = 1_800_000_000.0


def _run(i: int) -> RunRef:
    return RunRef(source="jsonl", project="sweep", run_id=f"run-{i:03d}", name=f"run-{i:03d}")


def sweep_events(runs: int, *, ties: int = 4) -> list:
    """`runs` runs of the reference trajectory, each with its config; the last rows of groups
    of `ties` runs were logged at the same second (ties keep the store's order), and
    every seventh run has a config but no row yet (no time: last)."""
    events: list = []
    for i in range(runs):
        run = _run(i)
        events.append(RunMeta(run=run, meta={"config": {"lr": 1e-4 * (1 + i % 3), "seed": i}}))
        if i % 7 == 3:
            continue
        rows = spec_trajectory(n=20, seed=i)
        end = NOW - 60.0 * (i // ties)
        events.append(ScalarBatch(
            run=run, steps=np.array([s for s, _ in rows]),
            columns={k: np.array([v[k] for _, v in rows]) for k in rows[0][1]},
            times=np.array([end - (len(rows) - 1 - s) for s, _ in rows])))
    return events


def sweep_store(runs: int) -> RunStore:
    store = RunStore()
    for event in sweep_events(runs):
        store.apply([event])
    return store


def keys(rows) -> list[str]:
    return [r.run.key for r in rows]


def test_the_first_rows_are_the_fleets_first_rows_in_its_order():
    store = sweep_store(40)
    every = fleet_rows(store, now=NOW)
    assert len(every) == 40
    assert len({r.updated_at for r in every}) < 40  # ties, and runs with no time
    for n in (1, 3, 4, 5, 17, 39, 40, 55):
        first = fleet_rows(store, now=NOW, first=n)
        assert keys(first) == keys(every)[:n], n
        assert first == every[:n]  # every cell the same
    assert [r.key for r in store.newest_runs(6)] == keys(every)[:6]


def test_carl_tui_fleet_forks_nothing_and_gives_the_app_only_its_sources(
        trackio_sweep, monkeypatch):  # noqa: F811
    """`carl-tui fleet --project` of a local Trackio project, in a terminal: the app is
    given the project's source (read by its poller after the first frame), and nothing
    is forked or read before it starts."""
    def no_fork():
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    monkeypatch.setattr(cli, "interactive", lambda: True)
    monkeypatch.setattr(cli, "_on_terminal", lambda: True)
    given = []
    monkeypatch.setattr(cli, "_run_app", lambda config: given.append(config) or 0)
    assert cli.main(["fleet", "--project", "sweep", "--trackio-dir", str(trackio_sweep)]) == 0
    (config,) = given
    assert config.settings.fleet
    assert callable(config.sources)  # built after the first frame
    sources = config.sources()
    assert [type(s) for s in sources] == [TrackioLocalSource]
    store = RunStore()
    store.apply(sources[0].poll())  # what the app's first poll reads: every run
    sources[0].close()
    assert store.run_count == 3

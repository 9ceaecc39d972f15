"""A big fleet's first rows: `RunStore.newest_runs` and `fleet_rows(first=)` give the
first rows of the fleet's order without a snapshot of every run, and `FirstRows` reads
them in a forked child (a real fork reading a Trackio project written by trackio) as the
app's own first poll reads them; a child that fails gives nothing and says nothing."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from carl_tui.events import RunMeta, RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.store.fleet import fleet_rows
from carl_tui.ui.first_rows import FirstRows
from tests.conftest import spec_trajectory
from tests.test_fleet import trackio_sweep  # noqa: F401  (a Trackio project, a fixture)

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


def fleet_of(root, first: int):
    from carl_tui.sources.trackio.local import TrackioLocalSource

    source = TrackioLocalSource("sweep", root=root)
    source.want_preview()
    store = RunStore()
    store.apply(source.poll())  # the app's first poll
    source.close()
    return fleet_rows(store, now=time.time(), first=first), store.run_count


def wait_result(ahead: FirstRows, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while (got := ahead.result()) is None:
        assert time.monotonic() < deadline, "no answer from the child"
        time.sleep(0.02)
    return got


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_reads_the_first_rows_as_the_apps_first_poll(trackio_sweep):  # noqa: F811
    from carl_tui.sources.trackio.local import TrackioLocalSource

    ahead = FirstRows(lambda: [TrackioLocalSource("sweep", root=trackio_sweep)], 2)
    rows, runs = wait_result(ahead)
    want, want_runs = fleet_of(trackio_sweep, 2)
    assert runs == want_runs == 3 and len(rows) == 2
    assert keys(rows) == keys(want)
    for got, exp in zip(rows, want, strict=True):  # all but `now`'s (state)
        assert (got.last_step, got.task_last, got.loss, got.updated_at, got.config,
                got.newest_read) == (exp.last_step, exp.task_last, exp.loss,
                                     exp.updated_at, exp.config, exp.newest_read)
        assert got.last_step == 460 and got.newest_read
    ahead._thread.join(5)
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(ahead._pid, os.WNOHANG)


def failing():
    raise RuntimeError("a source that cannot be opened")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.parametrize("make", [failing, list], ids=["fails", "no-runs"])
def test_a_child_that_fails_or_finds_nothing_gives_no_rows_and_says_nothing(make, capfd):
    assert wait_result(FirstRows(make, 64)) == ([], 0)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_past_its_time_is_stopped_and_gives_no_rows(monkeypatch, capfd):
    from carl_tui.ui import first_rows

    monkeypatch.setattr(first_rows, "CHILD_LIMIT_S", 1)
    t0 = time.monotonic()
    assert wait_result(FirstRows(lambda: time.sleep(30) or [], 64)) == ([], 0)
    assert time.monotonic() - t0 < 10
    assert capfd.readouterr() == ("", "")


def test_without_fork_no_rows_come_at_once(monkeypatch):
    monkeypatch.delattr(os, "fork")
    assert FirstRows(failing, 64).result() == ([], 0)

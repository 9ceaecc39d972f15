"""The store: events in, snapshots out; derived phi; gates and notices."""

import math

import numpy as np
import pytest

from carl_tui.events import LogLines, Marker, RunMeta, RunRef, ScalarBatch, SourceStatus
from carl_tui.store import RunStore
from tests.conftest import spec_trajectory

RUN = RunRef("test", "p", "r1", "one")


def test_phi_is_derived_from_entropy_when_vocab_known():
    store = RunStore()
    store.apply([RunMeta(RUN, {"config": {"vocab_size": 100}}),
                 ScalarBatch.from_rows(RUN, [(0, {"entropy": math.log(100) / 2})])])
    snap = store.snapshot(RUN.key)
    assert snap.phi_derived and snap.series["phi"].derived
    assert snap.series["phi"].last == 0.5 and snap.vocab_size == 100


def test_derived_phi_follows_every_batch():
    store = RunStore(vocab_size=100)
    for step in range(3):  # arriving one batch at a time, as from a live run
        store.apply([ScalarBatch.from_rows(RUN, [(step, {"entropy": math.log(100) * step / 4})])])
    phi = store.snapshot(RUN.key).series["phi"]
    assert phi.count == 3 and phi.last_step == 2 and phi.last == pytest.approx(0.5)


def test_vocab_known_late_derives_phi_for_the_whole_history():
    store = RunStore()
    ent = [(s, {"entropy": 4.0 - s / 100}) for s in range(300)]
    store.apply([ScalarBatch.from_rows(RUN, ent)])  # history first, config (vocab) after
    assert "phi" not in store.snapshot(RUN.key).series
    store.apply([RunMeta(RUN, {"config": {"vocab_size": 151936}})])
    phi = store.snapshot(RUN.key).series["phi"]
    ln_v = math.log(151936)
    assert phi.count == 300 and phi.derived
    assert phi.max == pytest.approx(1 - 1.01 / ln_v) and phi.min == pytest.approx(1 - 4.0 / ln_v)
    assert phi.steps[0] == 0 and phi.last == pytest.approx(1 - 1.01 / ln_v)


def test_logged_phi_is_never_replaced():
    store = RunStore(vocab_size=100)
    store.apply([ScalarBatch.from_rows(RUN, [(0, {"entropy": 1.0, "phi": 0.42})])])
    snap = store.snapshot(RUN.key)
    assert not snap.phi_derived and snap.series["phi"].last == 0.42


def test_no_vocab_no_phi():
    store = RunStore()
    store.apply([ScalarBatch.from_rows(RUN, [(0, {"entropy": 1.0})])])
    assert "phi" not in store.snapshot(RUN.key).series


def test_too_small_vocab_is_reported_once():
    store = RunStore(vocab_size=20)
    store.apply([ScalarBatch.from_rows(RUN, [(0, {"entropy": 9.0})]),
                 ScalarBatch.from_rows(RUN, [(1, {"entropy": 9.5})])])
    texts = [n.text for n in store.take_notices() if n.kind == "vocab"]
    assert len(texts) == 1 and "vocabulary size 20 looks too small" in texts[0]


def test_gate_fires_once_with_a_notice_at_the_step():
    store = RunStore()
    rows = spec_trajectory()
    for i in range(0, len(rows), 3):  # arriving in small batches
        store.apply([ScalarBatch.from_rows(RUN, rows[i : i + 3])])
    snap = store.snapshot(RUN.key)
    accs = [v["mean_token_accuracy"] for _, v in rows]
    # reference: first step where 3 of the last 5 are >= 0.99
    expected = next(i for i in range(len(accs))
                    if sum(a >= 0.99 for a in accs[max(0, i - 4) : i + 1]) >= 3)
    assert snap.gate.fired and snap.gate.trigger_step == expected
    flags = [n for n in store.take_notices() if n.kind == "phase_transition"]
    assert len(flags) == 1 and flags[0].step == expected
    assert snap.gate.peak_entropy == max(v["entropy"] for _, v in rows)
    assert [p for p, _ in snap.phase.timeline] == [
        "baseline", "melting", "transition", "crystallisation", "converged"]


def test_runs_order_logs_markers_and_sources():
    store = RunStore()
    other = RunRef("test", "p", "r2", "two")
    store.apply([ScalarBatch.from_rows(RUN, [(0, {"loss": 1.0})])])
    store.apply([ScalarBatch.from_rows(other, [(0, {"loss": 2.0})])])
    assert [r.run_id for r in store.runs()] == ["r2", "r1"]
    store.apply([LogLines(RUN, ("a", "b")), Marker(RUN, "phase_transition", 7),
                 SourceStatus("src", "live", skipped=4)])
    assert [r.run_id for r in store.runs()] == ["r1", "r2"]
    snap = store.snapshot(RUN.key)
    assert snap.log_tail == ("a", "b") and snap.log_total == 2
    assert snap.markers[0].step == 7
    summary = store.summary()
    assert summary.skipped == 4 and summary.sources["src"].state == "live"


def test_snapshot_is_bounded_for_long_runs():
    store = RunStore()
    n = 300_000
    store.apply([ScalarBatch(RUN, np.arange(n), {"loss": np.linspace(1, 0, n)})])
    snap = store.snapshot(RUN.key, max_points=1000)
    s = snap.series["loss"]
    assert s.count == n and len(s.values) <= 1100
    assert s.whole_mean == pytest.approx(np.linspace(1, 0, n).mean())


@pytest.mark.parametrize(("meta", "values", "step"), [
    ({"train_summary": 5}, {"train_loss": 0.5}, 30),
    ({"train_summary": "done", "train_summary_step": 40}, {"train_loss": 0.5}, 40),
    ({"train_summary": {"train_runtime": "12s", "total_flos": 3.0}, "train_summary_step": "x"},
     {"train_loss": 0.5, "total_flos": 3.0}, 30),
])
def test_a_malformed_run_summary_is_said_and_the_rest_kept(meta, values, step):
    """A run summary in a run's meta (a JSONL `meta` line can hold anything) that is not
    {name: number} at an integer step: what is good is kept, the rest is said in one
    line, and the store goes on."""
    store = RunStore()
    store.apply([RunMeta(RUN, {"train_summary": {"train_loss": 0.5},
                               "train_summary_step": 30})])
    store.apply([RunMeta(RUN, {**meta, "model": "tiny"}),
                 ScalarBatch.from_rows(RUN, [(41, {"loss": 1.0})])])
    snap = store.snapshot(RUN.key)
    assert snap.meta["model"] == "tiny" and snap.series["loss"].count == 1
    assert snap.meta["train_summary"] == values
    assert snap.meta["train_summary_step"] == step
    texts = [n.text for n in store.take_notices() if n.kind == "train_summary"]
    assert len(texts) == 1 and "\n" not in texts[0] and "not a number" in texts[0], texts


def test_a_sources_status_changes_the_store_not_its_runs():
    """The fleet table reads its rows again when the runs changed (`runs_version`), not
    when a source said it is still live."""
    store = RunStore()
    ref = RunRef("test", "p", "r", "r")
    store.apply([RunMeta(ref, {"seed": 1})])
    version, runs = store.version, store.runs_version
    store.apply([SourceStatus("jsonl: r", "live")])
    assert store.version == version + 1 and store.runs_version == runs
    store.apply([RunMeta(ref, {"seed": 2})])
    assert store.runs_version == runs + 1


def test_fleet_rows_take_again_only_the_snapshots_of_runs_that_changed():
    from carl_tui.store.fleet import RowSnapshots, fleet_rows

    store = RunStore()
    refs = [RunRef("test", "p", f"r{i}", f"r{i}") for i in range(5)]
    for i, ref in enumerate(refs):
        store.apply([ScalarBatch.from_rows(ref, [(s, {"loss": 1.0 / (s + 1 + i)})
                                                 for s in range(20)])])
    taken: list[str] = []
    snapshot = store.snapshot
    store.snapshot = lambda key, *a, **kw: taken.append(key) or snapshot(key, *a, **kw)
    memo = RowSnapshots()
    first = fleet_rows(store, now=0.0, snapshots=memo)
    assert sorted(taken) == sorted(r.key for r in refs)
    taken.clear()
    store.apply([ScalarBatch.from_rows(refs[2], [(20, {"loss": 0.01})])])
    again = fleet_rows(store, now=0.0, snapshots=memo)
    assert taken == [refs[2].key]
    assert {r.run.key: r.loss for r in again} == {
        **{r.run.key: r.loss for r in first}, refs[2].key: 0.01}

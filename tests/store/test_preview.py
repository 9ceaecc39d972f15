"""Newest first, coarse to fine: a long history is previewed (its newest rows and a
strided sample), shown provisionally, then read in order; at the end every value,
extreme, gate step and phase is the same as a plain read's.

Sources are fed by real writers: trackio's own `bulk_log` (in its own process, as
a training job writes) for the local store and a real Trackio server on
127.0.0.1; a JSONL stream written line by line. The preview thresholds are
lowered so that runs of a few thousand steps count as long.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import orjson
import pytest

from carl_tui.events import RunMeta, RunRef, ScalarBatch
from carl_tui.sources import jsonl as jl
from carl_tui.sources.tail import sample_lines
from carl_tui.sources.trackio import db as trackio_db
from carl_tui.sources.trackio import local as tl
from carl_tui.sources.trackio import newest_first as tpv
from carl_tui.sources.trackio import remote as tr
from carl_tui.store import RunStore
from tests.conftest import wait_for
from tests.trajectories import sft_story

N = 6000  # steps of the run written to the stores
RUN_ID = "sft-0001"

BULK_WRITER = textwrap.dedent(
    """
    import json, sys
    from trackio.sqlite_storage import SQLiteStorage
    spec = json.load(open(sys.argv[1]))
    rows = spec["rows"]
    for start in range(0, len(rows), 2000):
        part = rows[start:start + 2000]
        SQLiteStorage.bulk_log(spec["project"], spec["run"], part,
                               steps=[r["train/global_step"] for r in part],
                               timestamps=[f"2025-11-01T{spec.get('hour', 8):02d}:"
                                           f"{(start + i) // 6000 % 60:02d}:"
                                           f"{(start + i) // 100 % 60:02d}+00:00"
                                           for i in range(len(part))],
                               config=spec.get("config") if start == 0 else None,
                               run_id=spec["run_id"])
    """
)


def trl_rows(n: int, seed: int = 0, start: int = 0) -> list[dict]:
    """Rows as TRL's Trainer logs them to Trackio: `train/` keys, full-precision floats."""
    traj = sft_story(length=n + start, seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(start, n + start):
        acc = float(traj.columns["mean_token_accuracy"][i])
        ent = float(traj.columns["entropy"][i])
        out.append({
            "train/loss": float((0.1 + 2.4 * (1 - acc)) * np.exp(rng.normal(0, 0.05))),
            "train/grad_norm": float(abs(rng.normal(1.0, 0.3))),
            "train/learning_rate": 2e-5 * (1 - i / (n + start)) + 1e-8,
            "train/entropy": ent,
            "train/mean_token_accuracy": acc,
            "train/num_tokens": float(1024 * (i + 1)),
            "train/epoch": 2.0 * i / (n + start),
            "train/global_step": int(traj.steps[i]),
        })
    return out


def bulk_write(root, project: str, rows: list[dict], *, run: str = "sft", config=None,
               run_id: str = RUN_ID, hour: int = 8) -> None:
    """Append rows with trackio's own writer, in a process of its own (the rows dated from
    `hour` o'clock on, 100 a second)."""
    pytest.importorskip("trackio")
    spec = root / f"spec-{run_id}-{len(rows)}-{rows[0]['train/global_step']}.json"
    spec.write_text(json.dumps({"project": project, "run": run, "run_id": run_id,
                                "rows": rows, "config": config, "hour": hour}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACKIO_")}
    env.update(TRACKIO_DIR=str(root), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", BULK_WRITER, str(spec)], env=env, check=False,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("trackio")
    bulk_write(root, "proj", trl_rows(N), config={"vocab_size": 50, "model": "tiny"})
    return root


@pytest.fixture
def small_preview(monkeypatch):
    monkeypatch.setattr(tpv, "SIZES", tpv.PreviewSizes(1000, 150, 300))


def read_all(src, store: RunStore, *, on_snapshot=None, limit: int = 10_000) -> list:
    """Poll until caught up; every event in order. `on_snapshot(snap)` after each poll."""
    events: list = []
    for _ in range(limit):
        got = src.poll()
        store.apply(got)
        events += got
        if on_snapshot is not None and store.runs():
            on_snapshot(store.snapshot(store.runs()[0].key))
        if src.interval and not got:
            return events
    raise AssertionError("the source never caught up")


def assert_same_run(a, b) -> None:
    """Two snapshots of the same run: identical values, extremes, gate and phases."""
    assert a.history_read is None and b.history_read is None
    assert set(a.series) == set(b.series)
    for name, s in a.series.items():
        t = b.series[name]
        assert not s.provisional and not t.provisional
        assert (s.count, s.first_step, s.last_step, s.last, s.min, s.max) == \
               (t.count, t.first_step, t.last_step, t.last, t.min, t.max), name
        assert s.whole_mean == pytest.approx(t.whole_mean, rel=1e-12), name
        np.testing.assert_array_equal(s.steps, t.steps)
        np.testing.assert_array_equal(s.values, t.values)
        np.testing.assert_array_equal(s.tail, t.tail)
    assert a.gate == b.gate and not a.gate.provisional
    assert a.phase == b.phase and not a.phase.provisional
    # The same story (within one batch the gate is announced before the phases, so the
    # order of events depends on how rows were batched; their steps and texts do not).
    key = lambda e: (e.step, e.kind, e.text)
    assert sorted(a.events, key=key) == sorted(b.events, key=key)
    assert (a.steps_logged, a.last_step, a.first_step) == (b.steps_logged, b.last_step,
                                                           b.first_step)


# -- the store ------------------------------------------------------------------------


def _batches(rows: list[tuple[int, dict]], ref: RunRef, size: int) -> list[ScalarBatch]:
    return [ScalarBatch.from_rows(ref, rows[i:i + size]) for i in range(0, len(rows), size)]


def test_store_shows_a_preview_provisionally_then_exactly_what_a_plain_read_shows():
    traj = sft_story(length=4000, seed=3)
    rows = traj.rows()
    ref = RunRef("test", "p", "r1", "r1")
    sample = rows[0:3800:40] + rows[3800:]  # a strided sample, then the newest rows
    plain, staged = RunStore(), RunStore()
    for b in _batches(rows, ref, 700):
        plain.apply([b])
    staged.apply([ScalarBatch.from_rows(ref, sample).__class__(
        **{**{f: getattr(ScalarBatch.from_rows(ref, sample), f)
              for f in ("run", "steps", "columns")}, "preview": True})])
    first = staged.snapshot(ref.key)
    final = plain.snapshot(ref.key)
    # At once: the newest step and values (exact: they are real rows), the whole run's
    # shape, extremes and phase marked provisional.
    assert first.history_read == 0.0 and first.provisional
    assert first.last_step == final.last_step == int(traj.steps[-1])
    acc = "mean_token_accuracy"
    assert first.series[acc].last == final.series[acc].last
    assert first.series[acc].provisional and first.phase.provisional and first.gate.provisional
    assert first.series[acc].steps[0] == traj.steps[0]
    assert first.series[acc].steps[-1] == traj.steps[-1]
    assert first.steps_logged == 0 and not first.events  # no real row, nothing announced
    seen = []
    for b in _batches(rows, ref, 700):
        staged.apply([b])
        snap = staged.snapshot(ref.key)
        seen.append(snap.history_read)
        assert snap.last_step == final.last_step  # the newest is always shown
        assert snap.series[acc].last == final.series[acc].last
        assert snap.series[acc].min <= final.series[acc].min + 1e-12
    assert seen == sorted(seen) and seen[0] > 0 and all(s is not None for s in seen)
    staged.apply([ScalarBatch(ref, np.empty(0, dtype=np.int64), {}, preview=True)])
    assert_same_run(staged.snapshot(ref.key), final)
    # The run's own gate and phases saw only the real rows: the same story as a plain read.
    assert [e.text for e in staged.snapshot(ref.key).events] == [e.text for e in final.events]
    assert any(e.kind == "phase_transition" for e in final.events)
    assert final.phase.timeline and final.phase.phase == "converged"


def test_a_preview_never_reaches_the_gate_or_the_phases():
    traj = sft_story(length=2000, seed=5)
    ref = RunRef("test", "p", "r2", "r2")
    store = RunStore()
    store.apply([ScalarBatch(ref, b.steps, b.columns, preview=True)
                 for b in _batches(traj.rows(), ref, 500)])
    state = store._runs[ref.key]
    assert not state.series and state.steps_logged == 0
    assert not state.phases.stages and not state.gate.fired and state.gate.above == 0
    snap = store.snapshot(ref.key)
    assert snap.phase.provisional and snap.phase.phase  # the preview's own classifier


# -- local Trackio --------------------------------------------------------------------


def test_local_trackio_preview_first_then_the_exact_history(store_dir, small_preview):
    plain_src = tl.TrackioLocalSource("proj", root=store_dir)
    plain = RunStore(vocab_size=50)
    read_all(plain_src, plain)
    final = plain.snapshot(plain.runs()[0].key)

    src = tl.TrackioLocalSource("proj", root=store_dir)
    src.preview = True
    staged = RunStore(vocab_size=50)
    first = src.poll()
    previews = [e for e in first if isinstance(e, ScalarBatch)]
    assert [b.preview for b in previews] == [True]
    p = previews[0]
    assert 150 + 250 <= len(p) <= 150 + 330  # newest rows + a strided sample, not the history
    assert int(p.steps[-1]) == N - 1 and int(p.steps[0]) == 0
    assert np.all(np.diff(p.steps) > 0)
    assert any(isinstance(e, RunMeta) and e.meta["config"]["model"] == "tiny" for e in first)
    staged.apply(first)
    snap = staged.snapshot(staged.runs()[0].key)
    assert snap.last_step == N - 1 and snap.provisional
    assert snap.series["loss"].last == final.series["loss"].last
    flags = []
    rest = read_all(src, staged, on_snapshot=lambda s: flags.append(s.history_read))
    done = [e for e in rest if isinstance(e, ScalarBatch) and e.preview]
    assert len(done) == 1 and len(done[0]) == 0 and done[0].run.key == p.run.key
    assert flags[-1] is None and all(f is not None for f in flags[: flags.index(None)])
    assert src.skipped == plain_src.skipped == 0
    assert_same_run(staged.snapshot(p.run.key), final)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A project of 4 runs of 1,500 steps, written one after another, dated out of that
    order (sweep-1 has the newest rows, then 3, 0, 2)."""
    root = tmp_path_factory.mktemp("sweep")
    for i, hour in enumerate((9, 11, 8, 10)):
        bulk_write(root, "sweep", trl_rows(1500, seed=i), run=f"sweep-{i}", run_id=f"id-{i}",
                   config={"seed": i}, hour=hour)
    return root


def test_a_project_of_many_runs_previews_each_runs_newest_rows_first(sweep_dir, small_preview):
    """First poll: every run's config and newest rows (its name, last step, values and
    time: its row, exact); second: the shape of the history (no row sent twice); then the
    history, and every run ends as a plain read leaves it."""
    from carl_tui.store.fleet import fleet_rows
    from carl_tui.ui.fleet_columns import base_columns

    plain_src = tl.TrackioLocalSource("sweep", root=sweep_dir)
    plain = RunStore()
    read_all(plain_src, plain)
    final = {r.run.name: r for r in fleet_rows(plain, now=0.0)}
    assert [r.run.name for r in fleet_rows(plain, now=0.0)] == \
        [f"sweep-{i}" for i in (1, 3, 0, 2)]  # the newest record first

    src = tl.TrackioLocalSource("sweep", root=sweep_dir)
    src.preview = True
    store = RunStore()
    first = src.poll()
    newest = [e for e in first if isinstance(e, ScalarBatch)]
    assert all(b.preview and b.tail for b in newest)
    assert sorted(b.run.name for b in newest) == [f"sweep-{i}" for i in range(4)]
    last_steps = trl_rows(8, start=1492)
    for b in newest:
        assert b.steps.tolist() == [r["train/global_step"] for r in last_steps]
    assert sum(isinstance(e, RunMeta) for e in first) == 4
    store.apply(first)
    rows = fleet_rows(store, now=0.0)
    assert [r.run.name for r in rows] == list(final)  # in their final order already
    cells = {c.key: c for c in base_columns()}
    for r in rows:
        done = final[r.run.name]
        assert r.provisional and r.phase is None  # 8 rows tell no phase
        assert str(cells["phase"].cell(r, 0.0, {})) == "reading history"
        # the newest values are the run's own (no ≈); the best is the preview's
        assert r.newest_read and not str(cells["step"].cell(r, 0.0, {})).startswith("≈")
        assert not str(cells["task"].cell(r, 0.0, {})).startswith("≈")
        assert str(cells["best"].cell(r, 0.0, {})).startswith("≈")
        assert cells["trend"].cell(r, 0.0, {}).style == "dim"  # 8 rows, not the run
        assert (r.last_step, r.task_last, r.loss, r.updated_at, r.state) == \
            (done.last_step, done.task_last, done.loss, done.updated_at, done.state)

    shape = [e for e in src.poll() if isinstance(e, ScalarBatch)]
    assert shape and all(b.preview and not b.tail for b in shape)
    sent = [(b.run.key, s) for b in newest + shape for s in b.steps.tolist()]
    assert len(sent) == len(set(sent))  # no row twice
    store.apply(shape)
    assert store.snapshot(newest[0].run.key).series["loss"].last == \
        final[newest[0].run.name].loss  # the newest value stays the newest
    rest = read_all(src, store)
    ended = [e for e in rest if isinstance(e, ScalarBatch) and e.preview]
    assert sorted(e.run.name for e in ended) == [f"sweep-{i}" for i in range(4)]
    assert all(len(e) == 0 for e in ended)
    for ref in plain.runs():
        assert_same_run(store.snapshot(ref.key), plain.snapshot(ref.key))


def test_the_runs_newest_rows_parsed_in_one_pass_are_each_runs_own(sweep_dir):
    """`columns_by_run` parses every run's rows at once: each run's steps and columns are
    what parsing its rows alone gives; a row that is not a JSON object parses run by run."""
    from carl_tui.sources.trackio.local_preview import columns_by_run
    from carl_tui.sources.trackio.local_read import group_by_run, run_columns

    db = sqlite3.connect(sweep_dir / "sweep.db")
    rows = db.execute("SELECT id, run_id, step, metrics FROM metrics WHERE step >= 1490 "
                      "ORDER BY id").fetchall()
    db.close()
    by_run = group_by_run(rows)
    by_run["id-2"] = [(*by_run["id-2"][0][:3], "not json"), *by_run["id-2"][1:]]
    for groups in ({k: v for k, v in by_run.items() if k != "id-2"}, by_run):
        got = columns_by_run(groups)
        assert list(got) == list(groups)
        for key, run_rows in groups.items():
            steps, columns, *_ = run_columns(run_rows)
            np.testing.assert_array_equal(got[key][0], steps)
            assert set(got[key][1]) == set(columns)
            for name in columns:
                np.testing.assert_array_equal(got[key][1][name], columns[name])


def test_without_trackios_run_time_index_the_preview_is_the_shape_alone(sweep_dir, tmp_path,
                                                                          small_preview):
    """A database without the (run, timestamp) index (written by another Trackio) would
    cost a scan of the table per run: its preview is the sample and newest rows alone."""
    import shutil

    shutil.copy(sweep_dir / "sweep.db", tmp_path / "sweep.db")
    db = sqlite3.connect(tmp_path / "sweep.db")
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                              "AND tbl_name = 'metrics' AND sql LIKE '%timestamp%'").fetchall():
        db.execute(f'DROP INDEX "{name}"')
    db.commit()
    db.close()
    src = tl.TrackioLocalSource("sweep", root=tmp_path)
    src.preview = True
    first = [e for e in src.poll() if isinstance(e, ScalarBatch)]
    assert first and all(b.preview and not b.tail for b in first)


def test_closing_from_another_thread_mid_poll_leaves_the_database_to_the_poll(
        sweep_dir, small_preview, monkeypatch):
    """Quitting closes a source from the UI thread while its poll may be running a
    statement: closing the connection under it crashed the interpreter. The statement
    is interrupted instead, and the poll's own thread closes the database."""
    import threading

    src = tl.TrackioLocalSource("sweep", root=sweep_dir)
    src.preview = True
    inside, closed = threading.Event(), threading.Event()
    config_events = tl.TrackioLocalSource._config_events

    def held(self, configs):  # the poll, between two statements
        inside.set()
        closed.wait(5)
        return config_events(self, configs)

    monkeypatch.setattr(tl.TrackioLocalSource, "_config_events", held)
    failed: list[BaseException] = []

    def poll():
        try:
            src.poll()
        except BaseException as exc:  # noqa: BLE001 - what the poll ended with
            failed.append(exc)

    thread = threading.Thread(target=poll)
    thread.start()
    assert inside.wait(5)
    src.close()
    assert src._conn is not None  # left to the poll under way
    closed.set()
    thread.join(10)
    assert not thread.is_alive() and src._conn is None
    # interrupted, said as the source's error; never "a closed database" under its feet
    assert [type(e) for e in failed] in ([], [tl.SourceError])
    assert all("interrupted" in str(e) for e in failed)


def test_local_trackio_helpers_read_the_same_history(store_dir, monkeypatch):
    monkeypatch.setattr(tl, "HELPER_MIN_ROWS", 1000)
    monkeypatch.setattr(tl, "HELPER_BLOCK_ROWS", 700)
    plain_src = tl.TrackioLocalSource("proj", root=store_dir)
    plain_src.helpers = 0
    plain = RunStore(vocab_size=50)
    read_all(plain_src, plain)
    src = tl.TrackioLocalSource("proj", root=store_dir)
    helped = RunStore(vocab_size=50)
    events = read_all(src, helped)
    sizes = [len(e) for e in events if isinstance(e, ScalarBatch)]
    assert sizes[:-1] == [700] * (len(sizes) - 1) and sum(sizes) == N  # helper ranges
    key = plain.runs()[0].key
    assert_same_run(helped.snapshot(key), plain.snapshot(key))
    assert src._reader is None  # the helpers are gone once the history is read


def test_an_unchanged_database_is_polled_without_a_query(tmp_path):
    bulk_write(tmp_path, "live", trl_rows(500, seed=1))
    src = tl.TrackioLocalSource("live", root=tmp_path)
    store = RunStore()
    read_all(src, store)
    statements: list[str] = []
    src._conn.set_trace_callback(statements.append)
    for _ in range(5):
        assert src.poll() == []
    assert statements == ["PRAGMA data_version"] * 5  # no table was read
    bulk_write(tmp_path, "live", trl_rows(300, seed=1, start=500))
    statements.clear()
    got = src.poll()
    assert sum(len(e) for e in got if isinstance(e, ScalarBatch)) == 300
    assert any("FROM metrics" in s for s in statements)
    assert store.apply(got) is None and store.snapshot(store.runs()[0].key).last_step == \
        trl_rows(1, start=799)[0]["train/global_step"]


def test_most_recent_is_the_run_of_the_newest_row(tmp_path):
    bulk_write(tmp_path, "a", trl_rows(200, seed=2), run="first")
    bulk_write(tmp_path, "a", trl_rows(100, seed=2, start=200), run="first")
    db = sqlite3.connect(tmp_path / "a.db")
    run_ids = {r for (r,) in db.execute("SELECT DISTINCT run_id FROM metrics")}
    db.close()
    assert trackio_db.most_recent(tmp_path) == ("a", RUN_ID) and run_ids == {RUN_ID}


# -- JSONL: read from the end ---------------------------------------------------------


def _write_stream(path, n: int) -> list[dict]:
    traj = sft_story(length=n, seed=7)
    lines = [{"event": "meta", "run_id": "stream-7", "name": "tail-run", "project": "demo",
              "vocab_size": 50}]
    for step, vals in traj.rows():
        lines.append({"step": step, "time": 1_732_000_000.0 + 0.25 * step, **vals})
    with open(path, "wb") as f:
        f.writelines(orjson.dumps(obj) + b"\n" for obj in lines)
    return lines


def test_jsonl_is_previewed_from_its_end_then_read_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(jl, "PREVIEW_MIN_BYTES", 64 << 10)
    monkeypatch.setattr(jl, "PREVIEW_TAIL_BYTES", 8 << 10)
    monkeypatch.setattr(jl, "PREVIEW_SAMPLE_LINES", 200)
    path = tmp_path / "run.jsonl"
    lines = _write_stream(path, 5000)
    plain = RunStore(vocab_size=50)
    read_all(jl.JsonlSource(path), plain)
    src = jl.JsonlSource(path)
    src.preview = True
    first = src.poll()
    assert src.offset == 0  # nothing of the history was consumed by the preview
    (p,) = first
    assert p.preview and p.run.run_id == "stream-7" and p.run.name == "tail-run"
    assert int(p.steps[-1]) == lines[-1]["step"]
    assert p.columns["entropy"][-1] == lines[-1]["entropy"]
    assert 150 <= len(p) <= 200 + 8192 // 60  # a sample and the newest lines
    assert p.times is not None and p.times[-1] == lines[-1]["time"]
    staged = RunStore(vocab_size=50)
    staged.apply(first)
    rest = read_all(src, staged)
    assert [len(e) for e in rest if isinstance(e, ScalarBatch) and e.preview] == [0]
    assert src.skipped == 0
    key = plain.runs()[0].key
    assert key == p.run.key
    assert_same_run(staged.snapshot(key), plain.snapshot(key))


def test_sample_lines_picks_whole_lines_spread_over_the_file(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %06d %s\n" % (i, b"x" * (i % 37)) for i in range(20000))
                     + b"half a line")
    size = path.stat().st_size
    got = sample_lines(path, 0, size, count=100, tail_bytes=2000)
    numbers = [int(x.split()[1]) for x in got.lines]
    assert len(numbers) == 100 and numbers == sorted(numbers) and numbers[0] == 0
    assert all(b - a > 150 for a, b in itertools.pairwise(numbers))
    assert got.tail[-1].startswith(b"line 019999") and got.tail_end == size - len(b"half a line")
    assert all(x.startswith(b"line ") for x in got.tail + got.lines + got.head)


# -- a Trackio server: a strided pass over query_project ----------------------------


def test_remote_preview_is_a_strided_pass_then_the_exact_history(store_dir, small_preview):
    from tests.fakes.trackio_server import TrackioServer

    with TrackioServer(store_dir) as srv:
        plain_src = tr.TrackioRemoteSource(srv.url, project="proj")
        plain = RunStore(vocab_size=50)
        read_all(plain_src, plain)
        src = tr.TrackioRemoteSource(srv.url, project="proj")
        src.preview = True
        first = src.poll()
        asked = src.requests
        (p,) = [e for e in first if isinstance(e, ScalarBatch)]
        assert p.preview and int(p.steps[-1]) == N - 1 and int(p.steps[0]) == 0
        assert 150 + 250 <= len(p) <= 150 + 330
        assert asked <= 5  # columns, newest id, the sample, the tail (no page of history)
        staged = RunStore(vocab_size=50)
        staged.apply(first)
        assert staged.snapshot(p.run.key).provisional
        rest = read_all(src, staged)
        assert [len(e) for e in rest if isinstance(e, ScalarBatch) and e.preview] == [0]
        assert src.skipped == plain_src.skipped
        assert_same_run(staged.snapshot(p.run.key), plain.snapshot(p.run.key))
        src.close()
        plain_src.close()


def test_a_remote_project_of_many_runs_previews_each_runs_newest_rows(sweep_dir,
                                                                     small_preview,
                                                                     monkeypatch):
    """Against a real Trackio server: the first poll holds each run's newest rows too (one
    query, by the server's (run, timestamp) index), so each run's row is exact at once."""
    from carl_tui.store.fleet import fleet_rows
    from tests.fakes.trackio_server import TrackioServer

    with TrackioServer(sweep_dir) as srv:
        plain_src = tr.TrackioRemoteSource(srv.url, project="sweep")
        plain = RunStore()
        read_all(plain_src, plain)
        final = {r.run.name: r for r in fleet_rows(plain, now=0.0)}
        src = tr.TrackioRemoteSource(srv.url, project="sweep")
        src.preview = True
        first = src.poll()
        newest = [e for e in first if isinstance(e, ScalarBatch) and e.tail]
        assert sorted(b.run.name for b in newest) == [f"sweep-{i}" for i in range(4)]
        assert all(b.preview for b in newest)
        store = RunStore()
        store.apply(first)
        rows = fleet_rows(store, now=0.0)
        assert [r.run.name for r in rows] == list(final)
        for r in rows:
            done = final[r.run.name]
            assert r.provisional and r.newest_read
            assert (r.last_step, r.task_last, r.loss, r.updated_at) == \
                (done.last_step, done.task_last, done.loss, done.updated_at)
        read_all(src, store)
        for ref in plain.runs():
            assert_same_run(store.snapshot(ref.key), plain.snapshot(ref.key))
        src.close()
        plain_src.close()
        # a server whose database cannot answer that query: the preview goes without
        from carl_tui.sources.trackio import remote_preview

        monkeypatch.setattr(remote_preview, "_newest_rows_sql",
                            lambda remote, top: "SELECT no_such_column FROM metrics")
        src = tr.TrackioRemoteSource(srv.url, project="sweep")
        src.preview = True
        first = [e for e in src.poll() if isinstance(e, ScalarBatch)]
        assert first and all(b.preview and not b.tail for b in first)
        src.close()


def test_a_preview_too_thin_for_a_phase_tells_none_and_the_fleet_row_says_so():
    """The preview of a big project samples a run or two values at a time: from those its
    classifier says "baseline" of any run, so no phase is told until the history is read;
    a preview with enough of a run tells its phase, marked as the preview's."""
    from carl_tui.store.fleet import fleet_row
    from carl_tui.ui.fleet_columns import base_columns

    traj = sft_story(length=3000, seed=7)
    rows = traj.rows()
    cells = {c.key: c for c in base_columns()}

    def previewed(sample):
        store = RunStore()
        ref = RunRef("test", "p", "r", "r")
        b = ScalarBatch.from_rows(ref, sample)
        store.apply([ScalarBatch(ref, b.steps, b.columns, preview=True)])
        snap = store.snapshot(ref.key)
        row = fleet_row(snap, now=0.0)
        return snap, row, {k: str(c.cell(row, 0.0, {})) for k, c in cells.items()}

    snap, row, text = previewed([rows[1500], rows[-1]])  # two values of the run
    assert snap.phase.provisional and snap.phase.phase == "" and not snap.phase.history
    assert row.provisional and row.phase is None
    assert text["phase"] == "reading history"
    # the numbers are the preview's too: its newest value of a run need not be the run's
    assert all(text[k].startswith("≈") for k in ("step", "task", "best", "loss"))
    final = RunStore()
    for b in _batches(rows, RunRef("test", "p", "r", "r"), 1000):
        final.apply([b])
    done = fleet_row(final.snapshot("test:p:r"), now=0.0)
    assert not done.provisional and done.phase == "converged"
    snap, row, text = previewed(rows[0:2800:25] + rows[2800:])  # 312 values: enough
    assert snap.phase.phase and row.phase == snap.phase.phase
    assert text["phase"] == f"≈ {row.phase} · {row.stage}"


# -- on screen ------------------------------------------------------------------------


def _panel_text(panel, snap) -> str:
    from rich.console import Console

    console = Console(width=100, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(panel._render_snapshot(snap))
    return console.export_text()


async def test_the_dashboard_marks_provisional_values_until_the_history_is_read():
    from carl_tui.ui.app import DashboardConfig, Services, build_app

    traj = sft_story(length=3000, seed=11)
    rows = traj.rows()
    ref = RunRef("test", "p", "r3", "screen-run")
    store = RunStore()
    sample = ScalarBatch.from_rows(ref, rows[0:2800:25] + rows[2800:])
    store.apply([ScalarBatch(ref, sample.steps, sample.columns, preview=True)])
    app = build_app(DashboardConfig(sources=[], store=store, services=Services(clock=lambda: 0.0)))
    async with app.run_test(size=(160, 45)) as pilot:
        app.follow(ref.key)
        table, panel = app.dashboard.table, app.dashboard.phase
        await wait_for(pilot, lambda: "mean_token_accuracy" in [k.value for k in table.rows],
                       timeout=10, what="the accuracy row, from the preview")
        acc_row = table.get_row("mean_token_accuracy")
        assert str(acc_row[3]).startswith("≈") and str(acc_row[4]).startswith("≈")
        assert str(acc_row[5]) == str(int(traj.steps[-1]))  # the newest step, at once
        assert not str(acc_row[1]).startswith("≈")  # the latest value is exact
        text = _panel_text(panel, app.snapshot)
        assert "provisional: history 0% read" in text
        assert "≈ CRYSTALLISED at step" in text or "≈ not fired" in text
        for b in _batches(rows, ref, 1000):
            store.apply([b])
        store.apply([ScalarBatch(ref, np.empty(0, dtype=np.int64), {}, preview=True)])
        app.pull()
        await wait_for(pilot, lambda: app.snapshot is not None and not app.snapshot.provisional
                       and "≈" not in str(table.get_row("mean_token_accuracy")[3]),
                       timeout=10, what="the exact values, once the history is read")
        acc_row = table.get_row("mean_token_accuracy")
        assert not any("≈" in str(c) for c in acc_row)
        text = _panel_text(panel, app.snapshot)
        assert "provisional" not in text and "≈" not in text
        assert "CRYSTALLISED at step" in text
        await pilot.press("q")


def test_a_helper_that_dies_midway_costs_nothing(store_dir, monkeypatch):
    from carl_tui.sources.trackio import local_read as trackio_read

    monkeypatch.setattr(tl, "HELPER_MIN_ROWS", 1000)
    monkeypatch.setattr(tl, "HELPER_BLOCK_ROWS", 500)
    plain_src = tl.TrackioLocalSource("proj", root=store_dir)
    plain_src.helpers = 0
    plain = RunStore(vocab_size=50)
    read_all(plain_src, plain)
    answered = []
    real_answer = trackio_read._Worker.answer

    def dies_after_three(self):
        answered.append(1)
        if len(answered) > 3:
            self.proc.kill()  # the helper is gone: what it had not answered is read here
        return real_answer(self)

    monkeypatch.setattr(trackio_read._Worker, "answer", dies_after_three)
    src = tl.TrackioLocalSource("proj", root=store_dir)
    src.helpers = 2
    store = RunStore(vocab_size=50)
    events = read_all(src, store)
    sizes = [len(e) for e in events if isinstance(e, ScalarBatch)]
    assert sizes[:3] == [500, 500, 500] and sum(sizes) == N and max(sizes) > 500
    key = plain.runs()[0].key
    assert_same_run(store.snapshot(key), plain.snapshot(key))


def test_closing_the_source_ends_its_helpers(store_dir, monkeypatch):
    monkeypatch.setattr(tl, "HELPER_MIN_ROWS", 1000)
    monkeypatch.setattr(tl, "HELPER_BLOCK_ROWS", 500)
    src = tl.TrackioLocalSource("proj", root=store_dir)
    src.helpers = 2
    got = src.poll()
    assert sum(len(e) for e in got if isinstance(e, ScalarBatch)) == 500
    procs = [w.proc for w in src._reader._workers]
    assert len(procs) == 2 and all(p.poll() is None for p in procs)
    src.close()
    assert all(p.poll() is not None for p in procs)

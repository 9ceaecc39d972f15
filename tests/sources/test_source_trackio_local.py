"""TrackioLocalSource against databases written by real `trackio.log` calls."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trackio")

from carl_tui.events import RunMeta, ScalarBatch
from carl_tui.sources.base import SourceError
from carl_tui.sources.trackio import db
from carl_tui.sources.trackio import local as tl

WRITER = textwrap.dedent(
    """
    import json, sys, time
    import trackio
    plan = json.loads(sys.argv[1])
    for run in plan:
        trackio.init(project=run["project"], name=run["name"], config=run.get("config"))
        for row in run["rows"]:
            trackio.log(row)
            if run.get("sleep"):
                time.sleep(run["sleep"])
        trackio.finish()
    """
)


def trackio_write(root, plan, *, wait=True):
    """Run a separate Python process that logs `plan` with trackio into `root`."""
    env = {**os.environ, "TRACKIO_DIR": str(root), "HF_HUB_OFFLINE": "1"}
    # trackio writes NaN/Infinity floats; JSON-encode them as strings the writer converts.
    script = WRITER.replace(
        "trackio.log(row)",
        "trackio.log({k: (float(v[1:]) if isinstance(v, str) and v[:1] == '~' else v)"
        " for k, v in row.items()})",
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(plan)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if wait:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    return proc


def drain(src):
    events = []
    while True:
        new = src.poll()
        events += new
        if not new:
            return events


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("trackio")
    plan = [
        {
            "project": "proj",
            "name": "sft",
            "config": {"lr": 0.1, "model": "tiny"},
            "rows": [
                {"train/loss": 1.0 / (i + 1), "train/entropy": 2.0 - i / 10,
                 "train/global_step": 2 * i, "train/flag": True,
                 "train/bad": "~nan" if i == 1 else 0.5}
                for i in range(6)
            ],
        },
        # Same name again: a different run, keyed by its own run_id.
        {"project": "proj", "name": "sft",
         "rows": [{"loss": 3.0}, {"loss": "~inf"}, {"loss": 4.0}]},
        {"project": "other project!", "name": "x", "rows": [{"reward": 0.5}]},
    ]
    trackio_write(root, plan)
    return root


def test_reads_runs_steps_values_and_config(store):
    src = tl.TrackioLocalSource("proj", root=store)
    events = drain(src)
    metas = [e for e in events if isinstance(e, RunMeta)]
    batches = [e for e in events if isinstance(e, ScalarBatch)]
    assert len({b.run.run_id for b in batches}) == 2
    assert {b.run.name for b in batches} == {"sft"}
    first, second = batches
    assert first.run.source == "trackio" and first.run.project == "proj"
    # Trainer runs: the x axis is train/global_step, not Trackio's step.
    assert first.steps.tolist() == [0, 2, 4, 6, 8, 10]
    np.testing.assert_allclose(first.columns["loss"], [1 / (i + 1) for i in range(6)])
    np.testing.assert_allclose(first.columns["entropy"], [2.0 - i / 10 for i in range(6)])
    np.testing.assert_array_equal(first.columns["bad"], [0.5, np.nan, 0.5, 0.5, 0.5, 0.5])
    assert "flag" not in first.columns  # booleans are not numbers
    # Without train/global_step: Trackio's own step.
    assert second.steps.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(second.columns["loss"], [3.0, np.nan, 4.0])
    assert src.skipped == 6 + 1 + 1  # six booleans, "NaN", "Infinity"
    assert first.wall_time is not None and abs(first.wall_time - time.time()) < 600
    config = {m.run.run_id: m.meta["config"] for m in metas}
    assert config[first.run.run_id]["lr"] == 0.1 and config[first.run.run_id]["model"] == "tiny"
    assert src.poll() == []


def test_runs_filter_and_helpers(store, monkeypatch):
    runs = tl.list_runs("proj", store)
    assert [r.name for r in runs] == ["sft", "sft"] and runs[0].run_id != runs[1].run_id
    assert (runs[0].rows, runs[0].last_step) == (3, 2)
    assert (runs[1].rows, runs[1].last_step) == (6, 10)  # train/global_step of the last row
    only = tl.TrackioLocalSource("proj", root=store, runs=[runs[1].run_id])
    got = {e.run.run_id for e in drain(only) if isinstance(e, ScalarBatch)}
    assert got == {runs[1].run_id}
    names = {p.name for p in db.list_projects(store)}
    assert names == {"proj", "otherproject"}
    assert db.db_path("other project!", store).exists()
    assert db.most_recent(store) == ("otherproject", tl.list_runs("otherproject", store)[0].run_id)
    monkeypatch.setenv("TRACKIO_DIR", str(store))
    assert db.trackio_dir() == store
    monkeypatch.delenv("TRACKIO_DIR")
    monkeypatch.setenv("HF_HOME", "/x/hf")
    assert str(db.trackio_dir()) == "/x/hf/trackio"


def test_live_writer_every_point_once_in_order(tmp_path):
    n = 120
    rows = [{"train/loss": 1.0 + i, "train/global_step": i} for i in range(n)]
    proc = trackio_write(
        tmp_path, [{"project": "live", "name": "run", "rows": rows, "sleep": 0.01}], wait=False
    )
    src = tl.TrackioLocalSource("live", root=tmp_path, interval=0.05)
    events, deadline, polls_with_data = [], time.time() + 90, 0
    while proc.poll() is None and time.time() < deadline:
        try:
            new = src.poll()
        except SourceError:  # the database does not exist yet
            new = []
        polls_with_data += bool(new)
        events += new
        time.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read().decode()
    events += drain(src)
    batches = [e for e in events if isinstance(e, ScalarBatch)]
    steps = np.concatenate([b.steps for b in batches]).tolist()
    loss = np.concatenate([b.columns["loss"] for b in batches]).tolist()
    assert steps == list(range(n))
    assert loss == [1.0 + i for i in range(n)]
    assert polls_with_data >= 2  # it really read while the writer was writing


def test_old_schema_without_run_id_and_missing_db(tmp_path):
    with pytest.raises(SourceError, match="waiting for"):
        tl.TrackioLocalSource("nope", root=tmp_path).poll()
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp TEXT, "
        "run_name TEXT, step INTEGER, metrics TEXT)"
    )
    conn.executemany(
        "INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES (?, ?, ?, ?)",
        [("2025-01-01T00:00:00", "a", i, json.dumps({"loss": i})) for i in range(3)]
        + [("2025-01-01T00:00:01", "b", 0, "{broken")],
    )
    conn.commit()
    conn.close()
    src = tl.TrackioLocalSource("old", root=tmp_path)
    (batch,) = [e for e in src.poll() if isinstance(e, ScalarBatch)]
    assert (batch.run.run_id, batch.steps.tolist()) == ("a", [0, 1, 2])
    assert src.skipped == 1 and "keyed by name" in src.limitation
    assert tl.list_runs("old", tmp_path)[0].run_id == "b"


def test_locked_database_retries_then_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "BUSY_SLEEP_S", 0.001)
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.01)
    path = tmp_path / "locked.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode = DELETE")
    writer.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, "
        "timestamp TEXT, run_name TEXT, step INTEGER, metrics TEXT)"
    )
    insert = "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES (?,?,?,?,?)"
    writer.execute(insert, ("r", "2025-01-01T00:00:00", "n", 0, '{"loss": 1}'))
    src = tl.TrackioLocalSource("locked", root=tmp_path)
    src._open()
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute(insert, ("r", "2025-01-01T00:00:01", "n", 1, '{"loss": 2}'))
    with pytest.raises(SourceError, match="locked"):
        src.poll()
    assert src.last_id == 0
    writer.execute("COMMIT")
    (batch,) = [e for e in src.poll() if isinstance(e, ScalarBatch)]
    assert batch.steps.tolist() == [0, 1] and batch.columns["loss"].tolist() == [1.0, 2.0]


def test_media_are_counted_apart_and_a_nan_loss_raises_the_alert(tmp_path):
    """A real trackio writer logs a Table (valid, not plotted) and a NaN loss (trackio
    stores "NaN"): the table is noted, the NaN skipped and counted, and the store alerts."""
    from carl_tui.store import RunStore

    code = (
        "import trackio\n"
        "trackio.init(project='media', name='r', embed=False, auto_log_cpu=False,"
        " auto_log_gpu=False)\n"
        "t = trackio.Table(data=[[1, 2]], columns=['a', 'b'])\n"
        "trackio.log({'train/loss': 0.52, 'train/global_step': 10, 'samples': t})\n"
        "trackio.log({'train/loss': float('nan'), 'train/global_step': 20})\n"
        "trackio.log({'train/loss': 0.47, 'train/global_step': 30})\n"
        "trackio.finish()\n"
    )
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                   timeout=120)
    src = tl.TrackioLocalSource("media", root=tmp_path)
    store = RunStore()
    store.apply(src.poll())
    assert dict(src.unused_input.notes()) == {"table": 1}
    assert [(r.reason, r.count) for r in src.unused_input.reasons()] == [
        ("value not a finite number", 1)]
    snap = store.snapshot(store.runs()[0].key)
    assert snap.series["loss"].count == 2
    assert [(e.kind, e.step) for e in snap.events] == [("nan_loss", 20)]


ODD_WRITER = textwrap.dedent(
    """
    import math, sys
    from trackio.sqlite_storage import SQLiteStorage

    def row(run, i):
        r = {"train/loss": 2.0 / (i + 1) + run, "train/entropy": 1.5 - i / 400,
             "train/mean_token_accuracy": min(1.0, 0.3 + i / 250), "train/global_step": i}
        odd = {7: {"train/loss": float("nan")}, 11: {"train/entropy": "high"},
               13: {"train/grad_norm": {"inner": 1.0}}, 17: {"train/flag": True},
               19: {"train/mean_token_accuracy": float("inf")}, 23: {"train/reward": None},
               29: {"chart": {"_type": "trackio.image", "file_path": "x.png"}}}
        r.update(odd.get(i % 31, {}))
        if i % 37 == 5:
            del r["train/entropy"]  # a missing key
        if i % 41 == 3:
            r = {"eval/loss": 0.5 + run, "train/global_step": i}  # another key set
        return r

    # Three runs written in turns of a few rows (40, 47, 54): each run's rows come in
    # stretches that other runs' rows interrupt, as parallel jobs write one project.
    done = [0, 0, 0]
    while min(done) < 300:
        for run in range(3):
            part = [row(run, i) for i in range(done[run], min(300, done[run] + 40 + 7 * run))]
            if not part:
                continue
            SQLiteStorage.bulk_log(
                "odd", f"run-{run}", part, steps=[r["train/global_step"] for r in part],
                timestamps=[f"2025-11-01T08:{run:02d}:{(done[run] + k) % 60:02d}+00:00"
                            for k in range(len(part))],
                config={"seed": run} if done[run] == 0 else None, run_id=f"run-{run}-id")
            done[run] += len(part)
    """
)


def _same_events(a: list, b: list) -> None:
    """Two reads' events, one by one: the same runs, rows, values, times and skips."""
    assert [type(e) for e in a] == [type(e) for e in b]
    for x, y in zip(a, b):
        assert x.run == y.run
        if isinstance(x, RunMeta):
            assert x.meta == y.meta
            continue
        np.testing.assert_array_equal(x.steps, y.steps)
        assert sorted(x.columns) == sorted(y.columns)
        for name, values in x.columns.items():
            np.testing.assert_array_equal(values, y.columns[name], err_msg=name)
        assert (x.wall_time, x.nonfinite, x.preview) == (y.wall_time, y.nonfinite, y.preview)


def test_helpers_read_a_project_of_odd_interleaved_runs_as_one_process_does(
        tmp_path, monkeypatch):
    """Helper processes read ranges of a project whose runs interleave, with odd values
    (NaN, infinities, strings, nested dicts, booleans, nulls, media, missing keys, rows
    of another key set): the same events (rows, values, skips, names, times) as a read
    in one process by batches of the same size, and the same store (values, steps, gate,
    phases, alerts)."""
    from carl_tui.store import RunStore
    from tests.store.test_preview import assert_same_run

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACKIO_")}
    env.update(TRACKIO_DIR=str(tmp_path), HF_HUB_OFFLINE="1")
    subprocess.run([sys.executable, "-c", ODD_WRITER], env=env, check=True, timeout=120)
    monkeypatch.setattr(tl, "HELPER_MIN_ROWS", 100)
    monkeypatch.setattr(tl, "HELPER_BLOCK_ROWS", 37)  # ranges cut runs and hold several
    reads = []
    for helpers in (0, 2):
        src = tl.TrackioLocalSource("odd", root=tmp_path, batch_rows=37)
        src.helpers = helpers
        store = RunStore()
        events = drain(src)
        store.apply(events)
        reads.append((src, store, events))
        assert (src._reader is None) and (src._helped.tried == (helpers > 0))
        src.close()
    (plain, plain_store, plain_events), (helped, helped_store, helped_events) = reads
    batches = [e for e in helped_events if isinstance(e, ScalarBatch)]
    assert sum(map(len, batches)) == 900 and len({len(b) for b in batches}) > 2
    assert {b.run.name for b in batches} == {"run-0", "run-1", "run-2"}
    _same_events(plain_events, helped_events)
    assert plain.unused_input.reasons() == helped.unused_input.reasons() and plain.skipped > 0
    assert plain.unused_input.notes() == helped.unused_input.notes() == (("image", 3 * 9),)
    assert plain_store.runs() == helped_store.runs() and len(plain_store.runs()) == 3
    for ref in plain_store.runs():
        a, b = helped_store.snapshot(ref.key), plain_store.snapshot(ref.key)
        assert_same_run(a, b)
        assert a.events == b.events and any(e.kind == "nan_loss" for e in a.events)
        # 24 rows without an entropy: 10 strings, 8 missing, 8 of another key set (2 both)
        assert a.series["entropy"].count == 300 - 24


def test_rows_come_in_one_value_as_a_plain_fetch_gives_them(store):
    """`db.fetch_all`: one statement, whose one row holds every row (read row by row, a
    reading thread waits for the interpreter's lock at every row while the screen's
    thread is busy); the same rows, values and order as a plain fetch, BLOBs as text."""
    conn = db.connect(db.db_path("proj", store))
    cols = ["m.id", "m.run_id", "m.step", "m.metrics", "m.run_name", "m.timestamp"]
    rest = "FROM metrics AS m WHERE m.id > ? ORDER BY m.id DESC"
    plain = conn.execute(f"SELECT {', '.join(cols)} {rest}", (1,)).fetchall()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    got = db.fetch_all(conn, cols, rest, (1,))
    conn.set_trace_callback(None)
    assert len(got) == len(plain) >= 8
    want = sorted(tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in plain)
    assert got == want  # in id order, whatever the statement's order
    assert [type(v) for v in got[0]] == [int, str, int, str, str, str]
    assert len(statements) == 1 and "json_group_array" in statements[0]


def test_a_row_that_is_not_utf8_is_skipped_and_counted_the_others_read(tmp_path):
    """A BLOB that is not UTF-8 cannot be read as one JSON value: the rows are fetched one
    by one then, and that row is skipped and counted like any row that is not JSON."""
    conn = sqlite3.connect(tmp_path / "odd.db")
    conn.execute("CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, "
                 "timestamp TEXT, run_name TEXT, step INTEGER, metrics BLOB)")
    rows = [json.dumps({"loss": 1.0 / (i + 1)}).encode() for i in range(4)]
    rows[2] = b'{"loss": "\xff\xfe"}'
    conn.executemany("INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) "
                     "VALUES ('r', '2025-01-01T00:00:00', 'n', ?, ?)", list(enumerate(rows)))
    conn.commit()
    conn.close()
    src = tl.TrackioLocalSource("odd", root=tmp_path)
    (batch,) = [e for e in src.poll() if isinstance(e, ScalarBatch)]
    assert batch.steps.tolist() == [0, 1, 3]
    assert batch.columns["loss"].tolist() == [1.0, 0.5, 0.25]
    assert src.skipped == 1


def test_helpers_answer_through_a_pipe_of_a_megabyte():
    """A helper's answer (a range's columns, about a megabyte) comes in one or two reads,
    not sixteen: each read has the reading thread wait for the interpreter's lock."""
    fcntl = pytest.importorskip("fcntl")
    from carl_tui.sources.trackio import local_read

    limit = Path("/proc/sys/fs/pipe-max-size")
    if not hasattr(fcntl, "F_GETPIPE_SZ") or not limit.exists():
        pytest.skip("no pipe sizes on this system")
    if int(limit.read_text()) < local_read.PIPE_BYTES:
        pytest.skip("this system keeps pipes smaller")

    worker = local_read._Worker()
    try:
        size = fcntl.fcntl(worker.proc.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    finally:
        worker.close()
    assert size == local_read.PIPE_BYTES

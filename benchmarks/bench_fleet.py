"""The fleet of a big Trackio project: 1,000 runs x 2,000 steps, written by trackio's own
`bulk_log` (a sweep: learning rate and seed vary, TRL-like rows, one every 0.5 s).

    python -m benchmarks fleet            (CARL_BENCH_FLEET=RUNSxSTEPS for another size)

Ours: what `carl-tui fleet --json` does (`collect` from TrackioLocalSource, then
`fleet_rows` and the JSON), in a process of its own: the time until every row has its
phase, and the process's peak resident memory (its reading helpers' peak apart).
Reference, in the same run: Trackio's own reader, `SQLiteStorage.get_logs` for every run
(what a dashboard that re-reads each run's whole history does on every tick), in a
process of its own, on one run in REF_EVERY, scaled to every run (peak memory: of
those runs). Then the cost of a poll of the unchanged store (the issue: one cheap
query), against the first full read; and, in a copy of the store, the poll after trackio
appended APPEND_ROWS rows to one run (the issue: reading those rows, not the project):
its time, SQL statements and rows read, against that copy's first full read.

The store is kept between runs in the benchmarks' cache folder (writing it takes
minutes).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row
from benchmarks.trl_store import cache_root, rows, trackio_env, write_trackio_once

PROJECT = "fleet"
VERSION = 1  # bump when the shape changes (cached stores are rewritten)
REF_EVERY = 10  # the reference reads one run in 10 (all 1,000 took over 15 minutes)


def size() -> tuple[int, int]:
    runs, _, steps = (os.environ.get("CARL_BENCH_FLEET") or "1000x2000").partition("x")
    return int(runs), int(steps)


def run_name(i: int) -> str:
    return f"sweep-{i:04d}"


def write(root: Path, runs: int, steps: int) -> None:
    """Write the project (call in a process whose TRACKIO_DIR is `root`)."""
    from datetime import datetime, timedelta, timezone

    from trackio.sqlite_storage import SQLiteStorage

    t0 = datetime(2025, 11, 1, 8, 0, tzinfo=timezone.utc)
    lrs = (1e-5, 2e-5, 5e-5, 1e-4)
    for i in range(runs):
        start = t0 + timedelta(minutes=7 * i)
        SQLiteStorage.bulk_log(
            PROJECT, run_name(i), rows(0, steps, steps, seed=i),
            steps=list(range(steps)),
            timestamps=[(start + timedelta(seconds=0.5 * k)).isoformat() for k in range(steps)],
            config={"model": "Qwen/Qwen2.5-0.5B", "learning_rate": lrs[i % 4], "seed": i // 4,
                    "output_dir": f"out/{run_name(i)}"},
            run_id=f"{run_name(i)}-id",
        )


def ensure_store(runs: int, steps: int) -> Path:
    """The Trackio folder holding `fleet.db`, written once and kept."""
    root = cache_root() / f"fleet-v{VERSION}-{runs}x{steps}"
    write_trackio_once(root, PROJECT, root / "done",
                       ["benchmarks.bench_fleet", "write", str(root), str(runs), str(steps)])
    return root


def _ours(root: str) -> dict:
    """In its own process: read the project as `fleet --json` does; how long, how much."""
    import resource

    from carl_tui.report.collect import collect
    from carl_tui.report.fleet_listing import fleet_dict
    from carl_tui.sources.trackio.local import TrackioLocalSource
    from carl_tui.store import RunStore
    from carl_tui.store.fleet import FLEET_STORE, fleet_rows

    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0, cpu0 = time.perf_counter(), cpu_seconds()
    src = TrackioLocalSource(PROJECT, root=Path(root))
    store = RunStore(**FLEET_STORE)
    collect([src], store, patient=False, timeout=600)
    rows = fleet_rows(store)
    text = json.dumps([fleet_dict(r) for r in rows], default=str)
    took, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    src2 = TrackioLocalSource(PROJECT, root=Path(root))  # collect closed the first one
    src2.helpers = 0
    read_t0 = time.perf_counter()
    while src2.poll():
        pass
    first_read = time.perf_counter() - read_t0
    q0 = src2.queries
    p0 = time.perf_counter()
    polls = 20
    for _ in range(polls):
        assert src2.poll() == []
    poll_s = (time.perf_counter() - p0) / polls
    return {
        "seconds": took, "cpu_s": cpu, "rows": len(rows),
        "phases": sum(r.phase is not None for r in rows), "bytes": len(text), "base_mb": base_mb,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "helpers_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "first_read_s": first_read, "poll_s": poll_s, "poll_queries": (src2.queries - q0) / polls,
    }


APPEND_ROWS = 10


def _appended(root: str) -> dict:
    """In its own process, on a copy of the store: read it whole (the reference), then
    trackio appends APPEND_ROWS rows to one run; what the next poll costs: its time, its
    statements and the rows it read."""
    from carl_tui.events import ScalarBatch
    from carl_tui.sources.trackio.local import TrackioLocalSource

    src = TrackioLocalSource(PROJECT, root=Path(root))
    t0 = time.perf_counter()
    while src.poll():
        pass
    first_read, first_queries = time.perf_counter() - t0, src.queries
    runs, steps = size()
    subprocess.run([sys.executable, "-m", "benchmarks.bench_fleet", "append", root, str(runs),
                    str(steps)], env=trackio_env(root), check=True)
    statements: list[str] = []
    src._conn.set_trace_callback(statements.append)
    q0, t0 = src.queries, time.perf_counter()
    events = src.poll()
    took = time.perf_counter() - t0
    src.close()
    batches = [e for e in events if isinstance(e, ScalarBatch)]
    return {"first_read_s": first_read, "first_read_queries": first_queries,
            "append_s": took, "append_queries": src.queries - q0,
            "append_statements": len(statements),
            "append_rows": sum(len(b) for b in batches),
            "append_runs": len({b.run.key for b in batches})}


def append(runs: int, steps: int) -> None:
    """Trackio appends APPEND_ROWS steps to the middle run (TRACKIO_DIR is the store)."""
    from datetime import datetime, timedelta, timezone

    from trackio.sqlite_storage import SQLiteStorage

    i = runs // 2
    t0 = datetime(2025, 11, 2, 8, 0, tzinfo=timezone.utc)
    SQLiteStorage.bulk_log(
        PROJECT, run_name(i), rows(steps, steps + APPEND_ROWS, steps, seed=i),
        steps=list(range(steps, steps + APPEND_ROWS)),
        timestamps=[(t0 + timedelta(seconds=0.5 * k)).isoformat() for k in range(APPEND_ROWS)],
        run_id=f"{run_name(i)}-id",
    )


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the reading helpers)."""
    import resource

    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                 resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _trackio(root: str, runs: int) -> dict:
    """In its own process (TRACKIO_DIR=root): Trackio's own reader, each run's history, on
    every REF_EVERY-th run (its cost is linear in the runs read), scaled to every run."""
    import resource

    from trackio.sqlite_storage import SQLiteStorage

    sample = range(0, runs, REF_EVERY)
    t0 = time.perf_counter()
    n = sum(len(SQLiteStorage.get_logs(PROJECT, run_name(i))) for i in sample)
    took = time.perf_counter() - t0
    return {"seconds": took * runs / len(sample), "logs": n, "sampled": len(sample),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _in_process(what: str, root: Path, runs: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_fleet", what, str(root),
                          str(runs)], env=trackio_env(root), check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> list[Row]:
    runs, steps = size()
    root = ensure_store(runs, steps)
    ours = _in_process("ours", root, runs)
    ref = _in_process("trackio", root, runs)
    # Trackio appends rows to a copy (the cached store stays as written).
    with tempfile.TemporaryDirectory(prefix="carl-fleet-") as tmp:
        shutil.copyfile(root / f"{PROJECT}.db", Path(tmp) / f"{PROJECT}.db")
        appended = _in_process("appended", Path(tmp), runs)
    label = f"fleet: {runs} Trackio runs x {steps} steps"
    assert ours["rows"] == runs and appended["append_rows"] == APPEND_ROWS, (ours, appended)
    return [
        Row(f"{label}, every row's phase", ours["seconds"], ref["seconds"], "s",
            "<= 10 s", f"{ours['phases']}/{ours['rows']} phases, {ours['cpu_s']:.1f} CPU s; "
            "ref: trackio get_logs "
            f"of {ref['sampled']} runs, x{runs / ref['sampled']:.0f}"),
        Row(f"{label}, peak memory", ours["peak_mb"], ref["peak_mb"], "MB", "< 300 MB",
            f"maxrss; {ours['base_mb']:.0f} MB before reading; helper processes "
            f"{ours['helpers_peak_mb']:.0f} MB each at most"),
        Row(f"{label}, poll of the unchanged store", ours["poll_s"], ours["first_read_s"],
            "s", "one cheap query", f"{ours['poll_queries']:.0f} table queries a poll "
            "(PRAGMA data_version only); ref: the first full read"),
        Row(f"{label}, poll after {APPEND_ROWS} new rows in one run", appended["append_s"],
            appended["first_read_s"], "s", "reads those rows only",
            f"{appended['append_rows']} rows of {appended['append_runs']} run read, "
            f"{appended['append_statements']} SQL statements; ref: the first full read "
            f"({runs * steps} rows, {appended['first_read_queries']} table queries)"),
    ]


if __name__ == "__main__":
    what, where = sys.argv[1], sys.argv[2]
    if what == "write":
        write(Path(where), int(sys.argv[3]), int(sys.argv[4]))
    elif what == "ours":
        print(json.dumps(_ours(where)))
    elif what == "appended":
        print(json.dumps(_appended(where)))
    elif what == "append":
        append(int(sys.argv[3]), int(sys.argv[4]))
    else:
        print(json.dumps(_trackio(where, int(sys.argv[3]))))

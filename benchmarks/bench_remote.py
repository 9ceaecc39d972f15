"""Remote Trackio: cost of one poll when 10 new points arrived, and logging-to-source latency.

Against a real Trackio server on 127.0.0.1, with runs of 1,000 and 100,000
steps seeded by real `trackio.log` calls (trackio's own writer is fast enough:
about 100,000 points in a few seconds). A poll that fetches only new rows
must cost about the same for both; the 100,000-step poll may cost at most
2x the 1,000-step one. For comparison, the reference column of the bytes
rows is what re-reading the run with `get_logs` (the fallback for old
servers, down-sampled to 3,000 points) costs per poll.

Latency: a writer process logs a point every 0.37 s carrying its own
`time.time()`; the source runs in its `SourceRunner` at the default local
interval (1 s). Latency is arrival time minus that timestamp; it includes
trackio's client-side batching (it writes every 0.5 s).
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import Row
from carl_tui.events import ScalarBatch
from carl_tui.sources.base import SourceRunner
from carl_tui.sources.trackio.remote import TrackioRemoteSource
from tests.fakes.trackio_server import LiveWriter, TrackioServer, start_writer, wait_writer

SIZES = (1_000, 100_000)
NEW_POINTS = 10
REPEATS = 5


def _point(i: int) -> dict:
    return {
        "loss": 1.0 / (i + 1),
        "reward": i % 7 / 7,
        "entropy": 2.0 - i * 1e-5,
        "train/global_step": i,
    }


def _max_id(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT COALESCE(MAX(id), 0) FROM metrics").fetchone()[0]


def _wait_rows(db: Path, target: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _max_id(db) < target:
        if time.monotonic() > deadline:
            raise RuntimeError("trackio writer did not flush in time")
        time.sleep(0.02)


def _poll_cost(srv: TrackioServer, size: int) -> dict:
    project = f"bench{size}"
    t0 = time.perf_counter()
    wait_writer(start_writer(srv.data_dir, project, "seed", [_point(i) for i in range(size)]), 600)
    seed_s = time.perf_counter() - t0
    db = srv.data_dir / f"{project}.db"
    src = TrackioRemoteSource(srv.url, project=project)
    t0 = time.perf_counter()
    loaded = 0
    while True:
        loaded += sum(len(e) for e in src.poll() if isinstance(e, ScalarBatch))
        if not src.behind:
            break
    load_s = time.perf_counter() - t0
    assert loaded == size, (loaded, size)
    load_bytes = src.bytes_received
    writer = LiveWriter(srv.data_dir, project, "live")
    times, sizes, next_i = [], [], size
    try:
        for _ in range(REPEATS):
            target = _max_id(db) + NEW_POINTS
            writer.log([_point(next_i + k) for k in range(NEW_POINTS)])
            next_i += NEW_POINTS
            _wait_rows(db, target)
            b0 = src.bytes_received
            t = time.perf_counter()
            got = sum(len(e) for e in src.poll() if isinstance(e, ScalarBatch))
            times.append(time.perf_counter() - t)
            sizes.append(src.bytes_received - b0)
            assert got == NEW_POINTS, got
    finally:
        writer.close()
    b0 = src.bytes_received
    src.remote.call("get_logs", project=project, run="seed")
    get_logs_bytes = src.bytes_received - b0
    src.close()
    return {
        "seed_s": seed_s,
        "load_s": load_s,
        "load_bytes": load_bytes,
        "poll_s": statistics.median(times),
        "poll_bytes": statistics.median(sizes),
        "get_logs_bytes": get_logs_bytes,
    }


def _latency(srv: TrackioServer, n: int = 20, gap: float = 0.37) -> tuple[float, float, float]:
    project = "latency"
    wait_writer(start_writer(srv.data_dir, project, "warm", [{"x": 0.0}]))
    arrivals: list[float] = []
    lock = threading.Lock()

    def emit(events):
        now = time.time()
        with lock:
            for e in events:
                if isinstance(e, ScalarBatch) and "t_logged" in e.columns:
                    arrivals.extend(now - float(t) for t in e.columns["t_logged"])

    src = TrackioRemoteSource(srv.url, project=project)
    runner = SourceRunner(src, emit).start()
    time.sleep(1.5)  # first poll done: history loaded
    writer = start_writer(srv.data_dir, project, "live", [{"t_logged": 0.0}] * n, delay=gap)
    wait_writer(writer)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with lock:
            if len(arrivals) >= n:
                break
        time.sleep(0.05)
    runner.stop()
    assert len(arrivals) == n, len(arrivals)
    lat = sorted(arrivals)
    return statistics.median(lat), lat[int(0.9 * (n - 1))], src.interval


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp, TrackioServer(Path(tmp)) as srv:
        costs = {size: _poll_cost(srv, size) for size in SIZES}
        median, p90, interval = _latency(srv)
    small, big = costs[SIZES[0]], costs[SIZES[-1]]
    rows: list[Row] = []
    for size, c in costs.items():
        rows.append(
            Row(
                f"remote trackio: poll time, {NEW_POINTS} new, {size:,}-step run",
                c["poll_s"],
                small["poll_s"] if size != SIZES[0] else None,
                "s",
                "<= 2x the 1,000 poll" if size != SIZES[0] else "",
                f"median of {REPEATS}",
            )
        )
        rows.append(
            Row(
                f"remote trackio: poll bytes, {NEW_POINTS} new, {size:,}-step run",
                c["poll_bytes"],
                c["get_logs_bytes"],
                "B",
                "",
                "reference: re-reading the run with get_logs",
            )
        )
    rows.append(
        Row(
            "remote trackio: 100k/1k poll time ratio",
            big["poll_s"] / small["poll_s"],
            2.0,
            "x",
            "<= 2",
        )
    )
    rows.append(
        Row(
            "remote trackio: 100k/1k poll bytes ratio",
            big["poll_bytes"] / small["poll_bytes"],
            2.0,
            "x",
            "<= 2",
        )
    )
    rows.append(
        Row(
            f"remote trackio: full history load, {SIZES[-1]:,} steps",
            big["load_s"],
            None,
            "s",
            "",
            f"{big['load_bytes'] / 1e6:.1f} MB; seeding by trackio.log took {big['seed_s']:.1f} s",
        )
    )
    rows.append(
        Row(
            "remote trackio: log -> source latency (median)",
            median,
            interval,
            "s",
            "< poll interval",
            f"p90 {p90:.2f} s; includes trackio's 0.5 s client batching",
        )
    )
    return rows


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format())

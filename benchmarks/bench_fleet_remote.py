"""The fleet of a big Trackio project served by a real Trackio server on 127.0.0.1.

    python -m benchmarks fleet_remote     (CARL_BENCH_FLEET_REMOTE=RUNSxSTEPS, default
                                           the local fleet benchmark's 1000x2000)

The project is the local fleet benchmark's (`bench_fleet`: a sweep written by trackio's
`bulk_log`, kept in the benchmarks' cache), copied for a `trackio show` server of its
own. Ours: what `carl-tui fleet --trackio URL --project P --json` does (`collect` from
TrackioRemoteSource into a fleet-sized store, then `fleet_rows`): the time until every
row has its phase, the requests and the bytes received. The remote source pages through
`query_project` by id (`id > N`, 10,000 rows a reply): this Trackio's batch endpoint
(`get_logs_batch`, 64 runs a request) down-samples every run to at most `max_points`
(10,000 at most) and its `get_run_summary` has no values, so neither gives the exact
history that `summary` reads.
Reference, in the same run: Trackio's own batch endpoint pulling every run's logs
(`get_logs_batch`, 64 runs a request, `max_points` = the steps: every row), through
the same HTTP client. Then the polls of the unchanged project: requests and bytes each.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.bench_fleet import PROJECT, ensure_store, run_name
from benchmarks.bench_fleet_table import table_in_process
from benchmarks.common import Row

BATCH_RUNS = 64  # the most runs `get_logs_batch` takes in one request
POLLS = 10


def size() -> tuple[int, int]:
    runs, _, steps = (os.environ.get("CARL_BENCH_FLEET_REMOTE") or "1000x2000").partition("x")
    return int(runs), int(steps)


def _cpu() -> float:
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _ours(url: str) -> dict:
    """`fleet --json` against the server; then POLLS polls of the unchanged project."""
    import json

    from carl_tui.report.collect import collect
    from carl_tui.report.fleet_listing import fleet_dict
    from carl_tui.sources.trackio.remote import TrackioRemoteSource
    from carl_tui.store import RunStore
    from carl_tui.store.fleet import FLEET_STORE, fleet_rows

    src = TrackioRemoteSource(url, project=PROJECT)
    close, src.close = src.close, lambda: None  # kept open for the polls after
    t0, cpu0 = time.perf_counter(), _cpu()
    store = RunStore(**FLEET_STORE)
    collect([src], store, patient=False, timeout=1800)
    rows = fleet_rows(store)
    json.dumps([fleet_dict(r) for r in rows], default=str)
    took, cpu = time.perf_counter() - t0, _cpu() - cpu0
    requests, received = src.requests, src.bytes_received
    p0 = time.perf_counter()
    for _ in range(POLLS):
        assert src.poll() == []
    poll_s = (time.perf_counter() - p0) / POLLS
    out = {"seconds": took, "cpu_s": cpu, "rows": len(rows),
           "phases": sum(r.phase is not None for r in rows), "requests": requests,
           "bytes": received, "poll_s": poll_s,
           "poll_requests": (src.requests - requests) / POLLS,
           "poll_bytes": (src.bytes_received - received) / POLLS}
    close()
    return out


def _reference(url: str, runs: int, steps: int) -> dict:
    """Trackio's batch endpoint: every run's logs, BATCH_RUNS runs a request."""
    from carl_tui.sources.trackio.remote_http import TrackioHttp

    http = TrackioHttp(url, None, 600.0)
    t0, cpu0 = time.perf_counter(), _cpu()
    logs = 0
    try:
        for lo in range(0, runs, BATCH_RUNS):
            batch = [{"run": run_name(i), "run_id": f"{run_name(i)}-id"}
                     for i in range(lo, min(runs, lo + BATCH_RUNS))]
            got = http.call("get_logs_batch", project=PROJECT, runs=batch, max_points=steps)
            logs += sum(len(r.get("logs") or []) for r in got) if isinstance(got, list) else 0
        return {"seconds": time.perf_counter() - t0, "cpu_s": _cpu() - cpu0,
                "requests": http.requests, "bytes": http.bytes_received, "logs": logs}
    finally:
        http.close()


def run() -> list[Row]:
    from tests.fakes.trackio_server import TrackioServer

    runs, steps = size()
    cached = ensure_store(runs, steps)
    label = f"fleet: {runs} runs x {steps} steps on a Trackio server"
    with tempfile.TemporaryDirectory(prefix="carl-fleet-remote-") as tmp:
        shutil.copyfile(cached / f"{PROJECT}.db", Path(tmp) / f"{PROJECT}.db")
        with TrackioServer(Path(tmp)) as srv:
            table = table_in_process(tmp, runs, srv.url)
            ours = _ours(srv.url)
            ref = _reference(srv.url, runs, steps)
    assert ours["rows"] == runs, ours
    mb = 1024 * 1024
    return [
        Row(f"{label}, the fleet table: every run's row on screen", table["rows_s"],
            table["bare_s"], "s", "",
            "from the app's start under Textual's headless driver, its own process (ref: a "
            f"bare app's first frame there); {table['exact_steps']} of {runs} rows show "
            "their step as exact (each run's newest rows previewed)"),
        Row(f"{label}, every row's phase", ours["seconds"], ref["seconds"], "s", "",
            f"{ours['phases']}/{ours['rows']} phases, {ours['requests']} requests, "
            f"{ours['bytes'] / mb:.0f} MB, {ours['cpu_s']:.1f} CPU s here; ref: trackio's "
            f"get_logs_batch of every run ({ref['requests']} requests, "
            f"{ref['bytes'] / mb:.0f} MB, {ref['logs']} rows)"),
        Row(f"{label}, poll of the unchanged project", ours["poll_s"], ours["seconds"], "s",
            "one cheap request", f"{ours['poll_requests']:.0f} requests, "
            f"{ours['poll_bytes']:.0f} bytes a poll; ref: the first full read"),
    ]

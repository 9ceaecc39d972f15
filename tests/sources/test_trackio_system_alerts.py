"""Trackio system metrics and alerts, read by the local and the remote source; a job's
metrics stream as SystemSamples; the store's system state.

Every Trackio database here is written by real trackio in a separate process
(`trackio.log`, `trackio.log_system`, `trackio.log_cpu`, `trackio.alert`, and
trackio's own GPU monitor reading a stand-in NVML, since this machine has no
GPU); the remote source reads them through a real Trackio server on 127.0.0.1.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
import uuid

import numpy as np
import pytest

pytest.importorskip("trackio")
HfApi = pytest.importorskip("huggingface_hub").HfApi

from carl_tui.events import GpuSample, Marker, RunRef, ScalarBatch, SystemSample
from carl_tui.sources.base import SourceError
from carl_tui.sources.hf_jobs import HfJobSource, system_from_sample
from carl_tui.sources.trackio import system_tables as ts
from carl_tui.sources.trackio.local import TrackioLocalSource
from carl_tui.sources.trackio.remote import TrackioRemoteSource
from carl_tui.store import RunStore
from carl_tui.store.system import MAX_GPUS, SystemTrack
from tests.fakes.hub_jobs import JobsState, install_jobs_routes
from tests.fakes.server import FakeServer
from tests.fakes.trackio_server import ActionWriter, TrackioServer, write_fake_nvml

pytestmark = pytest.mark.timeout(120)

X = "train/global_step"
RUN = RunRef("trackio", "p", "r1", "run one")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with TrackioServer(tmp_path_factory.mktemp("trackio-sys")) as srv:
        yield srv


def project_name() -> str:
    return "sys" + uuid.uuid4().hex[:8]


def make_source(kind: str, server: TrackioServer, project: str, **kw):
    if kind == "local":
        return TrackioLocalSource(project, root=server.data_dir, interval=0.0, **kw)
    return TrackioRemoteSource(server.url, project=project, interval=0.0, **kw)


def poll_until(src, events: list, predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            events.extend(src.poll())
        except SourceError:
            pass  # the project appears with the writer's first flush
        if predicate(events):
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not met; {len(events)} events")


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def alerts(events):
    return [e for e in events if isinstance(e, Marker) and e.kind == "alert"]


# -- data shaped like a real run ------------------------------------------------

def gpu_row(rng: np.random.Generator, t: int, *, nan_power: bool = False) -> dict:
    """What trackio's GPU monitor logs for two H100s (keys as trackio/gpu.py writes them)."""
    row: dict = {}
    for i in range(2):
        util = int(np.clip(rng.normal(81 - 27 * i, 9), 0, 100))
        alloc = 31.4 + 0.0137 * t + 6.2 * i + float(rng.normal(0, 0.05))
        row[f"gpu/{i}/utilization"] = util
        row[f"gpu/{i}/memory_utilization"] = int(util * 0.4)
        row[f"gpu/{i}/allocated_memory"] = alloc
        row[f"gpu/{i}/total_memory"] = 79.6468505859375
        row[f"gpu/{i}/memory_usage"] = alloc / 79.6468505859375
        row[f"gpu/{i}/power"] = round(float(rng.normal(410 - 120 * i, 25)), 3)
        row[f"gpu/{i}/power_limit"] = 700.0
        row[f"gpu/{i}/temp"] = int(rng.normal(63, 4))
        row[f"gpu/{i}/sm_clock"] = 1980
    if nan_power:
        row["gpu/1/power"] = math.nan
    row["gpu/mean_utilization"] = (row["gpu/0/utilization"] + row["gpu/1/utilization"]) / 2
    total = row["gpu/0/allocated_memory"] + row["gpu/1/allocated_memory"]
    row["gpu/total_allocated_memory"] = total
    row["gpu/max_temp"] = max(row["gpu/0/temp"], row["gpu/1/temp"])
    return row


def expected_gpus(row: dict) -> tuple[GpuSample, ...]:
    def get(i, k, factor=1.0):
        v = row.get(f"gpu/{i}/{k}")
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v * factor

    return tuple(
        GpuSample(i, get(i, "utilization"), get(i, "allocated_memory", 1024.0),
                  get(i, "total_memory", 1024.0), get(i, "power"), get(i, "temp"))
        for i in range(2)
    )


class TrackioModel:
    """Trackio's step counting, to say where an alert belongs: each `log` without a
    step takes the next step, an explicit step moves the counter past it, and an
    alert takes the highest step so far. The source places it at the x
    (train/global_step, else the step) of the first row at that step, else of the
    newest row below (rows logged after the alert can share its step)."""

    def __init__(self):
        self.next_step = 0
        self.rows: list[tuple[int, int, int]] = []  # (step, order, x)

    def log(self, metrics: dict, step: int | None = None) -> None:
        s = self.next_step if step is None else step
        self.next_step = max(self.next_step, s + 1)
        self.rows.append((s, len(self.rows), int(metrics.get(X, s))))

    def alert_x(self) -> int:
        a = max(self.next_step - 1, 0)
        at = [r for r in self.rows if r[0] == a]
        if at:
            return min(at, key=lambda r: r[1])[2]
        return max((r for r in self.rows if r[0] < a), default=(0, 0, a))[2]


def training_round(rng, model: TrackioModel, start: int, n_steps: int, t0: int):
    """Actions for `n_steps` GRPO-like training steps: a profiling row per step (TRL
    logs them at the trainer's step), a Trainer row every 4th step, system rows and
    an alert now and then; with the system samples and alerts they should give."""
    actions, gpu_rows, want_alerts = [], [], []
    for gs in range(start, start + n_steps):
        prof = {"profiling/Time taken: GRPOTrainer._prepare_inputs": 0.21 + rng.gamma(2, 0.01)}
        actions.append(["log", prof, gs])
        model.log(prof, gs)
        if gs % 4 == 0:
            row = {"loss": 2.3 * math.exp(-gs / 60) + float(rng.normal(0, 0.02)),
                   "reward": 0.1 + 0.8 * (1 - math.exp(-gs / 40)) + float(rng.normal(0, 0.03)),
                   X: gs}
            actions.append(["log", row])
            model.log(row)
        if gs % 3 == 1:
            g = gpu_row(rng, t0 + gs, nan_power=not any(gpu_rows))  # once per round
            actions.append(["system", g])
            gpu_rows.append(g)
        if gs % 5 == 2:
            actions.append(["cpu"])
            gpu_rows.append(None)  # a CPU row: its values come back from the writer
        if gs % 7 == 3:
            level = ("info", "warn", "error")[gs % 3]
            title = f"reward plateau at step {gs}"
            text = f"mean reward {0.1 + gs / 97:.4f} → flat for 12 steps (σ={0.003 + gs / 1e4:.4f})"
            actions.append(["alert", title, text, level])
            want_alerts.append((title, text, level, model.alert_x()))
    return actions, gpu_rows, want_alerts


# -- following a live writer, locally and through the server -------------------

@pytest.mark.parametrize("kind", ["local", "remote"])
def test_system_metrics_and_alerts_followed_live_each_once(server, kind):
    rng = np.random.default_rng(11 if kind == "local" else 12)
    project = project_name()
    model = TrackioModel()
    src = make_source(kind, server, project)
    events: list = []
    rows: list = []
    want: list = []
    with ActionWriter(server.data_dir, project, "grpo-run") as w:
        for r in range(3):
            actions, gpu_rows, want_alerts = training_round(rng, model, 1 + 20 * r, 20, 1000)
            w.do(actions)
            rows += gpu_rows
            want += want_alerts
            n_rows, n_alerts = len(rows), len(want)
            poll_until(src, events, lambda ev, n=n_rows, k=n_alerts:
                       len(of(ev, SystemSample)) >= n and len(alerts(ev)) >= k)
        w.close()
        cpu_logged = w.cpu_logged
    for _ in range(3):  # nothing more comes: every sample and alert arrived once
        events.extend(src.poll())
    src.close()

    samples = of(events, SystemSample)
    assert len(samples) == len(rows) and len(cpu_logged) == rows.count(None) > 0
    cpu_iter = iter(cpu_logged)
    for got, row in zip(samples, rows, strict=True):
        assert got.run.name == "grpo-run" and got.step is None
        assert got.wall_time is not None and abs(got.wall_time - time.time()) < 600
        if row is not None:
            assert got.gpus == expected_gpus(row)
            assert got.cpu_percent is None and got.memory_mb is None
        else:
            cpu = next(cpu_iter)
            assert got.gpus == ()
            assert got.cpu_percent == cpu["cpu/utilization"]
            assert got.memory_mb == cpu["memory/used"] * 1024
            assert got.memory_total_mb == cpu["memory/total"] * 1024
    assert [s.wall_time for s in samples] == sorted(s.wall_time for s in samples)
    # the one NaN power per round is skipped and counted, the rest of its row kept
    assert sum(1 for s in samples if s.gpus and s.gpus[1].power_w is None) == 3
    assert src.skipped == 3

    got_alerts = [(m.detail["title"], m.detail["text"], m.detail["level"], m.step)
                  for m in alerts(events)]
    assert got_alerts == want and len(want) >= 6
    assert all(m.run.name == "grpo-run" for m in alerts(events))
    assert all(isinstance(m.detail["trackio_step"], int) for m in alerts(events))
    assert len({m.detail["trackio_step"] for m in alerts(events)}) == len(want)

    # the store keeps the newest of each part and a series per GPU
    store = RunStore()
    store.apply(events)
    run = samples[0].run
    snap = store.snapshot(run.key)
    view = snap.system
    gpu_rows = [r for r in rows if r is not None]
    assert view is not None and view.samples == len(rows) and len(view.gpus) == 2
    np.testing.assert_array_equal(view.gpus[0].utilization,
                                  [r["gpu/0/utilization"] for r in gpu_rows])
    np.testing.assert_allclose(view.gpus[1].memory_used_mb,
                               [r["gpu/1/allocated_memory"] * 1024 for r in gpu_rows])
    assert view.gpus[1].latest == expected_gpus(gpu_rows[-1])[1]
    assert view.cpu_percent == cpu_logged[-1]["cpu/utilization"]
    assert [m.step for m in snap.markers if m.kind == "alert"] == [a[3] for a in want]
    notices = [n for n in store.take_notices() if n.kind == "alert"]
    assert [n.step for n in notices] == [a[3] for a in want]


def test_trackio_gpu_monitor_samples_read_as_logged(server, tmp_path):
    """trackio.init(auto_log_gpu=True) with its own monitor thread: every NVML reading
    it logged comes back as one SystemSample, GPU by GPU, in order."""
    project = project_name()
    readings_file = tmp_path / "nvml.jsonl"
    fake = write_fake_nvml(tmp_path / "nvml")
    with ActionWriter(server.data_dir, project, "gpu-run", auto_log_gpu=True,
                      gpu_log_interval=0.05, extra_path=fake,
                      extra_env={"FAKE_NVML_LOG": str(readings_file)}) as w:
        w.do([["log", {"loss": 1.7 - 0.01 * i, X: i}] for i in range(1, 30)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if readings_file.exists() and readings_file.read_text().count("\n") >= 8:
                break
            time.sleep(0.05)
        w.close()
    readings = [json.loads(line) for line in readings_file.read_text().splitlines()]
    by_tick: dict[int, dict[int, dict]] = {}
    for r in readings:
        by_tick.setdefault(r["n"], {})[r["gpu"]] = r

    src = make_source("local", server, project)
    events: list = []
    poll_until(src, events, lambda ev: len(of(ev, SystemSample)) >= 4)
    events.extend(src.poll())
    samples = of(events, SystemSample)
    # trackio's monitor may read once more while finish() stops it; all else is stored
    assert len(by_tick) - 1 <= len(samples) <= len(by_tick) and len(samples) >= 4
    for n, s in enumerate(samples):
        assert [g.index for g in s.gpus] == [0, 1]
        for g in s.gpus:
            r = by_tick[n][g.index]
            assert g.utilization == r["util"]
            assert g.memory_used_mb == pytest.approx(r["used"] / 2**20, rel=1e-12)
            assert g.memory_total_mb == pytest.approx(r["total"] / 2**20, rel=1e-12)
            assert g.power_w == pytest.approx(r["power_mw"] / 1000, rel=1e-12)
            assert g.temperature_c == r["temp"]
    assert len({s.gpus[0].utilization for s in samples}) > 1  # the readings drift
    src.close()


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_run_filter_applies_to_system_rows_and_alerts(server, kind):
    project = project_name()
    rng = np.random.default_rng(5)
    for name in ("keep", "other"):
        with ActionWriter(server.data_dir, project, name) as w:
            w.do([["log", {"loss": 0.9, X: 2}], ["system", gpu_row(rng, 3)],
                  ["alert", f"{name} alert", None, "warn"]])
            w.close()
    src = make_source(kind, server, project, runs=["keep"])
    events: list = []
    poll_until(src, events, lambda ev: of(ev, SystemSample) and alerts(ev))
    for _ in range(3):
        events.extend(src.poll())
    assert {e.run.name for e in events if hasattr(e, "run")} == {"keep"}
    assert len(of(events, SystemSample)) == 1
    assert [(m.detail["title"], m.detail["text"], m.step) for m in alerts(events)] == [
        ("keep alert", "", 2)]
    src.close()


def test_database_without_the_tables_is_read_then_they_appear(server):
    """A database from a Trackio that had no system_metrics/alerts tables: metrics are
    read without an error; once a newer Trackio adds the tables, their rows come."""
    project = project_name()
    with ActionWriter(server.data_dir, project, "old-run") as w:
        w.do([["log", {"loss": 1.0 - 0.1 * i, X: i}] for i in range(5)])
        w.close()
    with sqlite3.connect(server.data_dir / f"{project}.db") as conn:
        conn.execute("DROP TABLE system_metrics")
        conn.execute("DROP TABLE alerts")
    sources = {kind: make_source(kind, server, project) for kind in ("local", "remote")}
    got: dict[str, list] = {kind: [] for kind in sources}
    for kind, src in sources.items():
        poll_until(src, got[kind], lambda ev: sum(len(b) for b in of(ev, ScalarBatch)) == 5)
        assert src.limitation == ""
    with ActionWriter(server.data_dir, project, "new-run") as w:
        w.do([["log", {"loss": 0.4, X: 6}], ["system", gpu_row(np.random.default_rng(1), 9)],
              ["alert", "loss low", "0.4", "info"]])
        w.close()
    for kind, src in sources.items():
        poll_until(src, got[kind], lambda ev: of(ev, SystemSample) and alerts(ev))
        assert src.limitation == ""
        assert [m.step for m in alerts(got[kind])] == [6]
        src.close()


# -- parsing ---------------------------------------------------------------------

def test_system_sample_from_trackio_keys():
    row = gpu_row(np.random.default_rng(3), 40)
    row.update({"gpu/2/utilization": "NaN", "gpu/2/temp": 71, "gpu/70000/utilization": 5,
                "cpu/utilization": 37.25, "cpu/0/utilization": 80.0, "memory/used": 12.5,
                "memory/total": 62.75, "disk/read_bytes": 12345, "gpu/detected": 1})
    sample, bad = ts.system_sample(RUN, row, 1700000000.5)
    assert bad == 1
    assert sample.gpus[:2] == expected_gpus(row)
    assert sample.gpus[2] == GpuSample(2, temperature_c=71)
    assert len(sample.gpus) == 3  # index 70000 is no GPU index
    assert (sample.cpu_percent, sample.memory_mb, sample.memory_total_mb) == (37.25, 12800.0,
                                                                              64256.0)
    assert sample.wall_time == 1700000000.5 and sample.step is None
    assert ts.system_sample(RUN, {"disk/read_bytes": 3, "network/sent_bytes": 9}, None) == (
        None, 0)
    assert ts.system_sample(RUN, {"gpu/0/power": "Infinity", "gpu/0/temp": True}, None) == (
        None, 2)


def test_alert_marker_steps_and_text():
    m = ts.alert_marker(RUN, title="spike\x1b[2J", text=None, level="ERROR", step=17,
                        timestamp="2026-01-02T03:04:05.25+00:00",
                        at_metrics=b'{"loss": 3.2, "train/global_step": 120}')
    assert (m.kind, m.step) == ("alert", 120)
    assert m.detail["title"] == "spike\ufffd[2J" and m.detail["text"] == ""
    assert m.detail["level"] == "error" and m.detail["trackio_step"] == 17
    assert m.detail["wall_time"] == pytest.approx(1767323045.25)
    plain = ts.alert_marker(RUN, title="t", text="x", level="info", step=9, timestamp=None,
                            at_metrics='{"loss": 1.0}')
    assert plain.step == 9 and "step_known" not in plain.detail
    lost = ts.alert_marker(RUN, title="t", text="x", level="odd", step=None, timestamp=None,
                           at_metrics=None, fallback_step=33)
    assert lost.step == 33 and lost.detail["step_known"] is False
    assert lost.detail["level"] == "odd"


# -- HF Jobs metrics stream ---------------------------------------------------------

def job_sample(rng, t: int, ids: list[str]) -> dict:
    return {
        "cpu_usage_pct": round(float(rng.normal(88, 6)), 2),
        "cpu_millicores": 8000,
        "memory_used_bytes": int(2**30 * (11.3 + 0.02 * t + rng.normal(0, 0.01))),
        "memory_total_bytes": 32 * 2**30,
        "rx_bps": 1200, "tx_bps": 800,
        "gpus": {gid: {"utilization": int(np.clip(rng.normal(76 - 20 * k, 8), 0, 100)),
                       "memory_used_bytes": int(2**30 * (17.9 + 0.05 * t + 3 * k)),
                       "memory_total_bytes": 23_836_033_024}
                 for k, gid in enumerate(ids)},
        "replica": "57vr7",
    }


def test_job_metrics_stream_gives_system_samples_per_gpu():
    state = JobsState(user="alice", token="hf_dummy")
    srv = FakeServer()
    install_jobs_routes(srv, state)
    rng = np.random.default_rng(2)
    sent = [job_sample(rng, t, ["882fa930", "1234abcd"]) for t in range(4)]
    # the API names GPUs by id: a later sample listing them the other way round
    # keeps each GPU's index
    sent.append(job_sample(rng, 4, ["1234abcd", "882fa930"]))
    with srv:
        api = HfApi(endpoint=srv.url, token="hf_dummy")
        state.add_job("job9", flavor="l4x2")
        src = HfJobSource("job9", namespace="alice", api=api, interval=0.01, status_interval=0.2)
        state.set_stage("job9", "RUNNING")
        state.add_metrics("job9", *sent)
        events: list = []
        poll_until(src, events, lambda ev: len(of(ev, SystemSample)) >= len(sent), timeout=20)
        state.set_stage("job9", "COMPLETED")
        src.close()
    samples = of(events, SystemSample)
    assert len(samples) == len(sent)  # one event a sample: the job bar's totals are read from it
    for s, raw in zip(samples, sent, strict=True):
        assert s.run == src.run and s.step is None and s.wall_time is not None
        assert s.cpu_percent == raw["cpu_usage_pct"]
        assert s.memory_mb == raw["memory_used_bytes"] / 2**20
        assert s.memory_total_mb == 32 * 1024
        by_index = {g.index: g for g in s.gpus}
        for gid, index in (("882fa930", 0), ("1234abcd", 1)):
            g, r = by_index[index], raw["gpus"][gid]
            assert g.utilization == r["utilization"]
            assert g.memory_used_mb == r["memory_used_bytes"] / 2**20
            assert g.memory_total_mb == 23_836_033_024 / 2**20
            assert g.power_w is None and g.temperature_c is None
    store = RunStore()
    store.apply(samples)
    usage = store.snapshot(src.run.key).usage
    assert usage.gpu_percent == pytest.approx(
        sum(g["utilization"] for g in sent[-1]["gpus"].values()) / 2)
    assert usage.cpu_percent == sent[-1]["cpu_usage_pct"]
    assert usage.gpu_memory_mb == pytest.approx(
        sum(g["memory_used_bytes"] for g in sent[-1]["gpus"].values()) / 2**20)


def test_system_from_sample_handles_missing_fields():
    assert system_from_sample(RUN, "garbage") is None
    assert system_from_sample(RUN, {"rx_bps": 3, "gpus": {}}) is None
    s = system_from_sample(RUN, {"cpu_usage_pct": float("nan"), "gpus": {
        "a": {"utilization": "high", "memory_used_bytes": 2**21}, "b": "x"}}, wall_time=5.0)
    assert s.gpus == (GpuSample(0, None, 2.0, None),) and s.cpu_percent is None
    ids: dict[str, int] = {}
    many = {"gpus": {f"g{i}": {"utilization": i} for i in range(100)}}
    assert len(system_from_sample(RUN, many, ids).gpus) == 64 and len(ids) == 64


# -- the store ---------------------------------------------------------------------

def test_system_track_merges_parts_and_bounds_series():
    track = SystemTrack(points=50)
    assert track.view() is None
    rng = np.random.default_rng(9)
    utils = []
    for t in range(120):
        u = float(np.clip(rng.normal(70, 10), 0, 100))
        utils.append(u)
        track.add(SystemSample(RUN, None, 1000.0 + t, (GpuSample(0, u, 2000.0 + t, 8000.0, 250.5),
                                                       GpuSample(3, 12.0))))
        if t % 10 == 0:
            track.add(SystemSample(RUN, None, 1000.5 + t, (), cpu_percent=t / 2,
                                   memory_mb=900.0 + t, memory_total_mb=16000.0))
    view = track.view()
    assert view.samples == 132 and [g.index for g in view.gpus] == [0, 3]
    np.testing.assert_array_equal(view.gpus[0].utilization, utils[-50:])
    np.testing.assert_array_equal(view.gpus[0].times, 1000.0 + np.arange(70, 120))
    assert np.isnan(view.gpus[1].power_w).all() and view.gpus[1].latest.utilization == 12.0
    # the newest sample is a GPU row; CPU and RAM are the newest CPU row's
    assert view.latest.gpus and view.cpu_percent == 55.0 and view.memory_mb == 1010.0
    assert view.updated_at == 1119.0
    for i in range(MAX_GPUS + 10):
        track.add(SystemSample(RUN, None, 2000.0, (GpuSample(100 + i, 1.0),)))
    assert len(track.view().gpus) == MAX_GPUS


def test_system_samples_do_not_make_a_run_look_fresh():
    store = RunStore()
    store.apply([ScalarBatch.from_rows(RUN, [(1, {"loss": 1.0})], wall_time=500.0)])
    v = store.run_version(RUN.key)
    store.apply([SystemSample(RUN, None, 900.0, (GpuSample(0, 50.0),))])
    snap = store.snapshot(RUN.key)
    assert snap.updated_at == 500.0 and snap.version > v
    assert snap.system is not None and snap.system.gpus[0].latest.utilization == 50.0


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_unreadable_alerts_table_does_not_stop_the_metrics(server, kind):
    """An alerts table of an unexpected shape: the metrics and system rows still come;
    the source says what it could not read."""
    project = project_name()
    with ActionWriter(server.data_dir, project, "odd-run") as w:
        w.do([["log", {"loss": 0.7 + 0.01 * i, X: i}] for i in range(4)]
             + [["system", gpu_row(np.random.default_rng(4), 1)]])
        w.close()
    with sqlite3.connect(server.data_dir / f"{project}.db") as conn:
        conn.execute("DROP TABLE alerts")
        conn.execute("CREATE TABLE alerts (id INTEGER PRIMARY KEY, run_id TEXT, note TEXT)")
    src = make_source(kind, server, project)
    events: list = []
    poll_until(src, events, lambda ev: sum(len(b) for b in of(ev, ScalarBatch)) == 4
               and len(of(ev, SystemSample)) == 1)
    assert "not read" in src.limitation and "no such column" in src.limitation
    assert alerts(events) == []
    src.close()

"""Remote Trackio source against a real Trackio server on 127.0.0.1.

One server runs for the whole session; each test writes its own project with
real `trackio.log` calls from separate processes.
"""

from __future__ import annotations

import math
import threading
import time
import uuid

import numpy as np
import pytest

from carl_tui.events import RunMeta, ScalarBatch, SourceStatus
from carl_tui.hub import HubToken, find_token
from carl_tui.redact import redact
from carl_tui.sources.base import SourceError, SourceRunner
from carl_tui.sources.trackio import remote as trackio_remote
from carl_tui.sources.trackio.remote import (
    NOT_AUTHORISED,
    TrackioRemoteSource,
    normalize_url,
)
from tests.fakes.server import FakeServer, Response
from tests.fakes.trackio_server import FaultProxy, TrackioServer, start_writer, wait_writer

pytestmark = pytest.mark.timeout(120)

SECRET = "hf_TESTSECRETabcdef123456"


@pytest.fixture(scope="session")
def trackio_server(tmp_path_factory):
    with TrackioServer(tmp_path_factory.mktemp("trackio")) as srv:
        yield srv


@pytest.fixture(scope="session")
def seeded(trackio_server):
    """Project "seeded": run a (5 points, config), run b (3 points), run big (12,345 points)."""
    d = trackio_server.data_dir
    writers = [
        start_writer(
            d,
            "seeded",
            "a",
            [{"loss": float(i), "train/global_step": 10 * i} for i in range(5)],
            config={"model": "tiny", "lr": 0.001},
        ),
        start_writer(d, "seeded", "b", [{"loss": -float(i)} for i in range(3)]),
        start_writer(d, "big", "big", [{"loss": 1.0 / (i + 1)} for i in range(12_345)]),
    ]
    for w in writers:
        wait_writer(w)
    return trackio_server


def project_name() -> str:
    return "p" + uuid.uuid4().hex[:8]


def collect(events):
    """{run_name: (steps, {metric: values})} concatenated over ScalarBatches."""
    out: dict[str, tuple[list[int], dict[str, list[float]]]] = {}
    for ev in events:
        if isinstance(ev, ScalarBatch):
            steps, cols = out.setdefault(ev.run.name, ([], {}))
            n0 = len(steps)
            steps.extend(int(s) for s in ev.steps)
            for k, v in ev.columns.items():
                col = cols.setdefault(k, [math.nan] * n0)
                col.extend(float(x) for x in v)
            for col in cols.values():
                col.extend([math.nan] * (len(steps) - len(col)))
    return out


def poll_until(src, events, predicate, timeout=20.0, sleep=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            events.extend(src.poll())
        except SourceError:  # e.g. the project does not exist yet
            pass
        if predicate(collect(events)):
            return
        time.sleep(sleep)
    raise AssertionError(f"condition not met; have {collect(events)}")


# -- URLs and tokens --------------------------------------------------------


def test_normalize_url_forms():
    assert normalize_url("user/space") == "https://user-space.hf.space"
    assert normalize_url("My_User/my.space") == "https://my-user-my-space.hf.space"
    assert normalize_url("https://huggingface.co/spaces/u/s") == "https://u-s.hf.space"
    assert normalize_url("https://u-s.hf.space/") == "https://u-s.hf.space"
    assert normalize_url("http://127.0.0.1:7860") == "http://127.0.0.1:7860"
    assert normalize_url("127.0.0.1:7860") == "http://127.0.0.1:7860"
    assert trackio_remote.is_local("http://localhost:7860")
    assert not trackio_remote.is_local("user/space")


def test_default_intervals():
    assert TrackioRemoteSource("http://127.0.0.1:1").interval == 1.0
    assert TrackioRemoteSource("user/space", token="x").interval == 3.0


def test_token_lookup_and_redaction(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    tok = find_token()
    assert tok is not None and tok.value == SECRET and tok.origin == "HF_TOKEN"
    assert SECRET not in repr(tok) and SECRET not in str(tok)
    assert find_token("hf_explicitTOKEN1").origin == "argument"
    assert redact(f"failed with {SECRET} in it") == "failed with [REDACTED] in it"
    assert redact("the word abcd1234", [HubToken("abcd1234")]) == "the word [REDACTED]"
    src = TrackioRemoteSource("user/space")
    assert src._headers() == {"Authorization": f"Bearer {SECRET}"}
    assert SECRET not in repr(src)
    # An implicit token never goes to a non-Hugging Face host.
    assert TrackioRemoteSource("http://127.0.0.1:9")._headers() == {}
    assert TrackioRemoteSource("http://127.0.0.1:9", token=HubToken(SECRET))._headers()


# -- real server --------------------------------------------------------------


def test_history_runs_config_and_pickers(seeded):
    src = TrackioRemoteSource(seeded.url, project="seeded", interval=0.1)
    assert "seeded" in src.list_projects() and "big" in src.list_projects()
    assert sorted(r.name for r in src.list_runs()) == ["a", "b"]
    events = src.poll()
    data = collect(events)
    # x axis is train/global_step when logged, else Trackio's step
    assert data["a"][0] == [0, 10, 20, 30, 40]
    assert data["a"][1]["loss"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert data["b"] == ([0, 1, 2], {"loss": [-0.0, -1.0, -2.0]})
    metas = [e for e in events if isinstance(e, RunMeta) and "config" in e.meta]
    cfg = {m.run.name: m.meta["config"] for m in metas}
    assert cfg["a"]["model"] == "tiny" and cfg["a"]["lr"] == 0.001
    refs = {e.run for e in events if isinstance(e, ScalarBatch)}
    assert {r.source for r in refs} == {"trackio-remote"}
    assert all(len(r.run_id) >= 8 and r.project == "seeded" for r in refs)
    assert src.poll() == []  # nothing new: nothing emitted


def test_runs_filter_by_name_and_id(seeded):
    src = TrackioRemoteSource(seeded.url, project="seeded", runs=["b"])
    assert set(collect(src.poll())) == {"b"}
    run_a = next(r for r in src.list_runs() if r.name == "a")
    src = TrackioRemoteSource(seeded.url, project="seeded", runs=[run_a.id])
    assert set(collect(src.poll())) == {"a"}


def test_paging_is_bounded_per_poll_and_complete(seeded, monkeypatch):
    monkeypatch.setattr(trackio_remote, "MAX_PAGES_PER_POLL", 1)
    src = TrackioRemoteSource(seeded.url, project="big", interval=1.0)
    first = src.poll()
    assert sum(len(e) for e in first if isinstance(e, ScalarBatch)) == 10_000
    assert src.behind and src.interval == 0.0
    rest = src.poll()
    assert not src.behind and src.interval == 1.0
    steps, cols = collect(first + rest)["big"]
    assert steps == list(range(12_345))
    assert np.allclose(cols["loss"], [1.0 / (i + 1) for i in range(12_345)])


def test_single_project_is_picked_and_unknown_project_reported(tmp_path):
    with TrackioServer(tmp_path) as srv:
        src = TrackioRemoteSource(srv.url)
        with pytest.raises(SourceError, match="no projects"):
            src.poll()
        wait_writer(start_writer(tmp_path, "only", "r", [{"x": 1.0}]))
        assert collect(src.poll())["r"][0] == [0]
        assert src.project == "only"
        with pytest.raises(SourceError, match="no such project/space") as err:
            TrackioRemoteSource(srv.url, project="missing").poll()
        assert err.value.retry is True  # the project may appear when its run starts


def test_live_writer_every_point_once_in_order(trackio_server):
    project = project_name()
    n = 60
    points = [
        {"loss": 1.0 / (i + 1), "train/entropy": float(i), "train/global_step": i} for i in range(n)
    ]
    points[7]["loss"] = float("nan")  # non-finite: dropped and counted
    writer = start_writer(trackio_server.data_dir, project, "live", points, delay=0.05)
    src = TrackioRemoteSource(trackio_server.url, project=project, interval=0.1)
    deadline = time.monotonic() + 20
    while project not in src.list_projects() and time.monotonic() < deadline:
        time.sleep(0.05)
    events: list = []
    lock = threading.Lock()

    def emit(evs):
        with lock:
            events.extend(evs)

    runner = SourceRunner(src, emit).start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                got = collect(events).get("live", ([], {}))[0]
            if len(got) >= n:
                break
            time.sleep(0.05)
        time.sleep(0.3)  # a few more polls must add nothing
    finally:
        runner.stop()
    wait_writer(writer)
    steps, cols = collect(events)["live"]
    assert steps == list(range(n))  # exactly once, in order, from step 0
    assert cols["entropy"] == [float(i) for i in range(n)]
    assert math.isnan(cols["loss"][7]) and cols["loss"][8] == 1.0 / 9
    assert src.skipped == 1
    batches = [e for e in events if isinstance(e, ScalarBatch)]
    assert len(batches) > 1  # it really was polled while the writer wrote
    failures = [e.message for e in events if isinstance(e, SourceStatus)
                and e.state == "retrying"]
    assert runner.last_state == "live", failures


def test_server_restart_mid_run_resumes_without_gaps(trackio_server):
    project = project_name()
    n = 40
    writer = start_writer(
        trackio_server.data_dir, project, "r", [{"v": float(i)} for i in range(n)], delay=0.05
    )
    src = TrackioRemoteSource(trackio_server.url, project=project, timeout=2.0)
    events: list = []
    poll_until(src, events, lambda d: len(d.get("r", ([],))[0]) >= 3)
    trackio_server.stop()
    with pytest.raises(SourceError, match="cannot connect") as err:
        src.poll()
    assert err.value.retry
    time.sleep(0.5)  # the writer keeps writing while the server is down
    trackio_server.start()
    wait_writer(writer)
    poll_until(src, events, lambda d: len(d["r"][0]) >= n)
    steps, cols = collect(events)["r"]
    assert steps == list(range(n)) and cols["v"] == [float(i) for i in range(n)]


# -- faults through a proxy ---------------------------------------------------


FAULTS = [
    ("500", "server error 500", True),
    ("garbage", "malformed reply", True),
    ("401", NOT_AUTHORISED, False),
    ("403", NOT_AUTHORISED, False),
    ("404", "no such project/space", False),
]


def test_faults_are_reported_and_recovered(trackio_server):
    """Each fault: a clear message, the cursor untouched, then exactly the new rows."""
    project = project_name()
    d = trackio_server.data_dir
    wait_writer(start_writer(d, project, "r", [{"v": float(i)} for i in range(5)]))
    with FaultProxy(trackio_server.url) as proxy:
        src = TrackioRemoteSource(proxy.url, project=project, token=SECRET)
        assert collect(src.poll())["r"][0] == [0, 1, 2, 3, 4]
        assert proxy.server.requests[-1].headers.get("authorization") == f"Bearer {SECRET}"
        for k, (fault, message, retry) in enumerate(FAULTS):
            run = f"after-{fault}"
            wait_writer(start_writer(d, project, run, [{"v": 10.0 * k + i} for i in range(3)]))
            proxy.fault = fault
            with pytest.raises(SourceError) as err:
                src.poll()
            assert message in str(err.value) and err.value.retry is retry, fault
            assert SECRET not in str(err.value) and SECRET not in repr(src)
            proxy.fault = None
            data = collect(src.poll())
            assert data == {run: ([0, 1, 2], {"v": [10.0 * k, 10.0 * k + 1, 10.0 * k + 2]})}


def test_slow_server_does_not_block_past_timeout(trackio_server):
    with FaultProxy(trackio_server.url) as proxy:
        proxy.fault, proxy.slow_s = "slow", 10.0
        src = TrackioRemoteSource(proxy.url, project="anything", timeout=1.0)
        t0 = time.monotonic()
        with pytest.raises(SourceError, match="did not answer within 1 s"):
            src.poll()
        assert time.monotonic() - t0 < 2.5


def test_connection_refused_before_server_is_up(tmp_path):
    srv = TrackioServer(tmp_path)
    src = TrackioRemoteSource(srv.url, project="later", timeout=2.0)
    with pytest.raises(SourceError, match="cannot connect"):
        src.poll()
    wait_writer(start_writer(tmp_path, "later", "r", [{"v": 1.0}, {"v": 2.0}]))
    with srv:
        assert collect(src.poll())["r"] == ([0, 1], {"v": [1.0, 2.0]})


def test_old_server_without_query_falls_back_to_logs(seeded):
    """A server that does not know query_project: get_logs, with the limitation shown."""
    with FaultProxy(seeded.url) as proxy:
        fake = FakeServer()
        fake.route(
            "POST",
            r"/api/query_project",
            lambda r: Response.json({"error": "Unknown API: query_project"}, 404),
        )
        fake.routes.extend(proxy.server.routes)
        with fake:
            src = TrackioRemoteSource(fake.url, project="seeded", runs=["a"])
            data = collect(src.poll())
            assert src.mode == "logs" and "down-sampled" in src.limitation
            assert data["a"][0] == [0, 10, 20, 30, 40]
            assert src.poll() == []  # only points newer than the last one are emitted


def test_logs_fallback_skips_a_row_without_a_step():
    """get_logs rows with no valid step are counted, never given one, never fatal."""
    from carl_tui.sources.trackio.remote import RemoteRun
    from carl_tui.sources.trackio.remote_logs import LogsFallback
    from carl_tui.sources.unused_input import UnusedInput

    rows = [{"step": 0, "loss": 0.93, "timestamp": "2026-01-01T00:00:00"},
            {"step": None, "loss": 0.91},
            {"step": "soon", "loss": 0.90},
            {"step": 2, "loss": 0.87, "timestamp": "2026-01-01T00:00:02"}]
    unused_input = UnusedInput()
    logs = LogsFallback()
    got = logs.read(lambda name, **kw: rows, "p", [RemoteRun("r1", "run one")], "url", unused_input)
    assert got.by_run == {"r1": [(0, {"loss": 0.93}), (2, {"loss": 0.87})]}
    assert got.names == {"r1": "run one"} and unused_input.total == 2
    assert logs.read(lambda name, **kw: rows, "p", [RemoteRun("r1", "run one")], "url",
                     unused_input).by_run == {}  # nothing newer than step 2


def test_malformed_rows_are_skipped_not_fatal():
    srv = FakeServer()
    rows = [
        {
            "id": 1,
            "run_id": "r1",
            "run_name": "n",
            "step": 0,
            "metrics": '{"loss": 1.0}',
            "timestamp": "x",
        },
        {
            "id": 2,
            "run_id": "r1",
            "run_name": "n",
            "step": 1,
            "metrics": "{not json",
            "timestamp": "x",
        },
        {
            "id": 3,
            "run_id": "r1",
            "run_name": "n",
            "step": 2,
            "metrics": '{"loss": "Infinity", "acc": 0.5}',
            "timestamp": "2026-01-01T00:00:00+00:00",
        },
    ]

    def query(req):
        q = req.json()["query"]
        if "WHERE 0" in q:
            return Response.json(
                {"data": {"columns": ["id", "run_id", "run_name", "step", "metrics"], "rows": []}}
            )
        if "FROM configs" in q:
            return Response.json({"data": {"columns": [], "rows": []}})
        last = int(q.split("id > ")[1].split()[0])
        return Response.json({"data": {"rows": [r for r in rows if r["id"] > last]}})

    srv.route("POST", r"/api/query_project", query)
    with srv:
        src = TrackioRemoteSource(srv.url, project="p")
        steps, cols = collect(src.poll())["n"]
        assert steps == [0, 2] and cols["loss"][0] == 1.0 and math.isnan(cols["loss"][1])
        assert cols["acc"][1] == 0.5
        assert src.skipped == 2 and src.last_id == 3


def test_a_nan_loss_on_a_remote_run_raises_the_alert(trackio_server):
    """Trackio stores a NaN loss as "NaN": read remotely, it is skipped and counted as
    locally, and the store's NaN-loss alert fires at its step."""
    from carl_tui.store import RunStore

    project = project_name()
    points = [{"train/loss": 0.52, "train/global_step": 10},
              {"train/loss": float("nan"), "train/global_step": 20},
              {"train/loss": 0.47, "train/global_step": 30}]
    wait_writer(start_writer(trackio_server.data_dir, project, "r", points))
    src = TrackioRemoteSource(trackio_server.url, project=project)
    store = RunStore()
    store.apply(src.poll())
    assert src.poll() == []  # everything arrived in the first poll
    snap = store.snapshot(store.runs()[0].key)
    assert snap.series["loss"].count == 2 and src.skipped == 1
    assert [(e.kind, e.step) for e in snap.events] == [("nan_loss", 20)]


def test_an_unchanged_project_costs_one_cheap_request_a_poll(trackio_server):
    """Once caught up, a poll of an unchanged project asks the server one cheap question
    (each table's newest id); rows that arrive later are still read, once each."""
    project, d = project_name(), trackio_server.data_dir
    wait_writer(start_writer(d, project, "a", [{"loss": float(i)} for i in range(20)]))
    src = TrackioRemoteSource(trackio_server.url, project=project)
    events = src.poll()
    while src.behind:
        events += src.poll()
    assert collect(events)["a"][0] == list(range(20))
    asked: list[str] = []
    query = src.remote.query
    src.remote.query = lambda sql: asked.append(sql) or query(sql)
    sent = src.requests
    for _ in range(3):
        assert src.poll() == []
    assert src.requests - sent == 3 and len(asked) == 3
    assert all(q.startswith("SELECT (SELECT COALESCE(MAX(id), 0) FROM metrics)") for q in asked)
    wait_writer(start_writer(d, project, "b", [{"loss": -float(i)} for i in range(5)]))
    new = src.poll()
    got = collect(new)
    assert list(got) == ["b"] and got["b"] == ([0, 1, 2, 3, 4], {"loss": [-0.0, -1, -2, -3, -4]})
    assert any(isinstance(e, RunMeta) and e.run.name == "b" for e in new)
    asked.clear()
    sent = src.requests
    assert src.poll() == [] and src.poll() == []
    assert src.requests - sent == 2 and all("MAX(id)" in q for q in asked)
    src.close()

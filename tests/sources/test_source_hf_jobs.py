"""HF Jobs source through huggingface_hub itself, against a loopback fake of the Jobs API."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
from huggingface_hub import HfApi

from carl_tui.errors import CarlError
from carl_tui.events import Job, LogLines, Progress, RunMeta, RunRef, ScalarBatch, SystemSample
from carl_tui.hub import NOT_AUTHORISED, list_jobs
from carl_tui.identity import job_run
from carl_tui.sources.base import SourceError
from carl_tui.sources.hf_jobs import HfJobSource, system_from_sample
from carl_tui.store import RunStore
from carl_tui.store.system import JobUsage, SystemTrack
from tests.fakes.hub_jobs import JobsState, install_jobs_routes
from tests.fakes.server import FakeServer

pytestmark = pytest.mark.timeout(60)

TRAINER_LOG = (Path(__file__).parents[1] / "data" / "trainer_stdout.txt").read_text().split("\n")
SAMPLE = {
    "cpu_usage_pct": 87.5,
    "cpu_millicores": 3500,
    "memory_used_bytes": 3 * 2**30,
    "memory_total_bytes": 15032385536,
    "rx_bps": 0,
    "tx_bps": 0,
    "gpus": {
        "882fa930": {
            "utilization": 90,
            "memory_used_bytes": 2**30,
            "memory_total_bytes": 22836000000,
        },
        "1234abcd": {
            "utilization": 70,
            "memory_used_bytes": 2**30,
            "memory_total_bytes": 22836000000,
        },
    },
    "replica": "57vr7",
}


@pytest.fixture
def hub():
    state = JobsState(user="alice", token="hf_dummy")
    srv = FakeServer()
    install_jobs_routes(srv, state)
    with srv:
        yield srv, state, HfApi(endpoint=srv.url, token="hf_dummy")


def poll_until(src, events, predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            events.extend(src.poll())
        except SourceError:
            pass
        if predicate(events):
            return
        time.sleep(0.02)
    raise AssertionError(f"condition not met; {len(events)} events")


def stages(events):
    out = []
    for e in events:
        if isinstance(e, Job) and (not out or out[-1] != e.stage):
            out.append(e.stage)
    return out


def log_lines(events):
    return [line for e in events if isinstance(e, LogLines) for line in e.lines]


def test_job_lifecycle_logs_metrics_and_usage(hub):
    srv, state, api = hub
    state.add_job("job1", flavor="a10g-small", labels={"carl": "demo"})
    # Forced disconnect: the first log stream drops after 5 lines; huggingface_hub's
    # own reconnect then gets a 500 and gives up, so the source opens a new stream,
    # which the server replays from the first line.
    state.drop_logs_after = 5
    state.fail_after_drop = 500
    src = HfJobSource("job1", namespace="alice", api=api, status_interval=0.1, interval=0.05)
    events: list = []
    poll_until(src, events, lambda ev: "SCHEDULING" in stages(ev))
    state.set_stage("job1", "RUNNING")
    state.add_metrics("job1", SAMPLE)
    half = len(TRAINER_LOG) // 2
    for line in TRAINER_LOG[:half]:
        state.append_log("job1", line)
        time.sleep(0.01)
    poll_until(src, events, lambda ev: any(isinstance(e, SystemSample) for e in ev))
    for line in TRAINER_LOG[half:]:
        state.append_log("job1", line)
    poll_until(src, events, lambda ev: len(log_lines(ev)) >= len(TRAINER_LOG))
    state.set_stage("job1", "COMPLETED")
    poll_until(src, events, lambda ev: src.finished)

    assert stages(events) == ["SCHEDULING", "RUNNING", "COMPLETED"]
    assert log_lines(events) == TRAINER_LOG  # every line once, in order
    # The source reconnected at least once and skipped the replayed lines.
    assert state.log_connections >= 2 and src.reconnects >= 1, state.history
    assert src.replayed_lines_skipped >= 5
    final = [e for e in events if isinstance(e, Job)][-1]
    assert final.flavor == "a10g-small" and final.finished_at and final.duration_s >= 0
    assert final.url.endswith("/jobs/alice/job1") and final.namespace == "alice"
    assert final.run == src.run and final.life == "finished" and final.label == "carl=demo"

    steps = [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]
    losses = [float(v) for e in events if isinstance(e, ScalarBatch) for v in e.columns["loss"]]
    assert steps == list(range(1, 13))
    assert losses[0] == 3.889 and losses[-1] == 3.88 and len(losses) == 12
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[-1].step == 12 and progress[-1].total == 12
    summary = [
        e.meta["train_summary"]
        for e in events
        if isinstance(e, RunMeta) and "train_summary" in e.meta
    ]
    assert summary and summary[0]["train_loss"] == 3.898
    meta = next(e.meta for e in events if isinstance(e, RunMeta) and "job_id" in e.meta)
    assert meta["labels"] == {"carl": "demo"} and meta["flavor"] == "a10g-small"

    # One sample, one event: the job bar's totals are read from it by the store.
    assert len([e for e in events if isinstance(e, SystemSample)]) == 1
    store = RunStore()
    store.apply(events)
    snap = store.snapshot(src.run.key)
    assert snap.job == final and snap.usage == JobUsage(
        cpu_percent=87.5, memory_mb=3 * 1024, gpu_percent=80.0, gpu_memory_mb=2 * 1024)
    assert all(r.headers.get("authorization") == "Bearer hf_dummy" for r in srv.requests)


def test_namespace_resolved_with_whoami(hub):
    srv, state, api = hub
    state.add_job("job2", stage="COMPLETED")
    state.append_log("job2", "hello", "{'loss': nan, 'reward': inf, 'entropy': 1.5}")
    src = HfJobSource("job2", api=api, interval=0.05)
    events: list = []
    poll_until(src, events, lambda ev: src.finished)
    assert src.namespace == "alice" and srv.requests_to("GET", r"/api/whoami-v2")
    assert log_lines(events) == ["hello", "{'loss': nan, 'reward': inf, 'entropy': 1.5}"]
    batch = next(e for e in events if isinstance(e, ScalarBatch))
    assert dict(batch.columns) == {"entropy": pytest.approx([1.5])} and list(batch.steps) == [1]
    assert src.skipped == 2  # nan and inf are counted, not plotted


def test_status_5xx_is_reported_then_recovers(hub):
    _, state, api = hub
    state.add_job("job3", stage="RUNNING")
    state.fail_next("inspect", 503, times=2)
    state.fail_next("logs", 502, times=2)
    src = HfJobSource("job3", namespace="alice", api=api, status_interval=0.1)
    with pytest.raises(SourceError, match=r"server error \(50") as err:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            src.poll()
            time.sleep(0.02)
    assert err.value.retry
    events: list = []
    state.append_log("job3", "line after recovery")
    poll_until(
        src,
        events,
        lambda ev: log_lines(ev) == ["line after recovery"] and stages(ev) == ["RUNNING"],
    )
    src.close()


def test_unauthorised_and_missing_job():
    state = JobsState(token="hf_right")
    with FakeServer() as srv:
        install_jobs_routes(srv, state)
        state.add_job("job4", namespace="alice")
        bad = HfJobSource(
            "job4", namespace="alice", api=HfApi(endpoint=srv.url, token="hf_wrongTOKEN123")
        )
        with pytest.raises(SourceError) as err:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                bad.poll()
                time.sleep(0.02)
        assert NOT_AUTHORISED in str(err.value) and err.value.retry is False
        assert "hf_wrongTOKEN123" not in repr(bad)
        bad.close()
        missing = HfJobSource(
            "nope", namespace="alice", api=HfApi(endpoint=srv.url, token="hf_right")
        )
        with pytest.raises(CarlError, match=r"job nope failed: not found on alice \(404\)"):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                missing.poll()
                time.sleep(0.02)
        missing.close()
        with pytest.raises(CarlError, match="rejected the token"):
            list_jobs("alice", api=HfApi(endpoint=srv.url, token="hf_wrongTOKEN123"))


def test_list_jobs(hub):
    _, state, api = hub
    now = time.time()
    state.add_job(
        "old",
        stage="COMPLETED",
        created_at=now - 3600,
        command=["python", "sft.py", "--lr", "1e-4"],
    )
    state.add_job(
        "new", stage="RUNNING", created_at=now - 60, flavor="h100", labels={"carl": "grpo"}
    )
    state.add_job("other", namespace="bob")
    rows = list_jobs(api=api)  # namespace from whoami
    assert [r.job_id for r in rows] == ["new", "old"]
    assert rows[0].run == job_run("alice", "new") and rows[1].life == "finished"
    assert rows[1].command == ("python", "sft.py", "--lr", "1e-4")
    assert rows[0].stage == "RUNNING" and rows[0].flavor == "h100" and rows[0].label == "carl=grpo"
    assert rows[1].label == "python sft.py --lr 1e-4" and rows[1].stage == "COMPLETED"
    assert 3500 < rows[1].age_s < 3700 and rows[0].namespace == "alice"
    assert [r.job_id for r in list_jobs("bob", api=api)] == ["other"]


def test_cancel_through_hub_client(hub):
    _, state, api = hub
    state.add_job("job5", stage="RUNNING")
    api.cancel_job(job_id="job5", namespace="alice")
    assert state.jobs["job5"].stage == "CANCELED"
    assert api.inspect_job(job_id="job5", namespace="alice").status.stage == "CANCELED"


def test_usage_is_read_from_the_system_samples_missing_fields_included():
    run = RunRef("hf-job", "alice", "j")
    track = SystemTrack()
    track.add(system_from_sample(run, {"cpu_usage_pct": 12, "memory_used_bytes": 2**20,
                                       "gpus": {}}))
    assert track.view().usage == JobUsage(cpu_percent=12.0, memory_mb=1.0)
    track.add(system_from_sample(run, {"gpus": {"a": {"utilization": 50},
                                                "b": {"utilization": 70,
                                                      "memory_used_bytes": 2**21}}}))
    assert track.view().usage == JobUsage(cpu_percent=12.0, memory_mb=1.0, gpu_percent=60.0,
                                          gpu_memory_mb=2.0)


def test_backlog_is_handed_out_in_bounded_polls(hub):
    _, state, api = hub
    state.add_job("job6", stage="COMPLETED")
    lines = [f"line {i}" for i in range(25)]
    state.append_log("job6", *lines)
    src = HfJobSource("job6", namespace="alice", api=api, max_lines_per_poll=10)
    events: list = []
    saw_behind = False
    deadline = time.monotonic() + 10
    while not src.finished and time.monotonic() < deadline:
        batch = src.poll()
        events.extend(batch)
        saw_behind |= src.behind and src.interval == 0.0
        assert sum(len(e.lines) for e in batch if isinstance(e, LogLines)) <= 10
        time.sleep(0.3 if not src.behind else 0)
    assert log_lines(events) == lines and saw_behind


def test_a_stage_given_as_huggingface_hubs_enum_is_read_as_its_name():
    """huggingface_hub types a job's stage as `JobStage`, a str Enum whose str() is
    "JobStage.ERROR": the source reads its value, as `hub.job_of` does, so the run's life
    and the end of polling follow the stage whichever form it comes in."""
    from types import SimpleNamespace

    from carl_tui.hub import TERMINAL_STAGES

    stage_type = pytest.importorskip("huggingface_hub._jobs_api").JobStage
    src = HfJobSource("job-1", namespace="me", api=object())
    info = SimpleNamespace(id="job-1", status=SimpleNamespace(stage=stage_type.ERROR,
                                                              message="out of memory"),
                           flavor="a10g-small", command=["python", "train.py"], labels={},
                           url="", created_at=None, started_at=None, finished_at=None)
    events = src._status_events(info)
    assert [e.stage for e in events if isinstance(e, Job)] == ["ERROR"]
    assert src._stage == "ERROR" and src._stage in TERMINAL_STAGES
    [life] = src.take_run_states()
    assert (life.state, life.reason) == ("failed", "job ERROR: out of memory")

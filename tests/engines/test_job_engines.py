"""One contract, every engine that runs here: Hugging Face Jobs (the loopback Hub fake,
through the real huggingface_hub client), this machine (a real child process), and, where
they are installed, a real local Ray head and a real single-node Slurm (skipped with one
line elsewhere). Each submits a job that prints Trainer lines, lists it, reads its log
from offset 0 and then from the offset returned (no line twice), and stops a second job,
which ends CANCELED on every engine."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from carl_tui.actions.engines import engine_name, make_engine
from carl_tui.actions.hf_engine import HfJobsEngine
from carl_tui.actions.jobs import JobsClient
from carl_tui.actions.local_engine import LocalEngine
from carl_tui.engines.base import JobEngine, Submission
from carl_tui.events import Job
from tests.fakes.hub_jobs import JobsState, install_jobs_routes
from tests.fakes.hub_repos import (
    TEST_TOKEN,
    HubState,
    install_job_launch_routes,
    install_repo_routes,
)
from tests.slurm_cluster import cluster_fixture

slurm = pytest.fixture(scope="module")(cluster_fixture)

LINES = [str({"loss": 1.0 / s, "reward": s / 10, "epoch": s / 5}) for s in range(1, 6)]
FIRST = 2  # lines printed before the pause
# Prints the first lines, pauses (the first read comes in it), prints the rest; one line
# of code (Slurm refuses a command word with a line break).
PRINTER = (f"import time; lines = {LINES!r}; "
           f"print(chr(10).join(lines[:{FIRST}]), flush=True); time.sleep(2.5); "
           f"print(chr(10).join(lines[{FIRST}:]), flush=True)")
SLEEPER = "import time; print('started', flush=True); time.sleep(120)"


@dataclass
class Harness:
    """An engine and how its jobs run: `python` is the job's interpreter; `started` and
    `finish` play the job's part where the engine is a fake (the Hub's jobs run nowhere)."""

    engine: JobEngine
    python: str
    working_dir: str = ""
    started: Callable[[Job, list[str]], None] = lambda job, lines: None
    finish: Callable[[Job, list[str]], None] = lambda job, lines: None

    def submit(self, name: str, code: str) -> Job:
        sub = Submission(name=name, command=(self.python, "-c", code),
                         working_dir=self.working_dir)
        assert self.engine.check(sub) == []
        return self.engine.submit(sub)


def hf_harness(server) -> Harness:
    pytest.importorskip("huggingface_hub")
    server.routes.clear()
    server.requests.clear()
    jobs = JobsState(token=TEST_TOKEN)
    jobs.keepalive_s = 30.0  # as the real Hub: a read that does not follow ends on its own
    install_repo_routes(server, HubState())
    install_jobs_routes(server, jobs, whoami=False)
    install_job_launch_routes(server, jobs)
    client = JobsClient(token=TEST_TOKEN, endpoint=server.url, namespace="alice")

    def started(job: Job, lines: list[str]) -> None:
        jobs.set_stage(job.job_id, "RUNNING")
        jobs.append_log(job.job_id, *lines)

    def finish(job: Job, lines: list[str]) -> None:
        jobs.append_log(job.job_id, *lines)
        jobs.set_stage(job.job_id, "COMPLETED")

    return Harness(HfJobsEngine(client), "python", started=started, finish=finish)


@pytest.fixture(params=["hf-jobs", "local", "ray", "slurm"])
def harness(request, tmp_path, monkeypatch) -> Harness:
    if request.param == "hf-jobs":
        return hf_harness(request.getfixturevalue("server"))
    if request.param == "local":
        return Harness(LocalEngine(tmp_path / "runs.jsonl", grace=5.0), sys.executable,
                       working_dir=str(tmp_path))
    if request.param == "ray":
        head = request.getfixturevalue("ray_head")
        return Harness(make_engine("ray", head.url), "python")
    cluster = request.getfixturevalue("slurm")
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    return Harness(make_engine("slurm"), sys.executable, working_dir=str(tmp_path))


def wait(engine: JobEngine, job_id: str, done, what: str, timeout: float = 90.0) -> Job:
    deadline = time.monotonic() + timeout
    while True:
        job = engine.job(job_id)
        if done(job):
            return job
        assert time.monotonic() < deadline, f"{what}: still {job.stage} ({job.message})"
        time.sleep(0.2)


def test_a_job_is_listed_and_its_log_read_on_from_where_the_last_read_ended(harness):
    engine = harness.engine
    job = harness.submit("contract", PRINTER)
    assert job.job_id and job.stage in ("SCHEDULING", "RUNNING")
    harness.started(job, LINES[:FIRST])
    listed = {j.job_id: j for j in engine.jobs()}
    assert job.job_id in listed and listed[job.job_id].run.source == engine.kind
    deadline = time.monotonic() + 90
    first = engine.log(job.job_id, 0)
    while LINES[0] not in first.text:  # the job's first lines reach its log
        assert time.monotonic() < deadline, f"no log from {engine_name(engine.kind)}"
        time.sleep(0.2)
        first = engine.log(job.job_id, 0)
    harness.finish(job, LINES[FIRST:])
    end = wait(engine, job.job_id, lambda j: j.ended, "the job's end")
    assert end.stage == "COMPLETED"
    rest = engine.log(job.job_id, first.offset)
    text = first.text + rest.text
    assert [line for line in text.splitlines() if line in LINES] == LINES  # each once, in order
    assert LINES[-1] in rest.text and LINES[0] not in rest.text
    assert text == engine.log(job.job_id, 0).text  # the two reads are the whole log
    assert engine.log(job.job_id, rest.offset).text == ""  # nothing new after the end
    assert {j.job_id: j.stage for j in engine.jobs()}[job.job_id] in ("COMPLETED", "ENDED")


def test_a_stopped_job_ends_canceled_on_every_engine(harness):
    engine = harness.engine
    job = harness.submit("stopped", SLEEPER)
    harness.started(job, ["started"])
    wait(engine, job.job_id, lambda j: j.stage == "RUNNING", "the job running")
    asked = engine.stop(job.job_id)
    assert asked.job_id == job.job_id
    end = wait(engine, job.job_id, lambda j: j.ended, "the stop", timeout=60)
    assert end.stage == "CANCELED" and end.life == "stopped"
    assert {j.job_id: j.stage for j in engine.jobs()}[job.job_id] in ("CANCELED", "ENDED")


def test_hf_sends_the_token_as_a_secret_and_takes_flavor_and_namespace(server):
    harness = hf_harness(server)
    sub = Submission(name="opts", command=("python", "-c", "print(1)"), env={"A": "b"},
                     time_limit_s=600, options={"flavor": "a10g-small", "namespace": "alice"},
                     gpus=1)
    job = harness.engine.submit(sub)
    (post,) = server.requests_to("POST", r"^/api/jobs/alice$")
    body = post.json()
    assert body["flavor"] == "a10g-small" and body["timeoutSeconds"] == 600
    assert body["environment"] == {"A": "b"} and body["secrets"] == {"HF_TOKEN": TEST_TOKEN}
    assert TEST_TOKEN not in " ".join(body["command"]) and job.flavor == "a10g-small"
    assert job.run.project == "alice" and job.run.source == "hf-job"
    too_many = Submission(name="big", command=("true",), gpus=4,
                          options={"flavor": "a10g-small"})
    assert harness.engine.check(too_many) == [
        "the flavor a10g-small has 1 GPUs, not the 4 asked for: pick a bigger flavor"]


def test_a_local_run_not_started_here_is_listed_but_not_stopped(tmp_path):
    engine = LocalEngine(tmp_path / "runs.jsonl", grace=5.0)
    job = engine.submit(Submission(name="other", command=(sys.executable, "-c", SLEEPER),
                                   working_dir=str(tmp_path)))
    other = LocalEngine(tmp_path / "runs.jsonl")  # another dashboard, the same registry
    try:
        assert other.job(job.job_id).stage == "RUNNING"
        with pytest.raises(Exception, match=r"not started by this dashboard.*kill -INT"):
            other.stop(job.job_id)
        assert other.job(job.job_id).stage == "RUNNING"
    finally:
        engine.stop(job.job_id)
    assert other.job(job.job_id).stage == "ENDED" and engine.job(job.job_id).stage == "CANCELED"

"""One job type (`events.Job`) from launch to status to the jobs list: what a stage means
for the run's life, what it has cost so far, and its command masked wherever it comes
from (the Hub's list, the store, this machine's registry)."""

from __future__ import annotations

import time

import pytest

from carl_tui.events import Job, RunRef, life_of_stage
from carl_tui.identity import job_run
from carl_tui.redact import MASK, redact_argv
from carl_tui.store import RunStore

SECRET = "hf_" + "Q" * 34
RUN = job_run("alice", "job-1")


@pytest.mark.parametrize(("stage", "life"), [
    ("SCHEDULING", "queued"), ("RUNNING", "live"), ("COMPLETED", "finished"),
    ("ERROR", "failed"), ("CANCELED", "stopped"), ("DELETED", "failed"),
    ("ENDED", "finished"), ("SOMETHING_NEW", "live"),
])
def test_a_jobs_stage_says_its_runs_life(stage, life):
    job = Job(RUN, "job-1", stage)
    assert life_of_stage(stage) == job.life == life
    assert job.ended == (life in ("finished", "failed", "stopped"))


def test_the_hubs_terminal_stages_are_the_stages_that_end_a_run():
    from carl_tui.hub import TERMINAL_STAGES

    assert frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"}) == TERMINAL_STAGES


def test_time_running_counts_from_start_to_end_or_now():
    now = time.time()
    queued = Job(RUN, "job-1", "SCHEDULING", created_at=now - 50)
    assert queued.running_s is None and 49 < queued.age_s < 60
    done = Job(RUN, "job-1", "COMPLETED", flavor="a10g-small", created_at=now - 7200,
               started_at=now - 3600, finished_at=now - 600)
    assert done.running_s == pytest.approx(3000) and done.duration_s == pytest.approx(6600)
    running = Job(RUN, "job-1", "RUNNING", started_at=now - 90)
    assert 89 < running.running_s < 100


def test_a_command_line_is_masked_by_argument():
    argv = ["python", "train.py", "--hub-token", "plainvalue123", f"--token={SECRET}",
            "--lr", "1e-4", SECRET, "--max-new-tokens", "64"]
    assert redact_argv(argv) == ("python", "train.py", "--hub-token", MASK, f"--token={MASK}",
                                 "--lr", "1e-4", MASK, "--max-new-tokens", "64")


def test_the_store_masks_a_jobs_command_label_and_message():
    store = RunStore()
    store.apply([Job(RUN, "job-1", "ERROR", message=f"bad token {SECRET}",
                     command=("python", "x.py", "--hub-token", "plainvalue123"),
                     label=f"token={SECRET}")])
    job = store.snapshot(RUN.key).job
    assert job.command == ("python", "x.py", "--hub-token", MASK)
    assert SECRET not in job.label and SECRET not in job.message and job.stage == "ERROR"


def test_the_hubs_job_list_masks_commands():
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import HfApi

    from carl_tui.hub import list_jobs
    from tests.fakes.hub_jobs import JobsState, install_jobs_routes
    from tests.fakes.server import FakeServer

    state = JobsState(user="alice", token="hf_dummy")
    with FakeServer() as srv:
        install_jobs_routes(srv, state)
        state.add_job("j", stage="RUNNING", flavor="l4x1", started_at=time.time() - 60,
                      command=["python", "t.py", "--hub-token", "plainvalue123", SECRET])
        (job,) = list_jobs(api=HfApi(endpoint=srv.url, token="hf_dummy"))
    assert job.command == ("python", "t.py", "--hub-token", MASK, MASK)
    assert SECRET not in job.label and "plainvalue123" not in job.label
    assert job.run == job_run("alice", "j") and job.namespace == "alice"
    assert job.flavor == "l4x1" and job.life == "live" and 59 < job.running_s < 120


def test_a_run_of_this_machine_is_a_job_of_the_jobs_list(tmp_path):
    from carl_tui.actions.local_job import LocalRun
    from carl_tui.identity import local_run

    rec = LocalRun(pid=4242, started_at=1_795_000_000.0, stream_path=tmp_path / "s.jsonl",
                   log_path=tmp_path / "l.log", argv=("python", "-m", "carl_tui", "train",
                                                       "--hub-token", "plainvalue123"),
                   name="grpo-local", host="h", alive=False)
    job = rec.job()
    assert job.run == local_run("grpo-local", 1_795_000_000.0, 4242) and isinstance(job.run,
                                                                                     RunRef)
    assert (job.job_id, job.stage, job.life, job.flavor) == ("local-4242", "ENDED", "finished",
                                                             "local")
    assert job.label == f"grpo-local · {tmp_path / 's.jsonl'}"
    assert job.command[-1] == MASK and job.started_at == 1_795_000_000.0

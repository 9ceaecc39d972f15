"""Following Slurm batch jobs on a real single-node cluster (tests/slurm_cluster.py): a
tiny real GRPO training submitted through `SlurmEngine.submit` is followed by
`SlurmJobSource` to "finished", its steps and values those of the trainer's own stream;
a second one, stopped through `SlurmEngine.stop`, is seen cancelled; the list source
gives one run per job with Slurm's states."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from carl_tui.engines.base import Submission
from carl_tui.engines.slurm import SlurmEngine
from carl_tui.events import Job, LogLines, RunLife, RunMeta, ScalarBatch
from carl_tui.sources.slurm_job import SlurmJobsListSource, SlurmJobSource
from tests.conftest import dashboard_config, plain_text, wait_for
from tests.slurm_cluster import cluster_fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

slurm = pytest.fixture(scope="module")(cluster_fixture)

ROOT = Path(__file__).resolve().parents[1].parent
STEPS = 6


def training(tmp: Path, name: str, steps: int) -> Submission:
    """A tiny GRPO run on the CPU (the project's offline model and task), its stream
    (the trainer's own record of each step) beside its log."""
    return Submission(
        name=name, working_dir=str(tmp), cpus=1,
        env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
             "TOKENIZERS_PARALLELISM": "false"},
        command=(sys.executable, "-m", "carl_tui", "train", "--model", "tiny", "--dataset",
                 "tiny", "--method", "grpo", "--max-steps", str(steps), "--batch-size", "8",
                 "--num-generations", "4", "--max-completion-length", "6", "--seed", "0",
                 "--stream", str(tmp / f"{name}.jsonl"), "--no-save",
                 "--output", str(tmp / name)))


def follow(source, until, timeout: float = 240.0) -> list:
    events: list = []
    deadline = time.monotonic() + timeout
    while not until(events):
        assert time.monotonic() < deadline, f"{source!r}: not within {timeout:g} s"
        events += source.poll()
        events += source.take_run_states(events[-50:] if events else [])
        time.sleep(source.interval or 0.02)
    return events


def rows(events) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for ev in events:
        if isinstance(ev, ScalarBatch):
            for i, step in enumerate(ev.steps.tolist()):
                out.setdefault(int(step), {}).update(
                    {k: float(v[i]) for k, v in ev.columns.items() if v[i] == v[i]})
    return out


@pytest.fixture(scope="module")
def jobs(slurm, tmp_path_factory):
    """The finished training and the stopped one, each followed by its source."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(slurm.conf))
    tmp = tmp_path_factory.mktemp("slurm-jobs")
    engine = SlurmEngine()
    done = engine.submit(training(tmp, "tiny-grpo", STEPS))
    source = SlurmJobSource(done.job_id, engine=engine, status_interval=0.5)
    finished = follow(source, lambda _ev: source.finished)

    stopped = engine.submit(training(tmp, "tiny-grpo-stopped", 500))
    watcher = SlurmJobSource(stopped.job_id, engine=engine, status_interval=0.5)
    began = follow(watcher, lambda ev: len(rows(ev)) >= 2)
    asked = engine.stop(stopped.job_id)
    t0 = time.monotonic()
    ended = follow(watcher, lambda _ev: watcher.finished)
    stop_s = time.monotonic() - t0
    yield {"engine": engine, "tmp": tmp, "done": done, "source": source,
           "finished": finished, "stopped": stopped, "asked": asked,
           "cancelled": began + ended, "stop_s": stop_s, "watcher": watcher}
    mp.undo()


def stream_rows(path: Path) -> dict[int, dict]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return {r["step"]: r for r in lines if "reward" in r and "step" in r}


def test_a_finished_job_is_followed_to_its_end_with_exact_steps(jobs):
    events, source = jobs["finished"], jobs["source"]
    got = rows(events)
    trainer = stream_rows(jobs["tmp"] / "tiny-grpo.jsonl")
    assert sorted(trainer) == list(range(1, STEPS + 1))
    assert sorted(s for s in got if "reward" in got[s]) == sorted(trainer)
    for step, row in trainer.items():  # the log prints 4 significant digits
        assert got[step]["reward"] == pytest.approx(row["reward"], rel=1e-3, abs=1e-6)
        assert got[step]["entropy"] == pytest.approx(row["entropy"], rel=1e-3)
    stages = [ev.stage for ev in events if isinstance(ev, Job)]
    assert stages[-1] == "COMPLETED" and "RUNNING" in stages
    lives = [ev.state for ev in events if isinstance(ev, RunLife)]
    assert lives[-1] == "finished"
    assert source.finished and source.job.message == "COMPLETED"
    assert source.path == jobs["tmp"] / f"carl-tiny-grpo-{jobs['done'].job_id}.out"
    assert any("train_summary" in ev.meta for ev in events if isinstance(ev, RunMeta))
    user = pwd.getpwuid(os.geteuid()).pw_name
    assert all(ev.run.key == f"slurm-job:{user}:{jobs['done'].job_id}"
               for ev in events if hasattr(ev, "run"))


def test_a_stopped_job_is_seen_cancelled(jobs):
    events, watcher = jobs["cancelled"], jobs["watcher"]
    assert jobs["asked"].job_id == jobs["stopped"].job_id
    assert watcher.finished and watcher.job.stage == "CANCELED"
    assert watcher.job.message == "CANCELLED" and watcher.job.life == "stopped"
    lives = [ev for ev in events if isinstance(ev, RunLife)]
    assert (lives[-1].state, lives[-1].reason) == ("stopped", "job CANCELED: CANCELLED")
    assert len(rows(events)) >= 2 and jobs["stop_s"] < 30
    assert any(isinstance(ev, LogLines) for ev in events)


def test_the_list_gives_one_run_per_job_with_slurms_states(jobs):
    engine: SlurmEngine = jobs["engine"]
    listed = SlurmJobsListSource(engine=engine)
    events = listed.poll()
    by_id = {ev.job_id: ev for ev in events if isinstance(ev, Job)}
    done, stopped = jobs["done"].job_id, jobs["stopped"].job_id
    assert (by_id[done].stage, by_id[done].message) == ("COMPLETED", "COMPLETED")
    assert (by_id[stopped].stage, by_id[stopped].message) == ("CANCELED", "CANCELLED")
    lives = {ev.run.run_id: ev.state for ev in listed.take_run_states(events)}
    assert lives[done] == "finished" and lives[stopped] == "stopped"
    # the run in view is followed by its companion: the same steps as the job's source
    companion = listed.companion(by_id[done].run.key)
    assert isinstance(companion, SlurmJobSource) and companion.job_id == done
    got = follow(companion, lambda _ev: companion.finished)
    assert sorted(s for s in rows(got) if "reward" in rows(got)[s]) == list(
        range(1, STEPS + 1))
    # headless: each job's log read once
    once = SlurmJobsListSource(engine=engine, read_logs=True)
    headless = once.poll()
    assert once.finished
    steps = {ev.run.run_id for ev in headless if isinstance(ev, ScalarBatch)}
    assert {done, stopped} <= steps


async def test_the_dashboard_shows_a_followed_job_to_its_end(jobs):
    """`carl-tui --slurm-job ID`'s screen: the job's state in the job bar, the run
    finished at its last step in the status bar."""
    from carl_tui.ui.app import build_app
    from carl_tui.ui.widgets.job_bar import JobBar
    from carl_tui.ui.widgets.status_bar import StatusBar

    done = jobs["done"].job_id
    source = SlurmJobSource(done, engine=jobs["engine"])
    app = build_app(dashboard_config([source], refresh_interval=0.05))
    async with app.run_test(size=(160, 45)) as pilot:
        def status() -> str:
            return plain_text(app.query_one(StatusBar), 300)
        await wait_for(pilot, lambda: f"step {STEPS} · finished" in status(),
                       what="the run finished at its last step", timeout=60)
        assert status().startswith(f"run tiny-grpo ({done}) · step {STEPS} · finished")
        assert plain_text(app.query_one(JobBar), 300).startswith(f"job {done} COMPLETED · ")


def carl_tui(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "carl_tui", *args], capture_output=True,
                          text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120,
                          check=False)


def test_the_commands_read_slurm_jobs_as_slurm_says(jobs, slurm):
    """`fleet --slurm --json`, `summary` and `export --slurm-job`: the states squeue says,
    a pending job's reason, the steps of the trainer's own stream."""
    engine: SlurmEngine = jobs["engine"]
    fill = engine.submit(Submission(name="fill", command=("sleep", "120"), cpus=slurm.cpus,
                                    working_dir=str(jobs["tmp"])))
    waiting = engine.submit(Submission(name="waiting", command=("true",),
                                       working_dir=str(jobs["tmp"])))
    deadline = time.monotonic() + 60
    while "Resources" not in engine.job(waiting.job_id).message:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    try:
        fleet = carl_tui("fleet", "--slurm", "--json", env=slurm.env)
        table = carl_tui("fleet", "--slurm", env=slurm.env)  # piped: the printed table
        squeue = json.loads(subprocess.run(["squeue", "--json"], capture_output=True,
                                           text=True, env=slurm.env, check=True).stdout)
    finally:
        for job in (waiting, fill):
            engine.stop(job.job_id)
    assert fleet.returncode == 0, fleet.stderr
    rows = {r["id"]: r for r in json.loads(fleet.stdout)}
    said = {str(j["job_id"]): j["job_state"] for j in squeue["jobs"]}
    done, stopped = jobs["done"].job_id, jobs["stopped"].job_id
    assert {k: (r["state"], r["job_state"]) for k, r in rows.items()} == {
        done: ("finished", "COMPLETED"), stopped: ("stopped", "CANCELLED"),
        fill.job_id: ("live", "RUNNING"), waiting.job_id: ("queued", "PENDING (Resources)")}
    assert all(r["job_state"].split(" ")[0] == said[k] for k, r in rows.items())
    assert rows[done]["last_step"] == STEPS and rows[done]["source"] == "slurm-job"
    [line] = [x for x in table.stdout.splitlines() if x.startswith(f"waiting ({waiting.job_id})")]
    assert "slurm-job  queued: PENDING (Resources)  " in line

    summary = carl_tui("summary", "--slurm-job", done, "--json", env=slurm.env)
    assert summary.returncode == 0, summary.stderr
    story = json.loads(summary.stdout)
    assert (story["first_step"], story["last_step"]) == (1, STEPS)
    export = carl_tui("export", "--slurm-job", done, "--metrics", "reward", env=slurm.env)
    trainer = stream_rows(jobs["tmp"] / "tiny-grpo.jsonl")
    exported = [json.loads(x) for x in export.stdout.splitlines()]
    assert [r["step"] for r in exported] == sorted(trainer)
    assert [r["reward"] for r in exported] == pytest.approx(
        [trainer[s]["reward"] for s in sorted(trainer)], rel=1e-3, abs=1e-6)
    unknown = carl_tui("summary", "--slurm-job", "999999", "--timeout", "5", env=slurm.env)
    assert unknown.returncode != 0 and "Slurm knows no job 999999" in unknown.stderr

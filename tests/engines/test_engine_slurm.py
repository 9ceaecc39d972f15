"""`SlurmEngine` on a real single-node Slurm cluster (tests/slurm_cluster.py): the batch
script it writes, submit, list, one job's state with a pending job's reason, its log,
stop, a secret that reaches the job and nothing else, and the words it says when a
command is missing or a job is unknown."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from carl_tui.engines.base import JobEngine, Submission
from carl_tui.engines.slurm import SlurmEngine, batch_script, slurm_time
from carl_tui.engines.slurm_records import STAGES, from_sacct_json, from_squeue_json
from carl_tui.errors import CarlError
from carl_tui.events import STAGE_LIFE, LogLines
from carl_tui.sources.base import SourceError
from carl_tui.sources.slurm_job import SlurmJobSource
from tests.slurm_cluster import cluster_fixture

slurm = pytest.fixture(scope="module")(cluster_fixture)

SECRET = "hf_PlantedSlurmSecretNeverShown42"
SCRIPT = ('echo "$GREETING"; echo "token ${#HF_TOKEN}"; [ "$HF_TOKEN" = "$EXPECT" ] && echo same; '
          "exit 3")


def wait_for(engine: SlurmEngine, job_id: str, done, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        job = engine.job(job_id)
        if done(job) or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


@pytest.fixture
def engine(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return SlurmEngine()


def test_the_script_says_every_request_and_quotes_the_command(tmp_path):
    sub = Submission(name="grpo-tiny", command=("python", "-c", "print('a b'); x=$HOME"),
                     env={"MODE": "it's"}, secrets={"HF_TOKEN": SECRET}, gpus=2, cpus=3,
                     time_limit_s=3601, working_dir=str(tmp_path),
                     options={"partition": "gpu"}, labels={"carl": "grpo", "sweep": "lr"})
    script = batch_script(sub)
    assert script.splitlines() == [
        "#!/bin/bash",
        "#SBATCH --job-name=grpo-tiny",
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus=2",
        "#SBATCH --cpus-per-task=3",
        "#SBATCH --time=0-01:01:00",
        f"#SBATCH --output={tmp_path}/carl-grpo-tiny-%j.out",
        f"#SBATCH --chdir={tmp_path}",
        "#SBATCH --comment=carl=grpo,sweep=lr",
        "# written by carl-tui",
        "# HF_TOKEN: from the environment sbatch was given (never written here)",
        "export MODE='it'\"'\"'s'",
        "exec python -c 'print('\"'\"'a b'\"'\"'); x=$HOME'",
    ]
    assert SECRET not in script
    no_gpu = batch_script(Submission(name="a", command=("true",), working_dir=str(tmp_path)))
    assert "--gpus" not in no_gpu and "--time" not in no_gpu
    assert slurm_time(59) == "0-00:01:00" and slurm_time(86400 + 120) == "1-00:02:00"


def test_check_names_every_problem_and_sends_nothing(tmp_path):
    engine = SlurmEngine(env={"PATH": str(tmp_path)})  # no Slurm command reachable
    assert isinstance(engine, JobEngine)
    bad = Submission(name="two words", command=(), env={"HF_TOKEN": SECRET}, gpus=-1,
                     time_limit_s=0, options={"partition": "a;b", "flavor": "x"},
                     labels={"sweep": "a b"})
    problems = engine.check(bad)
    assert problems == [
        "the job's name is letters, digits and _.:+@- (no spaces)",
        "the job needs a command",
        "GPUs are 0 or more, CPUs 1 or more",
        "the time limit is a number of seconds > 0",
        "the partition is letters, digits and _.:+@-",
        "'flavor' is not a Slurm option here (partition, account, qos, output)",
        "the label sweep=a b is letters, digits and _.:+@-",
        "HF_TOKEN is a secret: give it as a secret (the script shows plain variables)",
    ]
    with pytest.raises(CarlError) as err:
        engine.submit(bad)
    assert SECRET not in str(err.value) and list(engine.commands) == []
    assert engine.check(Submission(name="ok", command=("true",))) == []


def test_a_missing_command_says_where_to_run(tmp_path):
    engine = SlurmEngine(env={"PATH": str(tmp_path)})
    with pytest.raises(CarlError) as err:
        engine.submit(Submission(name="a", command=("true",)))
    assert str(err.value) == ("no sbatch on PATH: carl-tui drives Slurm through its "
                              "commands; run it on a login node")
    with pytest.raises(CarlError, match="^no squeue on PATH"):
        engine.jobs()


def test_every_state_is_a_stage_of_the_dashboard():
    assert set(STAGES.values()) <= set(STAGE_LIFE)
    assert {s: STAGE_LIFE[STAGES[s]] for s in ("PENDING", "RUNNING", "COMPLETING",
                                                "COMPLETED", "FAILED", "TIMEOUT",
                                                "OUT_OF_MEMORY", "CANCELLED")} == {
        "PENDING": "queued", "RUNNING": "live", "COMPLETING": "live",
        "COMPLETED": "finished", "FAILED": "failed", "TIMEOUT": "failed",
        "OUT_OF_MEMORY": "failed", "CANCELLED": "stopped"}


def test_the_newer_json_shapes_are_read():
    """Slurm 23.02 on: `job_state` a list, times and exit codes `{set, number}` objects
    (Slurm's OpenAPI v0.0.39+ schema); sacct's `state.current` and `time.*`."""
    [rec] = from_squeue_json({"jobs": [{
        "job_id": 7, "job_state": ["PENDING"], "state_reason": "Priority", "name": "g",
        "user_name": "ana", "partition": "gpu",
        "submit_time": {"set": True, "infinite": False, "number": 1700000000},
        "start_time": {"set": False, "infinite": False, "number": 0},
        "end_time": {"set": True, "infinite": True, "number": 0},
        "standard_output": "/scratch/ana/out-%j.log",
        "exit_code": {"status": ["PENDING"], "return_code": {"set": False, "number": 0}}}]})
    job = rec.job()
    assert (job.stage, job.message, job.created_at, job.started_at, rec.stdout) == (
        "SCHEDULING", "PENDING (Priority)", 1700000000.0, None, "")
    [acct] = from_sacct_json({"jobs": [{
        "job_id": 9, "name": "g", "user": "ana", "partition": "gpu",
        "state": {"current": ["TIMEOUT"], "reason": "None"},
        "time": {"submission": 1700000000, "start": 1700000010, "end": 1700000070},
        "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": 1}}}]})
    assert (acct.job().stage, acct.job().message, acct.job().finished_at) == (
        "ERROR", "TIMEOUT (exit 1)", 1700000070.0)


def test_submit_log_and_a_secret_only_the_job_sees(engine, tmp_path):
    sub = Submission(name="echo", working_dir=str(tmp_path), env={"GREETING": "hello there"},
                     secrets={"HF_TOKEN": SECRET}, labels={"carl": "echo"},
                     command=("bash", "-c", SCRIPT))
    os.environ["EXPECT"] = SECRET  # the job checks the value without printing it
    try:
        job = engine.submit(sub)
    finally:
        del os.environ["EXPECT"]
    assert job.stage in ("SCHEDULING", "RUNNING") and job.run.source == "slurm-job"
    ended = wait_for(engine, job.job_id, lambda j: j.ended)
    assert (ended.stage, ended.message, ended.name, ended.label) == (
        "ERROR", "FAILED (NonZeroExitCode, exit 3)", "echo", "carl=echo")
    assert {j.job_id: j.label for j in engine.jobs()}[job.job_id] == "carl=echo"
    assert ended.started_at is not None and ended.finished_at >= ended.started_at
    chunk = engine.log(job.job_id)
    assert chunk.text == f"hello there\ntoken {len(SECRET)}\nsame\n"
    assert engine.log(job.job_id, chunk.offset).text == ""
    record = engine.record(job.job_id)
    assert record.stdout == f"{tmp_path}/carl-echo-{job.job_id}.out"
    # the secret is in no command line sent, nor in anything Slurm tells
    said = [subprocess.run(cmd, check=False, capture_output=True, text=True).stdout for cmd in (
        ["squeue", "--json"], ["scontrol", "show", "job", job.job_id])]
    assert all(SECRET not in " ".join(c) for c in engine.commands)
    assert all(SECRET not in text and job.job_id in text for text in said)


def test_a_pending_job_says_its_reason_and_stop_cancels(engine, slurm, tmp_path):
    fill = engine.submit(Submission(name="fill", command=("sleep", "60"), cpus=slurm.cpus,
                                    working_dir=str(tmp_path)))
    wait_for(engine, fill.job_id, lambda j: j.stage == "RUNNING")
    waiting = engine.submit(Submission(name="waiting", command=("true",),
                                       working_dir=str(tmp_path)))
    pending = wait_for(engine, waiting.job_id, lambda j: "Resources" in j.message)
    assert (pending.stage, pending.message, pending.life) == (
        "SCHEDULING", "PENDING (Resources)", "queued")
    listed = {j.job_id: j for j in engine.jobs()}
    assert listed[waiting.job_id].message == "PENDING (Resources)"
    assert listed[fill.job_id].stage == "RUNNING"
    # a Slurm without --json: `squeue -o` says the same
    old = SlurmEngine(squeue_json=False)
    by_format = {j.job_id: j for j in old.jobs()}
    assert by_format[waiting.job_id].message == "PENDING (Resources)"
    assert by_format[fill.job_id].stage == "RUNNING"
    assert not any("--json" in c for c in old.commands)

    for job_id in (waiting.job_id, fill.job_id):
        engine.stop(job_id)
        stopped = wait_for(engine, job_id, lambda j: j.ended)
        assert (stopped.stage, stopped.message, stopped.life) == (
            "CANCELED", "CANCELLED", "stopped")
    assert ("scancel", fill.job_id) in engine.commands


def test_an_unknown_job_is_said_as_such(engine):
    with pytest.raises(CarlError) as err:
        engine.job("987654")
    assert err.value.kind == "not_found" and not err.value.retry
    assert str(err.value).startswith("Slurm knows no job 987654 (the controller forgets")
    with pytest.raises(CarlError, match="is not a Slurm job id"):
        engine.stop("12; rm -rf /")


def test_a_job_is_followed_while_its_controller_restarts(engine, slurm, tmp_path):
    """slurmctld down mid-job: the job's log is still read (scontrol cannot answer, its
    failure said only when nothing came); up again, the job is seen to its end."""
    job = engine.submit(Submission(
        name="ticks", working_dir=str(tmp_path),
        command=("bash", "-c", "for i in $(seq 1 30); do echo tick $i; sleep 0.3; done")))
    source = SlurmJobSource(job.job_id, engine=SlurmEngine(timeout_s=3),
                            status_interval=0.2)
    lines: list[str] = []
    failures: list[str] = []

    def poll_until(done, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, (lines, failures)
            try:
                events = source.poll()
            except SourceError as exc:
                failures.append(str(exc))
                events = []
            lines.extend(x for ev in events if isinstance(ev, LogLines) for x in ev.lines)
            time.sleep(0.1)

    poll_until(lambda: "tick 3" in lines)
    slurm.stop_controller()
    try:
        seen = len(lines)
        poll_until(lambda: len(lines) >= seen + 5)  # the log goes on without the controller
    finally:
        slurm.start_controller()
    poll_until(lambda: source.finished)
    assert lines == [f"tick {i}" for i in range(1, 31)]
    assert (source.job.stage, source.job.message) == ("COMPLETED", "COMPLETED")


def test_a_json_that_ignores_the_user_is_not_asked_again(engine, slurm, tmp_path):
    """Slurm 22.05's `squeue --json` lists every user's jobs whatever `--user` says: once
    seen, the list is asked with `squeue -o`, which the controller filters."""
    if os.geteuid() != 0:
        pytest.skip("a job of another user is submitted as root (sbatch --uid)")
    other = subprocess.run(["sbatch", "--parsable", "--uid=nobody", "--gid=nogroup",
                            f"--chdir={tmp_path}", "-o", "/dev/null", "--wrap", "true"],
                           capture_output=True, text=True, check=True).stdout.strip()
    mine = engine.submit(Submission(name="mine", command=("true",), working_dir=str(tmp_path)))
    first = {j.job_id for j in engine.jobs()}
    assert mine.job_id in first and other not in first
    assert engine.squeue_json is False
    engine.commands.clear()
    again = {j.job_id for j in engine.jobs()}
    assert again == first
    assert [c[:2] for c in engine.commands] == [("squeue", "-h")]
    everyone = {j.job_id for j in SlurmEngine("*").jobs()}
    assert {mine.job_id, other} <= everyone

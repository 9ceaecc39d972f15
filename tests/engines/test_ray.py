"""Ray Jobs: the engine over the dashboard's REST API, the job sources, and the launch
form, `s` and `j` on a real local Ray head (tests/ray_cluster.py). The tests of what needs no
cluster (the address, the mapping of Ray's words, the refusals) run everywhere; the rest
skip with one line where Ray is not installed (`make ray`), and fail under CI."""

from __future__ import annotations

import ast
import json
import socket
import time

import httpx
import pytest

from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.engines.base import JobEngine, Submission
from carl_tui.engines.ray import (
    SECRETS_REFUSED,
    RayEngine,
    dashboard_url,
    job_from_details,
    ray_run,
)
from carl_tui.errors import CarlError
from carl_tui.events import LogLines, ScalarBatch
from carl_tui.sources.ray_job import ray_job_source, ray_jobs_source
from tests.conftest import wait_until

SECRET = "hf_PlantedRayTokenShouldNeverLeave42"


def tiny_spec(address: str, tmp_path, steps: int, name: str) -> LaunchSpec:
    """A GRPO run of the offline tiny model on the CPU: seconds, no download."""
    return LaunchSpec(target="ray", model="tiny", dataset="tiny", max_steps=steps,
                      num_generations=2, carl=False, learning_rate=3e-4, run_name=name,
                      output_dir=str(tmp_path / name), ray_address=address,
                      extra_args=("--no-save",))


def trainer_steps(log: str) -> list[int]:
    """The steps of the Trainer's own log: one dict line with `loss` per logged step
    (logging_steps 1), numbered from 1, as the Trainer counts them."""
    dicts = [ast.literal_eval(line.strip()) for line in log.splitlines()
             if line.strip().startswith("{'loss'")]
    return list(range(1, len(dicts) + 1))


def ray_state(url: str, job_id: str) -> str:
    return httpx.get(f"{url}/api/jobs/{job_id}", timeout=5).json()["status"]


# -- without a cluster ----------------------------------------------------------------


def test_the_address_is_the_dashboard_url_and_never_carries_credentials(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert dashboard_url() == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "head.example:8265")
    assert dashboard_url() == "http://head.example:8265"
    assert dashboard_url("https://ray.example/prefix/") == "https://ray.example/prefix"
    with pytest.raises(CarlError, match="not a Ray dashboard address"):
        dashboard_url("ray://head:10001")
    with pytest.raises(CarlError, match="user name or password") as err:
        dashboard_url("http://alice:s3cretpw@head:8265")
    assert "s3cretpw" not in str(err.value)


def test_ray_states_map_to_the_stage_words_and_keep_rays_own_word():
    url = "http://127.0.0.1:8265"
    base = {"submission_id": "s-1", "entrypoint": f"python train.py --hub-token {SECRET}",
            "start_time": 1_700_000_000_000, "message": "Job was intentionally stopped."}
    words = {"PENDING": ("SCHEDULING", "queued"), "RUNNING": ("RUNNING", "live"),
             "SUCCEEDED": ("COMPLETED", "finished"), "FAILED": ("ERROR", "failed"),
             "STOPPED": ("CANCELED", "stopped")}
    for ray, (stage, life) in words.items():
        job = job_from_details(url, {**base, "status": ray})
        assert (job.stage, job.life) == (stage, life)
        assert job.message == f"{ray}: Job was intentionally stopped."
    job = job_from_details(url, {**base, "status": "SUCCEEDED", "end_time": 1_700_000_010_000})
    assert job.run == ray_run(url, "s-1") and job.run.project == "127.0.0.1:8265"
    assert job.created_at == 1_700_000_000.0 and job.finished_at == 1_700_000_010.0
    assert SECRET not in job.label and SECRET not in " ".join(job.command)
    assert job.command[:2] == ("python", "train.py")
    assert job_from_details(url, {**base, "status": "PENDING"}).started_at is None


def test_secrets_are_refused_with_the_way_to_give_the_cluster_its_token():
    engine = RayEngine("http://127.0.0.1:9")
    assert isinstance(engine, JobEngine)
    sub = Submission(name="t", command=("python", "-V"), secrets={"HF_TOKEN": SECRET})
    assert engine.check(sub) == [SECRETS_REFUSED]
    assert "ray start" in SECRETS_REFUSED and "no secrets store" in SECRETS_REFUSED
    with pytest.raises(CarlError, match="no secrets store") as err:
        engine.submit(sub)  # refused before anything is sent (nothing listens on port 9)
    assert SECRET not in str(err.value)
    plain = Submission(name="t", command=("python", "-V"), env={"HF_TOKEN": SECRET})
    assert any("is a secret" in p for p in engine.check(plain))
    bad = Submission(name="a b", command=(), gpus=-1, options={"flavor": "x"})
    problems = engine.check(bad)
    assert len(problems) == 4, problems


def test_the_submission_is_rays_own_request(tmp_path):
    spec = tiny_spec("http://127.0.0.1:8265", tmp_path, 3, "ray-unit").with_(num_gpus=2)
    sub = spec.submission()
    assert sub.gpus == 2 and not sub.secrets
    assert sub.command[:5] == ("python", "-m", "accelerate.commands.launch",
                               "--num_processes", "2")
    body = RayEngine(spec.ray_address).payload(sub)
    assert set(body) == {"entrypoint", "submission_id", "metadata", "runtime_env",
                         "entrypoint_num_cpus", "entrypoint_num_gpus"}
    assert body["entrypoint_num_gpus"] == 2 and body["entrypoint_num_cpus"] == 1
    assert body["submission_id"].startswith("ray-unit-")
    assert body["runtime_env"] == {"env_vars": {"PYTHONUNBUFFERED": "1"}}
    assert "--max-steps 3" in body["entrypoint"]
    assert spec.with_(num_gpus=-1).validate() == [
        "GPUs must be a whole number of 0 or more (got -1)."]
    assert "Ray address" in spec.with_(ray_address="ray://h:10001").validate()[0]


def test_no_dashboard_says_how_to_start_or_tunnel_one():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = RayEngine(f"http://127.0.0.1:{port}", backoff_s=0.01)
    t0 = time.monotonic()
    with pytest.raises(CarlError) as err:
        engine.jobs()
    assert time.monotonic() - t0 < 5  # refused: said at once, not retried for long
    assert str(err.value) == (f"Listing the Ray jobs: no Ray dashboard at "
                              f"http://127.0.0.1:{port}: start one with `ray start --head` or "
                              "tunnel it: `ssh -L 8265:localhost:8265 HEAD`")


# -- on a real Ray head -----------------------------------------------------------------


PRINTER = ("import time\n"
           "for step in range(1, 6):\n"
           "    print({'loss': 1.0 / step, 'reward': step / 10, 'epoch': step / 5}, flush=True)\n"
           "    time.sleep(0.4)\n"
           "print({'train_runtime': 2.0, 'train_loss': 0.5, 'epoch': 1.0}, end='')\n")


def test_a_job_is_followed_to_its_end_with_the_trainers_steps(ray_head):
    """A job printing Trainer log lines over two seconds (the real training is launched
    from the form in test_ray_ui): its log read incrementally, each line once, its last
    line (no newline) kept, the steps those of the log, its end the run's life."""
    engine = RayEngine(ray_head.url)
    job = engine.submit(Submission(name="follow", command=("python", "-c", PRINTER)))
    assert job.stage in ("SCHEDULING", "RUNNING")
    source = ray_job_source(job.job_id, ray_head.url, interval=0.2)
    events, texts, reads = [], [], []

    def read() -> bool:
        batch = source.poll()
        events.extend(batch)
        new = [line for e in batch if isinstance(e, LogLines) for line in e.lines]
        texts.extend(new)
        reads.append(len(new))
        return source.finished

    wait_until(read, "the job followed to its end", timeout=120)
    log = engine.log(job.job_id).text
    assert sum(1 for n in reads if n) >= 2  # the log came in more than one read
    assert "\n".join(texts) == log.rstrip("\n")  # each line once, in order: the log
    steps = sorted({int(s) for e in events if isinstance(e, ScalarBatch) and "loss" in e.columns
                    for s in e.steps})
    assert steps == trainer_steps(log) == [1, 2, 3, 4, 5]
    assert source.state.stage == "COMPLETED" and ray_state(ray_head.url, job.job_id) == "SUCCEEDED"
    assert source.take_run_states()[-1].state == "finished"


def test_the_list_reads_each_jobs_state_as_ray_says_it(ray_head, tmp_path):
    engine = RayEngine(ray_head.url)
    done = engine.submit(Submission(name="list-done", command=("python", "-c", "print(1)")))
    wait_until(lambda: engine.job(done.job_id).ended, "the job ended", timeout=60)
    source = ray_jobs_source(ray_head.url, read_logs=True)
    events = source.poll()
    assert source.finished
    listed = {e.job_id: e for e in events if hasattr(e, "job_id") and hasattr(e, "stage")}
    truth = httpx.get(f"{ray_head.url}/api/jobs/", timeout=5).json()
    for info in truth:
        if info.get("submission_id") in listed:
            assert listed[info["submission_id"]].message.split(":")[0] == info["status"]
    assert listed[done.job_id].stage == "COMPLETED"


def test_carl_tui_launch_targets_ray_with_its_gpu_request(capsys):
    from carl_tui.actions.launch_cli import main

    assert main(["--target", "ray", "--model", "tiny", "--dataset", "tiny", "--gpus", "2",
                 "--ray-address", "127.0.0.1:8265", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Ray (127.0.0.1:8265, 2 GPU)" in out
    assert "python -m accelerate.commands.launch --num_processes 2 -m carl_tui train" in out
    assert main(["--target", "ray", "--gpus", "-2", "--dry-run"]) == 2
    assert "GPUs must be a whole number of 0 or more (got -2)" in capsys.readouterr().err


def test_the_live_list_reads_each_jobs_log_once_as_it_grows(ray_head):
    engine = RayEngine(ray_head.url)
    job = engine.submit(Submission(name="list-live", command=("python", "-c", PRINTER)))
    source = ray_jobs_source(ray_head.url, interval=0.2)
    events = []

    def read() -> bool:
        events.extend(source.poll())
        log = source.logs.get(job.job_id)
        return log is not None and log.done

    wait_until(read, "the job's log read to its end by the list", timeout=120)
    assert not source.finished and source.list_calls >= 2  # live: it lists again
    steps = [int(s) for e in events if isinstance(e, ScalarBatch) and "loss" in e.columns
             and e.run.run_id == job.job_id for s in e.steps]
    assert steps == trainer_steps(engine.log(job.job_id).text) == [1, 2, 3, 4, 5]


def test_fleet_ray_lists_every_job_with_rays_state_and_summary_agrees(ray_head, capsys):
    from tests.report.test_report import cli, export_rows, summary
    from tests.store.test_fleet import assert_agrees_with_summary, fleet

    engine = RayEngine(ray_head.url)
    done = engine.submit(Submission(name="fleet-done", command=("python", "-c", PRINTER)))
    failed = engine.submit(Submission(name="fleet-failed", command=(
        "python", "-c", "raise SystemExit(3)", "--hub-token", SECRET)))
    wait_until(lambda: engine.job(done.job_id).ended and engine.job(failed.job_id).ended,
               "both jobs ended", timeout=120)
    address = ["--ray-address", ray_head.url]
    rows = {r["id"]: r for r in fleet(["--ray", *address, "--timeout", "30"], capsys)}
    truth = httpx.get(f"{ray_head.url}/api/jobs/", timeout=5).json()
    life = {"PENDING": "queued", "RUNNING": "live", "SUCCEEDED": "finished",
            "FAILED": "failed", "STOPPED": "stopped"}
    submitted = [t for t in truth if t.get("submission_id")]
    assert {r["id"] for r in rows.values()} == {t["submission_id"] for t in submitted}
    for info in submitted:  # what Ray said then: an ended job's state cannot change
        if info["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
            assert rows[info["submission_id"]]["state"] == life[info["status"]], info
    assert rows[failed.job_id]["state"] == "failed" and rows[done.job_id]["source"] == "ray-job"
    assert rows[failed.job_id]["config"]["command"][-2:] == ["--hub-token", "[REDACTED]"]
    assert SECRET not in json.dumps(list(rows.values()))  # the entrypoint masked
    assert (rows[done.job_id]["first_step"], rows[done.job_id]["last_step"]) == (1, 5)
    s = summary(["--ray-job", done.job_id, *address, "--timeout", "30"], capsys)
    assert_agrees_with_summary(rows[done.job_id], s)
    steps = [r["step"] for r in export_rows(["--ray-job", done.job_id, *address,
                                             "--timeout", "30"], capsys) if "loss" in r]
    assert steps == [1, 2, 3, 4, 5]
    rc, _out, err = cli(["summary", "--ray-job", "no-such-job", *address, "--timeout", "5"],
                        capsys)
    assert rc != 0 and "no such job" in err


def test_a_submit_that_had_gone_through_is_the_same_job(ray_head):
    """A submit retried after a dropped reply: Ray refuses the submission id it holds
    (the head passes on its agent's ValueError "... already exists" as a 500), and the
    engine answers with that job, not an error."""
    engine = RayEngine(ray_head.url)
    sub = Submission(name="twice", command=("python", "-c", "print(2)"))
    body = engine.payload(sub)
    first = httpx.post(f"{ray_head.url}/api/jobs/", json=body, timeout=10)
    assert first.status_code == 200
    engine.payload = lambda _sub: body  # the same request again
    job = engine.submit(sub)
    assert job.job_id == body["submission_id"] == first.json()["submission_id"]
    again = httpx.post(f"{ray_head.url}/api/jobs/", json=body, timeout=10)
    assert again.status_code == 500 and "already exists" in again.text

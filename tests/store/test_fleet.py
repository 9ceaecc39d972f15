"""`carl-tui fleet` and `store.fleet` on runs the real writers wrote: one row per run, its
numbers those of `summary --run` for the same run, its state, the sweep's axes."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import pytest

from carl_tui.events import STAGE_LIFE, Job, RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.store.fleet import (
    STALL_FACTOR,
    STALL_MIN_S,
    STALL_UNKNOWN_S,
    FleetRow,
    differing_keys,
    fleet_rows,
)
from tests.conftest import spec_trajectory
from tests.report.test_report import cli, summary


def fleet(argv, capsys) -> list[dict]:
    rc, out, err = cli(["fleet", *argv, "--json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def assert_agrees_with_summary(row: dict, s: dict) -> None:
    """The fleet's numbers are summary's for the same run."""
    assert row["run"] == s["run"]
    assert (row["first_step"], row["last_step"]) == (s["first_step"], s["last_step"])
    if s["phases"]:
        last = s["phases"][-1]
        assert row["phase"] == {"phase": last["phase"], "stage": last["stage"],
                                "from_step": last["from_step"], "seen_at": last["seen_at"]}
    else:
        assert row["phase"] == {"phase": None, "stage": None, "from_step": None,
                                "seen_at": None}
    assert row["gate"] == s["gate"]
    task = row["task"]["metric"]
    if task is not None:
        m = s["metrics"][task]
        assert (row["task"]["last"], row["task"]["best"]) == (m["last"], m["max"])
    if "loss" in s["metrics"]:
        assert row["loss"] == s["metrics"]["loss"]["last"]


def each_agrees(rows: list[dict], source_argv: list[str], capsys) -> None:
    for row in rows:
        assert_agrees_with_summary(row, summary([*source_argv, "--run", row["id"]], capsys))


# -- a Trackio sweep, written by trackio ---------------------------------------------------


SWEEP = [  # (run, lr, seed, finished)
    ("sweep-lr1e-4-s0", 1e-4, 0, False),
    ("sweep-lr1e-4-s1", 1e-4, 1, False),
    ("sweep-lr3e-4-s0", 3e-4, 0, True),
]


def sweep_points(seed: int, finished: bool) -> list[dict]:
    points = [{"train/mean_token_accuracy": v["mean_token_accuracy"],
               "train/entropy": v["entropy"], "train/loss": v["loss"],
               "train/global_step": 10 * (step + 1)}
              for step, v in spec_trajectory(n=46, seed=seed)]
    if finished:  # the Trainer's end-of-training values, at the last step
        points.append({"train/train_runtime": 123.4, "train/train_loss": 0.61,
                       "train/train_steps_per_second": 3.7, "train/global_step": 460})
    return points


@pytest.fixture(scope="module")
def trackio_sweep(tmp_path_factory):
    pytest.importorskip("trackio")
    from tests.fakes.trackio_server import start_writer, wait_writer

    root = tmp_path_factory.mktemp("trackio-sweep")
    for name, lr, seed, finished in SWEEP:  # one after the other: one database
        config = {"learning_rate": lr, "seed": seed, "model": "tiny-llama",
                  "output_dir": f"/tmp/out/{name}", "run_name": name}
        wait_writer(start_writer(root, "sweep", name, sweep_points(seed, finished),
                                 config=config))
    return root


def test_fleet_of_a_trackio_sweep_agrees_with_summary(trackio_sweep, capsys):
    argv = ["--project", "sweep", "--trackio-dir", str(trackio_sweep)]
    rows = fleet(argv, capsys)
    assert sorted(r["run"] for r in rows) == sorted(name for name, *_ in SWEEP)
    by_name = {r["run"]: r for r in rows}
    for name, lr, seed, finished in SWEEP:
        row = by_name[name]
        assert row["source"] == "trackio"
        # a run just written: live, until the source says more (or its end was read)
        assert row["state"] == ("finished" if finished else "live")
        assert row["config"]["learning_rate"] == lr and row["config"]["seed"] == seed
        assert row["first_step"] == 10 and row["last_step"] == 460
        assert row["task"]["metric"] == "mean_token_accuracy"
        assert row["phase"]["stage"] == "accuracy" and row["gate"]["fired_at"] is not None
        assert row["loss"] is not None and row["updated_at"] <= time.time()
    each_agrees(rows, argv, capsys)
    # the table: one line per run, the sweep's axes as columns (not the run's names/paths)
    rc, out, _ = cli(["fleet", *argv], capsys)
    assert rc == 0
    header, *lines = out.splitlines()
    assert header.split() == ["run", "source", "state", "step", "updated", "phase", "gate",
                              "task", "last", "best", "health", "learning_rate", "seed"]
    assert len(lines) == len(SWEEP)
    finished = next(line for line in lines if line.startswith("sweep-lr3e-4-s0"))
    fired = by_name["sweep-lr3e-4-s0"]["gate"]["fired_at"]
    assert finished.split()[2:4] == ["finished", "460"] and f" {fired} " in finished
    assert finished.split()[-2:] == ["0.0003", "0"]


def test_a_sweep_read_long_after_it_stopped_is_stalled_but_its_finished_run_is_not(
        trackio_sweep):
    """A history read in one batch has no measured interval: stalled after
    STALL_UNKNOWN_S without an update."""
    from carl_tui.report.collect import collect
    from carl_tui.sources.trackio.local import TrackioLocalSource

    store = RunStore()
    collect([TrackioLocalSource("sweep", root=trackio_sweep)], store, patient=False)
    rows = fleet_rows(store)
    newest = max(r.updated_at for r in rows)
    soon = {r.run.label: r.state for r in fleet_rows(store, now=newest + 60)}
    later = {r.run.label: r.state for r in fleet_rows(store, now=newest + STALL_UNKNOWN_S + 1)}
    assert soon == {"sweep-lr1e-4-s0": "live", "sweep-lr1e-4-s1": "live",
                    "sweep-lr3e-4-s0": "finished"}
    assert later == {"sweep-lr1e-4-s0": "stalled", "sweep-lr1e-4-s1": "stalled",
                     "sweep-lr3e-4-s0": "finished"}
    assert differing_keys(rows) == ["learning_rate", "seed"]


# -- TensorBoard, W&B, JSONL and Trainer logs ---------------------------------------------


def test_fleet_of_a_tensorboard_logdir_agrees_with_summary(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    rng = random.Random(3)
    for run, lr in (("grpo-a", 1e-5), ("grpo-b", 3e-5), ("sft-c", 1e-5)):
        w = SummaryWriter(str(tmp_path / "logs" / run))
        w.add_text("args", json.dumps({"learning_rate": lr, "output_dir": f"out/{run}",
                                       "per_device_train_batch_size": 8}))
        for step in range(0, 200, 5):
            w.add_scalar("train/loss", 3.0 * math.exp(-step / 60) + rng.random() * 0.05, step)
            if run.startswith("grpo"):
                w.add_scalar("train/reward", 0.1 + step / 250 + rng.random() * 0.02, step)
            else:
                w.add_scalar("train/mean_token_accuracy", min(0.99, step / 150), step)
            w.add_scalar("train/entropy", 2.0 - step / 200, step)
        w.close()
    argv = ["--tensorboard", str(tmp_path / "logs")]
    rows = fleet(argv, capsys)
    assert sorted(r["run"] for r in rows) == ["grpo-a", "grpo-b", "sft-c"]
    by_name = {r["run"]: r for r in rows}
    assert by_name["grpo-a"]["task"]["metric"] == "reward"
    assert by_name["grpo-a"]["phase"]["stage"] == "reward"
    assert by_name["sft-c"]["task"]["metric"] == "mean_token_accuracy"
    assert by_name["sft-c"]["task"]["best"] == pytest.approx(0.99, rel=1e-6)
    assert all(r["source"] == "tensorboard" and r["state"] == "live" for r in rows)
    assert all(len(r["task"]["trend"]) >= 10 for r in rows)
    each_agrees(rows, argv, capsys)
    rc, out, _ = cli(["fleet", *argv], capsys)
    assert rc == 0 and out.splitlines()[0].split()[-1] == "learning_rate"


@pytest.fixture(scope="module")
def wandb_runs(tmp_path_factory):
    from tests.sources.test_source_wandb import _has_wandb, sft_rows, start_writer

    if not _has_wandb():
        pytest.skip("needs wandb (the [wandb] extra)")
    root = tmp_path_factory.mktemp("wandb-fleet")
    plan = {"runs": [
        {"project": "fleet", "name": f"sft-seed{seed}", "rows": sft_rows(n=40, seed=seed),
         "config": {"seed": seed, "learning_rate": 2e-5, "model": "tiny/llama"}}
        for seed in (1, 2, 3)
    ]}
    proc = start_writer(root, plan)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()
    return root


def test_fleet_of_a_wandb_folder_agrees_with_summary(wandb_runs, capsys):
    argv = ["--wandb", str(wandb_runs)]
    rows = fleet(argv, capsys)
    assert sorted(r["run"] for r in rows) == ["sft-seed1", "sft-seed2", "sft-seed3"]
    for r in rows:
        assert r["source"] == "wandb"
        assert r["state"] == "finished"  # each run's exit record was read
        assert r["last_step"] == 39 and r["task"]["metric"] == "mean_token_accuracy"
    each_agrees(rows, argv, capsys)
    rc, out, _ = cli(["fleet", *argv], capsys)
    assert rc == 0 and out.splitlines()[0].split()[-1] == "seed"


def test_fleet_of_a_trainer_log_and_a_stream(trainer_logs, tmp_path, capsys):
    log = str(trainer_logs["sft_ls5"])
    (row,) = fleet([log], capsys)
    assert row["source"] == "trainer-log"
    assert row["state"] == "finished"  # the Trainer's end-of-training line was read
    assert_agrees_with_summary(row, summary([log], capsys))

    path = tmp_path / "stream.jsonl"
    t0 = 1_760_000_000.0
    with open(path, "w") as f:
        f.write(json.dumps({"event": "meta", "name": "spec", "vocab_size": 151936,
                            "learning_rate": 1e-4}) + "\n")
        f.writelines(json.dumps({"step": step, "time": t0 + 30 * step, **values}) + "\n"
                     for step, values in spec_trajectory(n=46, seed=2))
    (row,) = fleet([str(path)], capsys)
    assert row["state"] == "stopped"  # its rows are dated 2025: silent far beyond its beat
    assert row["updated_at"] == t0 + 30 * 45 and row["config"]["learning_rate"] == 1e-4
    assert_agrees_with_summary(row, summary([str(path)], capsys))


# -- the state of a run, by rule ----------------------------------------------------------


def dated_run(store: RunStore, name: str, gap: float, n: int = 20, t0: float = 1000.0):
    import numpy as np

    ref = RunRef("jsonl", "p", name, name)
    steps = np.arange(n, dtype=np.int64)
    store.apply([ScalarBatch(ref, steps, {"loss": np.linspace(2.0, 1.0, n)},
                             wall_time=t0 + gap * (n - 1), times=t0 + gap * steps)])
    return t0 + gap * (n - 1)


def test_stalled_is_several_times_the_runs_own_interval():
    store = RunStore()
    slow_last = dated_run(store, "slow", gap=30.0)  # 30 s between rows: stalled after 150 s
    fast_last = dated_run(store, "fast", gap=0.5)  # 0.5 s: after the 60 s floor
    assert STALL_FACTOR * 30.0 > STALL_MIN_S > STALL_FACTOR * 0.5

    def states(now):
        return {r.run.run_id: r.state for r in fleet_rows(store, now=now)}

    assert states(slow_last + 149) == {"slow": "live", "fast": "stalled"}
    assert fast_last == pytest.approx(1009.5)
    assert states(fast_last + 59) == {"slow": "live", "fast": "live"}
    assert states(slow_last + 151) == {"slow": "stalled", "fast": "stalled"}


@pytest.mark.parametrize("stage", sorted(STAGE_LIFE))
def test_a_jobs_row_says_its_jobs_life(stage):
    """The row's state is the job's own life for every stage a job can have (a training
    this machine started and whose process is gone is ENDED: finished, not live)."""
    store = RunStore()
    run = RunRef("hf-job", "me", "job-1", "job-1")
    store.apply([Job(run, "job-1", stage, flavor="local", started_at=time.time())])
    [row] = fleet_rows(store)
    assert row.state == Job(run, "job-1", stage).life == STAGE_LIFE[stage]


@pytest.mark.parametrize(("config", "epochs", "state"), [
    ({"max_steps": 20}, 1.0, "finished"),          # its last step is the one asked for
    ({"max_steps": "20"}, 1.0, "finished"),        # a YAML config's string
    ({"max_steps": 500}, 1.0, "stopped"),          # short of it: silent for 6,000 s
    ({"max_steps": -1, "num_train_epochs": 3}, 3.0, "finished"),  # epochs decide
    ({"max_steps": -1, "num_train_epochs": 3}, 2.5, "stopped"),
    ({"learning_rate": 1e-4}, 1.0, "stopped"),     # no end to compare with
    ({"kind": "sft", "steps": 20}, 1.0, "finished"),  # a sweep's spec: its own step count
    ({"total_steps": 20}, 1.0, "finished"),
    ({"steps": 500}, 1.0, "stopped"),
])
def test_a_run_that_logged_its_last_step_is_finished(config, epochs, state):
    """Trackio keeps no end of a run: a run whose rows reach the end its Trainer's config
    sets (`max_steps`, or `num_train_epochs` by the epoch it logs, as TRL's report_to
    logs the config) is finished, not stalled, however long ago it stopped."""
    import numpy as np

    from carl_tui.events import RunMeta

    store = RunStore()
    ref = RunRef("jsonl", "p", "run", "run")  # dated_run's
    last = dated_run(store, "run", gap=2.0, n=21)  # steps 0..20
    store.apply([RunMeta(ref, {"config": config}),
                 ScalarBatch(ref, np.array([20]), {"epoch": np.array([epochs])},
                             wall_time=last)])
    [row] = fleet_rows(store, now=last + 10 * STALL_UNKNOWN_S)
    assert row.state == state and row.last_step == 20


def test_jobs_first_seen_are_recorded_not_announced():
    """Listing 50 jobs is not 50 pieces of news: a job first seen is in its run's events
    but raises no notice, unless it failed; a later change of stage is announced."""
    store = RunStore()
    runs = [RunRef("hf-job", "me", f"job-{i}", f"job-{i}") for i in range(50)]
    store.apply([Job(r, r.run_id, "RUNNING" if i else "ERROR", flavor="a10g-small")
                 for i, r in enumerate(runs)])
    said = [n.text for n in store.take_notices()]
    assert said == ["job job-0: ERROR"]
    assert [e.text for e in store.snapshot(runs[7].key).events] == ["job job-7: RUNNING"]
    store.apply([Job(runs[7], "job-7", "COMPLETED", flavor="a10g-small")])
    assert [n.text for n in store.take_notices()] == ["job job-7: COMPLETED"]


def test_differing_keys_are_the_sweeps_axes():
    def row(name, **config):
        return FleetRow(run=RunRef("trackio", "p", name, name), source="trackio",
                        state="live", config=config)

    rows = [
        row("a", learning_rate=1e-4, seed=0, model="m", output_dir="out/a", run_name="a",
            lora={"r": 8}),
        row("b", learning_rate=3e-4, seed=0, model="m", output_dir="out/b", run_name="b",
            lora={"r": 16}),
        row("c", learning_rate=1e-4, seed=1, model="m", output_dir="out/c", run_name="c",
            lora={"r": 8}, beta=0.1),
    ]
    # beta is c's alone: not an axis (a key only one run has is that run's own)
    assert differing_keys(rows) == ["learning_rate", "seed", "lora"]
    assert differing_keys(rows[:1]) == []


def test_an_sft_and_a_grpo_run_differ_only_in_what_they_share(tmp_path, capsys):
    """One SFT and one GRPO run of a project: each trainer has dozens of keys the other
    lacks (96 config columns before); the axes are the keys both have with different
    values, and a tracker's `_` keys are in neither the table nor --json."""
    t0 = 1_760_000_000.0
    shared = {"model": "tiny", "seed": 0, "_Username": "someone", "_Created": "2025-10-09",
              "_Group": "g"}
    own = {"sft": {f"sft_key_{i}": i for i in range(48)} | {"learning_rate": 2e-5},
           "grpo": {f"grpo_key_{i}": i for i in range(48)} | {"learning_rate": 1e-6}}
    paths = []
    for name, keys in own.items():
        path = tmp_path / f"{name}.jsonl"
        with open(path, "w") as f:
            f.write(json.dumps({"event": "meta", "name": name, "project": "p",
                                "config": {**shared, **keys}}) + "\n")
            f.writelines(json.dumps({"step": step, "time": t0 + step, "loss": 2 - step / 10})
                         + "\n" for step in range(10))
        paths += ["--watch", str(path)]
    rc, out, _ = cli(["fleet", *paths], capsys)
    assert rc == 0
    assert out.splitlines()[0].split() == ["run", "source", "state", "step", "updated",
                                           "phase", "gate", "task", "last", "best",
                                           "health", "learning_rate"]
    rows = fleet(paths, capsys)
    assert len(rows) == 2
    for row in rows:
        assert not [k for k in row["config"] if k.startswith("_")], row["config"]
        assert row["config"]["model"] == "tiny"


# -- Hugging Face jobs, on the loopback fake -------------------------------------------------


@pytest.fixture
def hub(monkeypatch):
    pytest.importorskip("huggingface_hub")
    import huggingface_hub.constants as hc

    from tests.fakes.hub_jobs import JobsState, install_jobs_routes
    from tests.fakes.hub_repos import install_job_launch_routes
    from tests.fakes.server import FakeServer

    state = JobsState(user="alice", token="hf_FleetTestToken0001")
    srv = FakeServer()
    install_jobs_routes(srv, state)
    install_job_launch_routes(srv, state)
    with srv:
        monkeypatch.setattr(hc, "ENDPOINT", srv.url)
        monkeypatch.setenv("HF_TOKEN", state.token)
        yield srv, state


GPU_SAMPLE = {"cpu_usage_pct": 50.0, "memory_used_bytes": 2**30,
              "gpus": {"a": {"utilization": 90, "memory_used_bytes": 2**30},
                       "b": {"utilization": 70, "memory_used_bytes": 2**30}}}


@pytest.mark.timeout(120)
def test_fleet_of_jobs_queued_running_and_errored(hub, capsys):
    srv, jobs = hub
    now = time.time()
    jobs.add_job("job-queued", flavor="a10g-small")
    jobs.add_job("job-failed", flavor="a10g-small", stage="ERROR", message="out of memory",
                 created_at=now - 4000, started_at=now - 3600, finished_at=now - 1800)
    running = jobs.add_job("job-running", flavor="a10g-small", created_at=now - 100)
    jobs.set_stage("job-running", "RUNNING")
    started = running.started_at
    log = (Path(__file__).parents[1] / "data" / "trainer_stdout.txt").read_text().splitlines()
    jobs.append_log("job-running", *(line for line in log if "train_runtime" not in line))
    jobs.add_metrics("job-running", GPU_SAMPLE)

    def row(job):
        (r,) = fleet(["--job", job, "--namespace", "alice", "--timeout", "20"], capsys)
        return r

    queued, failed = row("job-queued"), row("job-failed")
    assert (queued["state"], queued["flavor"], queued["cost_usd"]) == ("queued", "a10g-small",
                                                                      0.0)
    assert queued["last_step"] is None and queued["phase"]["phase"] is None
    assert failed["state"] == "failed"
    assert failed["cost_usd"] == pytest.approx(0.5, abs=1e-3)  # $1.00/h for 30 minutes
    ran = row("job-running")
    done = time.time()
    assert ran["state"] == "live" and ran["source"] == "hf-job"
    assert ran["gpu_percent"] == pytest.approx(80.0)
    assert 0 < ran["cost_usd"] <= (done - started) / 3600 + 1e-6
    assert ran["last_step"] == 12 and ran["loss"] is not None  # (a log of loss, no accuracy)
    s = summary(["--job", "job-running", "--namespace", "alice", "--timeout", "20"], capsys)
    assert_agrees_with_summary(ran, s)
    # the prices came from the Hub's hardware list, asked once per command
    assert len(srv.requests_to("GET", r"^/api/jobs/hardware$")) == 3


def test_fleet_without_prices_says_so_and_prints_the_rest(hub, capsys):
    _srv, jobs = hub
    jobs.add_job("job-q", flavor="a10g-small")
    jobs.fail_next("hardware", 500, times=5)
    rc, out, err = cli(["fleet", "--job", "job-q", "--namespace", "alice", "--json",
                        "--timeout", "10"], capsys)
    assert rc == 0
    (row,) = json.loads(out)
    assert row["state"] == "queued" and row["cost_usd"] is None
    assert err.count("\n") == 1 and "job cost unknown" in err
    assert jobs.token not in err


# -- errors ---------------------------------------------------------------------------------


def test_fleet_errors_are_summarys(tmp_path, capsys):
    rc, _, err = cli(["fleet", str(tmp_path / "missing.jsonl")], capsys)
    assert rc == 1 and "no such file" in err
    rc, _, err = cli(["fleet", "--tensorboard", str(tmp_path), "--wandb", str(tmp_path),
                      "--run", "x"], capsys)  # several sources: every run (test_fleet_jobs.py)
    assert rc == 2 and "--run picks a run of one source" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    rc, out, err = cli(["fleet", str(empty), "--timeout", "1"], capsys)
    assert rc == 1 and out == "" and err.startswith("carl-tui: ") and err.count("\n") == 1


def test_fleet_is_in_the_help(capsys):
    rc, out, _ = cli(["--help"], capsys)
    assert rc == 0 and "fleet" in out
    rc, out, _ = cli(["fleet", "--help"], capsys)
    assert rc == 0 and "--json" in out and "--tensorboard" in out


def test_watch_a_folder_of_streams_and_logs(tmp_path, trainer_logs, capsys):
    """`--watch DIR`: every JSONL stream and Trainer log in the folder is a source (a
    sweep needed one flag a run: a folder was refused); a folder with none says so."""
    import shutil

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    t0 = 1_760_000_000.0
    for i in range(3):
        with open(sweep / f"run-{i}.jsonl", "w") as f:
            f.write(json.dumps({"event": "meta", "name": f"run-{i}", "project": "p"}) + "\n")
            f.writelines(json.dumps({"step": s, "time": t0 + s, "loss": 2 - s / 10 - i})
                         + "\n" for s in range(10))
    shutil.copy(trainer_logs["sft_ls5"], sweep / "train.log")
    (sweep / "notes.md").write_text("not a run\n")
    rows = fleet(["--watch", str(sweep)], capsys)
    assert sorted(r["source"] for r in rows) == ["jsonl"] * 3 + ["trainer-log"]
    assert {r["run"] for r in rows} >= {"run-0", "run-1", "run-2"}
    rc, out, err = cli(["summary", "--watch", str(sweep), "--run", "run-1", "--json"], capsys)
    assert rc == 0 and json.loads(out)["run"] == "run-1", err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, err = cli(["fleet", "--watch", str(empty)], capsys)
    assert rc == 2 and "is a directory with no JSONL stream or Trainer log" in err

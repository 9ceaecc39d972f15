"""`carl-tui fleet --jobs`: every Hugging Face job of a namespace, one row each, through the
real huggingface_hub client against the loopback fake of the Jobs API (tests/fakes/hub_jobs.py,
with the hardware list and its prices of tests/fakes/hub_repos.py); and `fleet` over several
sources at once, each written by its real writer."""

from __future__ import annotations

import json
import time

import pytest
from textual.widgets import DataTable

from carl_tui.redact import MASK
from tests.conftest import dashboard_config, plain_text, spec_trajectory, wait_for
from tests.report.test_report import cli, summary
from tests.store.test_fleet import (
    assert_agrees_with_summary,
    fleet,
    hub,  # noqa: F401  (the loopback Hub, a fixture)
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def loopback_hub(request):
    """The Hub's fake on loopback (`test_fleet.hub`): (the server, alice's jobs)."""
    return request.getfixturevalue("hub")

A10G = 16667 * 60 / 1e6  # the fake's a10g-small: $0.016667 a minute, $1.00 an hour
STEPS = 46


def trainer_lines(n: int = STEPS, seed: int = 0, *, end: bool = True) -> list[str]:
    """A Trainer's console output of a run shaped like the reference table: each logged
    dict, then the progress bar printed again after it (its true step), and the
    end-of-training dict when `end`."""
    lines = []
    for step, values in spec_trajectory(n=n, seed=seed):
        done = step + 1
        d = {k: f"{v:.4g}" for k, v in values.items()}
        lines.append(str({**d, "epoch": f"{done / n:.3g}"}))
        lines.append(f" {100 * done // n}%|#####| {done}/{n} [00:0{seed}<00:00,  9.50it/s]")
    if end:
        lines.append(str({"train_runtime": "12.5", "train_steps_per_second": "3.68",
                          "train_loss": "0.9", "epoch": "1.0"}))
    return lines


def five_jobs(jobs) -> float:
    """Queued, running (half its log so far), completed, errored and cancelled jobs of
    alice; returns the time they were made."""
    now = time.time()
    jobs.add_job("job-queued", flavor="a10g-small", created_at=now - 60)
    jobs.add_job("job-running", flavor="a10g-large", created_at=now - 900,
                 command=["python", "train.py", "--token", "hf_SecretInTheCommand0001"])
    jobs.set_stage("job-running", "RUNNING")
    jobs.append_log("job-running", *trainer_lines(end=False)[: 2 * 30])
    jobs.add_job("job-done", flavor="a10g-small", stage="COMPLETED", created_at=now - 8000,
                 started_at=now - 7200, finished_at=now - 3600)  # ran one hour: $1.00
    jobs.append_log("job-done", *trainer_lines(seed=1))
    jobs.add_job("job-error", flavor="a10g-small", stage="ERROR", message="CUDA out of memory",
                 created_at=now - 5000, started_at=now - 4800, finished_at=now - 3000)
    jobs.append_log("job-error", *trainer_lines(seed=2, end=False)[: 2 * 15],
                    "torch.OutOfMemoryError: CUDA out of memory")
    jobs.add_job("job-cancelled", flavor="t4-small", stage="CANCELED", created_at=now - 600,
                 started_at=now - 500, finished_at=now - 400)  # no log line at all
    return now


def logs_asked(srv, job: str = "[^/]+") -> int:
    return len(srv.requests_to("GET", rf"^/api/jobs/alice/{job}/logs"))


def lists_asked(srv) -> int:
    return len(srv.requests_to("GET", r"^/api/jobs/alice(\?.*)?$"))


# -- headless: fleet --jobs --json ---------------------------------------------------------


def test_fleet_of_every_job_has_each_ones_state_flavor_cost_steps_and_phase(loopback_hub, capsys):
    srv, jobs = loopback_hub
    five_jobs(jobs)
    rows = {r["id"]: r for r in fleet(["--jobs", "--timeout", "20"], capsys)}
    assert set(rows) == {"job-queued", "job-running", "job-done", "job-error", "job-cancelled"}
    assert {k: r["state"] for k, r in rows.items()} == {
        "job-queued": "queued", "job-running": "live", "job-done": "finished",
        "job-error": "failed", "job-cancelled": "stopped"}
    assert {k: r["flavor"] for k, r in rows.items()} == {
        "job-queued": "a10g-small", "job-running": "a10g-large", "job-done": "a10g-small",
        "job-error": "a10g-small", "job-cancelled": "t4-small"}
    assert all(r["source"] == "hf-job" for r in rows.values())
    assert rows["job-running"]["config"]["command"][:3] == ["python", "train.py", "--token"]
    made = {k: jobs.jobs[k].created_at for k in rows}
    assert {k: r["created_at"] for k, r in rows.items()} == pytest.approx(made, abs=1e-3)
    assert "hf_SecretInTheCommand0001" not in json.dumps(list(rows.values()))
    # cost: price per hour x time running (0 while queued)
    assert rows["job-queued"]["cost_usd"] == 0.0
    assert rows["job-done"]["cost_usd"] == pytest.approx(A10G, abs=1e-3)
    assert rows["job-error"]["cost_usd"] == pytest.approx(A10G * 0.5, abs=1e-3)
    # steps and phase, from each job's log (read once); none yet: "-", not an error
    assert (rows["job-done"]["first_step"], rows["job-done"]["last_step"]) == (1, STEPS)
    assert rows["job-done"]["phase"]["phase"] not in (None, "baseline")
    assert rows["job-running"]["last_step"] == 30
    assert rows["job-error"]["last_step"] == 15
    for quiet in ("job-queued", "job-cancelled"):
        assert rows[quiet]["last_step"] is None and rows[quiet]["phase"]["phase"] is None
    # one list call; a log read only for the jobs that started, once each
    assert lists_asked(srv) == 1
    assert logs_asked(srv, "job-queued") == 0
    assert all(logs_asked(srv, j) == 1 for j in ("job-running", "job-done", "job-error"))


def test_a_jobs_row_agrees_with_summary_of_that_job(loopback_hub, capsys):
    _srv, jobs = loopback_hub
    five_jobs(jobs)
    rows = {r["id"]: r for r in fleet(["--jobs", "--namespace", "alice", "--timeout", "20"],
                                      capsys)}
    for job in ("job-done", "job-running", "job-error"):
        s = summary(["--job", job, "--namespace", "alice", "--timeout", "20"], capsys)
        assert_agrees_with_summary(rows[job], s)
        assert rows[job]["last_step"] == s["last_step"] is not None


def test_the_jobs_table_masks_the_command_and_says_a_failure_in_one_line(loopback_hub, capsys):
    _srv, jobs = loopback_hub
    five_jobs(jobs)
    rc, out, err = cli(["fleet", "--jobs", "--timeout", "20"], capsys)  # piped: the table
    assert rc == 0 and "job-running" in out and "hf_SecretInTheCommand0001" not in out
    jobs.fail_next("list", 520, times=1)  # a server error the client does not retry: we do
    rows = fleet(["--jobs", "--timeout", "20"], capsys)
    assert len(rows) == 5 and next(r for r in rows if r["id"] == "job-done")["last_step"]
    jobs.fail_next("list", 401, times=20)
    rc, out, err = cli(["fleet", "--jobs", "--json", "--timeout", "2"], capsys)
    assert rc == 1 and out == "" and err.count("\n") == 1 and jobs.token not in err


# -- the fleet table over your jobs --------------------------------------------------------


def row_count(app) -> int:
    from carl_tui.ui.screens.fleet_table import FleetScreen

    found = app.screen.query("#fleet-table") if isinstance(app.screen, FleetScreen) else []
    return found[0].row_count if found else -1


async def open_row(app, pilot, job: str) -> None:
    """Enter on the row of `job` in the fleet table (`r` first where the table is not up)."""
    if row_count(app) < 0:
        await pilot.press("r")
        await wait_for(pilot, lambda: row_count(app) > 0, what="the fleet table")
    table = app.screen.query_one("#fleet-table", DataTable)
    table.move_cursor(row=table.get_row_index(f"hf-job:alice:{job}"))
    await pilot.press("enter")
    await wait_for(pilot, lambda: row_count(app) < 0, what="the table closed")


def loss_count(app, job: str) -> int:
    snap = app.store.snapshot(f"hf-job:alice:{job}", max_points=2)
    return snap.series["loss"].count if snap is not None and "loss" in snap.series else 0


async def test_the_fleet_table_lists_jobs_once_a_poll_and_reads_only_the_opened_jobs_log(
        loopback_hub):
    from huggingface_hub import HfApi

    from carl_tui.redact import MASK
    from carl_tui.sources.hf_jobs_list import HfJobsListSource
    from carl_tui.ui.app import build_app
    from carl_tui.ui.screens.run_card import RunCardScreen

    srv, jobs = loopback_hub
    five_jobs(jobs)
    src = HfJobsListSource(api=HfApi(endpoint=srv.url, token=jobs.token), interval=0.2)
    app = build_app(dashboard_config([src], fleet=True, refresh_interval=0.05))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: row_count(app) == 5, timeout=15, what="a row per job")
        await wait_for(pilot, lambda: src.list_calls >= 4, timeout=15, what="a few polls")
        assert lists_asked(srv) == src.list_calls  # one list request a poll, for every job
        assert logs_asked(srv) == 0  # no run opened: no log read
        # the card of a job: its flavor, cost and command, the secret in it masked
        table = app.screen.query_one("#fleet-table", DataTable)
        table.move_cursor(row=table.get_row_index("hf-job:alice:job-running"))
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen), what="the card")
        card = plain_text(app.screen.query_one("#run-card-body"), 160)
        assert f"python train.py --token {MASK}" in card and "a10g-large" in card
        assert "cost so far" in card and "hf_SecretInTheCommand0001" not in card
        await pilot.press("escape")
        await wait_for(pilot, lambda: row_count(app) == 5, what="back to the table")
        assert logs_asked(srv) == 0  # a card reads no log either
        await open_row(app, pilot, "job-running")
        await wait_for(pilot, lambda: loss_count(app, "job-running") == 30, timeout=15,
                       what="the opened job's steps")
        assert logs_asked(srv) == logs_asked(srv, "job-running") >= 1
        # another job opened: its log is read, the first one's stream is closed
        await open_row(app, pilot, "job-done")
        await wait_for(pilot, lambda: loss_count(app, "job-done") == STEPS, timeout=15,
                       what="the second job's steps")
        assert app.follower.companion.source.job_id == "job-done"
        assert sum(r.source.job_id == "job-running" for r in app.follower.runners) == 0
        closed = app.store.summary().sources["hf-job: job-running"]
        assert (closed.state, closed.message) == ("idle", "not in view")
        # the first job, opened again, goes on where it stopped: no step twice
        jobs.append_log("job-running", *trainer_lines(end=False)[2 * 30:])
        await open_row(app, pilot, "job-running")
        whole = len(trainer_lines(end=False))
        await wait_for(pilot, lambda: app.follower.companion.source.lines_parsed == whole,
                       timeout=15, what="the rest of the first job's log")
        await wait_for(pilot, lambda: app.snapshot.last_step == STEPS, what="on screen")
        assert loss_count(app, "job-running") == STEPS
        assert logs_asked(srv) == (logs_asked(srv, "job-running")
                                   + logs_asked(srv, "job-done"))


# -- several sources at once ---------------------------------------------------------------


@pytest.fixture(scope="module")
def three_sources(tmp_path_factory):
    """A TensorBoard folder of two runs written by SummaryWriter, a JSONL stream, and a
    local Trackio project of two runs written by trackio: {flag: path}."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("trackio")
    from torch.utils.tensorboard import SummaryWriter

    from tests.fakes.trackio_server import start_writer, wait_writer

    root = tmp_path_factory.mktemp("three-sources")
    for run, seed in (("tb-a", 3), ("tb-b", 4)):
        w = SummaryWriter(str(root / "tb" / run))
        for step, values in spec_trajectory(n=30, seed=seed):
            for k, v in values.items():
                w.add_scalar(f"train/{k}", v, step)
        w.close()
    stream = root / "stream.jsonl"
    with open(stream, "w") as f:
        f.write(json.dumps({"event": "meta", "name": "streamed", "seed": 5}) + "\n")
        f.writelines(json.dumps({"step": step, **values}) + "\n"
                     for step, values in spec_trajectory(n=40, seed=5))
    store = root / "trackio"
    store.mkdir()
    for run, seed in (("tr-a", 6), ("tr-b", 7)):
        points = [{"train/mean_token_accuracy": v["mean_token_accuracy"],
                   "train/entropy": v["entropy"], "train/loss": v["loss"]}
                  for _step, v in spec_trajectory(n=20, seed=seed)]
        wait_writer(start_writer(store, "sweep", run, points, config={"seed": seed}))
    return {"--tensorboard": root / "tb", "--watch": stream, "--trackio-dir": store}


def sources_argv(paths) -> list[str]:
    return ["--tensorboard", str(paths["--tensorboard"]), "--watch", str(paths["--watch"]),
            "--project", "sweep", "--trackio-dir", str(paths["--trackio-dir"])]


def test_fleet_of_several_sources_has_every_run_of_each_its_source_named(three_sources,
                                                                        capsys):
    rows = fleet(sources_argv(three_sources), capsys)
    assert sorted((r["source"], r["run"]) for r in rows) == [
        ("jsonl", "streamed"), ("tensorboard", "tb-a"), ("tensorboard", "tb-b"),
        ("trackio", "tr-a"), ("trackio", "tr-b")]
    # each row's numbers are those its own source gives `summary`
    by_run = {r["run"]: r for r in rows}
    one = {"tensorboard": ["--tensorboard", str(three_sources["--tensorboard"])],
           "jsonl": [str(three_sources["--watch"])],
           "trackio": ["--project", "sweep", "--trackio-dir", str(three_sources["--trackio-dir"])]}
    for name, row in by_run.items():
        assert_agrees_with_summary(row, summary([*one[row["source"]], "--run", name], capsys))
    assert by_run["streamed"]["last_step"] == 39 and by_run["tb-a"]["last_step"] == 29
    # the table names each row's source too
    rc, out, _ = cli(["fleet", *sources_argv(three_sources)], capsys)
    assert rc == 0
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:]}
    assert lines == {"streamed": "jsonl", "tb-a": "tensorboard", "tb-b": "tensorboard",
                     "tr-a": "trackio", "tr-b": "trackio"}
    assert out.splitlines()[0].split()[-1] == "seed"  # the runs' differing config key


def test_fleet_of_sources_and_jobs_together(three_sources, loopback_hub, capsys):
    five_jobs(loopback_hub[1])
    rows = fleet([*sources_argv(three_sources), "--jobs", "--timeout", "20"], capsys)
    sources = sorted(r["source"] for r in rows)
    assert sources == ["hf-job"] * 5 + ["jsonl", "tensorboard", "tensorboard", "trackio",
                                        "trackio"]
    done = next(r for r in rows if r["run"] == "job-done")
    assert done["last_step"] == STEPS and done["cost_usd"] == pytest.approx(A10G, abs=1e-3)
    # a job's flavor has its own column: never a config axis beside runs that have none
    assert done["config"]["flavor"] == "a10g-small"
    rc, out, _ = cli(["fleet", *sources_argv(three_sources), "--jobs", "--timeout", "20"],
                     capsys)
    assert rc == 0 and out.splitlines()[0].split()[10:] == ["health", "seed"]


def test_a_repeated_folder_flag_reads_each(three_sources, tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "other" / "tb-c"))
    w.add_scalar("train/loss", 1.0, 0)
    w.close()
    rows = fleet(["--tensorboard", str(three_sources["--tensorboard"]),
                  "--tensorboard", str(tmp_path / "other")], capsys)
    assert sorted(r["run"] for r in rows) == ["tb-a", "tb-b", "tb-c"]


def test_a_source_that_cannot_be_read_is_said_and_the_others_shown(three_sources, tmp_path,
                                                                   capsys):
    missing = tmp_path / "no-such-folder"
    rc, out, err = cli(["fleet", "--json", "--watch", str(three_sources["--watch"]),
                        "--tensorboard", str(missing)], capsys)
    assert rc == 0 and [r["run"] for r in json.loads(out)] == ["streamed"]
    assert err.count("\n") == 1 and "--tensorboard" in err and "no such directory" in err
    # a bad flag is refused before anything is read, as for one source
    rc, out, err = cli(["fleet", "--json", "--watch", str(three_sources["--watch"]),
                        "--tensorboard", str(three_sources["--watch"])], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--tensorboard" in err and "is not a directory" in err
    rc, out, err = cli(["fleet", "--watch", str(three_sources["--watch"]), "--tensorboard",
                        str(three_sources["--tensorboard"]), "--run", "tb-a"], capsys)
    assert rc == 2 and "--run" in err and err.count("\n") == 1
    # summary and export keep to one source
    rc, _, err = cli(["summary", "--tensorboard", str(tmp_path), "--wandb", str(tmp_path)],
                     capsys)
    assert rc == 2 and "choose one source" in err


def test_a_log_read_cut_by_the_timeout_keeps_what_came(loopback_hub):
    """`--timeout` ends the reading of a running job's log that never goes quiet: what it
    read is kept (its 30 steps), not dropped."""
    from huggingface_hub import HfApi

    from carl_tui.report.collect import collect
    from carl_tui.sources.hf_jobs_list import HfJobsListSource
    from carl_tui.store import RunStore

    srv, jobs = loopback_hub
    five_jobs(jobs)
    src = HfJobsListSource(api=HfApi(endpoint=srv.url, token=jobs.token), read_logs=True,
                           quiet_s=3600)
    store = RunStore()
    collect([src], store, timeout=5)
    assert not src.finished  # the running job's read was still waiting for quiet
    assert store.snapshot("hf-job:alice:job-running", max_points=2).last_step == 30
    assert store.snapshot("hf-job:alice:job-done", max_points=2).last_step == STEPS



def test_a_job_is_told_the_same_by_the_list_and_by_its_own_stream(loopback_hub):
    """The jobs list and the job's own source say a job's meta (labels too, the secret in
    its command masked), its state and its life the same way, each once."""
    from huggingface_hub import HfApi

    from carl_tui.events import Job, RunLife, RunMeta
    from carl_tui.redact import MASK
    from carl_tui.report.collect import collect
    from carl_tui.sources.hf_jobs import HfJobSource
    from carl_tui.sources.hf_jobs_list import HfJobsListSource
    from carl_tui.store import RunStore

    srv, jobs = loopback_hub
    five_jobs(jobs)
    jobs.jobs["job-running"].labels = {"sweep": "lr"}
    jobs.set_stage("job-running", "ERROR", message="killed")
    api = HfApi(endpoint=srv.url, token=jobs.token)
    listed = HfJobsListSource(api=api)
    told = [e for _ in range(2) for e in listed.poll() + listed.take_run_states()
            if e.run.key == "hf-job:alice:job-running"]
    own = HfJobSource("job-running", namespace="alice", api=api, status_interval=0.05)
    store = RunStore()
    collect([own], store, timeout=10)
    (meta,) = [e.meta for e in told if isinstance(e, RunMeta)]
    assert meta == {"job_id": "job-running", "flavor": "a10g-large", "labels": {"sweep": "lr"},
                    "command": ["python", "train.py", "--token", MASK],
                    "url": meta["url"]}
    streamed = store.snapshot("hf-job:alice:job-running", max_points=2).meta
    assert {k: streamed[k] for k in meta} == meta  # the job's own stream said the same
    assert [e.stage for e in told if isinstance(e, Job)] == ["ERROR"]  # once, in two polls
    (life,) = [e for e in told if isinstance(e, RunLife)]
    assert (life.state, life.reason) == ("failed", "job ERROR: killed")

@pytest.mark.parametrize(("argv", "expected"), [
    ([], [("Trackio", {})]),
    (["--jobs", "--namespace", "org"], [("--jobs", {"jobs": True, "namespace": "org"})]),
    (["--trackio", "http://127.0.0.1:9/", "--project", "p"],
     [("--trackio http://127.0.0.1:9/", {"trackio": "http://127.0.0.1:9/", "project": "p"})]),
    (["--trackio", "http://127.0.0.1:9/?project=x", "--project", "p"],
     [("--trackio http://127.0.0.1:9/?project=x", {"project": None}),
      ("--project p", {"project": "p", "trackio": None})]),
    (["f.log", "--watch", "g.jsonl", "--tensorboard", "a", "--tensorboard", "b", "--jobs"],
     [("--watch f.log", {"watch": "f.log"}), ("--watch g.jsonl", {"watch": "g.jsonl"}),
      ("--tensorboard a", {"tensorboard": "a"}), ("--tensorboard b", {"tensorboard": "b"}),
      ("--jobs", {"jobs": True})]),
])
def test_the_sources_fleet_reads(argv, expected):
    from carl_tui.cli_parser import build_parser
    from carl_tui.cli_request import fleet_requests

    got = fleet_requests(build_parser().parse_args(["fleet", *argv]))
    assert [label for label, _ in got] == [label for label, _ in expected]
    for (_, req), (_, fields) in zip(got, expected, strict=True):
        assert req.flags_given() == [] or len(req.flags_given()) == 1
        for name, value in fields.items():
            assert req.get(name) == value, name


def test_fleet_jobs_json_masks_every_secret_flag_of_a_command(loopback_hub, capsys):
    _srv, jobs = loopback_hub
    jobs.add_job("job-keys", flavor="a10g-small", command=[
        "python", "train.py", "--wandb-key", "wandbPlainValue01", "--hub-token",
        "hubPlainValue0002", "--db-password=dbPlainValue0003", "--lr", "1e-4"])
    (row,) = fleet(["--jobs", "--timeout", "20"], capsys)
    assert row["config"]["command"] == ["python", "train.py", "--wandb-key", MASK,
                                        "--hub-token", MASK, f"--db-password={MASK}",
                                        "--lr", "1e-4"]
    assert "PlainValue" not in json.dumps(row)

"""The launch form (`l`), `s` and `j` on a real single-node Slurm (tests/slurm_cluster.py),
driven with Pilot: the form checks the Slurm options, shows the batch script before
anything is submitted, a tiny GRPO job it submits is followed to "finished" with the
steps of the Trainer's own log, and a second one is cancelled with `s` (Slurm says
CANCELLED, in the dashboard, in `j`, in `fleet --slurm --json` and in `squeue`)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from textual.widgets import Input, Select

from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.engines.slurm import SlurmEngine
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.screens.jobs import JobsScreen
from carl_tui.ui.screens.launch import LaunchScreen
from tests.conftest import notices_said, plain_text
from tests.conftest import wait_for as pilot_wait
from tests.engines.test_ray import trainer_steps
from tests.slurm_cluster import cluster_fixture
from tests.ui.cluster_app import job_bar, make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

slurm = pytest.fixture(scope="module")(cluster_fixture)

ROOT = Path(__file__).resolve().parents[1].parent
SIZE = (160, 45)
wait_for = functools.partial(pilot_wait, timeout=180.0)  # a job starts torch on a busy CPU


@pytest.fixture
def cluster(slurm, monkeypatch, tmp_path):
    """The commands reach the test cluster; the job (Slurm copies the submitting
    environment) finds this project's Python first on PATH and works in `tmp_path`."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for name, value in (("HF_HUB_OFFLINE", "1"), ("OMP_NUM_THREADS", "1"),
                        ("TOKENIZERS_PARALLELISM", "false")):
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return slurm


def tiny_spec(partition: str, tmp_path, steps: int, name: str) -> LaunchSpec:
    """A GRPO run of the offline tiny model on the CPU: seconds, no download."""
    return LaunchSpec(target="slurm", model="tiny", dataset="tiny", max_steps=steps,
                      num_generations=2, carl=False, learning_rate=3e-4, run_name=name,
                      output_dir=str(tmp_path / name), partition=partition, timeout="10m",
                      extra_args=("--no-save",))


# -- without a cluster ----------------------------------------------------------------


def test_a_slurm_launch_is_checked_before_anything_is_sent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tiny_spec("carl", tmp_path, 3, "ok")
    assert spec.validate() == []
    sub = spec.with_(num_gpus=2, timeout="90m").submission()
    assert (sub.gpus, sub.time_limit_s, dict(sub.options), sub.working_dir) == (
        2, 5400, {"partition": "carl"}, str(tmp_path))
    assert spec.with_(partition="").submission().options == {}  # the cluster's default
    said = spec.with_(partition="gpu;rm", timeout="soon", num_gpus=-1).validate()
    assert said == ["GPUs must be a whole number of 0 or more (got -1)."]
    said = spec.with_(partition="gpu;rm", timeout="soon").validate()
    assert said == [("Partition 'gpu;rm' is a name of letters, digits, '-', '_' and '.' "
                     "(`sinfo` lists them); leave it empty for the cluster's default."),
                    "Timeout 'soon' is not a duration such as 90m, 2h or 3600."]


def test_carl_tui_launch_targets_slurm_with_its_batch_script(capsys, tmp_path, monkeypatch):
    from carl_tui.actions.launch_cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["--target", "slurm", "--model", "tiny", "--dataset", "tiny", "--gpus", "2",
                 "--partition", "gpu", "--timeout", "90m", "--run-name", "cli",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "Slurm (gpu, 2 GPU, 90m)" in out
    lines = out.splitlines()
    for line in ("#SBATCH --job-name=cli", "#SBATCH --partition=gpu", "#SBATCH --gpus=2",
                 "#SBATCH --time=0-01:30:00", f"#SBATCH --output={tmp_path}/carl-cli-%j.out",
                 "exec python -m accelerate.commands.launch --num_processes 2 -m carl_tui"):
        assert any(x.startswith(line) for x in lines), line
    assert main(["--target", "slurm", "--timeout", "30s", "--dry-run"]) == 2
    assert "Timeout '30s' is under a minute" in capsys.readouterr().err


# -- on the real cluster --------------------------------------------------------------


def my_jobs(name: str) -> list[str]:
    """The ids of the jobs called `name` that Slurm knows (what was sent)."""
    return [j.job_id for j in SlurmEngine().jobs() if j.name == name]


def problems(screen) -> str:
    return plain_text(screen.query_one("#problems"))


async def launch_from_form(app, pilot, spec: LaunchSpec) -> str:
    """`l`, the Slurm fields checked, ctrl+l, the batch script seen (a no first: nothing
    is submitted), then a yes: the run key followed."""
    await pilot.press("l")
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    assert screen.query_one("#target", Select).value == "slurm"
    for shown in ("#partition", "#gpus", "#timeout"):
        assert not screen.query_one(shown, Input).has_class("-hidden"), shown
    for hidden in ("#ray-address", "#output-repo", "#trackio"):
        assert screen.query_one(hidden, Input).has_class("-hidden"), hidden
    partition, timeout = screen.query_one("#partition", Input), screen.query_one("#timeout",
                                                                                 Input)
    partition.value, timeout.value = "gpu nodes", "20s"  # checked before anything is sent
    await pilot.press("ctrl+l")
    said = problems(screen)
    assert "Partition 'gpu nodes' is a name of letters" in said
    assert "Timeout '20s' is under a minute" in said
    assert not isinstance(app.screen, ConfirmScreen)
    partition.value, timeout.value = spec.partition, spec.timeout
    await pilot.press("ctrl+l")
    assert problems(screen).strip() == ""
    confirm = app.screen
    assert isinstance(confirm, ConfirmScreen)
    body = "\n".join(plain_text(s, 110) for s in confirm.query("Static"))
    assert f"Submit {spec.run_name} to Slurm?" in body
    for line in (f"#SBATCH --job-name={spec.run_name}", f"#SBATCH --partition={spec.partition}",
                 "#SBATCH --time=0-00:10:00", f"#SBATCH --chdir={os.getcwd()}",
                 "exec python -m carl_tui train --model tiny --dataset tiny --method grpo"):
        assert line in body, line
    await pilot.press("n")  # not submitted: the form is back, Slurm knows no such job
    assert app.screen is screen and not screen.busy
    assert my_jobs(spec.run_name) == []
    await pilot.press("ctrl+l")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen), what="submitted")
    await wait_for(pilot, lambda: (app.current_run or "").startswith("slurm-job:"),
                   what="following the Slurm job")
    return app.current_run


async def test_a_slurm_job_launched_from_the_form_is_followed_to_finished(cluster, tmp_path):
    spec = tiny_spec(cluster.partition, tmp_path, 3, "form-run")
    app = make_app(spec)
    said = notices_said(app)
    async with app.run_test(size=SIZE) as pilot:
        key = await launch_from_form(app, pilot, spec)
        job_id = key.rsplit(":", 1)[1]
        assert my_jobs("form-run") == [job_id]
        assert any(f"Launched Slurm job {job_id} on Slurm cluster ({cluster.conf})" in t
                   for t in said), said
        await wait_for(pilot, lambda: app.snapshot.life is not None
                       and app.snapshot.life.state == "finished", what="finished")
        assert "COMPLETED" in job_bar(app)
        record = SlurmEngine().record(job_id)
        assert (record.state, Path(record.stdout)) == (
            "COMPLETED", tmp_path / f"carl-form-run-{job_id}.out")
        log = Path(record.stdout).read_text()  # the Trainer's own log
        loss = app.snapshot.series["loss"]
        assert [int(s) for s in loss.steps] == trainer_steps(log) == [1, 2, 3]
        assert loss.count == 3

        # j lists the cluster the job was launched on (no Slurm was named to the dashboard)
        await pilot.press("j")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        assert "this machine's runs and Slurm jobs" in plain_text(screen.query_one(".title"))
        await wait_for(pilot, lambda: key in screen.rows, what="the Slurm job listed")
        assert screen.rows[key].stage == "COMPLETED"


def held_job(name: str, folder: Path) -> str:
    """A job Slurm keeps pending (`sbatch --hold`): its reason is JobHeldUser."""
    out = subprocess.run(["sbatch", "--parsable", "--hold", f"--job-name={name}",
                          f"--output={folder}/{name}-%j.out", "--wrap", "true"],
                         capture_output=True,
                         text=True, check=True, timeout=30)
    return out.stdout.strip().split(";")[0]


def slurm_says(job_id: str) -> tuple[str, str]:
    """The job's state as `squeue --json` and as `scontrol show job` say it."""
    run = {"capture_output": True, "text": True, "timeout": 30}
    squeue = json.loads(subprocess.run(["squeue", "--json"], check=True, **run).stdout)
    [state] = [j["job_state"] for j in squeue["jobs"] if str(j["job_id"]) == job_id]
    line = subprocess.run(["scontrol", "show", "job", "-o", job_id], check=True, **run).stdout
    word = line.split("JobState=", 1)[1].split()[0]
    return (state[0] if isinstance(state, list) else state), word


def fleet_rows() -> dict[str, dict]:
    """`carl-tui fleet --slurm --json`, by job id."""
    fleet = subprocess.run([sys.executable, "-m", "carl_tui", "fleet", "--slurm", "--json"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert fleet.returncode == 0, fleet.stderr
    return {r["id"]: r for r in json.loads(fleet.stdout)}


async def test_s_cancels_a_slurm_job_and_says_so_and_j_and_fleet_list_it(cluster, tmp_path):
    spec = tiny_spec(cluster.partition, tmp_path, 100_000, "form-stop")
    app = make_app(spec, list_slurm=True)
    said = notices_said(app)
    pending = held_job("held", tmp_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            key = await launch_from_form(app, pilot, spec)
            job_id = key.rsplit(":", 1)[1]
            await wait_for(pilot, lambda: "RUNNING" in job_bar(app), what="RUNNING")
            assert app.controller.stoppable(key) == ""  # a guard may stop it (ui/guard.py)
            await pilot.press("s")
            assert isinstance(app.screen, ConfirmScreen)
            assert f"Slurm job {job_id}" in plain_text(app.screen.query_one("Static"))
            await pilot.press("n")
            await pilot.pause(0.5)
            assert slurm_says(job_id) == ("RUNNING", "RUNNING")

            await pilot.press("s", "y")
            await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="CANCELED shown")
            # the source may read the end before the stop's worker says it: wait for both
            await wait_for(pilot, lambda: any(f"Slurm job {job_id} has stopped: CANCELLED" in t
                                              for t in said), what="the stop said")
            assert slurm_says(job_id) == ("CANCELLED", "CANCELLED")
            await wait_for(pilot, lambda: app.snapshot.life.state == "stopped", what="stopped")
            assert "CANCELLED" in app.snapshot.life.reason
            assert app.controller.stoppable(key).startswith("it has already ended (CANCELLED")
            await pilot.press("s")  # an ended job is not cancelled twice
            assert not isinstance(app.screen, ConfirmScreen)

            await pilot.press("j")  # the cluster's jobs beside the others, a held one's reason
            screen = app.screen
            assert isinstance(screen, JobsScreen)
            held_key = f"slurm-job:{SlurmEngine().user}:{pending}"
            await wait_for(pilot, lambda: key in screen.rows and held_key in screen.rows,
                           what="the Slurm jobs listed")
            assert screen.rows[key].stage == "CANCELED"
            assert screen.rows[held_key].message == "PENDING (JobHeldUser)"
            table = screen.query_one("#jobs")
            assert table.get_row(held_key)[0].plain == "SCHEDULING · PENDING (JobHeldUser)"
            assert table.get_row(key)[0].plain == "● CANCELED"  # the one in view, said once

            rows = await asyncio.to_thread(fleet_rows)  # what `fleet --slurm --json` says
            assert (rows[job_id]["state"], rows[job_id]["job_state"]) == ("stopped", "CANCELLED")
            assert (rows[pending]["state"], rows[pending]["job_state"]) == (
                "queued", "PENDING (JobHeldUser)")
            for jid in (job_id, pending):
                assert rows[jid]["job_state"].split(" ")[0] == slurm_says(jid)[0]

            # the held job chosen in `j` is followed; a guard's stop cancels it (ui/guard.py's
            # path: no key pressed, no confirmation)
            table.move_cursor(row=table.get_row_index(held_key))
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.current_run == held_key, what="the held job")
            await wait_for(pilot, lambda: app.snapshot.job is not None, what="its state")
            assert app.controller.stoppable(held_key) == ""
            words = await asyncio.to_thread(app.controller.guard_stop, app.snapshot.run, False)
            assert words == f"job {pending} stopped: CANCELLED"
            assert slurm_says(pending)[0] == "CANCELLED"
            await wait_for(pilot, lambda: app.snapshot.life is not None
                           and app.snapshot.life.state == "stopped", what="the held job stopped")
    finally:
        SlurmEngine().stop(pending)

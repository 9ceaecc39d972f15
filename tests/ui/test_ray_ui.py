"""The launch form (`l`), `s` and `j` on a real local Ray head, driven with Pilot: a tiny
GRPO job launched from the form is followed to "finished" with the steps of the
Trainer's own log, and a second one is stopped with `s` (Ray says STOPPED)."""

from __future__ import annotations

import functools

import pytest

# the jobs train a tiny model with this interpreter: without the training extras they fail
pytest.importorskip("trl")

from textual.widgets import Input, Select

from carl_tui.engines.ray import RayEngine
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.screens.jobs import JobsScreen
from carl_tui.ui.screens.launch import LaunchScreen
from tests.conftest import notices_said, plain_text
from tests.conftest import wait_for as pilot_wait
from tests.engines.test_ray import ray_state, tiny_spec, trainer_steps
from tests.ui.cluster_app import job_bar, make_app

SIZE = (160, 45)
wait_for = functools.partial(pilot_wait, timeout=180.0)  # a job starts torch on a busy CPU


async def launch_from_form(app, pilot, steps: str) -> str:
    """`l`, the Ray target's fields checked, ctrl+l: the run key followed."""
    await pilot.press("l")
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    assert screen.query_one("#target", Select).value == "ray"
    address = screen.query_one("#ray-address", Input)
    assert not address.has_class("-hidden") and screen.query_one("#output-repo",
                                                                 Input).has_class("-hidden")
    await wait_for(pilot, lambda: all(w.is_finished for w in app.workers
                                      if w.group == "launch-hardware"), what="flavors read")
    await pilot.pause(0.2)  # the Hub's flavors failed to load: not a word of it for Ray
    assert "Hardware" not in plain_text(screen.query_one("#launch-note"))
    gpus = screen.query_one("#gpus", Input)
    gpus.value = "-1"  # checked before anything is sent
    await pilot.press("ctrl+l")
    assert "GPUs must be a whole number of 0 or more" in plain_text(
        screen.query_one("#problems"))
    gpus.value = "0"
    screen.query_one("#steps", Input).value = steps
    await pilot.press("ctrl+l")
    await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen), what="launched")
    await wait_for(pilot, lambda: (app.current_run or "").startswith("ray-job:"),
                   what="following the Ray job")
    return app.current_run


async def test_a_ray_job_launched_from_the_form_is_followed_to_finished(ray_head, tmp_path):
    app = make_app(tiny_spec(ray_head.url, tmp_path, 3, "form-run"))
    said = notices_said(app)
    async with app.run_test(size=SIZE) as pilot:
        key = await launch_from_form(app, pilot, "3")
        job_id = key.rsplit(":", 1)[1]
        assert any(f"Launched Ray job {job_id} on Ray cluster at {ray_head.url}" in t
                   for t in said)
        await wait_for(pilot, lambda: app.snapshot.life is not None
                       and app.snapshot.life.state == "finished", what="finished")
        assert "COMPLETED" in job_bar(app)
        log = RayEngine(ray_head.url).log(job_id).text  # the Trainer's own log
        loss = app.snapshot.series["loss"]
        assert [int(s) for s in loss.steps] == trainer_steps(log) == [1, 2, 3]
        assert loss.count == 3
        assert ray_state(ray_head.url, job_id) == "SUCCEEDED"

        # j lists the cluster the job was launched on (no --ray-address was given)
        await pilot.press("j")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        await wait_for(pilot, lambda: key in screen.rows, what="the Ray job listed")
        assert screen.rows[key].stage == "COMPLETED"
        assert screen.rows[key].label.startswith("python -m carl_tui train --model tiny")


async def test_s_stops_a_ray_job_and_says_so_and_j_lists_it(ray_head, tmp_path):
    app = make_app(tiny_spec(ray_head.url, tmp_path, 100_000, "form-stop"), list_ray=True,
                   ray_address=ray_head.url)
    said = notices_said(app)
    async with app.run_test(size=SIZE) as pilot:
        key = await launch_from_form(app, pilot, "100000")
        job_id = key.rsplit(":", 1)[1]
        await wait_for(pilot, lambda: "RUNNING" in job_bar(app), what="RUNNING")
        assert app.controller.stoppable(key) == ""  # a guard may stop it (ui/guard.py)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert job_id in plain_text(app.screen.query_one("Static"))
        await pilot.press("n")
        await pilot.pause(0.5)
        assert ray_state(ray_head.url, job_id) == "RUNNING"

        await pilot.press("s", "y")
        await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="CANCELED shown")
        # the source may read the end before the stop's worker says it: wait for both
        await wait_for(pilot, lambda: any(f"Ray job {job_id} has stopped: STOPPED" in t
                                          for t in said), what="the stop said")
        assert ray_state(ray_head.url, job_id) == "STOPPED"
        # the source reads the end too: the run's life, with Ray's word as its reason
        await wait_for(pilot, lambda: app.snapshot.life.state == "stopped", what="stopped")
        assert "STOPPED" in app.snapshot.life.reason
        assert app.controller.stoppable(key).startswith("it has already ended (STOPPED")
        await pilot.press("s")  # an ended job is not stopped twice
        assert not isinstance(app.screen, ConfirmScreen)

        await pilot.press("j")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        await wait_for(pilot, lambda: key in screen.rows, what="the Ray job listed")
        assert screen.rows[key].stage == "CANCELED"

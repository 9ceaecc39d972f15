"""One rule picks the run opened by default, on screen and in `summary`: the most
recently active one; the screen says which and why. (A Trackio project of two runs
opened its first run on the dashboard and its newest in `summary`; a TensorBoard
folder picked one silently.)"""

from __future__ import annotations

import math

import pytest

from carl_tui.ui.app import DashboardConfig, Settings, build_app
from tests.conftest import notices_said
from tests.report.test_report import summary
from tests.ui.test_app import wait_for

CHOICE = "the most recently active of 2 runs (r or --run picks another)"


def trackio_project(tmp_path):
    """Two runs written by trackio itself: `zeta-old`, then `alpha-new` (alphabetically
    first, written last)."""
    from tests.fakes.trackio_server import start_writer, wait_writer

    for run, scale in (("zeta-old", 1.0), ("alpha-new", 2.0)):
        points = [{"train/loss": scale * math.exp(-i / 10), "train/global_step": i + 1}
                  for i in range(20)]
        wait_writer(start_writer(tmp_path, "proj", run, points))


def tensorboard_folder(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    for run in ("zeta-old", "alpha-new"):
        w = SummaryWriter(str(tmp_path / "tb" / run))
        for step in range(10):
            w.add_scalar("train/loss", 1.0 / (1 + step), step)
        w.close()


async def shown_run(source):
    app = build_app(DashboardConfig(sources=[source], settings=Settings(refresh_interval=0.05)))
    said = notices_said(app)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: any("most recently" in t for t in said), timeout=20)
        await pilot.pause(0.2)
        return app.snapshot.run.label, [t for t in said if "showing" in t]


async def test_a_trackio_project_opens_its_newest_run_everywhere(tmp_path, capsys):
    pytest.importorskip("trackio")
    from carl_tui.sources.trackio.local import TrackioLocalSource

    trackio_project(tmp_path)
    d = summary(["--project", "proj", "--trackio-dir", str(tmp_path)], capsys)
    assert d["run"] == "alpha-new"
    label, told = await shown_run(TrackioLocalSource("proj", root=tmp_path))
    assert label == "alpha-new"
    assert told == [f"showing alpha-new: {CHOICE}"]


async def test_a_tensorboard_folder_says_which_run_it_shows(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from carl_tui.sources.tensorboard import TensorBoardSource

    tensorboard_folder(tmp_path)
    d = summary(["--tensorboard", str(tmp_path / "tb")], capsys)
    assert d["run"] == "alpha-new"
    label, told = await shown_run(TensorBoardSource(tmp_path / "tb"))
    assert label == "alpha-new"
    assert told == [f"showing alpha-new: {CHOICE}"]


def test_run_answers_to_its_key_id_name_or_its_last_folders():
    """`--run` picks a run by key, id or name, or by the last parts of a path-like name
    (a TensorBoard run folder's own name); never by a part of a folder's name."""
    from carl_tui.events import RunRef

    ref = RunRef("tensorboard", "logs", "exp/Nov26_host", "exp/Nov26_host")
    named = ("tensorboard:logs:exp/Nov26_host", "exp/Nov26_host", "Nov26_host", "Nov26_host/")
    assert [w for w in named if not ref.answers_to(w)] == []
    assert [w for w in ("26_host", "exp", "/", "", "Nov26") if ref.answers_to(w)] == []


async def test_the_count_of_runs_waits_for_every_source():
    """Fourteen sources, one slow to answer: the choice is told once every source has
    answered, with the count of every run ("of 5 runs" was said with 14 loaded)."""
    import threading

    import numpy as np

    from carl_tui.events import RunMeta, RunRef, ScalarBatch
    from tests.conftest import ScriptedSource

    class Slow(ScriptedSource):
        gate = threading.Event()

        def poll(self):
            self.gate.wait(10)
            return super().poll()

    sources = []
    for i in range(14):
        run = RunRef("jsonl", "sweep", f"r{i}", f"r{i}")
        src = (Slow if i == 13 else ScriptedSource)(f"s{i}")
        src.push([RunMeta(run, {"name": f"r{i}"}),
                  ScalarBatch(run, np.arange(5, dtype=np.int64), {"loss": np.ones(5)},
                              wall_time=1_000.0 + i, times=1_000.0 + i + np.arange(5))])
        sources.append(src)
    app = build_app(DashboardConfig(sources=sources, settings=Settings(refresh_interval=0.05)))
    said = notices_said(app)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: len(app.store.runs()) == 13, timeout=10)
        await pilot.pause(0.5)
        assert not [t for t in said if "most recently" in t]
        Slow.gate.set()
        await wait_for(pilot, lambda: any("most recently" in t for t in said), timeout=10)
        told = [t for t in said if "most recently" in t]
        assert told == [f"showing r13: {CHOICE.replace('of 2 runs', 'of 14 runs')}"], told

"""Every local source that waits for a file or folder to appear looks again every
WAIT_POLL_S, with no growing backoff: a run that starts late is shown within a second."""

from __future__ import annotations

import sqlite3

import pytest

from carl_tui.sources.base import WAIT_POLL_S, SourceRunner


def _wandb_missing(tmp_path):
    from carl_tui.sources.wandb_run import WandbSource

    return WandbSource(tmp_path / "wandb")


def _wandb_run_without_log(tmp_path):
    from carl_tui.sources.wandb_run import WandbSource

    run = tmp_path / "wandb" / "offline-run-20261126_100000-abc123"
    run.mkdir(parents=True)
    return WandbSource(run)


def _wandb_folder_without_runs(tmp_path):
    from carl_tui.sources.wandb_run import WandbSource

    (tmp_path / "wandb").mkdir()
    return WandbSource(tmp_path / "wandb")


def _trackio_missing_db(tmp_path):
    from carl_tui.sources.trackio.local import TrackioLocalSource

    return TrackioLocalSource("later", root=tmp_path)


def _trackio_db_without_metrics(tmp_path):
    from carl_tui.sources.trackio import db
    from carl_tui.sources.trackio.local import TrackioLocalSource

    sqlite3.connect(db.db_path("early", tmp_path)).close()  # made, no table yet
    return TrackioLocalSource("early", root=tmp_path)


def _tensorboard_run_not_there_yet(tmp_path):
    from carl_tui.sources.tensorboard import TensorBoardSource

    return TensorBoardSource(tmp_path, runs=["grpo"])


def _replay_missing(tmp_path):
    from carl_tui.sources.replay import ReplaySource

    return ReplaySource(tmp_path / "later.jsonl")


@pytest.mark.parametrize("make", [
    _wandb_missing, _wandb_run_without_log, _wandb_folder_without_runs, _trackio_missing_db,
    _trackio_db_without_metrics, _tensorboard_run_not_there_yet, _replay_missing,
])
def test_waiting_for_a_local_run_to_appear_does_not_back_off(tmp_path, make):
    if make.__name__.startswith("_wandb"):
        pytest.importorskip("wandb")  # without it the W&B source says it needs it, at once
    statuses = []
    source = make(tmp_path)
    runner = SourceRunner(source, statuses.extend)
    try:
        assert [runner.poll_once() for _ in range(8)] == [WAIT_POLL_S] * 8
    finally:
        source.close()
    assert statuses[-1].state == "retrying" and statuses[-1].message.startswith("waiting for")

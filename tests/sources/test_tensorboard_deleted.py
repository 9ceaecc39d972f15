"""An event file deleted while TensorBoard's writer still writes it (issue 23): the run
does not go on looking live with nothing said; the run's log and the status bar say it."""

from __future__ import annotations

import time

import pytest

from carl_tui.events import LogLines, ScalarBatch
from carl_tui.sources import tensorboard as tb
from carl_tui.sources.base import SourceRunner

HANG_GUARD_S = 30  # only against a hang



def test_an_event_file_deleted_while_being_read_is_said(tmp_path):
    # tensorboardX's writer keeps writing to the deleted file (torch's writer makes the
    # file again at its next flush, which is read as a rewritten file)
    tbx = pytest.importorskip("tensorboardX")
    w = tbx.SummaryWriter(str(tmp_path / "logs" / "run-a"), max_queue=1)
    try:
        for step in range(11):  # its writer thread holds the latest event back
            w.add_scalar("train/loss", 1.0 / (step + 1), step)
        w.flush()
        statuses = []
        src = tb.TensorBoardSource(tmp_path / "logs")
        runner = SourceRunner(src, lambda events: statuses.extend(events))
        steps: list[int] = []
        deadline = time.monotonic() + HANG_GUARD_S
        while len(steps) < 10 and time.monotonic() < deadline:  # written by its thread
            runner.poll_once()
            steps = [int(s) for e in statuses if isinstance(e, ScalarBatch) for s in e.steps]
            time.sleep(0.01)
        assert steps[:10] == list(range(10))
        (event_file,) = (tmp_path / "logs" / "run-a").glob("events.out.tfevents.*")
        event_file.unlink()
        for step in range(11, 20):  # written to the deleted file: nobody can read them
            w.add_scalar("train/loss", 1.0 / (step + 1), step)
        w.flush()
        statuses.clear()
        runner.poll_once()
    finally:
        w.close()
    said = f"run-a/{event_file.name} was deleted while being read; what was read from it stays"
    notes = [line for e in statuses if isinstance(e, LogLines) for line in e.lines]
    assert notes == [said]
    assert statuses[-1].state == "live" and statuses[-1].limitation == said
    statuses.clear()
    runner.poll_once()  # said once
    assert not [e for e in statuses if isinstance(e, LogLines)]


def test_waiting_for_a_log_directory_or_its_first_event_file_does_not_back_off(tmp_path):
    from carl_tui.sources.base import WAIT_POLL_S

    for logdir in (tmp_path / "later", tmp_path):  # missing; there but without event files
        runner = SourceRunner(tb.TensorBoardSource(logdir), lambda events: None)
        assert [runner.poll_once() for _ in range(8)] == [WAIT_POLL_S] * 8

"""Is my run alive? A run's age is its data's own time (a record with none: its file's
time, never the time it was read), its state one word everywhere (live, stalled,
finished, failed, queued, stopped), and its source's connection a word of its own."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from carl_tui.events import RunLife, RunRef, ScalarBatch, SourceStatus
from carl_tui.report.collect import collect
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.trainer_file import TrainerLogSource
from carl_tui.store import RunStore
from carl_tui.store.fleet import STOP_MIN_S, fleet_rows
from carl_tui.ui.app import build_app
from tests.conftest import dashboard_config, wait_for

TRAINER_LOG = Path(__file__).parents[1] / "data" / "trainer_stdout.txt"


def screen_lines(app) -> list[str]:
    """The screen as drawn: one string per row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def aged(path: Path, seconds_ago: float) -> float:
    """Set the file's modification time `seconds_ago` back; returns it."""
    when = time.time() - seconds_ago
    os.utime(path, (when, when))
    return when


def stream_ending_with_a_log_line(path: Path, t0: float) -> None:
    rows = [{"step": i, "time": t0 + i, "loss": 2.0 - 0.1 * i} for i in range(5)]
    lines = [json.dumps(r) for r in rows] + [json.dumps({"event": "log", "text": "done"})]
    path.write_text("\n".join(lines) + "\n")


def test_a_record_with_no_time_is_dated_by_its_file_never_by_its_reading(tmp_path):
    """The demo stream's last line is a log line with no time: opened 12 minutes after it
    was written, the run is 12 minutes old (its file's time), not "5s ago"."""
    path = tmp_path / "demo-stream.jsonl"
    stream_ending_with_a_log_line(path, time.time() - 725)
    mtime = aged(path, 720)
    store = RunStore()
    collect([JsonlSource(path)], store, patient=False)
    [row] = fleet_rows(store)
    assert row.updated_at == mtime
    assert row.state == "stalled"  # 720 s silent, its rows 1 s apart


def test_rows_dated_by_themselves_keep_their_time_whatever_the_file_says(tmp_path):
    """A file copied today (a new mtime) whose every record carries its time: its age is
    the records' time."""
    path = tmp_path / "run.jsonl"
    t0 = time.time() - 9 * 86400
    path.write_text("".join(json.dumps({"step": i, "time": t0 + i, "loss": 1.0}) + "\n"
                            for i in range(4)))
    store = RunStore()
    collect([JsonlSource(path)], store, patient=False)
    [row] = fleet_rows(store)
    assert row.updated_at == t0 + 3


def finished_trainer_log(tmp_path: Path) -> Path:
    """A Trainer's console output whose bar reached its total (12/12), without the
    end-of-training line (a log cut there)."""
    lines = TRAINER_LOG.read_text().splitlines(keepends=True)
    kept = [line for line in lines if "train_runtime" not in line]
    path = tmp_path / "train.log"
    path.write_text("".join(kept))
    return path


def test_a_trainer_log_whose_bar_is_full_is_finished_and_as_old_as_its_file(tmp_path):
    path = finished_trainer_log(tmp_path)
    mtime = aged(path, 6.5 * 86400)
    store = RunStore()
    collect([TrainerLogSource(path)], store, patient=False)
    [row] = fleet_rows(store)
    assert (row.state, row.last_step, row.updated_at) == ("finished", 12, mtime)


def test_a_run_silent_far_beyond_its_cadence_has_stopped():
    """A run no source can see end (a file, Trackio) is stalled when it misses several of
    its beats, and stopped when silent for far longer (at least STOP_MIN_S)."""
    store = RunStore()
    ref = RunRef("jsonl", "p", "r", "r")
    t0, n = 1000.0, 20
    steps = np.arange(n, dtype=np.int64)
    store.apply([ScalarBatch(ref, steps, {"loss": np.ones(n)}, wall_time=t0 + 10 * (n - 1),
                             times=t0 + 10.0 * steps)])
    last = t0 + 10 * (n - 1)

    def state(silent: float) -> str:
        [row] = fleet_rows(store, now=last + silent)
        return row.state

    assert [state(30), state(120), state(STOP_MIN_S + 1)] == ["live", "stalled", "stopped"]


def test_the_sources_word_is_never_a_runs_state():
    follows = SourceStatus("file: train.log", "live", follows=True)
    server = SourceStatus("trackio: p", "live")
    slow = SourceStatus("trackio: p", "live", slow=True)
    done = SourceStatus("replay: r", "finished", follows=True)
    assert [s.word for s in (follows, server, slow, done)] == [
        "following", "connected", "answering slowly", "read all"]


async def test_the_status_bar_says_finished_and_the_files_age_not_live(tmp_path):
    """`--watch train.log` of a finished Trainer log read 6.5 days after it was written:
    "finished · updated 6.5d ago", its source "following" (never "live")."""
    path = finished_trainer_log(tmp_path)
    aged(path, 6.5 * 86400)
    app = build_app(dashboard_config([TrainerLogSource(path)], refresh_interval=0.05))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.last_step == 12, what="the log read")
        await pilot.pause(0.3)
        bar = screen_lines(app)[-2] + screen_lines(app)[-1]
        status = next(line for line in screen_lines(app) if line.lstrip().startswith("run "))
        assert "step 12/12 · finished · updated 6.5d ago" in status, status
        assert " live" not in status and " live" not in bar
        assert "train.log following" in status


def test_a_life_said_again_carries_the_files_time(tmp_path):
    """The engine says each run with data at its source's data time (its file's)."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    mtime = aged(path, 300)
    source = JsonlSource(path)
    events = source.poll()
    lives = [ev for ev in source.take_run_states(events) if isinstance(ev, RunLife)]
    assert [(life.state, life.updated_at) for life in lives] == [("live", mtime)]

"""Following a file at its edges (issue 23): rotated by the real logrotate before the
first look or while being read, turned into a directory and back, waited for. A real
writer (StreamWriter, in its own process) writes 1,000 steps; no step may be lost."""

from __future__ import annotations

import pytest

from carl_tui.events import LogLines, ScalarBatch
from carl_tui.sources.base import WAIT_POLL_S, SourceError, SourceRunner
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.open import open_file
from tests.rotation import LOGROTATE, expect, finish, go, run_scenario, start_writer

needs_logrotate = pytest.mark.skipif(
    LOGROTATE is None, reason="logrotate is not installed (apt-get install logrotate)")

N = 1000
HANG_GUARD = 2000  # polls: only against a hang


def read_until_quiet(src, steps: set[int], notes: list[str]) -> None:
    """Poll until a poll brings nothing and no backlog waits."""
    for _ in range(HANG_GUARD):
        try:
            events = src.poll()
        except SourceError as exc:
            notes.append(str(exc))
            return
        for ev in events:
            if isinstance(ev, ScalarBatch):
                steps.update(int(s) for s in ev.steps)
            elif isinstance(ev, LogLines):  # what the source says of the file, on screen
                notes.extend(ev.lines)
        if not events and src.interval != 0:
            return
    raise AssertionError("the source never went quiet")


@needs_logrotate
@pytest.mark.parametrize("mode", ["copytruncate", "create"])
def test_lines_rotated_away_before_the_first_look_are_read(tmp_path, mode):
    src = open_file(tmp_path / "train.jsonl")  # the dashboard, started before the file
    with pytest.raises(SourceError, match="waiting for"):
        src.poll()
    proc = start_writer(mode, tmp_path, n=N, rotate_at=400)
    finish(proc)  # 400 steps, logrotate, 600 steps: all before the next look
    assert (tmp_path / "train.jsonl.1").stat().st_size > 0
    steps: set[int] = set()
    notes: list[str] = []
    for _ in range(5):
        read_until_quiet(src, steps, notes)
    assert steps == set(range(N))
    assert any("rotated to train.jsonl.1 before it was read" in n for n in notes), notes


@needs_logrotate
def test_copytruncate_while_following_reads_the_lines_left_in_the_copy(tmp_path):
    src = JsonlSource(tmp_path / "train.jsonl")
    proc = start_writer("copytruncate", tmp_path, n=N, rotate_at=600, pause_at=400)
    try:
        steps: set[int] = set()
        notes: list[str] = []
        expect(proc, "written")
        read_until_quiet(src, steps, notes)
        assert steps == set(range(400))
        go(proc)
    finally:
        finish(proc)  # 200 more steps, then the copy and the truncation, then 400
    for _ in range(5):
        read_until_quiet(src, steps, notes)
    assert steps == set(range(N))
    assert any("truncated after a copy to train.jsonl.1" in n for n in notes), notes


def test_a_path_that_became_a_directory_is_read_again_when_it_is_a_file(tmp_path):
    src = JsonlSource(tmp_path / "train.jsonl")
    proc = start_writer("directory", tmp_path, n=N, rotate_at=400, pause_at=400)
    steps: set[int] = set()
    notes: list[str] = []
    try:
        expect(proc, "written")
        read_until_quiet(src, steps, notes)
        assert steps == set(range(400))
        go(proc)
        expect(proc, "directory")  # a directory is made at the path
        runner = SourceRunner(src, lambda events: None)
        with pytest.raises(SourceError) as info:
            for _ in range(3):
                src.poll()
        assert info.value.retry is True and "is a directory now" in str(info.value)
        assert runner.poll_once() == WAIT_POLL_S  # looked at again soon, not in 30 s
        go(proc)
    finally:
        finish(proc)
    read_until_quiet(src, steps, notes)
    assert steps == set(range(N))


def test_waiting_for_a_missing_file_does_not_back_off(tmp_path):
    runner = SourceRunner(open_file(tmp_path / "later.jsonl"), lambda events: None)
    assert [runner.poll_once() for _ in range(8)] == [WAIT_POLL_S] * 8


@needs_logrotate
@pytest.mark.parametrize("mode", ["copytruncate", "create", "directory"])
def test_the_dashboard_polling_loses_nothing(tmp_path, mode):
    """The dashboard's own loop (SourceRunner over `--watch`), started before the file."""
    lost, reader = run_scenario(mode, tmp_path, n=N, rotate_at=400, looks=2)
    assert lost == 0, [s.message for s in reader.statuses[-5:]]

"""W&B newest first: a long `.wandb` log is previewed from its head, a strided sample
of its blocks and its tail, then read in order; what the store holds in the end is
what a read from the start gives.

The logs are written by real `wandb.init(mode="offline")` runs (the writer of
test_source_wandb.py); the preview thresholds are lowered so that a run of a few
thousand steps counts as long. Resynchronising at a block boundary is checked on
the real log and on logs made by LevelDB's writer, record by record.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from carl_tui.events import ScalarBatch
from carl_tui.sources import wandb_log as wl
from carl_tui.sources import wandb_run as wr
from carl_tui.sources.unused_input import UnusedInput
from carl_tui.store import RunStore
from tests.sources.test_source_wandb import (
    GRPO_CONFIG,
    _record,
    copy_log,
    drain,
    expected_points,
    grpo_rows,
    leveldb_log,
    metas,
    needs_wandb,
    points,
    start_writer,
)
from tests.store.test_preview import assert_same_run, read_all

N = 3000  # rows of the long run (about 5 MB of log)
STEP_METRIC = "train/global_step"


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """A GRPO-shaped run of N rows; its config (a long chat template) spans three blocks."""
    root = tmp_path_factory.mktemp("wandb-long")
    plan = {"runs": [{"project": "rcl-pipeline", "name": "grpo-long", "define": True,
                      "config_update": GRPO_CONFIG, "rows": grpo_rows(N),
                      "summary": {"best_reward": 0.80913}}]}
    proc = start_writer(root, plan)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    (run,) = wr.list_runs(root)
    assert run.log is not None and run.log.stat().st_size > 40 * wl.BLOCK_LEN
    return run


@pytest.fixture
def small_preview(monkeypatch):
    """Previews of logs over 256 KiB: a 64 KiB tail and 40 sampled blocks."""
    monkeypatch.setattr(wl, "TAIL_BYTES", 64 << 10)
    monkeypatch.setattr(wr, "PREVIEW_SAMPLES", 40)
    monkeypatch.setattr(wr, "PREVIEW_MIN_SAMPLES", 10)


def previewing(path) -> wr.WandbSource:
    src = wr.WandbSource(path)
    src.preview = True
    src.preview_min_bytes = 256 << 10
    return src


def real(events) -> list:
    return [e for e in events if not (isinstance(e, ScalarBatch) and e.preview)]


def skip_counts(src) -> dict[str, int]:
    return {r.reason: r.count for r in src.unused_input.reasons()}


@needs_wandb
def test_preview_first_then_exactly_a_read_from_the_start(long_run, small_preview):
    rows = grpo_rows(N)
    want = expected_points(rows, step_metric=STEP_METRIC)
    plain = RunStore()
    plain_src = wr.WandbSource(long_run.dir)
    plain_events = read_all(plain_src, plain)

    src = previewing(long_run.dir)
    first = src.poll()
    # The config first (the model, the vocabulary), then the preview, then the summary.
    assert [type(e).__name__ for e in first] == ["RunMeta", "ScalarBatch", "ScalarBatch",
                                                 "RunMeta"]
    config, sample, newest, summary = first
    assert config.meta["config"]["chat_template"] == GRPO_CONFIG["chat_template"]
    assert config.meta["vocab_size"] == 151665 and config.meta["method"] == "grpo"
    assert sample.preview and newest.preview
    # The newest rows are values, not the run's shape: only the sample is classified (as
    # Trackio's newest rows), so the first screen waits for no reading of them.
    assert newest.tail and not sample.tail
    assert summary.meta["summary"]["best_reward"] == 0.80913
    assert {e.run for e in first} == {plain_events[0].run}
    # The newest rows are real rows, up to the last one; the sample spans the run.
    got = points([sample, newest])
    assert got["loss"][-1] == want["loss"][-1]
    assert int(newest.steps[-1]) == rows[-1][STEP_METRIC] == (N) * 5
    assert int(sample.steps[0]) == 5 and len(sample) < N // 10
    assert sample.steps[-1] < newest.steps[0]
    for name, pts in got.items():
        assert set(pts) <= set(want[name]), name
    assert src.interval == 0 and src.unused_input.total == 0 and not src.finished

    staged = RunStore()
    staged.apply(first)
    key = plain.runs()[0].key
    snap = staged.snapshot(key)
    assert snap.last_step == plain.snapshot(key).last_step and snap.provisional
    rest = read_all(src, staged)
    assert [len(e) for e in rest if isinstance(e, ScalarBatch) and e.preview] == [0]
    # Every real row once, in order; the same skipped input; the same end.
    assert points(rest) == points(plain_events) == want
    assert skip_counts(src) == skip_counts(plain_src)
    assert src.unused_input.notes() == plain_src.unused_input.notes()
    assert metas(rest, "exit_code") == [0] and src.finished
    assert metas(rest, "config")[-1] == metas(plain_events, "config")[-1]
    assert_same_run(staged.snapshot(key), plain.snapshot(key))
    assert staged.snapshot(key).meta == plain.snapshot(key).meta


@needs_wandb
def test_a_sampled_preview_shows_the_shape_of_the_run(long_run, small_preview):
    """A preview of a few evenly spaced rows shows the run's shape: rows from every tenth
    of it, and for each metric extremes within the true range that span most of it (the
    plots' y range, the table's min/max, provisional until the history is read). What a
    shape needs is a number of rows (a plot draws a few hundred points of a series), not
    a share of the run: 40 here, `PREVIEW_SAMPLES` on screen, whatever the run's length."""
    assert wr.PREVIEW_SAMPLES == 40  # (small_preview)
    want = expected_points(grpo_rows(N), step_metric=STEP_METRIC)
    first = previewing(long_run.dir).poll()
    got = points([e for e in first if isinstance(e, ScalarBatch) and e.preview])
    last = N * 5
    for name in ("loss", "reward", "entropy", "kl"):
        true = [v for _, v in want[name]]
        seen = [v for _, v in got[name]]
        assert min(true) <= min(seen) and max(seen) <= max(true), name
        assert max(seen) - min(seen) >= 0.8 * (max(true) - min(true)), name
        assert {step * 10 // (last + 1) for step, _ in got[name]} == set(range(10)), name
        assert len(seen) < N // 10, name  # a preview, not the history


@needs_wandb
def test_a_short_log_or_a_read_without_preview_is_read_from_the_start(long_run):
    src = wr.WandbSource(long_run.dir)  # `summary`, `export`: no preview asked for
    assert not any(getattr(e, "preview", False) for e in src.poll())
    short = wr.WandbSource(long_run.dir)
    short.preview = True  # the default threshold: this log is short
    assert not any(getattr(e, "preview", False) for e in short.poll())


@needs_wandb
def test_resync_at_every_block_of_a_real_log(long_run):
    data = long_run.log.read_bytes()
    whole = wl.scan_chunks(data[wl.HEADER_LEN :], wl.HEADER_LEN, at_eof=True,
                           unused_input=UnusedInput()).records
    starts = {wl.CHUNK_HEADER.unpack_from(data, b)[2]
              for b in range(wl.BLOCK_LEN, len(data), wl.BLOCK_LEN)}
    assert {wl.MIDDLE, wl.LAST} <= starts  # blocks that begin inside a record
    for b in range(wl.BLOCK_LEN, len(data) - wl.BLOCK_LEN, wl.BLOCK_LEN):
        at = wl.resync(data[b:], b)
        assert at is not None and at >= b
        unused_input = UnusedInput()
        found = wl.scan_chunks(data[at:], at, at_eof=True, unused_input=unused_input).records
        assert found and found == whole[-len(found):], b
        assert unused_input.total == 0


# Records around and across block boundaries: the second ends 3 bytes before the end of
# the first block (zero padding: the next block begins with a whole record), the fourth
# spans three blocks (the next ones begin with its middle and its last piece).
RECORD_SIZES = [100, wl.BLOCK_LEN - 3 - 3 * wl.HEADER_LEN - 100, 300, 70_000, 5, 40_000, 0,
                12, 33_000]


def test_resync_finds_the_first_record_that_starts_in_or_after_a_block():
    records = [_record((size, i)) for i, size in enumerate(RECORD_SIZES)]
    log, spans = leveldb_log(records)
    record_start = [pieces[0][0] - wl.HEADER_LEN for pieces in spans]
    first_kinds = set()
    for b in range(wl.BLOCK_LEN, len(log), wl.BLOCK_LEN):
        first_kinds.add(wl.CHUNK_HEADER.unpack_from(log, b)[2])
        want = [r for r, at in zip(records, record_start, strict=True) if at >= b]
        at = wl.resync(log[b:], b)
        if not want:
            assert at is None
            continue
        assert at == min(s for s in record_start if s >= b)
        unused_input = UnusedInput()
        assert wl.scan_chunks(log[at:], at, at_eof=True, unused_input=unused_input).records == want
        assert unused_input.total == 0
    assert {wl.FULL, wl.MIDDLE, wl.LAST} <= first_kinds


def test_resync_passes_over_a_block_whose_first_chunk_is_no_chunk():
    records = [_record((size, i)) for i, size in enumerate([40_000, 200, 200, 40_000, 200])]
    log, spans = leveldb_log(records)
    damaged = bytearray(log)
    b = wl.BLOCK_LEN
    damaged[b : b + 7] = b"\x13\x37\xff\xff\x09\x00\x42"  # not a chunk header
    assert wl.resync(log[b:], b) == spans[1][0][0] - wl.HEADER_LEN  # undamaged: record 1
    # Damaged: LevelDB's rule, the rest of the block is dropped; the next block begins
    # with the last piece of record 3, so record 4 is the first found.
    assert wl.resync(bytes(damaged[b:]), b) == spans[4][0][0] - wl.HEADER_LEN


@needs_wandb
def test_a_run_still_being_written_is_previewed_then_followed(long_run, small_preview,
                                                              tmp_path):
    data, log = copy_log(long_run, tmp_path)
    whole = drain(wr.WandbSource(long_run.dir))
    cut = len(data) * 2 // 3 + 13  # inside a record: the rest is not written yet
    log.write_bytes(data[:cut])
    ref_dir = tmp_path / "so-far" / log.parent.name
    ref_dir.mkdir(parents=True)
    (ref_dir / log.name).write_bytes(data[:cut])
    so_far = points(drain(wr.WandbSource(ref_dir)))  # what a read from the start finds now

    src = previewing(log.parent)
    first = src.poll()
    newest = [e for e in first if isinstance(e, ScalarBatch)][-1]
    assert newest.preview and int(newest.steps[-1]) == so_far["loss"][-1][0]
    assert not metas(first, "exit_code")
    events = list(first)
    rng = random.Random(5)
    pos = cut
    while pos < len(data):
        events += src.poll()
        step = rng.choice((7, 300, 5000, 40_000))
        with open(log, "ab") as f:
            f.write(data[pos : pos + step])
        pos += step
    events += drain(src)
    assert [len(e) for e in events if isinstance(e, ScalarBatch) and e.preview][-1] == 0
    assert sum(1 for e in events if isinstance(e, ScalarBatch) and e.preview and not len(e)) == 1
    assert points(real(events)) == points(whole)
    assert src.finished and metas(events, "exit_code") == [0]
    assert src.unused_input.total == 4 + 2  # the run's non-finite and non-numeric values, once


@needs_wandb
def test_corrupt_records_are_counted_once_with_a_preview(long_run, small_preview, tmp_path):
    data, log = copy_log(long_run, tmp_path)
    damaged = bytearray(data)
    for at in (len(data) // 2, len(data) - 20_000):  # in a sampled block; in the tail
        b = at // wl.BLOCK_LEN * wl.BLOCK_LEN
        damaged[b + 100] ^= 0x5A
        damaged[b + 2000] ^= 0x5A
    log.write_bytes(bytes(damaged))
    plain = wr.WandbSource(log.parent)
    plain_events = drain(plain)
    assert skip_counts(plain).get(wl.CORRUPT, 0) >= 2
    src = previewing(log.parent)
    events = drain(src)
    assert any(isinstance(e, ScalarBatch) and e.preview and len(e) for e in events)
    assert points(real(events)) == points(plain_events)
    assert skip_counts(src) == skip_counts(plain)


@needs_wandb
def test_a_folder_previews_its_long_runs(long_run, small_preview):
    events = drain(previewing(long_run.dir.parent))
    previews = [e for e in events if isinstance(e, ScalarBatch) and e.preview]
    assert len(previews) == 3 and len(previews[-1]) == 0
    assert {e.run.run_id for e in previews} == {long_run.run_id}
    assert points(real(events)) == expected_points(grpo_rows(N), step_metric=STEP_METRIC)



@needs_wandb
def test_only_a_folders_newest_runs_are_previewed(long_run, small_preview, monkeypatch):
    monkeypatch.setattr(wr, "PREVIEW_MAX_RUNS", 0)
    events = drain(previewing(long_run.dir.parent))
    assert not any(isinstance(e, ScalarBatch) and e.preview for e in events)
    assert points(events) == expected_points(grpo_rows(N), step_metric=STEP_METRIC)


class _Recorded(wr.WandbSource):
    """A W&B source that keeps what it sent, in order."""

    def __init__(self, path):
        super().__init__(path)
        self.sent: list = []

    def poll(self):
        got = super().poll()
        self.sent += got
        return got


@needs_wandb
async def test_the_dashboard_shows_the_preview_then_the_exact_history(long_run, small_preview):
    from carl_tui.ui.app import build_app
    from tests.conftest import dashboard_config, wait_for

    src = _Recorded(long_run.dir)
    src.preview_min_bytes = 256 << 10
    app = build_app(dashboard_config([src], refresh_interval=0.05))
    last = str(N * 5)
    async with app.run_test(size=(160, 45)) as pilot:
        table = app.dashboard.table

        def settled() -> bool:
            rows = [k.value for k in table.rows]
            if "loss" not in rows or src.interval == 0:
                return False
            row = [str(c) for c in table.get_row("loss")]
            return row[5] == last and not any("≈" in c for c in row)

        await wait_for(pilot, settled, timeout=60, what="the whole history on screen")
        await pilot.press("q")
    kinds = [(type(e).__name__, getattr(e, "preview", None), len(e) if hasattr(e, "steps")
              else None) for e in src.sent]
    first_real = next(i for i, k in enumerate(kinds) if k[0] == "ScalarBatch" and not k[1])
    assert any(k[1] and k[2] for k in kinds[:first_real])  # the preview came first
    assert [k for k in kinds if k[1] and not k[2]] == [("ScalarBatch", True, 0)]
    assert src.unused_input.total == 4 + 2


@needs_wandb
def test_records_are_decoded_without_importing_wandb(long_run):
    """`Record` is built from wandb's generated descriptors (the import costs seconds);
    it decodes every record of a real log as wandb's own class does."""
    code = ("import sys; from carl_tui.sources import wandb_run as wr; "
            "cls = wr._record_class(); print(cls.DESCRIPTOR.full_name, 'wandb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == ["wandb_internal.Record", "False"]
    built = wr._generated_record_class()
    from wandb.proto.wandb_internal_pb2 import Record

    data = long_run.log.read_bytes()
    records = wl.scan_chunks(data[wl.HEADER_LEN :], wl.HEADER_LEN, at_eof=True,
                             unused_input=UnusedInput()).records
    assert built is not None and built is not Record and len(records) > 3 * N
    for raw in records[:: len(records) // 500]:
        ours, theirs = built.FromString(raw), Record.FromString(raw)
        assert ours.WhichOneof("record_type") == theirs.WhichOneof("record_type")
        assert str(ours) == str(theirs)


@needs_wandb
def test_a_sampled_block_whose_first_bytes_hold_no_row_is_read_whole(long_run, monkeypatch):
    monkeypatch.setattr(wl, "SAMPLE_BYTES", 16)  # no record fits: each block is read whole
    got = wl.read_preview(long_run.log, wr._record_class(), samples=20, min_bytes=1)
    assert got is not None and len(got.sample) == 20
    want = expected_points(grpo_rows(N), step_metric=STEP_METRIC)
    probe = wr._RunReader(long_run.dir, UnusedInput(), wr._record_class())
    sampled = points(probe._records(got.head + got.sample))
    assert set(sampled["loss"]) <= set(want["loss"]) and len(sampled["loss"]) > 20

"""JsonlSource: the stream format, tailing a growing file, and columnar parsing."""

from __future__ import annotations

import json
import math
import os
import random

import numpy as np
import pytest

from carl_tui.events import LogLines, Marker, RunMeta, RunRef, ScalarBatch
from carl_tui.metric_names import STEP_KEYS, canonical, is_metric_key, valid_number
from carl_tui.sources.base import SourceError
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.rows import build_columns


def batches(events):
    return [e for e in events if isinstance(e, ScalarBatch)]


def concat(events, name):
    bs = batches(events)
    return np.concatenate([b.steps for b in bs]), np.concatenate(
        [b.columns.get(name, np.full(len(b), np.nan)) for b in bs]
    )


def write(path, text, mode="a"):
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)


def test_format_meta_metrics_markers_logs(tmp_path):
    path = tmp_path / "runs" / "stream.jsonl"
    path.parent.mkdir()
    lines = [
        {"event": "meta", "run_id": "r1", "name": "tiny-sft", "project": "carl",
         "model": "tiny", "method": "sft", "vocab_size": 20, "config": {"lr": 0.1}},
        {"step": 1, "time": 1732350000.1, "loss": 2.9, "train/entropy": 2.8,
         "mean_token_accuracy": 0.05, "rewards/reverse/mean": 0.5},
        {"event": "log", "text": "first\nsecond"},
        {"global_step": 2, "time": 1732350000.6, "train/loss": 2.5},
        {"event": "marker", "kind": "phase_transition", "step": 2, "value": 0.99},
        {"train/global_step": 3, "loss": 2.0},
        {"event": "log", "text": "done"},
    ]
    write(path, "".join(json.dumps(x) + "\n" for x in lines))
    src = JsonlSource(path)
    events = src.poll()
    ref = RunRef("jsonl", "carl", "r1", "tiny-sft")
    assert [type(e) for e in events] == [RunMeta, ScalarBatch, LogLines, Marker, LogLines]
    meta, batch, log1, marker, log2 = events
    assert meta.run == ref and meta.meta["vocab_size"] == 20 and meta.meta["config"] == {"lr": 0.1}
    assert "event" not in meta.meta
    assert batch.run == ref
    assert batch.steps.tolist() == [1, 2, 3]
    assert batch.columns["loss"].tolist() == [2.9, 2.5, 2.0]
    assert batch.columns["entropy"][0] == 2.8 and np.isnan(batch.columns["entropy"][1:]).all()
    assert batch.columns["rewards/reverse/mean"][0] == 0.5
    assert set(batch.columns) == {"loss", "entropy", "mean_token_accuracy", "rewards/reverse/mean"}
    assert batch.wall_time == 1732350000.6
    assert log1.lines == ("first", "second") and log2.lines == ("done",)
    assert (marker.kind, marker.step, dict(marker.detail)) == ("phase_transition", 2, {"value": 0.99})
    assert src.skipped == 0 and src.poll() == []


def test_default_identity_and_explicit_run(tmp_path):
    path = tmp_path / "proj" / "my-run.jsonl"
    path.parent.mkdir()
    write(path, '{"step": 0, "loss": 1}\n{"event": "meta", "run_id": "late"}\n')
    (batch,) = batches(JsonlSource(path).poll())
    # A meta line after the first metrics line does not rename the run.
    assert batch.run == RunRef("jsonl", "proj", "my-run", "my-run")
    explicit = RunRef("x", "p", "id")
    write(path, '{"event": "meta", "run_id": "r9"}\n{"step": 1, "loss": 1}\n', mode="w")
    events = JsonlSource(path, run=explicit).poll()
    assert all(e.run == explicit for e in events)


def test_missing_steps_continue_from_previous(tmp_path):
    path = tmp_path / "s.jsonl"
    write(path, '{"loss": 1}\n{"loss": 2}\n{"step": 10, "loss": 3}\n{"loss": 4}\n')
    src = JsonlSource(path)
    assert batches(src.poll())[0].steps.tolist() == [0, 1, 10, 11]
    write(path, '{"loss": 5}\n{"step": 7.0, "loss": 6}\n{"step": 7.5, "loss": 7}\n'
                '{"loss": 8}\n')
    (batch,) = batches(src.poll())
    # 7.5 is not a step: that line is skipped, never given an invented step;
    # the step-less line after it continues from the last kept line.
    assert batch.steps.tolist() == [12, 7, 8]
    assert batch.columns["loss"].tolist() == [5.0, 6.0, 8.0]
    assert src.skipped == 1
    assert [(r.reason, r.count, r.example) for r in src.tally.reasons()] == [
        ("invalid step", 1, "step=7.5")
    ]


def test_invalid_values_and_malformed_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "s.jsonl"
    write(
        path,
        '{"step": 1, "loss": NaN, "entropy": 1.5}\n'  # bare NaN literal (Python's json)
        '{"step": 2, "loss": Infinity, "entropy": "2.0"}\n'
        '{"step": 3, "loss": true, "entropy": null, "grad_norm": [1]}\n'
        '{"step": 4, "loss": "NaN", "entropy": {"a": 1}, "grad_norm": 0.5}\n'
        "not json at all\n"
        "[1, 2, 3]\n"
        '"a string"\n'
        "\n"
        '{"event": "bogus"}\n'
        '{"event": "marker", "step": 3}\n'
        '{"event": "log", "text": 5}\n'
        '{"step": 5, "loss": 0.25}\n',
    )
    src = JsonlSource(path)
    (batch,) = batches(src.poll())
    assert batch.steps.tolist() == [1, 2, 3, 4, 5]
    np.testing.assert_array_equal(batch.columns["loss"], [np.nan, np.nan, np.nan, np.nan, 0.25])
    np.testing.assert_array_equal(batch.columns["entropy"], [1.5, np.nan, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(batch.columns["grad_norm"], [np.nan, np.nan, np.nan, 0.5, np.nan])
    # values: NaN, Infinity, "2.0", true, null, [1], "NaN", {"a": 1} = 8;
    # lines: not json, array, string, bogus event, marker without kind, log without text = 6
    assert src.skipped == 14
    assert {r.reason: r.count for r in src.tally.reasons()} == {
        "value not a finite number": 3,  # NaN, Infinity, "NaN"
        "value not a number": 5,  # "2.0", true, null, [1], {"a": 1}
        "not JSON": 1,
        "not an object": 2,
        "unknown event": 1,
        "marker without kind": 1,
        "log without text": 1,
    }


def test_half_written_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "s.jsonl"
    write(path, '{"step": 0, "loss": 1.0}\n{"step": 1, "lo')
    src = JsonlSource(path)
    assert batches(src.poll())[0].steps.tolist() == [0]
    assert src.poll() == []
    write(path, 'ss": 2.0}\n{"step": 2')
    (batch,) = batches(src.poll())
    assert batch.steps.tolist() == [1] and batch.columns["loss"].tolist() == [2.0]
    write(path, ', "loss": 3.0}\n')
    assert batches(src.poll())[0].columns["loss"].tolist() == [3.0]
    assert src.skipped == 0


def test_truncated_file_is_read_again(tmp_path):
    path = tmp_path / "s.jsonl"
    write(path, "".join(f'{{"step": {i}, "loss": {i}}}\n' for i in range(5)))
    src = JsonlSource(path)
    src.poll()
    write(path, '{"step": 0, "loss": 9}\n', mode="w")
    events = src.poll()
    assert isinstance(events[0], LogLines) and "truncated" in events[0].lines[0]
    assert batches(events)[0].columns["loss"].tolist() == [9.0]
    assert src.generation == 1


def test_replaced_file_drains_old_lines_then_rereads(tmp_path):
    path = tmp_path / "s.jsonl"
    write(path, '{"step": 0, "loss": 0}\n')
    src = JsonlSource(path)
    src.poll()
    write(path, '{"step": 1, "loss": 1}\n')  # not yet read when the file is replaced
    new = tmp_path / "new.jsonl"
    write(new, '{"event": "meta", "run_id": "second"}\n{"step": 0, "loss": 5}\n')
    os.replace(new, path)
    events = src.poll()
    # The old copy first, until a read of it finds nothing more; then the new file.
    assert src.interval == 0  # polled again at once
    events += src.poll()
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ScalarBatch", "LogLines", "RunMeta", "ScalarBatch"]
    assert events[0].steps.tolist() == [1] and events[0].run.run_id == "s"
    assert "replaced" in events[1].lines[0]
    assert events[3].run.run_id == "second" and events[3].columns["loss"].tolist() == [5.0]
    assert src.generation == src.restarts == 1
    assert "replaced" in src.limitation and src.notes == [events[1].lines[0][len("[carl-tui] "):]]


def test_missing_file_waits_then_reads(tmp_path):
    path = tmp_path / "later.jsonl"
    src = JsonlSource(path)
    with pytest.raises(SourceError, match="waiting for"):
        src.poll()
    write(path, '{"step": 3, "loss": 1}\n')
    assert batches(src.poll())[0].steps.tolist() == [3]


def test_large_backlog_is_chunked_with_zero_interval(tmp_path):
    path = tmp_path / "big.jsonl"
    n = 20_000
    write(path, "".join(f'{{"step": {i}, "loss": {i / 7}, "acc": {i % 3}}}\n' for i in range(n)))
    src = JsonlSource(path, chunk_lines=3000, max_bytes_per_poll=200_000, interval=0.5)
    events, polls = [], 0
    while True:
        polls += 1
        events += src.poll()
        if src.interval != 0:
            break
    assert polls > 3 and src.interval == 0.5
    assert all(len(b) <= 3000 for b in batches(events))
    steps, loss = concat(events, "loss")
    assert steps.tolist() == list(range(n))
    np.testing.assert_allclose(loss, np.arange(n) / 7, rtol=1e-15)
    assert concat(events, "acc")[1].tolist() == [float(i % 3) for i in range(n)]


def _float_or_none(v):
    try:
        return valid_number(v)
    except OverflowError:
        return None


def _reference(rows, prev=-1):
    """Per-value reference implementation of the row rules (see sources/rows.py)."""
    steps, cols, skipped = [], {}, 0
    for d in rows:
        key = next((k for k in STEP_KEYS if k in d), None)
        step = None
        if key is not None:
            v = _float_or_none(d[key])
            if v is None or v != int(v) or not 0 <= v < 2**62:
                skipped += 1  # the whole row
                continue
            step = int(v)
        for k, v in d.items():
            if k in STEP_KEYS or (k != "time" and not is_metric_key(k)):
                continue
            num = _float_or_none(v)
            if num is None:
                skipped += 1
            elif k != "time":
                cols.setdefault(canonical(k), {})[len(steps)] = num
        step = prev + 1 if step is None else step
        steps.append(step)
        prev = step
    return steps, cols, skipped


@pytest.mark.parametrize("seed", range(6))
def test_columns_match_per_value_reference(seed):
    rnd = random.Random(seed)
    keys = ["loss", "train/loss2", "entropy", "reward", "time", "step", "global_step", "epoch"]
    odd = [None, True, "x", "1.5", [1], {"a": 2}, math.nan, math.inf, 2.5]
    uniform = seed % 2 == 0
    rows = []
    for i in range(300):
        ks = keys if uniform else rnd.sample(keys, rnd.randint(0, len(keys)))
        row = {}
        for k in ks:
            if k in ("step", "global_step"):
                row[k] = (rnd.choice([i, i * 2, float(i), 0.5 + i, -i - 1, None, 2**63])
                          if rnd.random() < 0.9 else "s")
            elif rnd.random() < (0.0 if uniform and seed == 0 else 0.1):
                row[k] = rnd.choice(odd)
            else:
                row[k] = rnd.choice([rnd.random(), rnd.randint(-5, 5)])
        rows.append(row)
    got = build_columns(rows)
    steps, cols, skipped = _reference(rows)
    assert got.steps.tolist() == steps
    assert got.skipped == skipped == got.tally.total
    assert set(got.columns) == set(cols)
    for name, values in cols.items():
        expect = np.full(len(steps), np.nan)
        for i, v in values.items():
            expect[i] = v
        np.testing.assert_array_equal(got.columns[name], expect)


def test_non_numbers_are_skipped_and_counted(tmp_path):
    path = tmp_path / "s.jsonl"
    write(path, '{"step": 1, "loss": 1.5, "flag": true, "name": "a"}\n'
                '{"step": 2, "loss": 2.5, "flag": false, "name": "b", "obj": {"x": 1}}\n')
    src = JsonlSource(path)
    (batch,) = batches(src.poll())
    assert batch.steps.tolist() == [1, 2] and batch.columns["loss"].tolist() == [1.5, 2.5]
    assert set(batch.columns) == {"loss"} and src.skipped == 5

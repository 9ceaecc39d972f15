"""ReplaySource timing with a fake clock, and the recording of a real demo run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from carl_tui.events import LogLines, Marker, RunMeta, ScalarBatch
from carl_tui.sources.base import SourceError
from carl_tui.sources.replay import ReplaySource

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "tiny-demo.jsonl"


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def steps_of(events):
    return [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "rec.jsonl"
    lines = [{"event": "meta", "run_id": "r", "vocab_size": 20}]
    lines += [{"step": i, "time": 1000.0 + 0.5 * i, "loss": float(i)} for i in range(6)]
    lines.insert(3, {"event": "log", "text": "after step 1"})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_real_time_playback_with_fake_clock(recording):
    clock = FakeClock()
    src = ReplaySource(recording, clock=clock, wall_clock=lambda: 5000.0)
    first = src.poll()
    assert isinstance(first[0], RunMeta) and first[0].run.run_id == "r"
    assert steps_of(first) == [0]
    # Wall times are shifted so that the first line happened "now".
    assert [e.wall_time for e in first if isinstance(e, ScalarBatch)] == [5000.0]
    assert src.interval == pytest.approx(0.25)  # capped wait
    clock.now += 0.49
    assert src.poll() == []
    assert src.interval == pytest.approx(0.01)
    clock.now += 0.01
    second = src.poll()
    assert steps_of(second) == [1] and isinstance(second[-1], LogLines)
    clock.now += 1.0
    assert steps_of(src.poll()) == [2, 3]
    assert not src.finished
    clock.now += 10
    assert steps_of(src.poll()) == [4, 5]
    assert src.finished


def test_speed_scales_time(recording):
    clock = FakeClock()
    src = ReplaySource(recording, speed=4.0, clock=clock)
    assert steps_of(src.poll()) == [0]
    clock.now += 0.25  # 1 recorded second
    assert steps_of(src.poll()) == [1, 2]


@pytest.mark.parametrize("speed", [0, math.inf])
def test_as_fast_as_possible(recording, speed):
    src = ReplaySource(recording, speed=speed, clock=FakeClock())
    assert steps_of(src.poll()) == list(range(6))
    assert src.finished and src.skipped == 0


def test_missing_recording_is_a_clear_error(tmp_path):
    with pytest.raises(SourceError, match="waiting for"):
        ReplaySource(tmp_path / "nope.jsonl").poll()


def _gate(values, window=5, min_above=3, threshold=0.99):
    for i in range(len(values)):
        recent = values[max(0, i - window + 1) : i + 1]
        if sum(v >= threshold for v in recent) >= min_above:
            return i
    return None


def test_the_real_recording_tells_the_story():
    """The recording of a real demo run (recordings/tiny-demo.jsonl) replays whole: every
    line read, the run's own gate marker where its accuracy makes the gate fire, phi as the
    callback derived it from entropy."""
    src = ReplaySource(RECORDING, speed=0)
    events = src.poll()
    assert src.finished and src.skipped == 0
    metas = [e for e in events if isinstance(e, RunMeta)]
    vocab = next(m.meta["vocab_size"] for m in metas if "vocab_size" in m.meta)
    steps, cols = [], {}
    for b in (e for e in events if isinstance(e, ScalarBatch)):
        steps += b.steps.tolist()
        for name, values in b.columns.items():
            cols.setdefault(name, []).extend(zip(b.steps.tolist(), values.tolist()))
    lines = [json.loads(x) for x in RECORDING.read_text().splitlines() if x.strip()]
    assert len(steps) == sum(1 for x in lines if "event" not in x)
    assert steps == sorted(steps)
    acc = [(s, v) for s, v in cols["mean_token_accuracy"] if not math.isnan(v)]
    gate = next(m for m in events if isinstance(m, Marker) and m.kind == "phase_transition")
    assert gate.step == acc[_gate([v for _, v in acc])][0]
    ent = {s: v for name in ("entropy", "warm_start/entropy") for s, v in cols.get(name, [])
           if not math.isnan(v)}  # the demo logs its warm start as warm_start/entropy
    phi = [(s, v) for s, v in cols["phi"] if not math.isnan(v)]
    assert len(phi) > 100
    for s, v in phi:
        assert v == pytest.approx(1 - ent[s] / math.log(vocab), abs=1e-9)


def test_recording_with_bom_and_bad_lines_counts_skips_by_reason(tmp_path):
    path = tmp_path / "rec.jsonl"
    lines = [json.dumps({"step": i, "time": 1000.0 + 0.5 * i, "loss": 2.0 - 0.1 * i})
             for i in range(4)]
    lines.insert(2, '{"step": -1, "time": 1000.7, "loss": 1.0}')
    lines.insert(3, "null")
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())  # no final newline
    src = ReplaySource(path, speed=0)
    assert steps_of(src.poll()) == [0, 1, 2, 3]
    assert {(r.reason, r.count) for r in src.unused_input.reasons()} == {
        ("negative step", 1), ("not an object", 1)
    }
    assert src.skipped == 2


def test_directory_is_refused_without_retry(tmp_path):
    with pytest.raises(SourceError, match="is a directory, not a file") as info:
        ReplaySource(tmp_path).poll()
    assert info.value.retry is False

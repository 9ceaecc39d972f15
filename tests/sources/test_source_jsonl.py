"""JsonlSource: the stream format, tailing a growing file, and columnar parsing."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carl_tui.events import LogLines, Marker, RunMeta, RunRef, ScalarBatch
from carl_tui.metric_names import STEP_KEYS, canonical, is_metric_key, valid_number
from carl_tui.sources.base import SourceError
from carl_tui.sources.jsonl import JsonlSource, StreamParser
from carl_tui.sources.replay import ReplaySource
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
    got = (marker.kind, marker.step, dict(marker.detail))
    assert got == ("phase_transition", 2, {"value": 0.99})
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
    assert [(r.reason, r.count, r.example) for r in src.unused_input.reasons()] == [
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
    assert {r.reason: r.count for r in src.unused_input.reasons()} == {
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
    assert got.skipped == skipped == got.unused_input.total
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


# -- the skipped-line policy ------------------------------------------------------------


def test_skipped_line_policy_one_rule(tmp_path):
    path = tmp_path / "s.jsonl"
    lines = [
        b'{"step": 3, "loss": 0.91}',
        b'{"step": -5, "loss": 0.88}',  # negative: never its absolute value
        b'{"step": NaN, "loss": 0.87}',
        b'{"step": true, "loss": 0.86}',
        b'{"step": "nine", "loss": 0.85}',
        b'{"step": 10.5, "loss": 0.84}',
        b'{"step": {"n": 9}, "loss": 0.83}',
        b'{"step": 4611686018427387904, "loss": 0.82}',
        b'{"step": null, "loss": 0.81}',
        b'{"step": 5, "global_step": "x", "loss": 0.79}',  # the first step key decides
        b'{"loss": 0.77}',  # no step key: previous kept step + 1
        b"null",
        '{"step": 9, "loss": 0.7}'.encode("utf-16-le"),
        b'\xef\xbb\xbf{"step": 7, "loss": 0.75}',  # a BOM at a line start is fine
        b'{"event": "marker", "kind": "gate", "step": -2}',
        b'{"event": "marker", "kind": "gate", "step": 6.5}',
        b'{"event": "marker", "kind": "gate"}',  # no step: the latest kept step
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    src = JsonlSource(path)
    events = src.poll()
    (batch,) = batches(events)
    assert batch.steps.tolist() == [3, 5, 6, 7]
    assert batch.columns["loss"].tolist() == [0.91, 0.79, 0.77, 0.75]
    (marker,) = [e for e in events if isinstance(e, Marker)]
    assert (marker.kind, marker.step) == ("gate", 7)
    # The UTF-16 line as it is shown: each NUL byte replaced.
    utf16 = ('{\x00"\x00s\x00t\x00e\x00p\x00"\x00:\x00 \x009\x00,\x00 \x00"\x00l\x00o'
             '\x00s\x00s\x00"\x00:\x00 \x000\x00.\x007\x00}\x00')
    reasons = {r.reason: (r.count, r.example) for r in src.unused_input.reasons()}
    assert reasons == {
        "invalid step": (8, "step=nan"),
        "negative step": (2, "step=-5"),
        "not an object": (1, "null"),
        "not UTF-8": (1, utf16.replace("\x00", "\ufffd")),
    }
    assert src.skipped == 12 == src.unused_input.total


def test_step_less_lines_can_collide_with_logged_steps(tmp_path):
    """Documented: a step-less line after step 5 gets 6; a later logged 6 is a second point."""
    path = tmp_path / "s.jsonl"
    write(path, '{"step": 5, "loss": 1.0}\n{"loss": 0.9}\n{"step": 6, "loss": 0.8}\n')
    (batch,) = batches(JsonlSource(path).poll())
    assert batch.steps.tolist() == [5, 6, 6]


def test_every_restart_is_visible(tmp_path):
    path = tmp_path / "run.jsonl"
    write(path, "".join(f'{{"step": {i}, "loss": {1 / (i + 1)}}}\n' for i in range(40)))
    src = JsonlSource(path)
    src.poll()
    assert src.limitation == "" and src.restarts == 0
    # truncated and rewritten past the old offset before the next poll
    write(path, "".join(f'{{"step": {i}, "loss": {2 / (i + 3)}}}\n' for i in range(60)), "w")
    events = src.poll()
    assert isinstance(events[0], LogLines)
    assert events[0].lines == (
        "[carl-tui] run.jsonl was truncated and written again; reading it again from the start",
    )
    assert batches(events)[0].steps.tolist() == list(range(60))
    assert src.restarts == 1 and src.notes == [events[0].lines[0][len("[carl-tui] "):]]
    assert src.limitation == (
        "run.jsonl started over once (latest: run.jsonl was truncated and written again; "
        "reading it again from the start); points read before stay in the plots"
    )


# -- hostile files ----------------------------------------------------------------------

HOSTILE = Path(__file__).parents[1] / "data" / "hostile"


def _hostile_module():
    spec = importlib.util.spec_from_file_location("make_hostile", HOSTILE / "make_hostile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


hostile = _hostile_module()


def read_all(src):
    events = []
    for _ in range(1000):
        events += src.poll()
        if src.interval != 0:
            return events
    raise AssertionError("the source never caught up")


def points_of(events):
    out = []
    for b in batches(events):
        for i, step in enumerate(b.steps.tolist()):
            values = {k: float(v[i]) for k, v in b.columns.items() if not np.isnan(v[i])}
            out.append((step, values))
    return out


def reasons_of(src):
    return {r.reason: r.count for r in src.unused_input.reasons()}


@pytest.mark.parametrize("name", sorted(hostile.CASES))
def test_hostile_file(name):
    case = hostile.CASES[name]()
    path = HOSTILE / name
    assert path.read_bytes() == case.data, "the corpus differs from make_hostile.py"
    src = JsonlSource(path)
    events = read_all(src)
    assert points_of(events) == case.points, case.note
    assert reasons_of(src) == case.skips, case.note
    # The replay source reads the same bytes with the same rules (a finished
    # recording's last line needs no newline).
    rep = ReplaySource(path, speed=0)
    rep_events = rep.poll()
    extra = points_of(rep_events)[len(case.points):]
    assert points_of(rep_events)[: len(case.points)] == case.points
    assert len(extra) == (name == "no_final_newline.jsonl")
    assert reasons_of(rep) == case.skips


def test_hostile_details():
    events = read_all(JsonlSource(HOSTILE / "events.jsonl"))
    (log,) = [e for e in events if isinstance(e, LogLines)]
    assert log.lines == ("title \ufffd]0;pwned\ufffd done",)  # no escape reaches the terminal
    src = JsonlSource(HOSTILE / "crlf.jsonl")
    events = read_all(src)
    assert {e.run.run_id for e in events} == {"crlf-run"}
    (meta,) = [e for e in read_all(JsonlSource(HOSTILE / "deep_nesting.jsonl"))
               if isinstance(e, RunMeta)]
    depth, node = 0, meta.meta["config"]
    while isinstance(node, list):
        depth, node = depth + 1, node[0]
    assert (depth, node) == (31, "<nested too deep>")


def test_no_final_newline_waits_then_reads(tmp_path):
    case = hostile.CASES["no_final_newline.jsonl"]()
    path = tmp_path / "run.jsonl"
    path.write_bytes(case.data)
    src = JsonlSource(path)
    assert points_of(read_all(src)) == case.points
    write(path, "\n")
    ((step, values),) = points_of(src.poll())
    assert step == 4 and set(values) == {"loss", "entropy", "mean_token_accuracy",
                                         "learning_rate"}
    assert src.skipped == 0


def test_ten_megabyte_line(tmp_path):
    case = hostile.big_line_case()
    path = tmp_path / "big.jsonl"
    path.write_bytes(case.data)
    src = JsonlSource(path)
    assert points_of(read_all(src)) == case.points
    assert reasons_of(src) == case.skips
    (example,) = [r.example for r in src.unused_input.reasons()]
    assert len(example) <= 120 and example.startswith("note='xxxx")
    # With a smaller line limit the line is skipped, and the rest still read.
    small = JsonlSource(path, max_line_bytes=1 << 20, max_bytes_per_poll=1 << 18)
    assert [s for s, _ in points_of(read_all(small))] == [0, 2]
    assert reasons_of(small) == {"line too long": 1}


# -- property-based fuzzing ---------------------------------------------------------------

VALUE_REASONS = {"value not a finite number", "value not a number", "invalid metric name"}
_weird = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
step_values = st.one_of(st.integers(0, 10**6), st.integers(0, 10**6).map(float), _weird)
metric_values = st.one_of(st.floats(-1e6, 1e6), st.integers(-(10**6), 10**6), _weird)
metric_keys = st.sampled_from(
    ["loss", "entropy", "reward", "kl", "train/mean_token_accuracy", "m_a", "m/b", "", " ",
     "\x1b[1m", "timestamp", "_runtime"]
)
rows = st.builds(
    lambda steps, metrics: {**steps, **metrics},
    st.fixed_dictionaries({}, optional={"step": step_values, "global_step": step_values,
                                        "time": metric_values}),
    st.dictionaries(metric_keys, metric_values, max_size=6),
)
_one_line_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), max_size=10
)
event_objs = st.one_of(
    st.fixed_dictionaries({"event": st.just("meta")},
                          optional={"run_id": st.text(max_size=4), "vocab_size": _weird}),
    st.fixed_dictionaries({"event": st.just("marker")},
                          optional={"kind": st.one_of(st.text(max_size=4), _weird),
                                    "step": step_values, "x": _weird}),
    st.fixed_dictionaries({"event": st.just("log"),
                           "text": st.one_of(_one_line_text, st.integers())}),
    st.fixed_dictionaries({"event": st.one_of(st.text(max_size=4), st.integers())}),
)


def _dumps(obj) -> bytes:
    return json.dumps(obj).encode()


def _is_object_line(b: bytes) -> bool:
    text = b.removeprefix(b"\xef\xbb\xbf").strip(b"\x00")
    try:
        return isinstance(json.loads(text.decode("utf-8")), dict)
    except (ValueError, RecursionError):
        return False


garbage = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"  ", b"\r", b"null", b"[1]", b"3", b'"x"', b"{", b"\x00\x00"]),
    rows.map(lambda o: json.dumps(o).encode("utf-16-le")),
).filter(lambda b: b"\n" not in b and not _is_object_line(b))
lines_strategy = st.lists(
    st.one_of(rows.map(lambda o: ("row", o)), event_objs.map(lambda o: ("event", o)),
              garbage.map(lambda b: ("garbage", b))),
    max_size=40,
)


def _ref_blank(line: bytes) -> bool:
    t = line.removeprefix(b"\xef\xbb\xbf").strip(b"\x00")
    return b"\x00" not in t and not t.strip()


def _ref_step(row):
    """The step the policy gives a row: int, None (no step key) or "skip"."""
    key = next((k for k in STEP_KEYS if k in row), None)
    if key is None:
        return None
    v = row[key]
    if type(v) not in (int, float) or not math.isfinite(v) or v != int(v):
        return "skip"
    return int(v) if 0 <= v < 2**62 else "skip"


def _ref_values(row):
    """(valid metric values, skipped values) of a kept row."""
    good = bad = 0
    for k, v in row.items():
        if k in STEP_KEYS or (k != "time" and not is_metric_key(k)):
            continue
        if k != "time" and (not canonical(k) or "\x1b" in k):
            bad += 1
            continue
        try:
            ok = valid_number(v) is not None
        except OverflowError:
            ok = False
        if ok:
            good += k != "time"
        else:
            bad += 1
    return good, bad


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines_strategy)
def test_fuzz_stream_parser_accounts_for_every_line(items):
    lines = [_dumps(x) if kind != "garbage" else x for kind, x in items]
    parser = StreamParser(RunRef("jsonl", "p", "r"), explicit=False)
    events = parser.parse(lines)
    rows_out = sum(len(b) for b in batches(events))
    metas = sum(isinstance(e, RunMeta) for e in events)
    markers = sum(isinstance(e, Marker) for e in events)
    log_lines = sum(len(e.lines) for e in events if isinstance(e, LogLines))
    reasons = {r.reason: r.count for r in parser.unused_input.reasons()}
    value_skips = sum(c for r, c in reasons.items() if r in VALUE_REASONS)
    line_skips = parser.unused_input.total - value_skips
    non_blank = sum(not _ref_blank(line) for line in lines)
    assert rows_out + metas + markers + log_lines + line_skips == non_blank
    # Steps are never invented: each kept row has its own step, or previous + 1.
    expect_steps, prev, good, bad = [], -1, 0, 0
    for kind, row in items:
        if kind != "row":
            continue
        step = _ref_step(row)
        if step == "skip":
            continue
        prev = prev + 1 if step is None else step
        expect_steps.append(prev)
        g, b = _ref_values(row)
        good, bad = good + g, bad + b
    got_steps = [int(s) for b in batches(events) for s in b.steps]
    assert got_steps == expect_steps
    cells = sum(int((~np.isnan(c)).sum()) for b in batches(events) for c in b.columns.values())
    assert (cells, value_skips) == (good, bad)


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, max_size=30), st.integers(-1, 50))
def test_fuzz_build_columns_accounts_for_every_row_and_value(rows_in, prev):
    got = build_columns(rows_in, prev_step=prev)
    kept = list(range(len(rows_in))) if got.kept is None else got.kept.tolist()
    row_skips = sum(c for r, c in ((r.reason, r.count) for r in got.unused_input.reasons())
                    if r in ("invalid step", "negative step"))
    assert len(kept) + row_skips == len(rows_in) == len(got) + row_skips
    expect, good, bad = [], 0, 0
    for i, row in enumerate(rows_in):
        step = _ref_step(row)
        assert (step != "skip") == (i in kept)
        if step == "skip":
            continue
        prev = prev + 1 if step is None else step
        expect.append(prev)
        g, b = _ref_values(row)
        good, bad = good + g, bad + b
    assert got.steps.tolist() == expect
    assert all(c.shape == got.steps.shape for c in got.columns.values())
    cells = sum(int((~np.isnan(c)).sum()) for c in got.columns.values())
    assert (cells, got.skipped - row_skips) == (good, bad)


def test_drain_reads_a_whole_last_line_without_newline(tmp_path):
    """summary / export stop at the end of the file: a complete last line
    without its newline is read, a half-written one is counted."""
    case = hostile.CASES["no_final_newline.jsonl"]()
    path = tmp_path / "run.jsonl"
    path.write_bytes(case.data)
    src = JsonlSource(path)
    assert points_of(read_all(src)) == case.points
    ((step, values),) = points_of(src.drain())
    last = json.loads(case.data.rsplit(b"\n", 1)[1])
    assert step == last.pop("step") == 4 and values == last
    assert src.drain() == [] and src.skipped == 0
    half = tmp_path / "half.jsonl"
    half.write_bytes(b'{"step": 0, "loss": 1.5}\n{"step": 1, "lo')
    src = JsonlSource(half)
    assert [s for s, _ in points_of(read_all(src))] == [0]
    assert src.drain() == []
    assert [(r.reason, r.count, r.example) for r in src.unused_input.reasons()] == [
        ("unfinished line", 1, '{"step": 1, "lo')
    ]


def test_tracker_media_tables_and_histograms_are_counted_apart_not_skipped():
    from carl_tui.sources.rows import build_columns
    from carl_tui.sources.unused_input import UnusedInput

    unused_input = UnusedInput()
    rows = [
        {"step": 1, "loss": 0.5, "samples": {"_type": "trackio.table", "data": [[1, 2]]}},
        {"step": 2, "loss": 0.4, "img": {"_type": "trackio.image", "file_path": "x.png"}},
        {"step": 3, "loss": 0.3, "hist": {"_type": "trackio.histogram", "bins": [0, 1]}},
        {"step": 4, "loss": {"not": "media"}},
    ]
    cols = build_columns(rows, unused_input=unused_input)
    assert cols.steps.tolist() == [1, 2, 3, 4]
    assert cols.columns["loss"][:3].tolist() == [0.5, 0.4, 0.3]
    assert set(cols.columns) == {"loss"}
    assert dict(unused_input.notes()) == {"table": 1, "image": 1, "histogram": 1}
    assert [(r.reason, r.count) for r in unused_input.reasons()] == [("value not a number", 1)]


def test_a_nan_under_a_skipped_name_is_not_reported_as_a_metric_value():
    """A value under an invalid metric name is skipped whole: even when it is NaN it is
    not named among the metric values logged as NaN (which would raise the NaN alert for
    a metric the run has not got)."""
    got = build_columns([{"step": 1, "bad name\x07": float("nan"), "loss": float("nan")},
                         {"step": 2, "loss": 0.93}])
    assert got.nonfinite == (("loss", 1),)
    assert [(r.reason, r.count) for r in got.unused_input.reasons()] == [
        ("invalid metric name", 1), ("value not a finite number", 1)]


def test_a_logged_text_breaks_at_newlines_only(tmp_path):
    """U+2028 and U+2029 inside a logged text are part of its line (str.splitlines would cut
    there); a final newline ends the last line and an empty text is one empty line."""
    path = tmp_path / "stream.jsonl"
    texts = ["a\u2028b\u2029c", "x\ny\n", ""]
    write(path, "".join(json.dumps({"event": "log", "text": t}) + "\n" for t in texts))
    logs = [e for e in JsonlSource(path).poll() if isinstance(e, LogLines)]
    assert [line for e in logs for line in e.lines] == ["a\u2028b\u2029c", "x", "y", ""]

"""Whatever a Trackio server answers, the remote source never raises anything but a
SourceError in words, and every row is either a point or counted by reason."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.events import ScalarBatch
from carl_tui.sources.base import SourceError
from carl_tui.sources.trackio.remote import TrackioRemoteSource

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1.5"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
metric_dicts = st.dictionaries(
    st.one_of(st.sampled_from(["train/loss", "train/reward", "train/global_step", "_step",
                               "timestamp", "eval/loss", ""]), st.text(max_size=10)),
    values, max_size=6)
rows = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.integers(0, 10**6), values),
        "run_id": st.one_of(st.text(max_size=8), values),
        "run_name": st.one_of(st.text(max_size=8), values),
        "step": values,
        "timestamp": st.one_of(st.just("2026-11-23T10:00:00"), values),
        "metrics": st.one_of(metric_dicts, metric_dicts.map(json.dumps), values,
                             st.binary(max_size=20)),
    },
)


def source() -> TrackioRemoteSource:
    return TrackioRemoteSource("http://127.0.0.1:9", project="p")


@settings(max_examples=300, deadline=None)
@given(st.lists(rows, max_size=12))
def test_any_rows_become_points_or_counted_skips(reply):
    src = source()
    events = src._rows_to_events(reply)
    points = sum(len(e) for e in events if isinstance(e, ScalarBatch))
    row_skips = {"row metrics not JSON", "row metrics not a JSON object", "invalid step",
                 "negative step"}
    skipped_rows = sum(r.count for r in src.unused_input.reasons() if r.reason in row_skips)
    assert points + skipped_rows == len(reply)  # every row a point, or a counted skip
    for e in events:
        if isinstance(e, ScalarBatch):
            assert (e.steps >= 0).all()  # no invented or negative step, ever


@settings(max_examples=200, deadline=None)
@given(st.one_of(values, st.dictionaries(st.sampled_from(["rows", "columns", "error"]),
                                         values, max_size=3)))
def test_any_query_reply_is_rows_or_a_source_error_in_words(reply):
    src = source()
    src.remote.call = lambda *a, **k: reply  # the server's answer, whatever it is
    try:
        out = src.remote.query("SELECT 1")
    except SourceError as exc:
        assert "malformed reply" in str(exc)
    else:
        assert isinstance(out, list) and all(isinstance(r, dict) for r in out)


def test_rows_that_are_lists_are_named_in_words():
    src = source()
    src.remote.call = lambda *a, **k: {"rows": [[1, "r", 3]], "columns": ["id", "run_id", "step"]}
    with pytest.raises(SourceError, match="its rows are lists, not objects"):
        src.remote.query("SELECT id, run_id, step FROM metrics")

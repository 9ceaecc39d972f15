"""The bounded series: exact recent window, extreme-keeping history, bounded memory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.store.series import Series, minmax_decimate


def test_short_series_is_exact():
    s = Series(recent=8, max_buckets=4)
    s.extend(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    steps, values = s.display()
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert values.tolist() == [1, 2, 3, 4, 5]
    assert (s.count, s.last, s.last_step, s.vmin, s.vmax) == (5, 5.0, 4.0, 1.0, 5.0)
    assert s.mean() == pytest.approx(3.0)


def test_nan_values_are_not_points():
    s = Series()
    s.extend(np.arange(4), np.array([1.0, np.nan, 3.0, np.nan]))
    assert s.count == 2
    assert s.display()[0].tolist() == [0, 2]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 5000),
    chunk=st.integers(1, 700),
    recent=st.integers(4, 64),
    buckets=st.integers(2, 16),
    seed=st.integers(0, 2**16),
)
def test_history_keeps_extremes_and_stays_bounded(n, chunk, recent, buckets, seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=n)
    steps = np.arange(n, dtype=float)
    s = Series(recent=recent, max_buckets=buckets)
    for i in range(0, n, chunk):
        s.extend(steps[i : i + chunk], values[i : i + chunk])
    ds, dv = s.display(max_points=10**9)
    # The global extremes, at their steps, survive decimation.
    assert dv.max() == values.max() and ds[dv.argmax()] == values.argmax()
    assert dv.min() == values.min() and ds[dv.argmin()] == values.argmin()
    # Points are in step order and the recent window is exact.
    assert np.all(np.diff(ds) >= 0)
    k = min(n, recent)
    assert dv[-k:].tolist() == values[-k:].tolist()
    # Bounded: history never holds more than 2 * max_buckets buckets.
    assert s.history().shape[0] <= 2 * buckets
    assert s.count == n and s.mean() == pytest.approx(values.mean())
    # Buckets account for every point that left the recent window.
    pending = s._pend_values.size
    assert s.history()[:, 5].sum() + pending + min(n, recent) == n


def test_million_points_bounded_memory():
    s = Series()
    bound = 2 * s.recent_cap * 8 + 2 * s.max_buckets * 8 * 8  # recent window + history
    rng = np.random.default_rng(0)
    s.extend(np.arange(100), rng.normal(size=100))
    assert s.memory_bytes <= 2 * 128 * 8  # a short run holds what it logged, not the bound
    sizes = set()
    for i in range(100):
        s.extend(np.arange(i * 10_000, (i + 1) * 10_000) + 100, rng.normal(size=10_000))
        sizes.add(s.memory_bytes)
        assert s.memory_bytes <= bound
    assert s.memory_bytes == bound and len(sizes) <= 3  # reaches the bound, then stays
    assert s.count == 1_000_100
    steps, _ = s.display(2000)
    assert len(steps) <= 2100
    assert steps[0] == pytest.approx(0, abs=1024) and steps[-1] == 1_000_099


def test_a_growing_series_keeps_every_point_in_order():
    """Growing the arrays keeps what they held: one point at a time, then in batches."""
    s = Series(recent=300, max_buckets=16)
    for i in range(150):
        s.extend(np.array([i]), np.array([float(i)]))
    s.extend(np.arange(150, 250), np.arange(150, 250, dtype=float))
    assert s.tail(300).tolist() == [float(i) for i in range(250)]
    s.extend(np.arange(250, 1000), np.arange(250, 1000, dtype=float))
    assert s.tail(300).tolist() == [float(i) for i in range(700, 1000)]
    h = s.history()
    assert h[0, 6] == 0 and h[-1, 7] < 700 and (h[:, 5].sum() + len(s._pend_values)) == 700


def test_minmax_decimate_keeps_spikes():
    steps = np.arange(100_000, dtype=float)
    values = np.zeros(100_000)
    values[31_337] = 9.0
    values[77_000] = -3.0
    s, v = minmax_decimate(steps, values, 500)
    assert len(s) <= 502
    assert v.max() == 9.0 and s[v.argmax()] == 31_337
    assert v.min() == -3.0 and s[v.argmin()] == 77_000

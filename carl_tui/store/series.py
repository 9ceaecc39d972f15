"""A bounded-memory time series: full resolution for the recent window, and a
decimated history that keeps the extremes of the whole run.

Memory is O(recent + 2 * max_buckets) whatever the run's length, and grows with
the run up to that bound (a short run holds what it logged, not the bound: a
dashboard of a thousand short runs holds a thousand short series). Points that
leave the recent window are folded into fixed-width buckets that remember their
minimum and maximum (and the steps where they occurred); when there are too
many buckets, neighbouring pairs merge and the width doubles. A plot of
`display()` therefore never loses a spike, however long the run.
"""

from __future__ import annotations

import math

import numpy as np

# Bucket fields, one column each in `_hist`.
_F_STEP_MIN, _F_MIN, _F_STEP_MAX, _F_MAX, _F_SUM, _F_COUNT, _F_FIRST_STEP, _F_LAST_STEP = range(8)
_NFIELDS = 8


class Series:
    __slots__ = (
        "_hist",
        "_n",
        "_nb",
        "_pend_steps",
        "_pend_values",
        "_steps",
        "_values",
        "_width",
        "count",
        "first_step",
        "last",
        "last_step",
        "max_buckets",
        "recent_cap",
        "total",
        "vmax",
        "vmin",
    )

    def __init__(self, recent: int = 4096, max_buckets: int = 1024):
        self.recent_cap = recent
        self.max_buckets = max_buckets
        self._steps = _EMPTY
        self._values = _EMPTY
        self._n = 0
        self._hist = np.empty((0, _NFIELDS), dtype=np.float64)
        self._nb = 0
        self._width = 1  # points per history bucket
        self._pend_steps = np.empty(0, dtype=np.float64)
        self._pend_values = np.empty(0, dtype=np.float64)
        self.count = 0
        self.total = 0.0
        self.vmin = math.inf
        self.vmax = -math.inf
        self.first_step: float | None = None
        self.last_step: float | None = None
        self.last: float | None = None

    # -- writing -------------------------------------------------------------

    def extend(self, steps: np.ndarray, values: np.ndarray) -> None:
        """Append points (NaN values are ignored)."""
        steps = np.asarray(steps, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64)
        keep = ~np.isnan(values)
        if not keep.all():
            steps, values = steps[keep], values[keep]
        n = values.shape[0]
        if n == 0:
            return
        self.count += n
        self.total += float(values.sum())
        self.vmin = min(self.vmin, float(values.min()))
        self.vmax = max(self.vmax, float(values.max()))
        if self.first_step is None:
            self.first_step = float(steps[0])
        self.last_step = float(steps[-1])
        self.last = float(values[-1])
        cap = self.recent_cap
        if n >= cap:
            self._room(cap)
            # Everything currently recent, plus the head of the new points, is history.
            self._to_history(
                np.concatenate([self._steps[: self._n], steps[: n - cap]]),
                np.concatenate([self._values[: self._n], values[: n - cap]]),
            )
            self._steps[:] = steps[n - cap :]
            self._values[:] = values[n - cap :]
            self._n = cap
            return
        overflow = self._n + n - cap
        if overflow > 0:
            self._to_history(self._steps[:overflow].copy(), self._values[:overflow].copy())
            keep_n = self._n - overflow
            self._steps[:keep_n] = self._steps[overflow : self._n]
            self._values[:keep_n] = self._values[overflow : self._n]
            self._n = keep_n
        self._room(self._n + n)
        self._steps[self._n : self._n + n] = steps
        self._values[self._n : self._n + n] = values
        self._n += n

    def _to_history(self, steps: np.ndarray, values: np.ndarray) -> None:
        if self._pend_values.size:
            steps = np.concatenate([self._pend_steps, steps])
            values = np.concatenate([self._pend_values, values])
        # Widen the buckets until everything fits in the history's bound.
        while self._nb + values.shape[0] // self._width > 2 * self.max_buckets:
            if self._nb <= 1:
                self._width *= 2  # merging pairs of at most one bucket changes nothing
            else:
                self._halve()
        w = self._width
        full = (values.shape[0] // w) * w
        self._pend_steps, self._pend_values = steps[full:].copy(), values[full:].copy()
        if full == 0:
            return
        s = steps[:full].reshape(-1, w)
        v = values[:full].reshape(-1, w)
        rows = np.arange(s.shape[0])
        self._hist_room(self._nb + s.shape[0])
        imin, imax = v.argmin(axis=1), v.argmax(axis=1)
        new = self._hist[self._nb : self._nb + s.shape[0]]
        new[:, _F_STEP_MIN] = s[rows, imin]
        new[:, _F_MIN] = v[rows, imin]
        new[:, _F_STEP_MAX] = s[rows, imax]
        new[:, _F_MAX] = v[rows, imax]
        new[:, _F_SUM] = v.sum(axis=1)
        new[:, _F_COUNT] = w
        new[:, _F_FIRST_STEP] = s[:, 0]
        new[:, _F_LAST_STEP] = s[:, -1]
        self._nb += s.shape[0]
        if self._nb > self.max_buckets:
            # Keep at most max_buckets between writes so the next batch has room.
            self._halve()

    def _room(self, n: int) -> None:
        """Grow the recent window's arrays to hold `n` points (doubling, up to the cap)."""
        if n > self._values.shape[0]:
            self._steps = _grown(self._steps, self._n, n, self.recent_cap)
            self._values = _grown(self._values, self._n, n, self.recent_cap)

    def _hist_room(self, rows: int) -> None:
        """Grow the history to hold `rows` buckets (doubling, up to 2 * max_buckets)."""
        if rows > self._hist.shape[0]:
            self._hist = _grown(self._hist, self._nb, rows, 2 * self.max_buckets)

    def _halve(self) -> None:
        merged = _merge_pairs(self._hist[: self._nb])
        self._nb = merged.shape[0]
        self._hist[: self._nb] = merged
        self._width *= 2

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return self.count

    @property
    def memory_bytes(self) -> int:
        return self._steps.nbytes + self._values.nbytes + self._hist.nbytes

    def history(self) -> np.ndarray:
        """History buckets as rows of (step_min, min, step_max, max, sum, count, first, last)."""
        return self._hist[: self._nb].copy()

    def display(self, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
        """Points to plot, oldest first: bucket extremes, then the pending and
        recent points; reduced to at most ~max_points by min/max decimation."""
        h = self._hist[: self._nb]
        hs = np.empty(2 * h.shape[0])
        hv = np.empty(2 * h.shape[0])
        first_is_min = h[:, _F_STEP_MIN] <= h[:, _F_STEP_MAX]
        hs[0::2] = np.where(first_is_min, h[:, _F_STEP_MIN], h[:, _F_STEP_MAX])
        hv[0::2] = np.where(first_is_min, h[:, _F_MIN], h[:, _F_MAX])
        hs[1::2] = np.where(first_is_min, h[:, _F_STEP_MAX], h[:, _F_STEP_MIN])
        hv[1::2] = np.where(first_is_min, h[:, _F_MAX], h[:, _F_MIN])
        steps = np.concatenate([hs, self._pend_steps, self._steps[: self._n]])
        values = np.concatenate([hv, self._pend_values, self._values[: self._n]])
        return minmax_decimate(steps, values, max_points)

    def mean(self) -> float | None:
        """Mean over the whole run."""
        return self.total / self.count if self.count else None

    def tail(self, k: int) -> np.ndarray:
        """The last k values (at most the recent window)."""
        k = min(k, self._n)
        return self._values[self._n - k : self._n].copy()

    def trend(self, k: int = 10) -> float:
        """Mean of the last k values minus the mean of the k before them (0 if too short)."""
        return trend(self._values[: self._n], k)


_EMPTY = np.empty(0, dtype=np.float64)
_MIN_ROOM = 64  # the first allocation, in points or buckets


def _grown(a: np.ndarray, used: int, need: int, cap: int) -> np.ndarray:
    """`a` (its first `used` rows kept) in a larger array of room for `need` rows: twice
    its size at least, at most `cap`."""
    out = np.empty((min(cap, max(need, 2 * a.shape[0], _MIN_ROOM)), *a.shape[1:]),
                   dtype=np.float64)
    out[:used] = a[:used]
    return out


def mean_of(values: np.ndarray) -> float:
    """`values.mean()` (the same sum, divided the same way), without numpy's overhead
    for small arrays: a thousand runs' rows take five series' means each."""
    return float(np.add.reduce(values)) / values.shape[0]


def trend(values: np.ndarray, k: int = 10) -> float:
    """Mean of the last k values minus the mean of the k before them (0 if too short)."""
    n = min(values.shape[0], 2 * k)
    if n < 2:
        return 0.0
    half = n // 2
    tail = values[values.shape[0] - n :]
    return mean_of(tail[half:]) - mean_of(tail[:half])


def _merge_pairs(b: np.ndarray) -> np.ndarray:
    """Merge neighbouring buckets pairwise (an odd last bucket stays alone)."""
    n = b.shape[0]
    even = n - (n % 2)
    a, c = b[0:even:2], b[1:even:2]
    out = np.empty((even // 2 + (n % 2), _NFIELDS), dtype=np.float64)
    m = out[: even // 2]
    take_a_min = a[:, _F_MIN] <= c[:, _F_MIN]
    m[:, _F_MIN] = np.where(take_a_min, a[:, _F_MIN], c[:, _F_MIN])
    m[:, _F_STEP_MIN] = np.where(take_a_min, a[:, _F_STEP_MIN], c[:, _F_STEP_MIN])
    take_a_max = a[:, _F_MAX] >= c[:, _F_MAX]
    m[:, _F_MAX] = np.where(take_a_max, a[:, _F_MAX], c[:, _F_MAX])
    m[:, _F_STEP_MAX] = np.where(take_a_max, a[:, _F_STEP_MAX], c[:, _F_STEP_MAX])
    m[:, _F_SUM] = a[:, _F_SUM] + c[:, _F_SUM]
    m[:, _F_COUNT] = a[:, _F_COUNT] + c[:, _F_COUNT]
    m[:, _F_FIRST_STEP] = a[:, _F_FIRST_STEP]
    m[:, _F_LAST_STEP] = c[:, _F_LAST_STEP]
    if n % 2:
        out[-1] = b[-1]
    return out


def minmax_decimate(
    steps: np.ndarray, values: np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """Reduce to at most ~max_points, keeping each chunk's min and max in step order."""
    n = values.shape[0]
    if n <= max_points or max_points < 4:
        return steps, values
    chunks = max_points // 2
    width = math.ceil(n / chunks)
    full = (n // width) * width
    s = steps[:full].reshape(-1, width)
    v = values[:full].reshape(-1, width)
    rows = np.arange(s.shape[0])
    imin, imax = v.argmin(axis=1), v.argmax(axis=1)
    lo, hi = np.minimum(imin, imax), np.maximum(imin, imax)
    out_s = np.empty(2 * s.shape[0])
    out_v = np.empty(2 * s.shape[0])
    out_s[0::2], out_v[0::2] = s[rows, lo], v[rows, lo]
    out_s[1::2], out_v[1::2] = s[rows, hi], v[rows, hi]
    return np.concatenate([out_s, steps[full:]]), np.concatenate([out_v, values[full:]])

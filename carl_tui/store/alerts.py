"""Watches for what a user must hear about at once: a loss that turns NaN or
infinite, and a loss that diverges.

- NaN/infinite: the run logged a loss that is not a finite number (sources
  report such values in `ScalarBatch.nonfinite`). Said once per episode: again
  only after finite losses came back.
- Divergence: a loss far above its own recent level, measured in its own noise,
  and not falling back. The level is the mean of the last `window` values; the
  noise unit is the largest of their standard deviation, their mean
  step-to-step change and a fiftieth of the range the loss has covered in the
  run. A value more than `k` noise units above the level is over the bar;
  `patience` values over it in a row, the latest at least as high as the first
  of them, are a divergence (one spike, or a spike on its way back down, is
  not). Only once `MIN_HISTORY` values are known; while the loss has moved fewer
  times than that its noise is at least its smallest move, and a loss that has
  not moved at all must double (see `_bar`). So a GRPO loss wobbling near zero,
  a loss that drifts up slowly (a KL term growing), or a loss rounded to its
  last digit, never alerts; a loss that blows up does. Values over the bar
  stay out of the level; after `window` of them in a row the loss has a new
  level, and a later blow-up from it alerts again. Re-armed once a value is back
  under the bar.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np

LOSS_METRICS = ("loss", "eval/loss", "policy_loss", "train_loss")
DIVERGE_K = 6.0  # noise units above the recent level
DIVERGE_WINDOW = 50
DIVERGE_PATIENCE = 3
SPAN_FRACTION = 0.02  # the noise unit is at least this share of the run's range
MIN_HISTORY = 10

Emit = Callable[[str, int | None, str, str], None]  # (kind, step, text, severity)


def is_loss(name: str) -> bool:
    return name in LOSS_METRICS or name.endswith("/loss")


def _bars(history: np.ndarray, chunk: np.ndarray, window: int, k: float,
          lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The level and the bar each value of `chunk` is measured against, if every value
    before it was taken into the level (bar NaN where fewer than MIN_HISTORY values are
    known). A value's own bar does not depend on it, only on the values before it."""
    x = np.concatenate([history, chunk])
    r, n = history.shape[0], chunk.shape[0]
    x0 = x - (x[0] if x.shape[0] else 0.0)  # nearer zero: the sums of squares keep digits
    s1 = np.concatenate([[0.0], np.cumsum(x0)])
    s2 = np.concatenate([[0.0], np.cumsum(x0 * x0)])
    d = np.abs(np.diff(x0))
    sd = np.concatenate([[0.0, 0.0], np.cumsum(d)])
    sm = np.concatenate([[0, 0], np.cumsum(d > 0)])  # how many times the loss moved
    end = r + np.arange(n)  # each value's window is x[start:end]
    count = np.minimum(end, window)
    start = end - count
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (s1[end] - s1[start]) / count
        var = np.maximum((s2[end] - s2[start]) / count - mean * mean, 0.0)
        step = (sd[end] - sd[np.minimum(start + 1, end)]) / (count - 1)
    moved = sm[end] - sm[np.minimum(start + 1, end)]
    seen = np.concatenate([[hi], chunk[:-1]]) if n else chunk
    top = np.maximum.accumulate(seen)
    bottom = np.minimum.accumulate(np.concatenate([[lo], chunk[:-1]]) if n else chunk)
    span = np.where(np.isfinite(top - bottom), top - bottom, 0.0)
    level = mean + (x[0] if x.shape[0] else 0.0)
    quantum = np.zeros(n)
    moving = np.flatnonzero((moved > 0) & (moved < MIN_HISTORY))
    if moving.shape[0]:  # (rare: a loss that has just started to move)
        dz = np.where(d > 0, d, np.inf)
        quantum[moving] = [dz[start[i] : end[i] - 1].min() for i in moving.tolist()]
    return level, _bar(level, np.sqrt(var), np.nan_to_num(step), moved, count, span, quantum, k)


def _bar(level, spread, step, moved, count, span, quantum, k: float) -> np.ndarray:
    """The bar over windows of `count` values: their mean `level`, standard deviation
    `spread`, mean step-to-step change `step`, how many steps `moved`, their smallest
    move `quantum`, and the run's range `span`. While the loss has moved fewer than
    MIN_HISTORY times (a GRPO loss logged as 0.0 for 47 steps, then 0.0001, 0.0002 as
    its KL term grows), its noise is at least its smallest move (the digits it is logged
    with). A loss that has not moved at all (a DPO loss stuck at ln 2) is over its bar at
    twice its level; NaN (no bar) before MIN_HISTORY values, or when that is zero."""
    noise = np.maximum(np.maximum(spread, step), SPAN_FRACTION * span)
    noise = np.where(moved < MIN_HISTORY, np.maximum(noise, quantum), noise)
    jump = np.where(moved > 0, k * noise, np.maximum(np.abs(level), k * SPAN_FRACTION * span))
    return np.where((count >= MIN_HISTORY) & (jump > 0), level + jump, np.nan)


class Divergence:
    """One loss's divergence watch. A stretch in which no value is over its bar
    (checked at once, each against the level it would have) is taken whole; from
    the first value over it, values are read one by one until the watch is quiet
    again. Both give the same alerts."""

    CHUNK = 4096  # values checked at once

    def __init__(self, k: float, window: int, patience: int):
        self.k, self.window, self.patience = k, window, patience
        self.recent: deque[float] = deque(maxlen=window)
        self.lo, self.hi = math.inf, -math.inf  # the range of the values taken
        self.streak: list[float] = []  # values over the bar, in a row
        self.alerted = False

    def feed(self, steps: np.ndarray, values: np.ndarray
             ) -> list[tuple[int, float, float, float]]:
        """(step, value, recent level, bar) where a divergence starts."""
        values = np.asarray(values, dtype=np.float64)
        steps = np.asarray(steps)
        keep = np.isfinite(values)  # NaN: not logged at this step (inf: the NaN alert's)
        if not keep.all():
            steps, values = steps[keep], values[keep]
        out: list[tuple[int, float, float, float]] = []
        i, n = 0, values.shape[0]
        while i < n:
            if not (self.streak or self.alerted):  # quiet: take values up to one over
                chunk = values[i : i + self.CHUNK]
                _, bars = _bars(np.fromiter(self.recent, np.float64, len(self.recent)),
                                chunk, self.window, self.k, self.lo, self.hi)
                over = np.flatnonzero(chunk > bars)  # NaN bars: never over
                stop = int(over[0]) if over.shape[0] else chunk.shape[0]
                self._take(chunk[:stop])
                i += stop
                if stop == chunk.shape[0]:
                    continue
            hit = self._one(values[i])
            if hit is not None:
                out.append((int(steps[i]), float(values[i]), *hit))
            i += 1
        return out

    def _take(self, values: np.ndarray) -> None:
        if values.shape[0]:
            self.recent.extend(values[-self.window:].tolist())
            self.lo = min(self.lo, float(values.min()))
            self.hi = max(self.hi, float(values.max()))

    def _bar(self) -> tuple[float, float] | None:
        """(level, bar) for the next value, or None while the noise is not known."""
        recent = np.fromiter(self.recent, np.float64, len(self.recent))
        level, bar = _bars(recent, np.zeros(1), self.window, self.k, self.lo, self.hi)
        return None if math.isnan(bar[0]) else (float(level[0]), float(bar[0]))

    def _one(self, v: float) -> tuple[float, float] | None:
        """Read one value; (the recent level, the bar) when a divergence starts at it."""
        known = self._bar()
        if known is None or v <= known[1]:
            self.streak.clear()
            self.alerted = False
            self._take(np.array([v]))
            return None
        self.streak.append(v)
        p = self.patience
        start = (len(self.streak) >= p and not self.alerted
                 and self.streak[-1] >= self.streak[-p])
        if start:
            self.alerted = True
        if len(self.streak) >= self.window:  # a new level: measured from here on
            self.recent.clear()
            self.recent.extend(self.streak)
            self.lo = min(self.lo, min(self.streak))
            self.hi = max(self.hi, max(self.streak))
            self.streak.clear()
        return known if start else None


class AlertWatch:
    def __init__(self, emit: Emit, *, k: float = DIVERGE_K,
                 window: int = DIVERGE_WINDOW, patience: int = DIVERGE_PATIENCE):
        self._emit = emit
        self._params = (k, window, patience)
        self._diverge: dict[str, Divergence] = {}
        self._nan_open: set[str] = set()

    def feed(self, steps: np.ndarray, cols: Mapping[str, np.ndarray],
             nonfinite: tuple[tuple[str, int], ...]) -> None:
        bad: dict[str, int] = {}
        for name, step in nonfinite:
            if is_loss(name) and name not in bad:
                bad[name] = step
        for name, step in bad.items():
            if name not in self._nan_open:
                self._nan_open.add(name)
                self._emit("nan_loss", step, f"{name} is NaN or infinite at step {step}",
                           "error")
        for name, values in cols.items():
            if not is_loss(name):
                continue
            if name in self._nan_open and name not in bad and (~np.isnan(values)).any():
                self._nan_open.discard(name)  # finite losses came back: re-armed
            watch = self._diverge.get(name)
            if watch is None:
                watch = self._diverge[name] = Divergence(*self._params)
            for step, v, level, _ in watch.feed(steps, values):
                self._emit("diverging", step,
                           f"{name} diverging: {v:.4g} at step {step}, rising far above "
                           f"its recent level {level:.4g} (over {self._params[0]:g}x its "
                           "noise)", "error")

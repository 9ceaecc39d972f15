"""Watches for what a user must hear about at once: a loss that turns NaN or
infinite, and a loss that diverges.

- NaN/infinite: the run logged a loss that is not a finite number (sources
  report such values in `ScalarBatch.nonfinite`). Said once per episode: again
  only after finite losses came back.
- Divergence: a loss-like metric rose above `factor` times its minimum over
  the last `window` values, on `patience` values in a row (one spike is
  noise). Only once `MIN_HISTORY` values are known, and only for a metric whose
  recent values are all positive and whose minimum is not a near-zero outlier
  (at least a tenth of the recent median): a GRPO loss around zero has no
  meaningful ratio. Re-armed once it falls back under the bar.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np

LOSS_METRICS = ("loss", "eval/loss", "policy_loss", "train_loss")
DIVERGE_FACTOR = 3.0
DIVERGE_WINDOW = 50
DIVERGE_PATIENCE = 3
MIN_HISTORY = 10

Emit = Callable[[str, int | None, str, str], None]  # (kind, step, text, severity)


def is_loss(name: str) -> bool:
    return name in LOSS_METRICS or name.endswith("/loss")


class _Divergence:
    """One loss's divergence watch. Values are read in chunks: a chunk in which no
    value can be over the bar (checked at once, against the rolling minimum it
    would have) is taken whole; only a chunk that might hold a divergence is read
    value by value. Both give the same alerts."""

    CHUNK = 4096

    def __init__(self, factor: float, window: int, patience: int):
        self.factor, self.patience = factor, patience
        self.window = window
        self.recent: deque[float] = deque(maxlen=window)
        self._sorted: list[float] | None = []  # `recent` in order (None: to rebuild)
        self.streak = 0
        self.alerted = False

    def _floor(self) -> float | None:
        """The recent minimum, when a ratio to it means something."""
        n = len(self.recent)
        if n < MIN_HISTORY:
            return None
        srt = self._sorted
        if srt is None:
            srt = self._sorted = sorted(self.recent)
        low = srt[0]
        half = n // 2
        median = srt[half] if n % 2 else (srt[half - 1] + srt[half]) / 2
        if low <= 0 or low < 0.1 * median:
            return None
        return low

    def _append(self, v: float) -> None:
        srt = self._sorted
        if srt is not None:
            if len(self.recent) == self.window:
                del srt[bisect.bisect_left(srt, self.recent[0])]
            bisect.insort(srt, v)
        self.recent.append(v)

    def feed(self, steps: np.ndarray, values: np.ndarray) -> list[tuple[int, float, float]]:
        """(step, value, recent minimum) where a divergence starts."""
        values = np.asarray(values, dtype=np.float64)
        keep = ~np.isnan(values)  # NaN: not logged at this step
        if not keep.all():
            steps, values = np.asarray(steps)[keep], values[keep]
        out: list[tuple[int, float, float]] = []
        for i in range(0, values.shape[0], self.CHUNK):
            chunk = values[i : i + self.CHUNK]
            if not self.alerted and self._quiet(chunk):
                self.recent.extend(chunk.tolist())
                self._sorted = None
                self.streak = 0
            else:
                out += self._feed_slow(np.asarray(steps)[i : i + self.CHUNK], chunk)
        return out

    def _quiet(self, chunk: np.ndarray) -> bool:
        """No value of `chunk` can be over the bar: each is at most `factor` times the
        minimum of the `window` values before it (all taken, as none is over), or has
        fewer than MIN_HISTORY before it, or a minimum <= 0 (then there is no floor)."""
        w, r = self.window, len(self.recent)
        lowest = min(float(chunk.min()), min(self.recent, default=math.inf))
        if lowest > 0 and float(chunk.max()) <= self.factor * lowest:
            return True  # every window's minimum is at least `lowest`
        padded = np.concatenate([np.full(w, np.inf), np.fromiter(self.recent, np.float64, r),
                                 chunk])
        lows = np.lib.stride_tricks.sliding_window_view(padded[:-1], w)[r : r + chunk.shape[0]]
        low = lows.min(axis=1)
        count = np.minimum(w, r + np.arange(chunk.shape[0]))
        possible = (count >= MIN_HISTORY) & (low > 0) & (chunk > self.factor * low)
        return not bool(possible.any())

    def _feed_slow(self, steps: np.ndarray, values: np.ndarray) -> list[tuple[int, float, float]]:
        out = []
        for step, v in zip(steps.tolist(), values.tolist()):
            low = self._floor()
            over = low is not None and v > self.factor * low
            self.streak = self.streak + 1 if over else 0
            if over and self.streak >= self.patience and not self.alerted:
                self.alerted = True
                out.append((int(step), v, low))
            if not over and low is not None and v <= self.factor * low:
                self.alerted = False
            if not over:
                self._append(v)
        return out


class AlertWatch:
    def __init__(self, emit: Emit, *, factor: float = DIVERGE_FACTOR,
                 window: int = DIVERGE_WINDOW, patience: int = DIVERGE_PATIENCE):
        self._emit = emit
        self._params = (factor, window, patience)
        self._diverge: dict[str, _Divergence] = {}
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
                watch = self._diverge[name] = _Divergence(*self._params)
            for step, v, low in watch.feed(steps, values):
                self._emit("diverging", step,
                           f"{name} diverging: {v:.4g} at step {step} is over "
                           f"{self._params[0]:g}x its recent minimum {low:.4g}", "error")

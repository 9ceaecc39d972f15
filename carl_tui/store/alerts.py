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
    def __init__(self, factor: float, window: int, patience: int):
        self.factor, self.patience = factor, patience
        self.recent: deque[float] = deque(maxlen=window)
        self.streak = 0
        self.alerted = False

    def _floor(self) -> float | None:
        """The recent minimum, when a ratio to it means something."""
        if len(self.recent) < MIN_HISTORY:
            return None
        low = min(self.recent)
        if low <= 0 or low < 0.1 * float(np.median(self.recent)):
            return None
        return low

    def feed(self, steps: np.ndarray, values: np.ndarray) -> list[tuple[int, float, float]]:
        """(step, value, recent minimum) where a divergence starts."""
        out = []
        for step, v in zip(steps.tolist(), values.tolist()):
            if math.isnan(v):  # not logged at this step
                continue
            low = self._floor()
            over = low is not None and v > self.factor * low
            self.streak = self.streak + 1 if over else 0
            if over and self.streak >= self.patience and not self.alerted:
                self.alerted = True
                out.append((int(step), v, low))
            if not over and low is not None and v <= self.factor * low:
                self.alerted = False
            if not over:
                self.recent.append(v)
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

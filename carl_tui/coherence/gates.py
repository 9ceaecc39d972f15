"""Gates: should an agent act (coherence), has training crystallised (phase
transition), and when do CARL rewards switch on (cascade).

Every gate ignores missing values: NaN (or any non-finite number, or None).
The `update_many` methods give exactly the state a loop of `update` calls gives.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .constants import SIGMA

Level = Literal["high", "medium", "low", "abstain"]


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _arrays(steps, values, name: str) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(steps)
    v = np.asarray(values, dtype=np.float64)
    if s.ndim != 1 or v.shape != s.shape:
        raise ValueError(f"steps and {name} must be 1-D arrays of the same length")
    return s, v


# --------------------------------------------------------------------------- coherence


@dataclass(frozen=True)
class GateDecision:
    act: bool
    level: Level


class CoherenceGate:
    """mean phi >= 0.8 -> act "high"; >= 0.5 -> "medium"; >= threshold -> "low";
    otherwise (or NaN) abstain. Acting always requires phi >= threshold."""

    def __init__(self, threshold: float = SIGMA) -> None:
        self.threshold = float(threshold)

    def decide(self, phi_mean: float) -> GateDecision:
        if not _finite(phi_mean) or phi_mean < self.threshold:
            return GateDecision(False, "abstain")
        if phi_mean >= 0.8:
            return GateDecision(True, "high")
        if phi_mean >= 0.5:
            return GateDecision(True, "medium")
        return GateDecision(True, "low")


# ------------------------------------------------------------------- phase transition


class PhaseTransitionGate:
    """Fires once, the first time at least `min_above` of the last `window` values
    of `metric` are >= `threshold`; records that step. Tracks the peak entropy."""

    def __init__(
        self,
        metric: str = "mean_token_accuracy",
        window: int = 5,
        min_above: int = 3,
        threshold: float = 0.99,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if not 1 <= min_above <= window:
            raise ValueError("min_above must be between 1 and window")
        self.metric = metric
        self.window = int(window)
        self.min_above = int(min_above)
        self.threshold = float(threshold)
        self._values: deque[float] = deque(maxlen=self.window)
        self.fired = False
        self.trigger_step: int | None = None
        self.peak_entropy: float | None = None
        self.peak_entropy_step: int | None = None

    @property
    def window_values(self) -> list[float]:
        return list(self._values)

    @property
    def above(self) -> int:
        return sum(1 for v in self._values if v >= self.threshold)

    @property
    def progress_text(self) -> str:
        return f"{self.above}/{self.window} >= {self.threshold:g}"

    def _track_entropy(self, step, entropy) -> None:
        if _finite(entropy) and (self.peak_entropy is None or entropy > self.peak_entropy):
            self.peak_entropy = float(entropy)
            self.peak_entropy_step = int(step)

    def update(self, step: int, value: float | None, entropy: float | None = None) -> bool:
        """Feed one logged step; True only on the update where the gate fires."""
        self._track_entropy(step, entropy)
        if not _finite(value):
            return False
        self._values.append(float(value))
        if not self.fired and self.above >= self.min_above:
            self.fired = True
            self.trigger_step = int(step)
            return True
        return False

    def update_many(self, steps, values, entropies=None) -> bool:
        """Feed many steps at once; True when the gate fired during this call."""
        s, v = _arrays(steps, values, "values")
        if entropies is not None:
            _, h = _arrays(steps, entropies, "entropies")
            ok = np.isfinite(h)
            if ok.any():
                hv = h[ok]
                i = int(np.argmax(hv))
                if self.peak_entropy is None or hv[i] > self.peak_entropy:
                    self.peak_entropy = float(hv[i])
                    self.peak_entropy_step = int(s[ok][i])
        ok = np.isfinite(v)
        v, s = v[ok], s[ok]
        if v.size == 0:
            return False
        prev = np.fromiter(self._values, dtype=np.float64, count=len(self._values))
        allv = np.concatenate([prev, v])
        cs = np.concatenate([[0], np.cumsum(allv >= self.threshold)])
        end = np.arange(prev.size + 1, allv.size + 1)  # one past each new value
        count = cs[end] - cs[np.maximum(end - self.window, 0)]
        self._values.clear()
        self._values.extend(allv[-self.window :].tolist())
        if self.fired:
            return False
        hits = np.flatnonzero(count >= self.min_above)
        if hits.size == 0:
            return False
        self.fired = True
        self.trigger_step = int(s[hits[0]])
        return True


# --------------------------------------------------------------------------- cascade


class CascadeGate:
    """Stage A (task rewards only) -> stage B (task + CARL reward), switched once.

    Self-calibrating rule, over the non-missing task-metric values x_1..x_n:

    - m_n: mean of the last `window` values (the smoothed metric);
      lo_n, hi_n: running min and max of m.
    - baseline: mean b and population std s of the first `warmup` values.
    - at step n (n >= max(warmup, 2 * window)) the metric is *settled high* when
      (a) it rose clearly above the baseline: m_n > b + rise_z * s / sqrt(window)
          (the last term is the noise of a window mean), and m_n > b;
      (b) it is near the top of its own range: m_n >= lo_n + level * (hi_n - lo_n);
      (c) it stopped climbing: m_n - m_{n-window} <= flat * (hi_n - lo_n).
    - the gate fires when it has been settled high for `patience` consecutive values.

    No fixed threshold on the metric's scale: everything is relative to its history.
    A metric that never rises (pure noise) does not fire.
    """

    def __init__(
        self,
        window: int = 10,
        warmup: int = 20,
        level: float = 0.8,
        rise_z: float = 6.0,
        flat: float = 0.1,
        patience: int = 5,
    ) -> None:
        if window < 1 or warmup < 1 or patience < 1:
            raise ValueError("window, warmup and patience must be positive")
        self.window = int(window)
        self.warmup = int(warmup)
        self.level = float(level)
        self.rise_z = float(rise_z)
        self.flat = float(flat)
        self.patience = int(patience)
        self.count = 0
        self._baseline: list[float] = []
        self.baseline_mean = math.nan
        self.baseline_std = math.nan
        self._rise_bar = math.nan
        self._raw: deque[float] = deque(maxlen=self.window)
        self._smooth: deque[float] = deque(maxlen=self.window + 1)
        self.lo = math.inf
        self.hi = -math.inf
        self.streak = 0
        self.fired = False
        self.trigger_step: int | None = None

    @property
    def stage(self) -> str:
        return "B" if self.fired else "A"

    @property
    def smoothed(self) -> float:
        return self._smooth[-1] if self._smooth else math.nan

    @property
    def progress_text(self) -> str:
        if self.fired:
            return f"stage B since step {self.trigger_step}"
        return f"stage A: settled high {self.streak}/{self.patience}"

    def _close_baseline(self) -> None:
        base = np.array(self._baseline, dtype=np.float64)
        self.baseline_mean = float(np.mean(base))
        self.baseline_std = float(np.std(base))
        self._rise_bar = self.baseline_mean + self.rise_z * self.baseline_std / math.sqrt(
            self.window
        )

    def _settled(self, m: float, m_prev: float, lo: float, hi: float) -> bool:
        span = hi - lo
        return (
            m > self._rise_bar
            and m > self.baseline_mean
            and hi > lo
            and m >= lo + self.level * span
            and m - m_prev <= self.flat * span
        )

    def update(self, step: int, task_metric: float | None) -> bool:
        """Feed one value; True only on the update where the gate fires."""
        if not _finite(task_metric):
            return False
        x = float(task_metric)
        self.count += 1
        if len(self._baseline) < self.warmup:
            self._baseline.append(x)
            if len(self._baseline) == self.warmup:
                self._close_baseline()
        self._raw.append(x)
        if self.count < self.window:
            return False
        total = 0.0
        for v in self._raw:
            total += v
        m = total / self.window
        self._smooth.append(m)
        self.lo = min(self.lo, m)
        self.hi = max(self.hi, m)
        ok = self.count >= max(self.warmup, 2 * self.window) and self._settled(
            m, self._smooth[0], self.lo, self.hi
        )
        self.streak = self.streak + 1 if ok else 0
        if not self.fired and self.streak >= self.patience:
            self.fired = True
            self.trigger_step = int(step)
            return True
        return False

    def update_many(self, steps, task_metric) -> bool:
        """Feed many values at once; True when the gate fired during this call."""
        s, v = _arrays(steps, task_metric, "task_metric")
        ok = np.isfinite(v)
        x, s = v[ok], s[ok]
        n_new = x.size
        if n_new == 0:
            return False
        c0 = self.count
        counts = c0 + np.arange(1, n_new + 1)  # count after each new value
        # Baseline: the first `warmup` values overall.
        need = self.warmup - len(self._baseline)
        if need > 0:
            self._baseline.extend(x[:need].tolist())
            if len(self._baseline) == self.warmup:
                self._close_baseline()
        # Smoothed metric for each new value that completes a window.
        raw = np.concatenate([np.fromiter(self._raw, np.float64, len(self._raw)), x])
        k = len(self._raw)  # raw[k + i] is the i-th new value
        self._raw.clear()
        self._raw.extend(raw[-self.window :].tolist())
        first = max(0, self.window - 1 - k)  # first new index with a full window
        self.count = c0 + n_new
        if first >= n_new:
            return False
        ends = np.arange(k + first, k + n_new)  # window = raw[end - window + 1 : end + 1]
        total = np.zeros(ends.size)
        for j in range(self.window):  # left-to-right sum, as in `update`
            total = total + raw[ends - self.window + 1 + j]
        m = total / self.window
        lo = np.minimum.accumulate(np.concatenate([[self.lo], m]))[1:]
        hi = np.maximum.accumulate(np.concatenate([[self.hi], m]))[1:]
        # m_{n - window}: from the carried smoothed values, then from m itself.
        sm = np.concatenate([np.fromiter(self._smooth, np.float64, len(self._smooth)), m])
        ks = len(self._smooth)
        prev_idx = ks + np.arange(m.size) - self.window
        m_prev = sm[np.maximum(prev_idx, 0)]
        cnt = counts[first:]
        cond = cnt >= max(self.warmup, 2 * self.window)
        if not math.isnan(self._rise_bar):
            span = hi - lo
            cond &= (
                (m > self._rise_bar)
                & (m > self.baseline_mean)
                & (hi > lo)
                & (m >= lo + self.level * span)
                & (m - m_prev <= self.flat * span)
            )
        else:
            cond[:] = False
        self._smooth.clear()
        self._smooth.extend(sm[-(self.window + 1) :].tolist())
        self.lo, self.hi = float(lo[-1]), float(hi[-1])
        # Streak of consecutive settled values, continuing the carried one.
        idx = np.arange(m.size)
        last_false = np.maximum.accumulate(np.where(cond, -1, idx))
        streak = np.where(last_false < 0, idx + 1 + self.streak, idx - last_false)
        self.streak = int(streak[-1])
        if self.fired:
            return False
        hits = np.flatnonzero(streak >= self.patience)
        if hits.size == 0:
            return False
        self.fired = True
        self.trigger_step = int(s[first + hits[0]])
        return True

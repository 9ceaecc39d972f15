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

from .constants import SIGMA, SQRT_PI_2, SUM_ROUNDING

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
    """The rules of docs/maths.md ("Gates"), in order: mean phi >= 0.8 -> act
    "high"; >= 0.5 -> act "medium"; >= threshold (default SIGMA) -> act "low";
    otherwise, or NaN, abstain. The threshold only replaces SIGMA as the floor of "low": a phi that
    is high or medium acts whatever the threshold."""

    def __init__(self, threshold: float = SIGMA) -> None:
        self.threshold = float(threshold)

    def decide(self, phi_mean: float) -> GateDecision:
        if not _finite(phi_mean):
            return GateDecision(False, "abstain")
        if phi_mean >= 0.8:
            return GateDecision(True, "high")
        if phi_mean >= 0.5:
            return GateDecision(True, "medium")
        if phi_mean >= self.threshold:
            return GateDecision(True, "low")
        return GateDecision(False, "abstain")


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

    It calibrates itself from the task metric's own history, with no threshold
    on its scale (an affine rescale of the metric switches at the same step).
    Over the finite values x_1..x_n:

    - level m_n: the mean of the last `window` values; m_first the first one;
      lo_n, hi_n: the lowest and highest level so far;
    - noise: sigma_n = sqrt(pi)/2 times the mean |x_i - x_(i-1)| over the last
      max(2 * window, 10) differences (a trend barely moves it), and
      s_n = sigma_n / sqrt(window), the noise of a level.

    Nothing is decided before n >= max(warmup, 2 * window) ("calibrating").
    Then it switches, once, the first time either route holds:

    - "rise" (risen and held): for `patience` values in a row the level is
      clearly above its first level (m_n - m_first > rise_z * s_n), near its
      best (m_n >= lo_n + level * (hi_n - lo_n)) and no longer climbing. With
      H = 2 * window, g = m_n - m_(n-H) (the gain over the last H values),
      g0 = m_(n-H) - m_(n-2H) and c = climb_z * sqrt(2) * s_n, it is climbing
      when g > c, or when g0 > c, g0 < 0.75 * (hi_n - lo_n) and g > 0: a slow
      climb must show over two horizons, not pass for flat on one noisy one,
      while the gain of a rise that already ended (most of its range) does not
      hold the gate back.
    - "flat" (stopped moving): with h = plateau // 2, the mean of the last h
      values is not above the mean of the h values before them by more than
      tolerance * sigma_n * sqrt(2 / h), and the metric is near its best (the
      mean of the last h values >= hi_n - (tolerance + sqrt(2 ln(n / window)))
      * s_n, allowing for hi_n being the highest of many noisy levels; or near
      as above). Needs n >= 2 * h.

    Bounds (the tests hold them on hundreds of seeded runs). A metric that is
    sustained from value n0 (its level stays within its noise of where it ends
    up) switches by n0 + plateau at the latest, by the flat route (one more
    value for each tolerance-sigma fluke of the two means), and never before
    max(warmup, 2 * window, ...) values: high from the first step, a rise inside
    the warm-up, a slow rise and a noisy plateau all decide. After a clear
    rise the rise route is usually much sooner: within about 8 * window values
    after the level stops climbing (two horizons, a window and the patience).
    A metric still climbing does not switch: by the rise route it is climbing,
    by the flat route its recent mean is clearly above the one before.

    A flat metric switches by the flat route wherever it sits, pure noise
    around a low level included, after `plateau` values and not before (and
    never by the rise route: it does not rise). The gate cannot tell
    0.95 +- 0.02 (a task learned before this stage) from 0.3 +- 0.1 (one not
    learned): each is an affine rescale of the other, and nothing in the run
    says where the metric's top is. Waiting forever is the one answer that is
    always wrong, so a metric that stopped moving for `plateau` values gets
    the CARL reward; `reason` says which route switched it. A run whose task
    reward sits flat for more than `plateau` values before it starts to learn
    switches then: raise `plateau` for such runs.

    `waiting_for` says in one sentence what the gate waits for right now. Once
    switched, the gate keeps its state as of the switch and ignores further
    values. `update` is `update_many` on one value, and `update_many` gives the
    same state however the values are cut into batches.
    """

    def __init__(
        self,
        window: int = 10,
        warmup: int = 20,
        level: float = 0.8,
        rise_z: float = 6.0,
        climb_z: float = 1.0,
        patience: int = 5,
        plateau: int = 200,
        tolerance: float = 3.0,
        name: str = "task reward",
    ) -> None:
        if window < 1 or warmup < 1 or patience < 1 or plateau < 1:
            raise ValueError("window, warmup, patience and plateau must be positive")
        self.window = int(window)
        self.warmup = int(warmup)
        self.level = float(level)
        self.rise_z = float(rise_z)
        self.climb_z = float(climb_z)
        self.patience = int(patience)
        self.plateau = int(plateau)
        self.tolerance = float(tolerance)
        self.name = name
        self.horizon = 2 * self.window  # values over which a climb must show
        self.noise_span = max(2 * self.window, 10)  # differences the noise is read from
        self.count = 0
        self.lo = math.inf
        self.hi = -math.inf
        self.streak = 0
        self.fired = False
        self.trigger_step: int | None = None
        self.reason = ""  # "rise" or "flat" once fired
        self._last_x = math.nan
        self._px: list[float] = [0.0]  # running sums of x by count (enough for both means)
        self._pd: list[float] = [0.0]  # running sums of |differences|, by count
        self._m: list[float] = []  # the last 2 * horizon levels (NaN before the first)
        self._m_first = math.nan  # the first level
        self._now: dict[str, float] = {}  # the latest quantities, for `waiting_for`

    # ---------------------------------------------------------------- state

    @property
    def stage(self) -> str:
        return "B" if self.fired else "A"

    @property
    def ready_at(self) -> int:
        """Values needed before anything is decided."""
        return max(self.warmup, 2 * self.window)

    @property
    def progress_text(self) -> str:
        if self.fired:
            return f"stage B since step {self.trigger_step}"
        return f"stage A: settled high {self.streak}/{self.patience}"

    @property
    def waiting_for(self) -> str:
        """What the gate is waiting for right now, in one short sentence."""
        name = self.name
        if self.fired:
            how = "held near its best" if self.reason == "rise" else "stayed flat"
            return f"nothing: switched at step {self.trigger_step} ({name} {how})"
        if self.count < self.ready_at:
            return f"calibrating: {self.count}/{self.ready_at} values"
        v = self._now
        m, hi = v["m"], v["hi"]
        if v["rose"]:
            if v["climbing"]:
                return (f"{name} {m:.3g} is still climbing (+{v['gain']:.2g} over the last "
                        f"{self.horizon} values)")
            if not v["near"]:
                return f"{name} {m:.3g} must come back near its best ({hi:.3g})"
            left = self.patience - self.streak
            return f"{name} {m:.3g} must hold near its best ({hi:.3g}) for {left} more steps"
        if self.count < 2 * (self.plateau // 2):
            return (f"no clear rise yet: {name} {m:.3g} switches if it stays flat for "
                    f"{2 * (self.plateau // 2)} values ({self.count} so far)")
        return (f"no clear rise yet: {name} {m:.3g} is still moving (its recent mean is up "
                f"{v['drift']:.2g}, more than its noise {v['drift_bar']:.2g}); waiting for it "
                f"to stay flat")

    # --------------------------------------------------------------- update

    def update(self, step: int, task_metric: float | None) -> bool:
        """Feed one value; True only on the update where the gate fires."""
        x = math.nan if task_metric is None else task_metric
        return self.update_many(np.array([step]), np.array([x], dtype=np.float64))

    def update_many(self, steps, task_metric) -> bool:
        """Feed many values at once; True when the gate fired during this call."""
        s, v = _arrays(steps, task_metric, "task_metric")
        if self.fired:
            return False
        ok = np.isfinite(v)
        x, s = v[ok], s[ok]
        k = x.size
        if k == 0:
            return False
        b = _CascadeBatch(self, x)
        r = self._rules(b)
        idx = np.arange(k)
        last_false = np.maximum.accumulate(np.where(r["settled"], -1, idx))
        streak = np.where(last_false < 0, idx + 1 + self.streak, idx - last_false)
        fire = (streak >= self.patience) | r["flat"]
        end = int(np.argmax(fire)) if fire.any() else k - 1  # state kept up to here
        if fire.any():
            self.fired = True
            self.trigger_step = int(s[end])
            self.reason = "rise" if streak[end] >= self.patience else "flat"
        self._carry(b, r, x, streak, end)
        return self.fired

    def _rules(self, b: _CascadeBatch) -> dict[str, np.ndarray]:
        """After each value: the rise route's conditions (rose, near its best, climbing:
        settled when none holds it back) and the flat route's (drift within its bar)."""
        with np.errstate(invalid="ignore"):
            ready = b.n >= self.ready_at
            span_m = b.hi - b.lo
            rose = b.m - b.m_first > self.rise_z * b.noise
            near = b.m >= b.lo + self.level * span_m
            gain = b.m - b.m_back
            before = b.m_back - b.m_back2  # the climb over the horizon before that
            bar = self.climb_z * math.sqrt(2.0) * b.noise
            climbing = (gain > bar) | ((before > bar) & (before < 0.75 * span_m) & (gain > 0))
            settled = ready & b.full & rose & near & ~climbing
            half = max(b.half, 1)
            drift_bar = self.tolerance * b.sigma * math.sqrt(2.0 / half)
            # Near its best: hi is the highest of many noisy levels, allow for that.
            recent = (b.px[b.n - b.px_base] - b.mid) / half
            slack = (self.tolerance + np.sqrt(2 * np.log(np.maximum(b.n / self.window, 2)))) \
                * b.noise
            flat = ready & b.full & b.have & (b.drift <= drift_bar) & (
                (recent >= b.hi - slack) | near)
        return {"rose": rose, "near": near, "gain": gain, "climbing": climbing,
                "settled": settled, "drift_bar": drift_bar, "flat": flat}

    def _carry(self, b: _CascadeBatch, r: dict[str, np.ndarray], x: np.ndarray,
               streak: np.ndarray, end: int) -> None:
        """Carry the state through value `end` of the batch (the last one, or the one
        that fired), and what `waiting_for` says there."""
        n_end = int(b.n[end])
        self.count = n_end
        self._last_x = float(x[end])
        keep = max(self.window, 2 * b.half) + 1
        self._px = b.px[: n_end - b.px_base + 1][-keep:].tolist()
        self._pd = b.pd[: n_end - b.pd_base + 1][-(self.noise_span + 1):].tolist()
        self._m = b.m_hist[: len(self._m) + end + 1][-2 * self.horizon:].tolist()
        self._m_first = b.m_first
        self.lo, self.hi = float(b.lo[end]), float(b.hi[end])
        self.streak = int(streak[end])
        self._now = {"m": float(b.m[end]), "hi": float(b.hi[end]),
                     "rose": bool(r["rose"][end]), "near": bool(r["near"][end]),
                     "climbing": bool(r["climbing"][end]), "gain": float(r["gain"][end]),
                     "drift": float(b.drift[end]), "drift_bar": float(r["drift_bar"][end])}


class _CascadeBatch:
    """The quantities after each value of one batch of finite values, continuing a
    CascadeGate's state: running sums by count, the level m and its noise, the lowest
    and highest level, the levels one and two horizons back, and the drift of the
    plateau means."""

    def __init__(self, g: CascadeGate, x: np.ndarray) -> None:
        k = x.size
        w, span = g.window, g.noise_span
        c0 = g.count
        n = self.n = c0 + 1 + np.arange(k)  # count after each new value
        # Running sums by count; buffer index j is count base + j.
        px = self.px = np.concatenate([g._px[:-1], np.cumsum(np.concatenate([[g._px[-1]], x]))])
        px_base = self.px_base = c0 - (len(g._px) - 1)
        d = np.abs(np.diff(np.concatenate([[g._last_x], x])))
        d = np.where(np.isnan(d), 0.0, d)  # the first value has no difference
        pd = self.pd = np.concatenate([g._pd[:-1], np.cumsum(np.concatenate([[g._pd[-1]], d]))])
        pd_base = self.pd_base = c0 - (len(g._pd) - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            full = self.full = n >= w
            m = self.m = np.where(
                full, (px[n - px_base] - px[np.maximum(n - w, px_base) - px_base]) / w, np.nan)
            ndiff = np.minimum(span, n - 1)
            lo_count = np.maximum(n - span, 1)
            dsum = pd[n - pd_base] - pd[np.maximum(lo_count, pd_base) - pd_base]
            sigma = SQRT_PI_2 * dsum / np.maximum(ndiff, 1)
            # A metric logged exactly constant has no noise, but its running sums round.
            self.sigma = sigma = np.maximum(sigma, SUM_ROUNDING * np.abs(px[n - px_base]))
            self.noise = sigma / math.sqrt(w)
        m_first = g._m_first
        if math.isnan(m_first) and full.any():
            m_first = float(m[np.argmax(full)])
        self.m_first = m_first
        m_ok = np.where(full, m, np.inf)
        self.lo = np.minimum.accumulate(np.concatenate([[g.lo], m_ok]))[1:]
        self.hi = np.maximum.accumulate(
            np.concatenate([[g.hi], np.where(full, m, -np.inf)]))[1:]
        self._history(g, k)
        self._plateau(g)

    def _history(self, g: CascadeGate, k: int) -> None:
        """The level `horizon` values back (or the first level) and 2 * horizon back."""
        hz, w, n = g.horizon, g.window, self.n
        m_hist = self.m_hist = np.concatenate([g._m, np.where(self.full, self.m, np.nan)])
        pos = len(g._m) + np.arange(k)
        self.m_back = np.where(n - hz >= w, m_hist[np.maximum(pos - hz, 0)], self.m_first)
        self.m_back2 = np.where(n - 2 * hz >= w, m_hist[np.maximum(pos - 2 * hz, 0)], np.nan)

    def _plateau(self, g: CascadeGate) -> None:
        """Mean of the last plateau / 2 values against the plateau / 2 before them."""
        half = self.half = g.plateau // 2
        n, px, base = self.n, self.px, self.px_base
        self.have = have = n >= 2 * half
        mid = self.mid = px[np.maximum(n - half, base) - base]
        first = px[np.maximum(n - 2 * half, base) - base]
        with np.errstate(invalid="ignore"):
            self.drift = np.where(have, ((px[n - base] - mid) - (mid - first)) / max(half, 1),
                                  np.nan)

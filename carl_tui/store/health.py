"""Run health: the failures an RL engineer watches for, read from the metrics TRL logs.

Each rule reads a run's rows in order, online (a row is judged on the rows up to it,
never on later ones), and says a `HealthFlag` once its condition holds: `seen_at` is
the step of the row at which it is said, `from_step` where the trouble began in that
same online view (the first row of the stretch the condition holds over, not the row
at which it fired), with its evidence in numbers. Each rule keeps a few recent values
per metric, so a poll costs O(new values) whatever the run's length.

- `no_learning_signal`: most groups of completions score the same (the mean of the
  last 10 `frac_reward_zero_std` >= 0.8), or, where the run logs no such fraction, the
  reward's within-group spread `reward_std` is ~0 (the mean of the last 5 under 1% of
  the reward's scale). A reward that rose and sits at the top of what its completions
  were seen to score (a row's mean plus half its spread) is said as solved (severity
  "information"), not as a failure.
- `entropy_collapse`: in RL rows (a reward, no token accuracy), the policy's entropy
  (mean of 5) falls under ENTROPY_FLOOR of its start, or fast: under ENTROPY_FAST of its
  level ENTROPY_SPAN rows before and under ENTROPY_HALF of its start. The reward
  ceiling R = -a exp(H) + b (Cui et al. 2025) is fitted online (running sums) over the
  rows with both; its forecast at H = 0, with a standard error, is given once the fit
  is good (`CeilingFit.stated`).
- `truncation`: completions run into the length cap: the mean of the last 5
  `completions/clipped_ratio` >= 0.5.
- `kl_drift`: the KL to the reference jumps off a plateau (medians of three spans of
  KL_SPAN rows: the middle under KL_PLATEAU times the first, the last at least twice the
  middle and KL_NOISE standard errors above it) while the reward did not rise.
- `reward_dominance` (an audit signal, not an early warning): with several task reward
  functions, one carries the gain while another falls, each change beyond 3 noise
  units of that function (more over a long run: `_extreme`).
- `loss_spike` / `grad_spike`: the loss (rows without a reward) or the gradient norm
  jumps far above its own recent level, in its own noise: the divergence alert's watch
  (store/alerts.py) with a patience of one value (the gradient norm: three).
- `task_collapse`: the task metric (token accuracy, else the task reward) falls from its
  best by more than half of what it gained, beyond 5 noise units, and stays down 5 rows;
  only a gain of COLLAPSE_RISE standard errors (more over a long run) counts.
- `stalled` (`stalled_flag`): no new data for STALL_INTERVALS logging intervals (at least
  STALL_MIN_S seconds) while the job says it is running; it needs the clock.

The rules were tuned on the tuning half of the corpus of real runs (tests/health_corpus.py
scores them; tests/store/test_health_corpus.py holds them on the check half).

The alerts' own judgements (`nan_loss`, `diverging`) are kept as flags too (`alert_flag`),
so a guard reads every verdict in one list.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.store import roles
from carl_tui.store.alerts import DIVERGE_K, DIVERGE_WINDOW, Divergence, is_loss

FLAGS = mn.HEALTH_FLAGS
ALERT_FLAGS = mn.ALERT_FLAGS  # the alerts' judgements, kept as flags

ZERO_STD = "frac_reward_zero_std"
REWARD_STD = "reward_std"
CLIPPED = "completions/clipped_ratio"
KL = "kl"
GRAD = "grad_norm"
LOSS = "loss"

LEVEL = 5  # values in a level (a mean of the last LEVEL values)
ZERO_STD_HIGH = 0.8
ZERO_STD_LEVEL = 10  # a level of the fraction: its mean over more rows (a few groups: coarse)
SOLVED_SHARE = 0.05  # solved: within this share of the top the completions were seen at
ZERO_STD_ON = 0.5  # a value at or above this is part of the stretch (from_step)
STD_REL = 0.01  # reward_std under this share of the reward's scale is ~0
ENTROPY_FLOOR = 0.3
ENTROPY_ON = 0.9  # the fall starts where the level leaves 90% of where it was
ENTROPY_SPAN = 10  # rows over which a fast fall is measured
ENTROPY_HALF = 0.5  # ... and to under half its start
ENTROPY_FAST = 0.75  # a fast fall: the level under 75% of its level ENTROPY_SPAN rows before
CLIPPED_HIGH = 0.5
CLIPPED_ON = 0.25
KL_SPAN = 10
KL_RATIO = 2.0
KL_NOISE = 10.0  # the rise, in standard errors of a difference of two medians
KL_PLATEAU = 1.5
DOMINANCE_NOISE = 3.0
DOMINANCE_MIN_ROWS = 20
COLLAPSE_SHARE = 0.5
COLLAPSE_NOISE = 5.0
COLLAPSE_RISE = 8.0  # only what was learned collapses: a rise of this many standard errors
COLLAPSE_HOLD = 5
REWARD_LEVEL = 10  # a reward's level: a mean of more values (one batch's reward is noisy)
SPIKE_K = DIVERGE_K
GRAD_SPIKE_K = DIVERGE_K
GRAD_PATIENCE = 3
STALL_INTERVALS = 5
STALL_MIN_S = 60.0
FIT_MIN_ROWS = 10
FIT_MIN_R2 = 0.6
MAX_FLAGS = 100
NOISE_WINDOW = 100  # steps between values a noise is measured over (20 err by up to 50%)


@dataclass(frozen=True)
class CeilingFit:
    """R = -a exp(H) + b, fitted by least squares over `n` rows with both: the reward's
    forecast at zero entropy is `ceiling` = b - a, with standard error `ceiling_se`."""

    a: float
    b: float
    ceiling: float
    ceiling_se: float
    r2: float
    n: int

    @property
    def stated(self) -> bool:
        """Good enough to state: enough rows, a fit that explains the reward (R^2), the
        reward rising as the entropy falls (a > 0), and a finite error."""
        return (self.n >= FIT_MIN_ROWS and self.r2 >= FIT_MIN_R2 and self.a > 0
                and math.isfinite(self.ceiling_se))

    def text(self) -> str:
        return (f"task reward ceiling {self.ceiling:.3g} +/- {self.ceiling_se:.2g} at zero entropy "
                f"(R = -{self.a:.3g} exp(H) + {self.b:.3g}, R^2 {self.r2:.2f} over {self.n} "
                "steps)")

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "ceiling": self.ceiling,
                "ceiling_se": self.ceiling_se, "r2": self.r2, "n": self.n}


@dataclass(frozen=True)
class Evidence:
    """A flag's evidence in numbers: the metric read, its level and trend when said, the
    threshold it crossed, the window (rows) the level is taken over, and one line."""

    metric: str
    level: float
    trend: float
    threshold: float
    window: int
    text: str
    fit: CeilingFit | None = None

    def as_dict(self) -> dict:
        d = {"metric": self.metric, "level": _num(self.level), "trend": _num(self.trend),
             "threshold": _num(self.threshold), "window": self.window, "text": self.text}
        if self.fit is not None:
            d["fit"] = self.fit.as_dict()
        return d


@dataclass(frozen=True)
class HealthFlag:
    flag: str  # one of FLAGS or ALERT_FLAGS
    from_step: int  # where the trouble began (online)
    seen_at: int  # the step at which the rule, on the rows up to it, says it
    severity: str  # "information" (an audit, a solved task), "warning", "error"
    evidence: Evidence

    def as_dict(self) -> dict:
        return {"flag": self.flag, "from_step": self.from_step, "seen_at": self.seen_at,
                "severity": self.severity, "evidence": self.evidence.as_dict()}

    @property
    def text(self) -> str:
        return f"{self.flag}: {self.evidence.text}"


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


class _Recent:
    """The last `k` values and their mean (a running sum, summed afresh now and then)."""

    __slots__ = ("n", "q", "s")

    def __init__(self, k: int = LEVEL) -> None:
        self.q: deque[float] = deque(maxlen=k)
        self.s = 0.0
        self.n = 0

    def add(self, v: float) -> None:
        if len(self.q) == self.q.maxlen:
            self.s -= self.q[0]
        self.q.append(v)
        self.n += 1
        self.s = math.fsum(self.q) if self.n % 1024 == 0 else self.s + v

    @property
    def full(self) -> bool:
        return len(self.q) == self.q.maxlen

    @property
    def mean(self) -> float:
        return self.s / len(self.q) if self.q else math.nan


class _Noise:
    """One value's noise, from the mean absolute step between the last values (for
    independent noise E|x[i+1] - x[i]| = 2 sigma / sqrt(pi)): a slow trend adds little."""

    __slots__ = ("last", "steps")

    def __init__(self, k: int = NOISE_WINDOW) -> None:
        self.steps = _Recent(k)
        self.last: float | None = None

    def add(self, v: float) -> None:
        if self.last is not None:
            self.steps.add(abs(v - self.last))
        self.last = v

    @property
    def sigma(self) -> float:
        return self.steps.mean * math.sqrt(math.pi) / 2 if self.steps.q else 0.0


def _extreme(windows: float) -> float:
    """How far (in standard errors) the highest of `windows` independent levels of noise
    lies above their mean: sqrt(2 ln windows)."""
    return math.sqrt(2 * math.log(max(windows, 1.0)))


def _median(values: list[float]) -> float:
    v = sorted(values)
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2


def _rows(steps: np.ndarray, *cols: np.ndarray) -> list[tuple]:
    """(step, v1, v2, ...) of the rows where the first column is finite."""
    first = cols[0]
    idx = np.flatnonzero(np.isfinite(first))
    if not idx.shape[0]:
        return []
    return list(zip(steps[idx].tolist(), *(c[idx].tolist() for c in cols), strict=True))


class _Episode:
    """A condition's stretch: where the current one began (`start`), and whether the flag
    was said (once a run: a flag says where the trouble began, not each time it recurs)."""

    __slots__ = ("said", "start")

    def __init__(self) -> None:
        self.start: int | None = None
        self.said = False

    def see(self, step: int, on: bool) -> None:
        if self.said:
            return
        if not on:
            self.start = None
        elif self.start is None:
            self.start = step

    def say(self) -> bool:
        """True the first time the flag is said."""
        if self.said:
            return False
        self.said = True
        return True


class _NoSignal:
    """no_learning_signal (see the module docstring)."""

    def __init__(self) -> None:
        self.zero = _Recent(ZERO_STD_LEVEL)
        self.std, self.reward = _Recent(), _Recent()
        self.start: float | None = None  # the reward's first level
        self.top = -math.inf  # the best a row's completions were seen to score
        self.std_peak = 0.0
        self.episode = _Episode()

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        if self.episode.said:
            return []
        nan = np.full(steps.shape[0], np.nan)
        zero = np.asarray(cols.get(ZERO_STD, nan), dtype=np.float64)
        std = np.asarray(cols.get(REWARD_STD, nan), dtype=np.float64)
        reward = np.where(np.isfinite(task), task, cols.get(mn.REWARD, nan))
        either = np.where(np.isfinite(zero), zero, np.where(np.isfinite(std), -1.0, np.nan))
        for step, _, z, s, r in _rows(steps, either, zero, std, reward):
            if math.isfinite(r):
                self._reward(r, s)
            flag = self._one(int(step), z, s)
            if flag is not None:
                return [flag]
        return []

    def _reward(self, r: float, s: float) -> None:
        self.reward.add(r)
        if self.start is None and self.reward.full:
            self.start = self.reward.mean
        self.top = max(self.top, r + 0.5 * s if math.isfinite(s) else r)

    def _one(self, step: int, z: float, s: float) -> HealthFlag | None:
        if math.isfinite(z):
            self.zero.add(z)
            self.episode.see(step, z >= ZERO_STD_ON)
            if not (self.zero.full and self.zero.mean >= ZERO_STD_HIGH):
                return None
            metric, level, threshold = ZERO_STD, self.zero.mean, ZERO_STD_HIGH
            words = f"{level:.0%} of groups have no reward variance (>= {threshold:.0%})"
        else:
            self.std.add(s)
            self.std_peak = max(self.std_peak, s)
            r = abs(self.reward.mean) if self.reward.q else 0.0
            threshold = max(1e-6, STD_REL * max(r, self.std_peak))
            self.episode.see(step, s <= 2 * threshold)
            if not (self.std.full and self.std.mean <= threshold):
                return None
            metric, level = REWARD_STD, self.std.mean
            words = f"reward_std {level:.3g} ~ 0 (under {threshold:.3g})"
        if not self.episode.say():
            return None
        solved = self._solved()
        sev = "information" if solved else "warning"
        words = (f"solved: the reward sits at its top {self.reward.mean:.3g} (from "
                 f"{self.start:.3g}); {words}") if solved else f"no learning signal: {words}"
        recent = self.zero if metric == ZERO_STD else self.std
        return HealthFlag("no_learning_signal", self.episode.start or step, step, sev,
                          Evidence(metric, level, _trend(recent), threshold, recent.q.maxlen
                                   or LEVEL, words))

    def _solved(self) -> bool:
        """The reward saturated: it rose, and sits at the top of what its completions were
        ever seen to score (a row's mean plus half its spread, `top`): not a reward stuck
        below what some completions earned (a constant reward, every completion failing)."""
        if self.start is None or not self.reward.full or not math.isfinite(self.top):
            return False
        level = self.reward.mean
        return level > self.start and level >= self.top - SOLVED_SHARE * abs(self.top)


def _trend(r: _Recent) -> float:
    """The last value minus the first of the recent ones."""
    return r.q[-1] - r.q[0] if len(r.q) > 1 else 0.0


class _CeilingFit:
    """Least squares of R on x = exp(H), from running sums (O(1) a row)."""

    __slots__ = ("n", "sr", "srr", "sx", "sxr", "sxx")

    def __init__(self) -> None:
        self.n = 0
        self.sx = self.sr = self.sxx = self.sxr = self.srr = 0.0

    def add(self, h: float, r: float) -> None:
        x = math.exp(min(h, 50.0))
        self.n += 1
        self.sx += x
        self.sr += r
        self.sxx += x * x
        self.sxr += x * r
        self.srr += r * r

    def fit(self) -> CeilingFit | None:
        n = self.n
        if n < 3:
            return None
        mx, mr = self.sx / n, self.sr / n
        sxx = self.sxx - n * mx * mx
        srr = self.srr - n * mr * mr
        sxr = self.sxr - n * mx * mr
        if sxx <= 1e-12 * max(self.sxx, 1e-300) or srr <= 0:
            return None
        slope = sxr / sxx  # R = b + slope x, a = -slope
        b = mr - slope * mx
        sse = max(srr - slope * sxr, 0.0)
        r2 = 1 - sse / srr
        s2 = sse / (n - 2)
        se = math.sqrt(s2 * (1 / n + (1 - mx) ** 2 / sxx))  # the fitted mean at x = exp(0)
        return CeilingFit(-slope, b, b + slope, se, r2, n)


class _EntropyCollapse:
    """entropy_collapse, and the reward ceiling's fit (see the module docstring)."""

    def __init__(self) -> None:
        self.level = _Recent()
        self.levels: deque[float] = deque(maxlen=ENTROPY_SPAN + 1)  # the last levels
        self.start: float | None = None
        self.fit = _CeilingFit()
        self.episode = _Episode()

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        nan = np.full(steps.shape[0], np.nan)
        h = np.asarray(cols.get(mn.ENTROPY, nan), dtype=np.float64)
        reward = np.where(np.isfinite(task), task, cols.get(mn.REWARD, nan))
        acc = np.asarray(cols.get(mn.ACCURACY, nan), dtype=np.float64)
        h = np.where(np.isfinite(reward) & ~np.isfinite(acc), h, np.nan)  # RL rows only
        out = []
        for step, hv, r in _rows(steps, h, reward):
            self.fit.add(hv, r)
            self.level.add(hv)
            if not self.level.full:
                continue
            level = self.level.mean
            self.levels.append(level)
            if self.start is None:
                self.start = level
            flag = self._judge(int(step), level)
            if flag is not None:
                out.append(flag)
        return out

    def _judge(self, step: int, level: float) -> HealthFlag | None:
        then = self.levels[0]
        self.episode.see(step, level < ENTROPY_ON * then or level < ENTROPY_ON * self.start)
        far = level < ENTROPY_FLOOR * self.start
        fast = (len(self.levels) > ENTROPY_SPAN and level < ENTROPY_FAST * then
                and level < ENTROPY_HALF * self.start)
        if self.start <= 0 or not (far or fast) or not self.episode.say():
            return None
        fit = self.fit.fit()
        stated = fit if fit is not None and fit.stated else None
        words = (f"entropy collapsed: {level:.3g}, from {self.start:.3g} at the start"
                 + (f" and {then:.3g} {ENTROPY_SPAN} rows before" if fast else ""))
        if stated is not None:
            words += f"; {stated.text()}"
        threshold = ENTROPY_FLOOR * self.start if far else ENTROPY_FAST * then
        return HealthFlag("entropy_collapse", self.episode.start or step, step, "warning",
                          Evidence(mn.ENTROPY, level, level - then, threshold, LEVEL, words,
                                   stated))

    def ceiling(self) -> CeilingFit | None:
        """The fit, once good enough to state."""
        fit = self.fit.fit()
        return fit if fit is not None and fit.stated else None


class _Truncation:
    """truncation (see the module docstring)."""

    def __init__(self) -> None:
        self.level = _Recent()
        self.episode = _Episode()

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        clipped = cols.get(CLIPPED)
        if clipped is None or self.episode.said:
            return []
        out = []
        for step, c in _rows(steps, np.asarray(clipped, dtype=np.float64)):
            self.level.add(c)
            self.episode.see(int(step), c >= CLIPPED_ON)
            level = self.level.mean
            if self.level.full and level >= CLIPPED_HIGH and self.episode.say():
                words = (f"{level:.0%} of completions clipped at the length cap "
                         f"(>= {CLIPPED_HIGH:.0%})")
                out.append(HealthFlag("truncation", self.episode.start or int(step),
                                      int(step), "warning",
                                      Evidence(CLIPPED, level, _trend(self.level),
                                               CLIPPED_HIGH, LEVEL, words)))
        return out


class _KlDrift:
    """kl_drift (see the module docstring): medians of three spans of KL_SPAN rows (an
    outlier moves none): the KL sat on a plateau (the middle span under KL_PLATEAU times
    the first: not the ramp every run climbs as it leaves the reference), then the last
    span doubled it, by more than KL_NOISE standard errors, while the reward's mean over
    the last span did not rise above the middle one's."""

    def __init__(self) -> None:
        self.kl: deque[float] = deque(maxlen=3 * KL_SPAN)
        self.reward: deque[float] = deque(maxlen=3 * KL_SPAN)
        self.steps: deque[int] = deque(maxlen=3 * KL_SPAN)
        self.reward_noise = _Noise()
        self.kl_noise = _Noise(3 * KL_SPAN)
        self.said = False

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        kl = cols.get(KL)
        if kl is None or self.said:
            return []
        nan = np.full(steps.shape[0], np.nan)
        reward = np.where(np.isfinite(task), task, cols.get(mn.REWARD, nan))
        for step, k, r in _rows(steps, np.asarray(kl, dtype=np.float64), reward):
            if not math.isfinite(r):
                continue
            self.kl.append(k)
            self.kl_noise.add(k)
            self.reward.append(r)
            self.steps.append(int(step))
            self.reward_noise.add(r)
            if len(self.kl) == self.kl.maxlen:
                flag = self._judge(int(step))
                if flag is not None:
                    self.said = True
                    return [flag]
        return []

    def _judge(self, step: int) -> HealthFlag | None:
        kl, r, n = list(self.kl), list(self.reward), KL_SPAN
        kla, kl0, kl1 = (_median(kl[i * n : (i + 1) * n]) for i in range(3))
        r0, r1 = math.fsum(r[n : 2 * n]) / n, math.fsum(r[2 * n :]) / n
        se = self.reward_noise.sigma * math.sqrt(2 / n)
        bar = KL_NOISE * 1.25 * self.kl_noise.sigma * math.sqrt(2 / n)
        if not (kl0 <= KL_PLATEAU * kla and kl1 >= KL_RATIO * kl0 and kl1 - kl0 > bar
                and r1 - r0 <= se):
            return None
        words = (f"KL to the reference {kl0:.3g} -> {kl1:.3g} (medians of {n} rows) "
                 f"while the reward went {r0:.3g} -> {r1:.3g}")
        return HealthFlag("kl_drift", self.steps[2 * n], step, "warning",
                          Evidence(KL, kl1, kl1 - kl0, KL_RATIO * kl0, n, words))


class _RewardDominance:
    """reward_dominance, an audit signal (see the module docstring)."""

    def __init__(self) -> None:
        self.levels: dict[str, _Recent] = {}
        self.noise: dict[str, _Noise] = {}
        self.start: dict[str, float] = {}
        self.rows = 0
        self.episode = _Episode()

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        names = roles.task_reward_names(cols)
        if (len(names) < 2 and len(self.levels) < 2) or self.episode.said:
            return []
        nan = np.full(steps.shape[0], np.nan)
        stack = np.vstack([np.asarray(cols.get(n, nan), dtype=np.float64) for n in names])
        out = []
        for i in np.flatnonzero(np.isfinite(stack).any(axis=0)).tolist():
            for n, v in zip(names, stack[:, i].tolist(), strict=True):
                if math.isfinite(v):
                    self._add(n, v)
            self.rows += 1
            flag = self._judge(int(steps[i]))
            if flag is not None:
                out.append(flag)
        return out

    def _add(self, name: str, v: float) -> None:
        lv = self.levels.setdefault(name, _Recent())
        self.noise.setdefault(name, _Noise()).add(v)
        lv.add(v)
        if name not in self.start and lv.full:
            self.start[name] = lv.mean

    def _judge(self, step: int) -> HealthFlag | None:
        if self.rows < DOMINANCE_MIN_ROWS or len(self.start) < 2:
            return None
        gains = {n: self.levels[n].mean - s for n, s in self.start.items()}
        k = DOMINANCE_NOISE + _extreme(self.rows / LEVEL)  # (a long run's extremes of noise)
        bars = {n: k * math.sqrt(2 / LEVEL) * self.noise[n].sigma for n in gains}
        top = max(gains, key=gains.get)
        others = [n for n in gains if n != top]
        fell = [n for n in others if gains[n] < -max(bars[n], 0.1 * gains[top])]
        on = (gains[top] > bars[top] and bool(fell)
              and sum(gains[n] for n in others) <= 0)
        self.episode.see(step, on)
        if not (on and self.episode.say()):
            return None
        fallen = ", ".join(f"{roles.reward_function(n)} {gains[n]:+.3g}" for n in fell)
        words = (f"audit: {roles.reward_function(top)} carries the gain ({gains[top]:+.3g}) "
                 f"while the others fall ({fallen}); a proxy may be taking over")
        return HealthFlag("reward_dominance", self.episode.start or step, step, "information",
                          Evidence(top, self.levels[top].mean, gains[top], bars[top],
                                   LEVEL, words))


class _Spike:
    """loss_spike / grad_spike: the divergence alert's watch (store/alerts.py), with
    `patience` values over its bar in a row. A loss is read on rows without a reward only:
    an RL loss (GRPO's) sits near zero whatever the policy does."""

    def __init__(self, flag: str, k: float, patience: int) -> None:
        self.flag, self.k, self.patience = flag, k, patience
        self.watches: dict[str, Divergence] = {}
        self.said = False

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        if self.said:
            return []
        rl = np.isfinite(task) | np.isfinite(cols.get(mn.REWARD, np.full(steps.shape[0],
                                                                          np.nan)))
        for name, values in cols.items():
            if not self._reads(name):
                continue
            if self.flag == "loss_spike" and rl.any():
                values = np.where(rl, np.nan, values)
            watch = self.watches.get(name)
            if watch is None:
                watch = self.watches[name] = Divergence(self.k, DIVERGE_WINDOW,
                                                        self.patience)
            for step, v, level, bar in watch.feed(steps, values):
                self.said = True
                words = (f"{name} {v:.4g} at step {step}, far above its recent level "
                         f"{level:.4g} (bar {bar:.4g}: {self.k:g}x its noise)")
                return [HealthFlag(self.flag, step, step, "warning",
                                   Evidence(name, v, v - level, bar, DIVERGE_WINDOW, words))]
        return []

    def _reads(self, name: str) -> bool:
        return name == GRAD if self.flag == "grad_spike" else is_loss(name)


class _TaskCollapse:
    """task_collapse (see the module docstring): one watch per task metric (token
    accuracy, the task reward), each from its own first row."""

    def __init__(self) -> None:
        self.watches: dict[str, _Fall] = {}

    def feed(self, steps, cols, task) -> list[HealthFlag]:
        nan = np.full(steps.shape[0], np.nan)
        acc = np.asarray(cols.get(mn.ACCURACY, nan), dtype=np.float64)
        reward = np.where(np.isfinite(acc), np.nan, task)  # the reward where no accuracy
        out = []
        for name, values in ((mn.ACCURACY, acc), (_task_name(cols), reward)):
            rows = _rows(steps, values)
            if not rows:
                continue
            kind = "accuracy" if name == mn.ACCURACY else "reward"
            watch = self.watches.get(kind)
            if watch is None:
                watch = self.watches[kind] = _Fall(name, LEVEL if kind == "accuracy"
                                                   else REWARD_LEVEL)
            for step, v in rows:
                if watch.episode.said:
                    break
                flag = watch.add(int(step), v)
                if flag is not None:
                    out.append(flag)
        return out


def _task_name(cols: Mapping[str, np.ndarray]) -> str:
    return roles.task_metric_label(cols, carl_known=bool(roles.carl_reward_names(cols))) \
        or "task reward"


class _Fall:
    """One task metric's fall from its best level, held COLLAPSE_HOLD rows."""

    def __init__(self, metric: str, k: int) -> None:
        self.metric, self.k = metric, k
        self.level = _Recent(k)
        self.noise = _Noise()
        self.best = -math.inf
        self.best_step = 0
        self.floor = math.inf  # the lowest level before the best
        self.low = math.inf  # the lowest level so far
        self.held = 0
        self.episode = _Episode()

    def add(self, step: int, v: float) -> HealthFlag | None:
        self.level.add(v)
        self.noise.add(v)
        if not self.level.full:
            return None
        level = self.level.mean
        self.low = min(self.low, level)
        if level > self.best:
            self.best, self.best_step, self.floor = level, step, self.low
        fall, rise = self.best - level, self.best - self.floor
        se = self.noise.sigma / math.sqrt(self.k)
        # the best and the lowest of many levels of noise lie ~`extreme` se out: a long run
        # must not read its own noise as a rise and a fall
        extreme = _extreme(self.level.n / self.k)
        bar = max(COLLAPSE_SHARE * rise, max(COLLAPSE_NOISE, extreme + 3) * se)
        on = rise > max(COLLAPSE_RISE, 2 * extreme + 4) * se and fall > bar
        self.held = self.held + 1 if on else 0
        self.episode.see(step, on)
        if not (self.held >= COLLAPSE_HOLD and self.episode.say()):
            return None
        words = (f"{self.metric} fell from its best {self.best:.3g} (step {self.best_step}) "
                 f"to {level:.3g} and stays down")
        return HealthFlag("task_collapse", self._began(), step, "warning",
                          Evidence(self.metric, level, -fall, self.best - bar, self.k, words))

    def _began(self) -> int:
        """The fall began after the best level's step."""
        return self.best_step


RULES = (_NoSignal, _EntropyCollapse, _Truncation, _KlDrift, _RewardDominance,
         lambda: _Spike("loss_spike", SPIKE_K, 1),
         lambda: _Spike("grad_spike", GRAD_SPIKE_K, GRAD_PATIENCE),
         _TaskCollapse)


class HealthWatch:
    """Every rule over one run's rows, fed in order (`feed`); `flags` says what was said."""

    def __init__(self) -> None:
        self._rules = [make() for make in RULES]
        self._entropy = next(r for r in self._rules if isinstance(r, _EntropyCollapse))
        self.flags: list[HealthFlag] = []  # the newest MAX_FLAGS
        self.said = 0  # flags said in the whole run

    def feed(self, steps: np.ndarray, cols: Mapping[str, np.ndarray],
             task: np.ndarray | None = None) -> list[HealthFlag]:
        """A batch of rows (steps in order, NaN where a metric was not logged; `task`: the
        task reward per row, `roles.task_reward`); the flags said on it."""
        steps = np.asarray(steps)
        n = steps.shape[0]
        if n == 0:
            return []
        if task is None:
            task = roles.task_reward(cols, n, carl_known=bool(roles.carl_reward_names(cols)))
        new = [f for rule in self._rules for f in rule.feed(steps, cols, task)]
        new.sort(key=lambda f: f.seen_at)
        self._keep(new)
        return new

    def add_alert(self, kind: str, step: int | None, text: str) -> HealthFlag:
        """One of the alerts' judgements (`nan_loss`, `diverging`), as a flag."""
        flag = alert_flag(kind, step, text)
        self._keep([flag])
        return flag

    def _keep(self, new: Sequence[HealthFlag]) -> None:
        """Kept in the order of their steps (a batch's alerts are told before its rules)."""
        late = self.flags and new and new[0].seen_at < self.flags[-1].seen_at
        self.flags.extend(new)
        if late:
            self.flags.sort(key=lambda f: f.seen_at)
        self.said += len(new)
        if len(self.flags) > MAX_FLAGS:
            del self.flags[: len(self.flags) - MAX_FLAGS]

    def ceiling(self) -> CeilingFit | None:
        """The reward ceiling's forecast from the entropy, once the fit is good enough."""
        return self._entropy.ceiling()


def alert_flag(kind: str, step: int | None, text: str) -> HealthFlag:
    s = int(step) if step is not None else 0
    metric = text.split(" ", 1)[0] if text else kind
    return HealthFlag(kind, s, s, "error",
                      Evidence(metric, math.nan, math.nan, math.nan, 0, text))


def flags_of(steps: np.ndarray, cols: Mapping[str, np.ndarray]) -> list[HealthFlag]:
    """Every flag a whole history raises, read in order (what a dashboard that followed
    the run from its start said)."""
    watch = HealthWatch()
    watch.feed(np.asarray(steps), {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()})
    return list(watch.flags)


def stalled_flag(wall_steps: np.ndarray, wall_times: np.ndarray, now: float,
                 running: bool) -> HealthFlag | None:
    """`stalled`: no new data for STALL_INTERVALS logging intervals (the median of the
    last ones; at least STALL_MIN_S) while the job says it is running; None otherwise.
    `wall_steps`/`wall_times`: when each step was logged (epoch seconds), oldest first."""
    if not running or len(wall_times) < 2:
        return None
    t = np.asarray(wall_times, dtype=np.float64)[-21:]
    gaps = np.diff(t)
    gaps = gaps[gaps > 0]
    interval = float(np.median(gaps)) if gaps.shape[0] else 0.0
    bar = max(STALL_INTERVALS * interval, STALL_MIN_S)
    silent = now - float(t[-1])
    if silent <= bar:
        return None
    last = int(np.asarray(wall_steps)[-1])
    words = (f"no new data for {silent:.0f} s ({silent / interval:.0f} logging intervals of "
             f"{interval:.3g} s) while the job is running") if interval > 0 else \
        f"no new data for {silent:.0f} s while the job is running"
    return HealthFlag("stalled", last, last, "warning",
                      Evidence("wall time", silent, silent, bar, STALL_INTERVALS, words))


#: Worst first: an error (NaN, divergence) before a warning before an audit or a solved task.
SEVERITY_RANK = {"error": 0, "warning": 1, "information": 2}


def standing(flags: Sequence[HealthFlag], step: int | None = None) -> list[HealthFlag]:
    """The flags that stand (at `step`: those whose trouble began by then, `from_step <=
    step`), each flag once (where it was first said), worst first: by severity, then the
    trouble that began first."""
    first: dict[str, HealthFlag] = {}
    for f in flags:
        if step is not None and f.from_step > step:
            continue
        have = first.get(f.flag)
        if have is None or f.from_step < have.from_step:
            first[f.flag] = f
    return sorted(first.values(),
                  key=lambda f: (SEVERITY_RANK.get(f.severity, 1), f.from_step, f.flag))


def short_evidence(flag: HealthFlag) -> str:
    """A flag's evidence in a few words: its line without what is in brackets or after a
    semicolon (the threshold, the fit: the whole line is in the events and summary),
    nor the flag's own name said again."""
    text = flag.evidence.text.split(";", 1)[0]
    while "(" in text and ")" in text[text.index("("):]:
        start = text.index("(")
        end = text.index(")", start)
        text = text[:start].rstrip() + text[end + 1:]
    text = text.removeprefix("no learning signal: ")
    if text.startswith("entropy collapsed: "):
        text = "entropy " + text.removeprefix("entropy collapsed: ")
    return " ".join(text.split()).rstrip(" ,")


def flag_line(flag: HealthFlag) -> str:
    """"truncation since step 12 (seen at 16): 72% of completions clipped at the length
    cap": the flag, where its trouble began, where it was said, its evidence in short."""
    seen = f" (seen at {flag.seen_at})" if flag.seen_at != flag.from_step else ""
    return f"{flag.flag} since step {flag.from_step}{seen}: {short_evidence(flag)}"

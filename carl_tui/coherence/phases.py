"""Online phases of a run: baseline, melting, transition, plateau, crystallisation, converged.

The method, in three parts, each a plain piece a reader can check against the curve.

1. Segments (`segment`). The progress metric (token accuracy, or the task reward of an
   RL run; a run with neither reads minus its entropy, the order parameter up to a scale)
   is cut into straight pieces by an exact change-point search: the segmentation into at
   most `max_segments` lines that minimises the squared residuals over the noise variance
   plus `penalty * ln n` per segment (a BIC-like rule; the segment neighbourhood search of
   Auger and Lawrence). The noise comes from the run itself, from second differences (a
   steady climb adds nothing to them; their largest tenth, where the curve steps, is left
   out). The values are kept as the sufficient statistics of a least-squares line (count,
   sums of i, x, i*i, i*x, x*x) in at most `buckets` buckets of 2^k values: the residuals
   of any line over whole buckets are exact, memory is bounded and a poll costs what it
   adds.
2. The reading (`Reading`, frozen): where the stage started, its best level, the rise in
   standard errors, the slope of the last segment, the share of the climb held, the
   distance to the ceiling, the entropy against its start, phi where the vocabulary size
   is known; `Reading.text` says it in one line (the panel's `h`, `summary`'s "why").
3. The words, pure functions of the reading and the phase said before (`verdict`):
   - baseline: nothing moved beyond the noise ("too few to tell" under `min_values`);
   - melting: the entropy spiked (`melt` times its start, two values in a row) before the
     progress climbed;
   - transition: the last segment climbs (its slope `slope_z` standard errors up, gaining
     `slow` of the rise so far), or just stepped up; dated from the climb's first segment.
     After a spike, until the entropy is back under its start;
   - plateau: the climb stopped and held `min_values` values, and nothing says the model
     knows its task: token accuracy far from its ceiling (or short of the gate's bar), a
     reward with neither a ceiling nor a low entropy or a high phi;
   - crystallisation: the climb stopped near the ceiling (`near` of the way, never under
     `floor` of it) where no gate reads the metric; at the gate's step where one does;
     for a reward, with phi at `phi_high` or the entropy under `low_entropy` of its start;
   - converged: crystallised, and held since for `hold` times as long as the climb took.
   A fall after a climb is not a phase: the phase said before it stands, and the health
   flags speak of it.

Online, a change can only be seen after it happens: each phase is said once, at `seen_at`,
and dated at `from_step`, the first step of the segment where the change is (`Said`). A
phase said and later contradicted (a plateau whose climb resumes) stays in `said` with the
step it was corrected at; `timeline` is the story as it reads now. A step back (to an
earlier phase) is said once two readings in a row tell it.

The segments are read again when the count of values reaches the next point of a fixed
schedule (every value up to `every_value`, then each `growth` more) and at the gate's step,
so the labels do not depend on how the steps are cut into batches. The constants were
chosen on the tuning half of the corpus of real runs (tests/phase_checks.py).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from .constants import SQRT_PI_12


class Phase(str, Enum):
    BASELINE = "baseline"
    MELTING = "melting"
    TRANSITION = "transition"
    CRYSTALLISATION = "crystallisation"
    CONVERGED = "converged"
    PLATEAU = "plateau"

    @property
    def index(self) -> int:
        return PHASES.index(self)


#: Phases; `update_many` returns indices into this tuple. Plateau comes last so that the
#: older indices keep their meaning; it is not "later" than crystallisation.
PHASES: tuple[Phase, ...] = tuple(Phase)
#: The ceiling of token accuracy (a fraction); a reward has none (`math.inf`).
ACCURACY_CEILING = 1.0


@dataclass(frozen=True)
class PhaseSettings:
    """The method's constants, tuned on the tuning half of the real-run corpus."""

    penalty: float = 1.0  # per segment, times ln n (a BIC counts its parameters here)
    max_segments: int = 5
    buckets: int = 64
    min_values: int = 5  # fewer: "too few to tell"
    slope_z: float = 3.0  # a segment climbs: its slope this many standard errors above 0
    rise_z: float = 3.0  # the climb so far, in standard errors of two fitted levels
    rise_noise: float = 0.5  # ... and in the noise of one value (a drift nobody sees is no climb)
    near: float = 0.8  # crystallised: this share of the way from the start to the ceiling
    floor: float = 0.5  # ... and never under this share of the ceiling
    low_entropy: float = 0.5  # or the entropy under this share of its start
    phi_high: float = 0.8  # or phi at least the coherence gate's "high" bar
    melt: float = 2.5  # melting: the entropy this many times its start
    hold: float = 2.0  # converged: held this many times the climb's length
    slow: float = 0.2  # a climbing segment gains at least this share of the rise so far
    every_value: int = 32  # read the segments at every value up to this many
    growth: float = 1.04  # then each time the count grows by this factor

    @property
    def rise_after(self) -> int:
        """The fewest values from which a phase other than baseline can be told."""
        return self.min_values


@dataclass(frozen=True)
class Segment:
    """A straight piece of the progress curve: values `first`..`last` (by count)."""

    first: int
    last: int
    first_step: int
    last_step: int
    start: float  # the line's value at its first value
    end: float  # ... and at its last
    slope_z: float  # its slope over the slope's standard error

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class Reading:
    """What the segments say at one step: the evidence behind the phase."""

    step: int
    values: int
    noise: float  # of one value
    segments: tuple[Segment, ...] = ()
    start: float = math.nan  # the level the stage started at
    level: float = math.nan  # the level now (the last line's end)
    best: float = math.nan  # the highest fitted level so far
    rise_z: float = 0.0  # best - start, in standard errors
    ceiling: float = math.inf
    entropy: float = math.nan  # now (the mean of its last values)
    entropy_start: float = math.nan
    entropy_peak: float = math.nan
    gate_step: int | None = None
    gate_watched: bool = False  # the phase-transition gate reads this metric
    spike_from: int | None = None  # the entropy is `melt` times its start since this step
    entropy_last: float = math.nan  # the last known entropy
    entropy_now: float = math.nan  # the median of its last three values
    phi: float = math.nan  # 1 - entropy / ln V now, where the vocabulary size V is known

    @property
    def rise(self) -> float:
        return self.best - self.start

    @property
    def done(self) -> float:
        """The share of the climb so far that the level holds now (1 at the best)."""
        return (self.level - self.start) / self.rise if self.rise > 0 else math.nan

    @property
    def to_ceiling(self) -> float:
        return self.ceiling - self.level

    def text(self, settings: PhaseSettings | None = None) -> str:
        """One line of evidence, in numbers."""
        st = settings or PhaseSettings()
        if self.values < st.min_values:
            return f"{self.values} values, too few to tell"
        parts = [f"level {self.level:.4g} (start {self.start:.4g}, best {self.best:.4g})",
                 f"noise {self.noise:.2g}", f"rise {self.rise_z:.1f} se"]
        if self.segments:
            last = self.segments[-1]
            parts.append(f"last segment from step {last.first_step}, slope {last.slope_z:+.1f} se")
        if self.rise > 0:
            parts.append(f"{self.done:.0%} of the climb held")
        if math.isfinite(self.ceiling):
            parts.append(f"{self.to_ceiling:.3g} to the ceiling {self.ceiling:g}")
        if math.isfinite(self.phi):
            parts.append(f"phi {self.phi:.3g}")
        if math.isfinite(self.entropy) and math.isfinite(self.entropy_start):
            parts.append(f"entropy {self.entropy:.3g} ({self.entropy / self.entropy_start:.0%}"
                         " of its start)")
        return " · ".join(parts)


@dataclass(frozen=True)
class Said:
    """A phase as the dashboard said it: where it began, when it was first said, and the
    step at which a later reading contradicted it (None while it stands)."""

    phase: Phase
    from_step: int
    seen_at: int
    corrected_at: int | None = None


# ------------------------------------------------------------------ the words


def verdict(r: Reading, before: Said | None, st: PhaseSettings) -> tuple[Phase, int]:
    """The phase a reading tells, and the step it is dated from. `before` is the phase
    said last (a fall after a climb keeps it)."""
    segs = r.segments
    first_step = segs[0].first_step if segs else r.step
    if r.values < st.min_values or not segs:
        return Phase.BASELINE, first_step
    if _gated(r) and (before is None or before.phase not in (Phase.CRYSTALLISATION,
                                                              Phase.CONVERGED)):
        return Phase.CRYSTALLISATION, r.gate_step  # the gate's step: one step for it
    climbing = _climbing(segs, st, r.noise, r.rise)
    moved = before is not None and before.phase not in (Phase.BASELINE, Phase.MELTING)
    # Once out of baseline, the rise must fall to half its bar to go back (no flicker).
    learned = (r.rise_z >= (st.rise_z / 2 if moved else st.rise_z)
               and r.rise >= st.rise_noise * r.noise)
    spiking = r.spike_from is not None and not moved
    # During the entropy's spike a climb is the transition once the entropy falls from
    # its peak (the reference table in docs/maths.md: 9.3 at the peak,
    # 4.1 in the transition).
    falling = not spiking or (math.isfinite(r.entropy_peak)
                              and r.entropy_now <= st.low_entropy * r.entropy_peak)
    if (not moved and r.spike_from is None and math.isfinite(r.entropy_last)
            and math.isfinite(r.entropy_start) and r.entropy_last >= st.melt * r.entropy_start):
        # one value of a spike: melting or an outlier, told by the next value
        return (before.phase, before.from_step) if before is not None else (
            Phase.BASELINE, first_step)
    if climbing[-1] and learned and r.level > r.start and falling and not _gated(r):
        k = len(segs) - 1
        while k > 0 and climbing[k - 1]:
            k -= 1
        return Phase.TRANSITION, segs[k].first_step  # from the climb's first segment
    if spiking and not (learned and falling and r.level > r.start):  # the reference's melting
        return Phase.MELTING, r.spike_from
    if not learned:
        return Phase.BASELINE, first_step
    if r.level < r.start + 0.5 * r.rise and before is not None:
        return before.phase, before.from_step  # a fall is not a phase: the flags say it
    return _stopped(r, before, st, climbing)


def _stopped(r: Reading, before: Said | None, st: PhaseSettings,
             climbing: list[bool]) -> tuple[Phase, int]:
    """The climb stopped: transition still (a stop not held yet, or the entropy not back
    after its spike), plateau, crystallisation or converged; dated where it began."""
    segs = r.segments
    # The flat part: the last segments that do not climb, at one level (no step between).
    k = len(segs) - 1
    while (k > 0 and not climbing[k - 1] and not _stepped(segs, k, r, st)
           and segs[k - 1].end >= r.start + 0.5 * r.rise):
        k -= 1
    flat_from = segs[k].first_step
    climb_values = max(1, segs[k].first - _climb_start(segs, k, r))
    held = segs[-1].last - segs[k].first + 1
    if held < st.min_values and not _gated(r):  # a stop is known once it held a while
        if before is not None and before.phase is Phase.TRANSITION:
            return before.phase, before.from_step
        return Phase.TRANSITION, segs[_climb_first(segs, k, r)].first_step
    melted = (math.isfinite(r.entropy_peak) and math.isfinite(r.entropy_start)
              and r.entropy_peak >= st.melt * r.entropy_start)
    if melted and r.entropy_now > r.entropy_start and not _gated(r):
        # After the entropy's spike the run is still reorganising until its entropy is back
        # under where it started (the reference table: 4.1 in the transition, 0.4 after it).
        since = before.from_step if before is not None and before.phase is Phase.TRANSITION \
            else segs[_climb_first(segs, k, r)].first_step
        return Phase.TRANSITION, since
    if not _coherent(r, st):
        # (Near the ceiling but short of the gate's bar, a stop was tried as a transition
        # "to the bar": a run that stays there would never end its climb. It is a plateau;
        # the evidence says how far the ceiling is.)
        return Phase.PLATEAU, flat_from
    if before is not None and before.phase is Phase.CONVERGED:
        return Phase.CONVERGED, before.from_step  # converged stays converged
    if before is not None and before.phase is Phase.CRYSTALLISATION:
        # Converged once it held, from crystallisation on, as long again as the climb took
        # (`hold` times): never dated before the crystallisation, the gate's included.
        due = _index_of(segs, before.from_step) + math.ceil(st.hold * climb_values)
        if segs[-1].last >= due and held >= st.min_values:
            return Phase.CONVERGED, _step_of(segs, due)
    # Crystallised where the flat part began, or where the gate fired (one step for it).
    return Phase.CRYSTALLISATION, r.gate_step if _gated(r) else flat_from


def _jump_z(segs: tuple[Segment, ...], k: int, noise: float) -> float:
    """The step from segment k-1's end to segment k's start, in standard errors."""
    if k == 0:
        return 0.0
    a, b = segs[k - 1], segs[k]
    se = noise * math.sqrt(4 / a.count + 4 / b.count)
    return (b.start - a.end) / se if se > 0 else 0.0


def _rise_z(segs: tuple[Segment, ...], noise: float) -> float:
    """How clearly the level rose above where the stage started, in standard errors: the
    largest of a segment's mean above the first segment's mean (means of many values are
    precise where a short segment's end is not); a single line: its own climb (its slope).
    (Counting every segment's own slope was tried: quiet runs' drifts read as climbs.)"""
    if not segs or not noise > 0:
        return 0.0
    first = segs[0]
    base = (first.start + first.end) / 2
    z = first.slope_z if len(segs) == 1 else 0.0
    for s in segs[1:]:
        se = noise * math.sqrt(1 / first.count + 1 / s.count)
        z = max(z, ((s.start + s.end) / 2 - base) / se)
    return z


def _stepped(segs: tuple[Segment, ...], k: int, r: Reading, st: PhaseSettings) -> bool:
    """A step between segments k-1 and k: `slope_z` standard errors and a tenth of the
    rise so far (smaller ones are the noise the light penalty cuts at)."""
    return (abs(_jump_z(segs, k, r.noise)) >= st.slope_z
            and abs(segs[k].start - segs[k - 1].end) >= 0.1 * r.rise)


def _climbing(segs: tuple[Segment, ...], st: PhaseSettings, noise: float,
              rise: float) -> list[bool]:
    """Which segments climb: a slope `slope_z` standard errors above zero that gains at
    least `slow` of the rise so far (the slow approach to a level a run ends on gains
    little: it is not a climb); or, while it holds fewer than `min_values` values, a jump
    up into it of `slope_z` standard errors and a tenth of the rise so far, into a segment
    that does not fall (a step up: it climbed, and whether it holds there is not known
    yet)."""
    out = []
    for k, s in enumerate(segs):
        gains = s.slope_z >= st.slope_z and s.end - s.start >= st.slow * rise
        jumped = (_jump_z(segs, k, noise) >= st.slope_z and s.count < st.min_values
                  and s.slope_z > -st.slope_z and k > 0
                  and s.start - segs[k - 1].end >= 0.1 * rise)
        out.append(gains or jumped)
    return out


def _near_ceiling(r: Reading, st: PhaseSettings) -> bool:
    """`near` of the way from the start to the ceiling, and at least `floor` of it."""
    room = r.ceiling - r.start
    return bool(math.isfinite(r.ceiling) and r.level >= st.floor * r.ceiling and room > 0
                and r.level - r.start >= st.near * room)


def _gated(r: Reading) -> bool:
    return r.gate_step is not None and r.gate_step <= r.step


def _climb_first(segs: tuple[Segment, ...], k: int, r: Reading) -> int:
    """The index of the first segment of the climb that ended before segment k."""
    j = k
    while j > 0 and segs[j - 1].start > r.start + 0.25 * r.rise:
        j -= 1
    return j


def _coherent(r: Reading, st: PhaseSettings) -> bool:
    if _gated(r):
        return True
    if r.gate_watched:  # the gate reads this metric: its bar is the ceiling's
        return False
    if math.isfinite(r.ceiling):  # the ceiling says it (token accuracy: the reference's 99%)
        return _near_ceiling(r, st)
    if math.isfinite(r.phi) and r.phi >= st.phi_high:  # the order parameter high
        return True
    if math.isfinite(r.entropy) and math.isfinite(r.entropy_start) and r.entropy_start > 0:
        return r.entropy <= st.low_entropy * r.entropy_start
    return False


def _climb_start(segs: tuple[Segment, ...], k: int, r: Reading) -> int:
    """The first value of the climb that ended before segment k: the first of the segments
    before k that no longer sit near the start level (a quarter of the rise above it)."""
    return segs[_climb_first(segs, k, r)].first


def _index_of(segs: tuple[Segment, ...], step: int) -> int:
    """The value index at `step` (the first value at or after it)."""
    for s in segs:
        if s.first_step <= step <= s.last_step or step < s.first_step:
            if step <= s.first_step:
                return s.first
            frac = (step - s.first_step) / max(1, s.last_step - s.first_step)
            return s.first + math.ceil(frac * (s.count - 1))
    return segs[-1].last


def _step_of(segs: tuple[Segment, ...], index: int) -> int:
    for s in segs:
        if s.first <= index <= s.last:
            frac = (index - s.first) / max(1, s.count - 1)
            return round(s.first_step + frac * (s.last_step - s.first_step))
    return segs[-1].last_step


# ----------------------------------------------------------- the segmentation


class _Buckets:
    """Sufficient statistics of a least-squares line over buckets of `size` values (a
    power of two, doubled when the buckets would pass `cap`): columns count, sum i, sum x,
    sum i*i, sum i*x, sum x*x; and each bucket's first and last step."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 1
        self.stats = np.zeros((0, 6))
        self.first_step = np.zeros(0, dtype=np.int64)
        self.last_step = np.zeros(0, dtype=np.int64)
        self.n = 0

    def add(self, x: np.ndarray, steps: np.ndarray) -> None:
        while x.size:
            if self.stats.shape[0] and self.stats[-1, 0] < self.size:
                take = int(min(self.size - self.stats[-1, 0], x.size))
                self.stats[-1] += _stats(x[:take], self.n)
                self.last_step[-1] = steps[take - 1]
            else:
                take = min(x.size, self.size * (self.cap - self.stats.shape[0] + 1))
                take = max(take, 1)
                cuts = np.arange(0, take, self.size)
                rows = _stats_grouped(x[:take], self.n, cuts)
                self.stats = np.vstack([self.stats, rows])
                self.first_step = np.concatenate([self.first_step, steps[cuts]])
                ends = np.minimum(cuts + self.size, take) - 1
                self.last_step = np.concatenate([self.last_step, steps[ends]])
            self.n += take
            x, steps = x[take:], steps[take:]
            while self.stats.shape[0] > self.cap:
                self._merge()

    def _merge(self) -> None:
        m = self.stats.shape[0]
        even = m - m % 2
        pairs = self.stats[:even].reshape(-1, 2, 6).sum(axis=1)
        first = self.first_step[:even:2]
        last = self.last_step[1:even:2]
        if m % 2:
            pairs = np.vstack([pairs, self.stats[-1:]])
            first = np.concatenate([first, self.first_step[-1:]])
            last = np.concatenate([last, self.last_step[-1:]])
        self.stats, self.first_step, self.last_step = pairs, first, last
        self.size *= 2


def _stats(x: np.ndarray, offset: int) -> np.ndarray:
    i = np.arange(offset, offset + x.size, dtype=np.float64)
    return np.array([x.size, i.sum(), x.sum(), (i * i).sum(), (i * x).sum(), (x * x).sum()])


def _stats_grouped(x: np.ndarray, offset: int, cuts: np.ndarray) -> np.ndarray:
    i = np.arange(offset, offset + x.size, dtype=np.float64)
    cols = np.stack([np.ones_like(x), i, x, i * i, i * x, x * x], axis=1)
    return np.add.reduceat(cols, cuts, axis=0)


def segment(stats: np.ndarray, first_step: np.ndarray, last_step: np.ndarray, noise: float,
            st: PhaseSettings) -> tuple[Segment, ...]:
    """The best segmentation of the buckets into at most `max_segments` lines (see the
    module docstring), with at least 3 values in each."""
    m = stats.shape[0]
    prefix = np.vstack([np.zeros((1, 6)), np.cumsum(stats, axis=0)])
    d = prefix[None, :, :] - prefix[:, None, :]  # d[a, b] = sums over buckets a..b-1
    c, si, sx, sii, six, sxx = (d[..., k] for k in range(6))
    with np.errstate(divide="ignore", invalid="ignore"):
        var_i = sii - si * si / c
        cov = six - si * sx / c
        sse = sxx - sx * sx / c - np.where(var_i > 0, cov * cov / var_i, 0.0)
    a_idx, b_idx = np.indices((m + 1, m + 1))
    cost = np.where((b_idx > a_idx) & (c >= 3), np.maximum(sse, 0.0), np.inf)
    var = max(noise * noise, 1e-300)
    n = float(prefix[-1, 0])
    beta = st.penalty * math.log(max(n, 3.0))
    cost = cost / var
    best = cost[0]  # one segment: buckets 0..b-1
    choices = [np.zeros(m + 1, dtype=np.int64)]
    totals = [best[m] + beta]
    for _k in range(1, st.max_segments):
        cand = best[:, None] + cost
        arg = np.argmin(cand, axis=0)
        best = cand[arg, np.arange(m + 1)]
        choices.append(arg)
        totals.append(best[m] + beta * (_k + 1))
    k = int(np.argmin(totals))
    bounds = [m]
    for level in range(k, 0, -1):
        bounds.append(int(choices[level][bounds[-1]]))
    bounds.append(0)
    bounds = sorted(set(bounds))
    out = []
    for a, b in itertools.pairwise(bounds):
        cnt, s_i, s_x, s_ii, s_ix, _ = prefix[b] - prefix[a]
        var_i = s_ii - s_i * s_i / cnt
        slope = (s_ix - s_i * s_x / cnt) / var_i if var_i > 0 else 0.0
        mean_i, mean_x = s_i / cnt, s_x / cnt
        first = round(s_i / cnt - (cnt - 1) / 2)
        last = first + int(cnt) - 1
        se = noise / math.sqrt(var_i) if var_i > 0 else math.inf
        out.append(Segment(
            first=first, last=last, first_step=int(first_step[a]),
            last_step=int(last_step[b - 1]),
            start=float(mean_x + slope * (first - mean_i)),
            end=float(mean_x + slope * (last - mean_i)),
            slope_z=float(slope / se) if se > 0 and math.isfinite(se) else (
                math.copysign(math.inf, slope) if slope else 0.0)))
    return tuple(out)


# ------------------------------------------------------------- the classifier


class PhaseClassifier:
    """Labels each logged step with a Phase, online. See the module docstring.

    `PhaseClassifier(settings)` or `PhaseClassifier(penalty=4.0, ...)`: any field of
    `PhaseSettings` by name, the others at their defaults; `ceiling`: the progress
    metric's best possible value (token accuracy: 1.0), if it has one."""

    defaults = PhaseSettings()  # the settings of a classifier made without any

    def __init__(self, settings: PhaseSettings | None = None, *, ceiling: float = math.inf,
                 **overrides: float) -> None:
        self.settings = replace(settings or self.defaults, **overrides)
        self.ceiling = float(ceiling)
        self._buckets = _Buckets(self.settings.buckets)
        self._by_entropy: bool | None = None  # progress is minus the entropy (no metric)
        # the noise of one value: the mean |second difference| of the known values
        self._d2_count = 0
        self._d2 = np.zeros(0)  # the last `_D2_KEPT` |second differences|
        self._tail = np.zeros(0)  # the last two known values
        # entropy: its first values (their median is its start), its last three (their
        # median is a value with one outlier left out), the highest such median, and the
        # mean of its last `_E_LEVEL` values
        self._e_first: list[float] = []
        self._e_last = np.zeros(0)
        self._e_steps = np.zeros(0, dtype=np.int64)
        self.entropy_start = math.nan
        self.entropy_peak = math.nan
        self.entropy_level = math.nan
        self.spike_from: int | None = None  # the step the entropy's spike began
        self._next_read = 1
        self._pending: Phase | None = None  # a new phase told by one reading so far
        self._gate_unread = False  # the gate fired at a step not read yet
        self.reading = Reading(step=0, values=0, noise=math.nan)
        self.said: list[Said] = []
        self.gate_step: int | None = None
        #: The phase-transition gate reads this metric: crystallisation is the gate's (the
        #: store sets it; the gate's bar, token accuracy >= 0.99 held, is the reference's).
        self.gate_watched = False
        self.vocab_size: int | None = None  # known: phi = 1 - entropy / ln V (the store sets it)
        self.last_step = 0

    # ---------------------------------------------------------------- state

    @property
    def phase(self) -> Phase:
        return self._standing[-1].phase if self._standing else Phase.BASELINE

    @property
    def _standing(self) -> list[Said]:
        return [s for s in self.said if s.corrected_at is None]

    @property
    def timeline(self) -> list[tuple[Phase, int]]:
        """The story as it reads now: (phase, the step it began), in order."""
        return [(s.phase, s.from_step) for s in self._standing]

    @property
    def since_step(self) -> int | None:
        standing = self._standing
        return standing[-1].from_step if standing else None

    @property
    def seen_at(self) -> int | None:
        standing = self._standing
        return standing[-1].seen_at if standing else None

    @property
    def values(self) -> int:
        return self._buckets.n

    def evidence(self) -> str:
        return self.reading.text(self.settings)

    def stage_ended(self) -> None:
        """The run moved on to another progress metric (SFT to GRPO), or its training
        ended: the segments are read once more with every value in."""
        if self._buckets.n:
            self._read(self.last_step, final=True)

    def gate_fired(self, step: int) -> None:
        """The phase-transition gate fired at `step` on this classifier's progress metric:
        crystallisation (or converged) is dated from it, never before; the segments are read
        again at once."""
        if self.gate_step is None:
            self.gate_step = int(step)
            if self._buckets.n and step <= self.last_step:
                self._read(self.last_step, final=True)
            else:  # read at the value of the gate's step: it is the crystallisation's
                self._gate_unread = True

    # --------------------------------------------------------------- update

    def update(self, step: int, accuracy: float | None, entropy: float | None) -> Phase:
        """Feed one step (either metric may be missing); returns its phase."""
        a = math.nan if accuracy is None else accuracy
        e = math.nan if entropy is None else entropy
        self.update_many(np.array([step]), np.array([a], dtype=np.float64),
                         np.array([e], dtype=np.float64))
        return self.phase

    def update_many(self, steps, accuracy, entropy) -> np.ndarray:
        """Feed many steps; returns the phase said at each step (indices into PHASES)."""
        s = np.asarray(steps)
        acc = np.asarray(accuracy, dtype=np.float64)
        ent = np.asarray(entropy, dtype=np.float64)
        if s.ndim != 1 or acc.shape != s.shape or ent.shape != s.shape:
            raise ValueError("steps, accuracy and entropy must be 1-D of the same length")
        n = s.size
        labels = np.zeros(n, dtype=np.int8)
        if n == 0:
            return labels
        s = s.astype(np.int64)
        if self._by_entropy is not False and np.isfinite(acc).any():
            first_acc = int(np.argmax(np.isfinite(acc)))
            if self._by_entropy is None and not np.isfinite(ent[:first_acc]).any():
                self._by_entropy = False  # the first value is the progress metric's
            elif first_acc:  # read minus the entropy until the progress metric comes
                head = self.update_many(s[:first_acc], acc[:first_acc], ent[:first_acc])
                return np.concatenate([head, self.update_many(s[first_acc:], acc[first_acc:],
                                                              ent[first_acc:])])
            else:  # it comes now: its values are read from here on, from a clean slate
                self._restart_progress()
        elif self._by_entropy is None and np.isfinite(ent).any():
            self._by_entropy = True
        self.last_step = int(s[-1])
        progress = -ent if self._by_entropy else acc
        known = np.isfinite(progress)
        rows = np.flatnonzero(known)  # batch rows of the known values, in order
        pos = 0  # rows before `pos` are fed
        done = 0  # known values fed
        while done < rows.size:
            need = self._next_read - self._buckets.n  # values until the next reading
            take = min(need, rows.size - done) if need > 0 else 1
            if self._gate_unread:  # a reading at the gate's step, however rows come
                at = np.flatnonzero(s[rows[done:done + take]] >= self.gate_step)
                take = int(at[0]) + 1 if at.size else take
            upto = int(rows[done + take - 1])
            self._feed_entropy(ent[pos:upto + 1], s[pos:upto + 1])
            self._feed(progress[rows[done:done + take]], s[rows[done:done + take]])
            labels[pos:upto + 1] = self.phase.index
            pos, done = upto + 1, done + take
            gate_now = self._gate_unread and s[upto] >= self.gate_step
            if self._buckets.n >= self._next_read or gate_now:
                self._gate_unread = self._gate_unread and not gate_now
                self._read(int(s[upto]), final=gate_now)
                labels[upto] = self.phase.index
                self._schedule()
        if pos < n:
            self._feed_entropy(ent[pos:], s[pos:])
            labels[pos:] = self.phase.index
        return labels

    def _restart_progress(self) -> None:
        """The progress metric came after a stretch read from minus the entropy: its
        values are read from a clean slate (segments, noise, schedule); what was said
        stands."""
        self._by_entropy = False
        self._buckets = _Buckets(self.settings.buckets)
        self._d2_count = 0
        self._d2 = np.zeros(0)
        self._tail = np.zeros(0)
        self._next_read = 1

    # ------------------------------------------------------------ internals

    def _schedule(self) -> None:
        st, n = self.settings, self._buckets.n
        self._next_read = n + 1 if n < st.every_value else max(n + 1, int(n * st.growth))

    def _feed(self, x: np.ndarray, steps: np.ndarray) -> None:
        if x.size == 0:
            return
        joined = np.concatenate([self._tail, x])
        if joined.size >= 3:
            d2 = joined[2:] - 2 * joined[1:-1] + joined[:-2]
            self._d2 = np.concatenate([self._d2, np.abs(d2)])[-_D2_KEPT:]
            self._d2_count += d2.size
        self._tail = joined[-2:]
        self._buckets.add(x, steps)

    def _feed_entropy(self, e: np.ndarray, steps: np.ndarray) -> None:
        known = np.isfinite(e)
        e, steps = e[known], steps[known]
        if e.size == 0:
            return
        need = self.settings.min_values - len(self._e_first)
        if need > 0:
            self._e_first.extend(e[:need].tolist())
            self.entropy_start = float(np.median(self._e_first))
        joined = np.concatenate([self._e_last, e])
        joined_steps = np.concatenate([self._e_steps, steps])
        if joined.size >= 3:
            med = np.median(np.lib.stride_tricks.sliding_window_view(joined, 3), axis=1)
            peak = float(med.max())
            self.entropy_peak = peak if math.isnan(self.entropy_peak) else max(
                self.entropy_peak, peak)
        # The spike: two values in a row at `melt` times the start (one is an outlier),
        # until two values in a row under it; read pair by pair as if one value came at a
        # time, so that the batches' cuts change nothing.
        if math.isfinite(self.entropy_start) and joined.size >= 2:
            high = joined >= self.settings.melt * self.entropy_start
            first = max(joined.size - e.size - 1, 0)  # the first pair holding a new value
            highs = np.flatnonzero(high[1:] & high[:-1])
            lows = np.flatnonzero(~high[1:] & ~high[:-1])
            highs, lows = highs[highs >= first], lows[lows >= first]
            if lows.size:  # the spike (if any) ended at the last low pair
                self.spike_from = None
                highs = highs[highs > lows[-1]]
            if self.spike_from is None and highs.size:
                self.spike_from = int(joined_steps[highs[0]])
        self._e_last = joined[-_E_LEVEL:]
        self._e_steps = joined_steps[-_E_LEVEL:]
        self.entropy_level = float(self._e_last.mean())

    def _noise(self) -> float:
        """The noise of one value from the mean |second difference| of the last `_D2_KEPT`
        values (a steady climb adds nothing to them), leaving out their largest tenth (a
        step of the curve moves a few of them), rescaled to the whole mean of Gaussian
        noise. Their median was tried: it reads the noise of quantised rewards (binomial
        means) too low, and pure noise climbed."""
        if self._d2_count == 0:
            return math.nan
        d2 = self._d2
        keep = d2.size - d2.size // 10
        low = np.partition(d2, keep - 1)[:keep] if keep < d2.size else d2
        sigma = SQRT_PI_12 * float(low.mean()) * (_TRIM_SCALE if keep < d2.size else 1.0)
        if sigma == 0.0:
            return 1e-9
        return sigma * (1 + 1 / math.sqrt(self._d2_count))  # widened while few are known

    def _read(self, step: int, final: bool = False) -> None:
        b, st = self._buckets, self.settings
        noise = self._noise()
        segs: tuple[Segment, ...] = ()
        if b.n >= st.min_values and math.isfinite(noise):
            segs = segment(b.stats, b.first_step, b.last_step, noise, st)
        start = segs[0].start if segs else math.nan
        best = max(max(s.start, s.end) for s in segs) if segs else math.nan
        rise_z = _rise_z(segs, noise)
        self.reading = Reading(
            step=step, values=b.n, noise=noise, segments=segs, start=start,
            level=segs[-1].end if segs else math.nan, best=best, rise_z=rise_z,
            ceiling=self.ceiling if not self._by_entropy else math.inf,
            entropy=self.entropy_level, entropy_start=self.entropy_start,
            entropy_peak=self.entropy_peak, gate_step=self.gate_step,
            gate_watched=self.gate_watched, spike_from=self.spike_from,
            entropy_last=float(self._e_last[-1]) if self._e_last.size else math.nan,
            entropy_now=float(np.median(self._e_last[-3:])) if self._e_last.size else math.nan,
            phi=1.0 - self.entropy_level / math.log(self.vocab_size)
            if self.vocab_size and self.vocab_size > 1 else math.nan)
        before = self._standing[-1] if self._standing else None
        phase, since = verdict(self.reading, before, st)
        # A step back (to baseline or melting, or a climb said to resume) is said once two
        # readings in a row tell it: one reading can be the noise of the last values. The
        # end of a stage and the gate say it at once.
        if (before is not None and phase is not before.phase and not final
                and (_back(before.phase, phase) or phase in _STOPS)
                and self._pending is not phase):
            self._pending = phase
            return
        self._pending = None
        self._say(phase, since, step)

    def _say(self, phase: Phase, since: int, step: int) -> None:
        """Say `phase` from `since` at `step`. What another phase was said to be from `since`
        on reads wrong now: corrected. The phase standing already is not said again, except
        a stop (plateau, crystallisation) whose flat part now begins after the step it was
        said at: the curve climbed on past it, so the story is corrected to a transition
        there and the stop after it."""
        for s in self._standing:
            if s.from_step >= since and s.phase is not phase:
                self._correct(s, step)
        standing = self._standing
        if not standing or standing[-1].phase is not phase:
            self.said.append(Said(phase, since, step))
            return
        last = standing[-1]
        if since != last.from_step and since <= last.seen_at and phase is not Phase.BASELINE \
                and (len(standing) < 2 or standing[-2].from_step < since):
            # The segments place its start elsewhere now, still before it was seen: the
            # same phase, re-dated (it keeps the step it was seen at).
            self._correct(last, step)
            self.said.append(Said(phase, since, last.seen_at))
            return
        if phase in (Phase.PLATEAU, Phase.CRYSTALLISATION) and since > last.seen_at:
            self._correct(last, step)
            if len(standing) < 2 or standing[-2].phase is not Phase.TRANSITION:
                self.said.append(Said(Phase.TRANSITION, last.from_step, step))
            self.said.append(Said(phase, since, step))

    def _correct(self, s: Said, step: int) -> None:
        i = self.said.index(s)
        self.said[i] = replace(s, corrected_at=step)


_E_LEVEL = 5  # entropy values in its level now
_D2_KEPT = 4096  # second differences the noise is read from
#: mean over trimmed mean of |Gaussian| values with the largest tenth left out
_TRIM_SCALE = 0.7979 / 0.6573
_ORDER = {Phase.BASELINE: 0, Phase.MELTING: 1, Phase.TRANSITION: 2, Phase.PLATEAU: 3,
          Phase.CRYSTALLISATION: 3, Phase.CONVERGED: 4}


_STOPS = (Phase.PLATEAU, Phase.CRYSTALLISATION)


def _back(before: Phase, now: Phase) -> bool:
    """`now` reads an earlier part of a run's story than `before` did."""
    return _ORDER[now] < _ORDER[before]


def seen_enough(c: PhaseClassifier) -> bool:
    """`c` saw enough to tell any phase but baseline (or it left baseline already)."""
    return c.phase is not Phase.BASELINE or c.values >= c.settings.rise_after


__all__ = ["ACCURACY_CEILING", "PHASES", "Phase", "PhaseClassifier", "PhaseSettings",
           "Reading", "Said", "Segment", "seen_enough", "segment", "verdict"]

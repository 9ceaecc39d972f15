"""Online phase classifier: baseline -> melting -> transition -> crystallisation -> converged.

It reads a progress metric A (token accuracy, or the task reward of an RL run)
and the entropy E, each against its own history: nothing assumes A lies in
[0, 1] (a GRPO reward from -1 to 3 gets the same phases as the same story in
[0, 1]; only a metric given a `ceiling`, token accuracy's 1.0, is read against
it) and E is only compared with itself. Every label uses only the past;
missing values are carried forward. The rules were fitted to, and are checked
on, a corpus of real training histories (tests/data/real_runs) and the spec's
phase table (README, "The phases of a run", says them in words).

Calibration, per metric, from the run itself:

- a0, e0: the medians of the first `baseline_points` known values of A and E;
  nothing is decided on a metric before it has that many values (for A, before
  the current value; A's rules out of baseline wait for twice as many).
- sigma: the noise of single values of A, sqrt(pi/12) times the mean absolute
  second difference x[i] - 2 x[i-1] + x[i-2] of its known values (a steady climb
  adds nothing to it; a value logged again unchanged does not count), widened
  by 1 + 1/sqrt(count) while few are known; read until the transition begins,
  then frozen. The noise of log E from first differences of its calm values
  (E < 1.3 * e0) while in baseline.
- peak: the highest entropy so far, each value first replaced by the median of
  the last three known ones (one noisy value is not a peak).
- level of A: the mean of its last W known values, W = window_fraction of the
  known values so far (2 to 2048); running sums of the first 2048 values give
  the level of the first quarter of the run.

Phases (constants are `PhaseSettings` fields):

- MELTING (from baseline): E >= melt_ratio * e0 on two known values in a row
  (the one before >= sqrt(melt_ratio) * e0), or on one if A jumped with it or A
  has no baseline yet: one high value is an outlier, not a phase. A run that melted
  reads the rest of its phases from the entropy ("spike mode"):
  - TRANSITION: E <= transition_fall * peak, and A rose clearly above its mean
    during melting (by more than guard_z * sigma); a run without A needs log E
    clearly below its level during melting instead;
  - CRYSTALLISATION: E <= crystal_fall * peak, with A near its best
    (A >= a0 + level * (best - a0)) if A is logged;
  - CONVERGED: E <= converged_ratio * e0 and A near its best; from
    crystallisation also log E clearly below its crystallisation level.
  "Clearly below a level": by more than (fall_z + sqrt(2 ln n)) * sqrt(1 + 1/n)
  noise units of log E, n the values the level is the mean of.
- Without a spike (GRPO, or an SFT run whose entropy only drifts), from A, while
  E is not on its way to a spike (E < sqrt(melt_ratio) * e0):
  - TRANSITION: two known values in a row rise_z noise units above a0; or the
    level (of at least 3 values) level_z standard errors above a0; or the level
    of the last quarter of the values (climb_fraction) level_z standard errors,
    and one noise unit, above the level of the first quarter (a slow GRPO climb).
  - CRYSTALLISATION: the climb is over. The level is near its best level, and
    over windows of W values, W = climb_fraction of the values since the climb
    began (its last calm value, A <= a0 + sigma), at least 3 and the level's
    window: the last window is not above the one before by stop_z standard
    errors of the difference, or gained less than slow_fraction of the climb's
    average gain per W values; both windows inside the climb, and W values
    enough to see the climb: its average gain per W values by stop_z standard
    errors, or its rise so far divided by 1 + r by seen_z (the end of a small
    climb of a noisy reward, 2 or 3 noise units, is seen before hundreds of
    values). A metric with a `ceiling` (token accuracy: 1.0; the store and the
    training callback pass it) that stops far below it has most of its room
    left: W is at least 3 * (1 + headroom * r), r = (ceiling - level) /
    (level - a0) up to 4, the room left in units of the rise so far; and the
    level of the last window is at least `share` (40%) of the ceiling: token
    accuracy under 0.4 gets most tokens wrong, its task mostly still to learn,
    and a pause there is a pause (tiny SFT runs pause at 0.2 to 0.3 and climb on
    for hundreds of steps; a pretrained model starts above it). A reward has no
    ceiling (r = 0).
  - The end of a stage (`stage_ended`: the store calls it when the run moves on
    to another progress metric, SFT to GRPO, and when the run's end-of-training
    summary is read after its rows): a stage that ends in a transition
    read from the climb of A (no spike), with the level of the last quarter of
    the climb (climb_fraction of its values) near its best level, ends in
    crystallisation at its last step: its training stopped, so its climb is
    over, however far below the ceiling it was.
  - CONVERGED: held near its best for `hold` times as long as the climb took
    (last calm value to crystallisation) and flat over windows of
    settle_fraction of all the values (as above, without the "slowed" case); or
    the entropy fell to converged_ratio * e0 as above.
  - Back to TRANSITION from crystallisation or converged: the level clearly above
    its level when crystallisation began (by resume_z standard errors and by
    resume_fraction of the rise then): the climb resumed.
- The phase-transition gate: `gate_fired(step)` (the store calls it for the
  stage whose progress metric the gate reads) makes every step from `step` on
  crystallisation or later; a converged run after a spike, or past the gate,
  stays converged.

What it cannot know. Online, a pause in a climb looks like its end
(crystallisation; it returns to transition when the climb resumes), unless it
is short and far below the ceiling, or the metric is under `share` of its
ceiling (then a real end there is a transition until the stage or the training
ends).
A climb of a few noise units is seen late, its end later. Without the entropy,
a small early rise of A that holds is a transition. A run without A reads every
phase from the entropy spike, or stays in baseline; with very noisy entropy (8%
a step) and no A, its transition comes up to a few steps late rather than early.

`update` is `update_many` on one step, and `update_many` gives the same labels
and state however the steps are cut into batches (O(n) numpy per batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from .constants import SQRT_PI_2, SQRT_PI_12, SUM_ROUNDING


class Phase(str, Enum):
    BASELINE = "baseline"
    MELTING = "melting"
    TRANSITION = "transition"
    CRYSTALLISATION = "crystallisation"
    CONVERGED = "converged"

    @property
    def index(self) -> int:
        return PHASES.index(self)


#: Phases in order; `update_many` returns indices into this tuple.
PHASES: tuple[Phase, ...] = tuple(Phase)

_TINY = 1e-12
_BASE, _MELT, _TRANS, _CRYST, _CONV = range(5)
_TAIL = 4096  # running sums kept: the longest windows compared are half of it
_MIN_CLIMB = 3  # the fewest values a climb's windows average
_CHUNK = 4096  # steps whose conditions are computed at once (doubling)
_HEAD = 2048  # running sums of the first known values of A kept (their level)
_CALM = 1.3  # entropy under this times e0 is calm (counts for its noise)
_MELT_MARGIN = 1.0  # a long spike gives its noise many chances: a wider margin
_HEADROOM_CAP = 4.0  # headroom counts up to this many times the rise so far
_SKIP = 2  # values at the start of crystallisation left out of its entropy level


def _sigma(total, count, scale=SQRT_PI_2):
    """Noise of single values from the sum and count of absolute successive
    differences (first differences: `scale` SQRT_PI_2; second: SQRT_PI_12),
    widened while few are known (scalars or arrays)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        n = np.maximum(count, 1)
        return scale * (total / n) * (1.0 + 1.0 / np.sqrt(n))


def _med3(a, b, c):
    """Median of three (elementwise), exactly one of the inputs."""
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


@dataclass(frozen=True)
class PhaseSettings:
    """The classifier's constants (see the module docstring for what each one does)."""

    baseline_points: int = 5
    melt_ratio: float = 2.5
    transition_fall: float = 0.72
    crystal_fall: float = 0.23
    converged_ratio: float = 0.28
    rise_z: float = 5.0
    guard_z: float = 3.0
    fall_z: float = 0.75
    level: float = 0.8
    stop_z: float = 2.0
    window_fraction: float = 0.05
    hold: float = 2.0
    level_z: float = 3.8
    climb_fraction: float = 0.25
    settle_fraction: float = 0.25
    resume_z: float = 4.0
    resume_fraction: float = 0.25
    slow_fraction: float = 0.25
    headroom: float = 0.25
    seen_z: float = 3.0
    share: float = 0.4

    def __post_init__(self) -> None:
        if self.baseline_points < 2:
            raise ValueError("baseline_points must be at least 2")
        for name in self.__dataclass_fields__:
            kind = int if name == "baseline_points" else float
            object.__setattr__(self, name, kind(getattr(self, name)))

    @property
    def rise_after(self) -> int:
        """Values of A known before a rise can be called (twice `baseline_points`): the
        fewest from which any phase but baseline is told from A."""
        return 2 * self.baseline_points

    def window(self, n: np.ndarray) -> np.ndarray:
        """Values averaged for the level of A: a fixed share of the n known so far."""
        w = np.ceil(self.window_fraction * n)
        return np.clip(w, 2, _TAIL // 2).astype(np.int64)


#: The ceiling of token accuracy (a fraction); a reward has none (`math.inf`).
ACCURACY_CEILING = 1.0


class PhaseClassifier:
    """Labels each logged step with a Phase, online. See the module docstring.

    `PhaseClassifier(settings)` or `PhaseClassifier(melt_ratio=3.0, ...)`: any field of
    `PhaseSettings` by name, the others at their defaults."""

    def __init__(self, settings: PhaseSettings | None = None, *, ceiling: float = math.inf,
                 **overrides: float) -> None:
        self.settings = replace(settings or PhaseSettings(), **overrides)
        self.ceiling = float(ceiling)  # the progress metric's best possible value, if any
        # Carried values and calibration.
        self.accuracy = math.nan  # last known A
        self.entropy = math.nan  # last known E
        self._acc_prev = math.nan  # the known A before the last one
        self._ent_prev = (math.nan, math.nan)  # the two known E before the last one
        self._acc_base: list[float] = []
        self._ent_base: list[float] = []
        self.acc_baseline = math.nan
        self.entropy_baseline = math.nan
        self.acc_count = 0
        self.ent_count = 0
        self.best_accuracy = math.nan
        self.peak_entropy = math.nan
        self._dsum = 0.0  # sum of |successive differences| of A (until the transition)
        self._dcount = 0
        self._ldsum = 0.0  # the same for log E (while in baseline)
        self._ldcount = 0
        # Per-phase state.
        self._index = 0
        self.timeline: list[tuple[Phase, int]] = []
        self.melted = False
        self._ref_sum = 0.0  # A during melting (the transition guard's reference)
        self._ref_count = 0
        self._lref_sum = 0.0  # log E during melting (the guard when A is not logged)
        self._lref_count = 0
        self._log_sigma_m = math.nan  # noise of log E, frozen when baseline ended
        self._cref_sum = 0.0  # log E during crystallisation (the convergence guard),
        self._cref_count = 0  # leaving out its first _SKIP values (the end of the fall)
        self._cref_seen = 0
        self._t_cryst: float = math.nan
        self._t_calm: float = math.nan  # last step A was within its noise of a0
        self._t_start: float = math.nan  # where the climb began (the last calm step)
        # running sums of known A: the last _TAIL + 1, and those of the first _HEAD known A
        # (float64 arrays: a classifier holds 72 KB after a long run, with them as lists of
        # Python floats 215 KB; the fleet holds one per run and stage)
        self._prefix: np.ndarray = np.zeros(1)
        self._head: np.ndarray = np.zeros(1)
        self._best_level = math.nan  # the highest level of A since the transition began
        self._sigma_t = math.nan  # sigma frozen when the transition began
        self._c_trans = 0  # known values of A when the climb began (its last calm one)
        self._n_calm = math.nan  # known values of A at its last calm step
        self._cryst_level = math.nan  # the best level of A when crystallisation began
        self.gate_step = math.nan  # the phase-transition gate fired here (see gate_fired)
        self.last_step = 0  # the last step fed

    # ---------------------------------------------------------------- state

    @property
    def phase(self) -> Phase:
        return PHASES[self._index]

    @property
    def since_step(self) -> int | None:
        return self.timeline[-1][1] if self.timeline else None

    def stage_ended(self) -> None:
        """The run moved on to another progress metric (SFT to GRPO), or its training
        ended: this metric's climb ended with its stage. See `_end_of_stage`."""
        if _end_of_stage(self):
            self._index = _CRYST
            self._start_cref(math.nan)  # as on entering it (the stage's entropy is in)
            self._t_cryst, self._cryst_level = float(self.last_step), self._best_level
            self.timeline.append((Phase.CRYSTALLISATION, self.last_step))

    def gate_fired(self, step: int) -> None:
        """The phase-transition gate fired at `step` (on this classifier's progress
        metric): from that step on the phase is crystallisation or later. Call it
        before feeding that step."""
        if math.isnan(self.gate_step):
            self.gate_step = float(step)

    # --------------------------------------------------------------- update

    def update(self, step: int, accuracy: float | None, entropy: float | None) -> Phase:
        """Feed one step (either metric may be missing); returns its phase."""
        a = math.nan if accuracy is None else accuracy
        e = math.nan if entropy is None else entropy
        self.update_many(np.array([step]), np.array([a], dtype=np.float64),
                         np.array([e], dtype=np.float64))
        return self.phase

    def update_many(self, steps, accuracy, entropy) -> np.ndarray:
        """Feed many steps; returns each step's phase index (into PHASES) as int8."""
        s = np.asarray(steps)
        acc = np.asarray(accuracy, dtype=np.float64)
        ent = np.asarray(entropy, dtype=np.float64)
        if s.ndim != 1 or acc.shape != s.shape or ent.shape != s.shape:
            raise ValueError("steps, accuracy and entropy must be 1-D of the same length")
        n = s.size
        if n == 0:
            return np.zeros(0, dtype=np.int8)
        if not self.timeline:
            self.timeline.append((PHASES[0], int(s[0])))
        t, self.last_step = s.astype(np.float64), int(s[-1])
        f = _Features(self, t, acc, ent)
        labels = np.empty(n, dtype=np.int8)
        pos, chunk = 0, _CHUNK
        while pos < n:
            if self._index == _CONV and (self.melted or t[pos] >= self.gate_step):
                labels[pos:] = _CONV  # final: nothing moves a converged run back
                break
            # Conditions over the next `chunk` steps only, doubling while nothing happens:
            # a long run with many phase changes stays O(n).
            end = f.end = min(n, pos + chunk)
            target = self._targets(f, t, pos)
            gated = t[pos:end] >= self.gate_step
            target = np.where(gated, np.maximum(target, _CRYST), target)
            back = _resumed(self, f, pos) & ~gated
            hit = np.flatnonzero((target > self._index) | back)
            if hit.size == 0:
                labels[pos:end] = self._index
                self._carry_segment(f, t, pos, end)
                pos, chunk = end, 2 * chunk
                continue
            j = pos + int(hit[0])
            labels[pos:j] = self._index
            self._carry_segment(f, t, pos, j)  # state through j - 1, in the old phase
            up = int(target[hit[0]])
            self._enter(up if up > self._index else _TRANS, f, t, j, s)
            labels[j] = self._index
            pos, chunk = j + 1, _CHUNK
        f.finish(self)
        return labels

    # ------------------------------------------------------------ internals

    def _targets(self, f: _Features, t: np.ndarray, pos: int) -> np.ndarray:
        """For steps pos.., the latest phase whose condition holds (0 if none)."""
        st = self.settings
        sl = slice(pos, f.end)
        a, r = f.a[sl], f.r[sl]
        acc_seen = f.acc_cal[sl]  # A known and calibrated
        ent_ok = f.ent_cal[sl]
        if self._index == _BASE:
            with np.errstate(invalid="ignore"):
                spiking = ent_ok & (r >= st.melt_ratio)
                # one value is not a spike: the one before was up too, or A jumped with it
                before = f.e_prev[sl] >= math.sqrt(st.melt_ratio) * f.e0[sl]
                jump = f.acc_known[sl] & (
                    (f.a[sl] - f.a_prev[sl] > 2 * math.sqrt(2) * f.sigma_before[sl])
                    | (f.a[sl] - f.a0[sl] > 2 * f.sigma_before[sl]))
            spiking &= before | jump | ~f.acc_ready[sl]
            with np.errstate(invalid="ignore"):
                rising = ent_ok & (r >= math.sqrt(st.melt_ratio))  # on its way to a spike
            return _from_baseline(self, f, pos, spiking, rising)
        best = f.best[sl]
        with np.errstate(invalid="ignore"):
            near_best = ~acc_seen | (a >= f.a0[sl] + st.level * (best - f.a0[sl]))
            low_entropy = ent_ok & (r <= st.converged_ratio)
        if self.melted:
            return self._spike_targets(f, pos, near_best, low_entropy)
        return self._climb_targets(f, t, pos, low_entropy)

    def _spike_targets(self, f: _Features, pos: int, near_best: np.ndarray,
                       low_entropy: np.ndarray) -> np.ndarray:
        """After a spike ("spike mode"): the phases read from the entropy's fall from
        its peak, guarded by A (or by log E when A is not logged)."""
        st = self.settings
        sl = slice(pos, f.end)
        e, peak, ent_ok, acc_seen = f.e[sl], f.peak[sl], f.ent_cal[sl], f.acc_cal[sl]
        out = np.zeros(e.size, dtype=np.int8)
        with np.errstate(invalid="ignore"):
            fell = ent_ok & (e <= st.transition_fall * peak)
            crystal = ent_ok & (e <= st.crystal_fall * peak) & near_best
        if self._index == _MELT:
            ref, _ = _running_mean(f.acc_raw[sl], f.acc_known[sl], self._ref_sum,
                                   self._ref_count)
            sigma = np.nan_to_num(f.sigma_before[sl])
            with np.errstate(invalid="ignore"):
                guard_a = np.isnan(ref) | (f.a[sl] - ref > st.guard_z * sigma)
            floor = np.log(np.maximum(peak, _TINY)) - 2 * self._lsigma()
            guard_e = self._fell_from(f, pos, self._lref_sum, self._lref_count, floor,
                                      margin=_MELT_MARGIN)
            guard = np.where(acc_seen, guard_a, guard_e)
            out[fell & guard] = _TRANS
            out[crystal & guard] = _CRYST
            out[crystal & guard & low_entropy] = _CONV
        elif self._index == _TRANS:
            out[crystal] = _CRYST
            out[crystal & low_entropy] = _CONV
        else:  # crystallisation
            fell = self._fell_from(f, pos, self._cref_sum, self._cref_count,
                                   seen=self._cref_seen)
            out[low_entropy & near_best & fell] = _CONV
        return out

    def _climb_targets(self, f: _Features, t: np.ndarray, pos: int,
                       low_entropy: np.ndarray) -> np.ndarray:
        """Without a spike: the phases read from the climb of A's level."""
        sl = slice(pos, f.end)
        acc_seen = f.acc_cal[sl]
        out = np.zeros(acc_seen.size, dtype=np.int8)
        if self._index == _TRANS:
            settled = _stopped(self, f, pos)[0]
            settled &= acc_seen & _flat(self, f, pos, self.settings.climb_fraction,
                                        climb=True)
            out[settled] = _CRYST
            out[settled & low_entropy] = _CONV
        elif self._index == _CRYST:
            st = self.settings
            held = t[sl] - self._t_cryst >= st.hold * (self._t_cryst - self._t_start)
            recent = f.levels(pos)[0]
            a0 = f.a0[sl]
            with np.errstate(invalid="ignore"):
                holds = recent >= a0 + st.level * (self._best_level - a0)
            fell = self._fell_from(f, pos, self._cref_sum, self._cref_count,
                                   seen=self._cref_seen)
            held &= _flat(self, f, pos, self.settings.settle_fraction, climb=False)
            out[acc_seen & holds & (held | (low_entropy & fell))] = _CONV
        return out

    def _lsigma(self) -> float:
        return 0.0 if math.isnan(self._log_sigma_m) else self._log_sigma_m

    def _fell_from(self, f: _Features, pos: int, total: float, count: int, floor=None,
                   seen: int | None = None, margin: float = 0.0):
        """log E clearly below its mean over the current phase (or `floor`, if higher):
        by more than the largest dip its noise makes in that many values. With
        `seen`, the phase's first _SKIP known values are left out of the mean."""
        sl = slice(pos, f.end)
        known = f.ent_known[sl]
        if seen is not None:
            known = known & (seen + np.cumsum(known) > _SKIP)
        ref, n = _running_mean(f.log_e[sl], known, total, count)
        if floor is not None:
            ref = np.fmax(ref, floor)
        # The largest dip of n noisy values, against a mean of n noisy values.
        z = self.settings.fall_z + margin + np.sqrt(2 * np.log(np.maximum(n, 2)))
        z = z * np.sqrt(1 + 1 / np.maximum(n, 1))
        with np.errstate(invalid="ignore"):
            fell = f.log_e[sl] < ref - z * self._lsigma()
        # No level yet: melting lets the fall count; crystallisation waits for one.
        return fell if seen is not None else np.isnan(ref) | fell

    def _carry_segment(self, f: _Features, t: np.ndarray, a: int, b: int) -> None:
        """Update the per-phase state over steps a..b-1 spent in the current phase."""
        if b <= a:
            return
        if self._index == _TRANS and not self.melted:
            self._best_level = float(_stopped(self, f, a)[1][b - a - 1])
        elif self._index == _MELT:
            known = f.acc_known[a:b]
            self._ref_sum = _sum_after(self._ref_sum, f.acc_raw[a:b][known])
            self._ref_count += int(known.sum())
            known = f.ent_known[a:b]
            self._lref_sum = _sum_after(self._lref_sum, f.log_e[a:b][known])
            self._lref_count += int(known.sum())
        elif self._index == _CRYST:
            known = f.ent_known[a:b]
            rank = self._cref_seen + np.cumsum(known)
            used = known & (rank > _SKIP)
            self._cref_sum = _sum_after(self._cref_sum, f.log_e[a:b][used])
            self._cref_count += int(used.sum())
            self._cref_seen += int(known.sum())

    def _start_cref(self, log_e: float) -> None:
        """Crystallisation begins: the entropy it is judged against starts empty (its
        first value `log_e`, when known, counts as seen)."""
        self._cref_sum, self._cref_count = 0.0, 0
        self._cref_seen = 0 if math.isnan(log_e) else 1

    def _enter(self, index: int, f: _Features, t: np.ndarray, j: int, s: np.ndarray) -> None:
        """Enter phase `index` at batch position j."""
        old = self._index
        if old < _CRYST <= index and not self.melted:  # the best level includes this step
            # (from baseline too: the gate can crystallise a climb never seen as one)
            self._best_level = float(_stopped(self, f, j)[1][0])
        self._index = index
        self.timeline.append((PHASES[index], int(s[j])))
        le = f.log_e[j]
        if old == _BASE:
            f.freeze_e = j
            self._log_sigma_m = float(f.log_sigma_before[j])
        if index == _MELT:
            self.melted = True
            a = f.a[j]
            self._ref_sum, self._ref_count = (float(a), 1) if not math.isnan(a) else (0.0, 0)
            self._lref_sum, self._lref_count = (float(le), 1) if not math.isnan(le) else (0.0, 0)
        if index == _CRYST:
            self._start_cref(le)
        if old < _TRANS <= index:  # (not on a return to the transition: old > index)
            self._sigma_t = float(f.sigma_before[j])
            f.freeze_a = j
            calm = f.last_calm[j]
            self._t_start = float(t[j]) if math.isnan(calm) else float(calm)
            calm_n = f.last_calm_n[j]
            self._c_trans = 0 if math.isnan(calm_n) else int(calm_n)  # no calm: from the start
        if old < _CRYST <= index:
            self._t_cryst = float(t[j])
            self._cryst_level = self._best_level


def seen_enough(c: PhaseClassifier) -> bool:
    """`c` saw enough to tell any phase but baseline: `rise_after` values of the progress
    metric or of the entropy (or it left baseline already)."""
    need = c.settings.rise_after
    return c.phase is not Phase.BASELINE or max(c.acc_count, c.ent_count) >= need


class _Features:
    """Per-step features of one batch, continuing the classifier's state."""

    def __init__(self, c: PhaseClassifier, t: np.ndarray, acc: np.ndarray,
                 ent: np.ndarray) -> None:
        self.freeze_a: int | None = None  # batch index where the transition began
        self.end = t.size  # conditions are computed for steps pos..end-1
        self.freeze_e: int | None = None  # batch index where the run left baseline
        self._progress(c, t, acc)
        self._climb(c)
        self._entropy(c, ent)

    def _progress(self, c: PhaseClassifier, t: np.ndarray, acc: np.ndarray) -> None:
        """The progress metric A: carried values, baseline, best, noise, last calm step."""
        self.acc_raw = acc
        self.acc_known = np.isfinite(acc)
        kv = acc[self.acc_known]
        k = np.cumsum(self.acc_known)  # known values up to each step
        # known values with the two carried ones in front: [prev, last, new...]
        hist = np.concatenate([[c._acc_prev, c.accuracy], kv])
        self.a = hist[k + 1]
        self.a_prev = hist[k]
        self.a0, self.acc_cal, self._acc_base_after = _baseline(
            kv, k, c._acc_base, c.acc_baseline, c.settings.baseline_points
        )
        self.acc_count = c.acc_count + k
        # Calibrated before the step: the current value is not part of its own baseline.
        self.acc_ready = (c.acc_count + k - self.acc_known) >= c.settings.baseline_points
        start_best = -np.inf if math.isnan(c.best_accuracy) else c.best_accuracy
        best = np.maximum.accumulate(
            np.concatenate([[start_best], np.where(self.acc_known, acc, -np.inf)])
        )[1:]
        self.best = np.where(np.isneginf(best), np.nan, best)
        self._k, self._hist = k, hist
        self._dsum, self._dcnt, self.sigma_before = _noise2(
            hist, k - self.acc_known, c._dsum, c._dcount
        )
        with np.errstate(invalid="ignore"):
            calm = self.acc_known & self.acc_ready & (acc - self.a0 <= self.sigma_before)
        self.last_calm = _last_time(c._t_calm, np.where(calm, t, -np.inf))
        self.last_calm_n = _last_time(c._n_calm, np.where(calm, self.acc_count, -np.inf))
        # Running sums of the known values (added one by one, whatever the batches).
        prefix = np.cumsum(np.concatenate([[c._prefix[-1]], kv]))
        self._prefix = np.concatenate([c._prefix[:-1], prefix])
        self._prefix_off = len(c._prefix)
        head = len(c._head) - 1
        self._head = np.concatenate([c._head[:-1], prefix[: _HEAD + 2 - len(c._head)]]) \
            if head < _HEAD else np.asarray(c._head)
        self._c0 = c.acc_count  # known values before the batch

    def _climb(self, c: PhaseClassifier) -> None:
        """The level of A: the mean of its last W known values."""
        w = c.settings.window(self.acc_count)
        g = self.g = self.acc_count - self._c0 - 1  # the last known value, batch numbering
        self.recent, self.w = self.window_mean(g, w), w
        self.floor = self.rounding(g)

    def _entropy(self, c: PhaseClassifier, ent: np.ndarray) -> None:
        """The entropy E: carried values, baseline, ratio to it, noise of log E, peak."""
        self.ent_known = np.isfinite(ent)
        ev = ent[self.ent_known]
        ke = np.cumsum(self.ent_known)
        ehist = np.concatenate([[c._ent_prev[0], c._ent_prev[1], c.entropy], ev])
        self.e = ehist[ke + 2]
        self.e_prev = ehist[ke + 1]  # the known E before the last one
        self.e0, ent_cal, self._ent_base_after = _baseline(
            ev, ke, c._ent_base, c.entropy_baseline, c.settings.baseline_points
        )
        self.ent_cal = ent_cal & ~np.isnan(self.e)
        self.ent_count = c.ent_count + ke
        with np.errstate(invalid="ignore", divide="ignore"):
            self.log_e = np.log(np.maximum(self.e, _TINY))
            log_hist = np.log(np.maximum(ehist[2:], _TINY))
            self.r = self.e / np.maximum(self.e0, _TINY)
        self._ke, self._ehist = ke, ehist
        # Noise of log E from its calm values only (not the climb into a spike).
        calm = self.r[self.ent_known] < _CALM
        self._lsum, self._lcnt, self.log_sigma_before = _noise(
            log_hist, ke - self.ent_known, c._ldsum, c._ldcount, calm
        )
        # Peak: running max of the median of the last three known values.
        x0, x1, x2 = ehist[:-2], ehist[1:-1], ehist[2:]
        med = _med3(x0, x1, x2)
        med = np.where(np.isnan(x0), np.where(np.isnan(x1), x2, 0.5 * (x1 + x2)), med)[1:]
        start_peak = -np.inf if math.isnan(c.peak_entropy) else c.peak_entropy
        peak_known = np.maximum.accumulate(np.concatenate([[start_peak], med]))
        peak = peak_known[ke]
        self.peak = np.where(np.isneginf(peak), np.nan, peak)
        self._peak_last = float(peak_known[-1])

    def levels(self, pos: int):
        """For steps pos..: the level of A (mean of its last W known values), W, and
        the rounding floor of the noise."""
        e = self.end
        return self.recent[pos:e], self.w[pos:e], self.floor[pos:e]

    def window_mean(self, g: np.ndarray, m: int) -> np.ndarray:
        """Mean of the m known values of A ending at each new known value g (batch
        numbering; -1 is the last value before the batch), summed left to right."""
        end = self._prefix_off + g
        start = end - m
        ok = (start >= 0) & (end >= 0)
        total = self._prefix[np.where(ok, end, 0)] - self._prefix[np.where(ok, start, 0)]
        return np.where(ok, total / m, np.nan)

    def head_mean(self, m: np.ndarray) -> np.ndarray:
        """Mean of the first m known values of A (NaN while fewer are known)."""
        ok = m < self._head.size
        return np.where(ok, self._head[np.where(ok, m, 0)] / np.maximum(m, 1), np.nan)

    def rounding(self, g: np.ndarray) -> np.ndarray:
        """Noise floor for window means at known value g: the rounding of the running
        sums there (a metric logged exactly constant has no noise but rounding)."""
        end = np.maximum(self._prefix_off + g, 0)
        return SUM_ROUNDING * np.abs(self._prefix[end])

    def finish(self, c: PhaseClassifier) -> None:
        """Write the carried state after the batch back into the classifier."""
        if self.freeze_a is not None:
            c._t_calm = float(self.last_calm[self.freeze_a])
            c._n_calm = float(self.last_calm_n[self.freeze_a])
        elif c._index < _TRANS:
            c._t_calm = float(self.last_calm[-1])
            c._n_calm = float(self.last_calm_n[-1])
        c._prefix = self._prefix[-(_TAIL + 1):].copy()  # a copy: not a view of the batch's
        c._head = self._head.copy()
        hist, k = self._hist, self._k
        c.accuracy, c._acc_prev = float(hist[-1]), float(hist[-2])
        c._acc_base[:] = self._acc_base_after
        c.acc_baseline = float(self.a0[-1])
        c.acc_count = int(self.acc_count[-1])
        c.best_accuracy = float(self.best[-1])
        m = _frozen(self.freeze_a, c._index < _TRANS, k, self.acc_known)
        if m is not None:
            c._dsum, c._dcount = float(self._dsum[m]), int(self._dcnt[m])
        ehist, ke = self._ehist, self._ke
        c.entropy = float(ehist[-1])
        c._ent_prev = (float(ehist[-3]), float(ehist[-2]))
        c._ent_base[:] = self._ent_base_after
        c.entropy_baseline = float(self.e0[-1])
        c.ent_count = int(self.ent_count[-1])
        c.peak_entropy = math.nan if math.isinf(self._peak_last) else self._peak_last
        m = _frozen(self.freeze_e, c._index == _BASE, ke, self.ent_known)
        if m is not None:
            c._ldsum, c._ldcount = float(self._lsum[m]), int(self._lcnt[m])


def _from_baseline(c: PhaseClassifier, f: _Features, pos: int, spiking: np.ndarray,
                   rising: np.ndarray) -> np.ndarray:
    """Out of baseline: melting on an entropy spike, else a transition on two known
    values of A in a row clearly above a0."""
    sl = slice(pos, f.end)
    out = np.zeros(spiking.size, dtype=np.int8)
    sigma = f.sigma_before[sl]
    st = c.settings
    w = np.maximum(f.w[sl], 3)
    recent = f.window_mean(f.g[sl], w)
    with np.errstate(invalid="ignore"):
        lower = np.minimum(f.a[sl], f.a_prev[sl])
        risen = lower - f.a0[sl] > st.rise_z * sigma
        # or the level of A (of at least 3 values) clearly above a0, a median of
        # baseline_points values; either once twice baseline_points are known
        sigma_r = np.maximum(sigma, f.floor[sl])  # a constant A: rounding is its noise
        se = sigma_r * np.sqrt(1.0 / w + 1.57 / st.baseline_points)
        level = recent - f.a0[sl] > st.level_z * se
        # or the level of the last quarter of the values clearly above the first
        # quarter (a slow, noisy climb: GRPO rewards)
        level |= _quarter_rise(f, pos, sigma_r, st)
        risen = (risen | level) & (f.acc_count[sl] >= st.rise_after)
        risen &= f.acc_ready[sl]
    out[spiking] = _MELT
    out[risen & ~rising] = _TRANS
    return out


def _stopped(c: PhaseClassifier, f: _Features, pos: int):
    """For steps pos..: whether the level of A is near its best (above a0 + level *
    (best - a0)); the best level."""
    recent = f.levels(pos)[0]
    start_best = -np.inf if math.isnan(c._best_level) else c._best_level
    best = np.maximum.accumulate(np.concatenate([[start_best], np.nan_to_num(
        recent, nan=-np.inf)]))[1:]
    a0 = f.a0[pos:f.end]
    with np.errstate(invalid="ignore"):
        near = recent >= a0 + c.settings.level * (best - a0)
    return near, best


def _flat(c: PhaseClassifier, f: _Features, pos: int, fraction: float, *,
          climb: bool) -> np.ndarray:
    """The climb of A stopped (or slowed, if `climb`), over windows of W known values:
    W is `fraction` of the known values since the climb began (if `climb`; of all of
    them otherwise), at least the level's window and _MIN_CLIMB (3). Stopped: the level over the
    last W values is not clearly above the level of the W before (by stop_z noise
    units of that difference). Slowed: it rose by less than slow_fraction of the
    climb's average gain per W values. Either only once both windows lie in the climb
    and W values are enough to see the climb: its average gain per W values by stop_z
    noise units, or (if `climb`) by seen_z its rise so far times the share of the room
    to the ceiling that rise covers, 1 / (1 + r) (all of it for a reward: the end of a
    small climb of a noisy reward, 2 or 3 noise units, would otherwise take hundreds
    of values to see). And (if `climb`, for a metric with a ceiling) the level of the
    last window is at least `share` of the ceiling: below that, a pause."""
    n = f.acc_count[pos:f.end] - c._c_trans
    m = np.ceil(fraction * np.maximum(n if climb else f.acc_count[pos:f.end], 0))
    # far below a ceiling (accuracy at 0.4 of 1.0), a pause is weak evidence of an end:
    # the climb's windows are at least _MIN_CLIMB * (1 + headroom * r) values
    room = _room(c, f, pos)
    least = _MIN_CLIMB * (1.0 + c.settings.headroom * room) if climb else _MIN_CLIMB
    m = np.clip(m, np.maximum(f.w[pos:f.end], np.ceil(least)), _TAIL // 2).astype(np.int64)
    g = f.g[pos:f.end]
    recent, before = f.window_mean(g, m), f.window_mean(g - m, m)
    noise = np.maximum(c._sigma_t, f.floor[pos:f.end]) * np.sqrt(2.0 / m)
    z = c.settings.stop_z
    with np.errstate(invalid="ignore", divide="ignore"):
        rise = recent - f.a0[pos:f.end]
        pace = rise / np.maximum(n, 1) * m
        limit = z * noise
        seen = pace >= z * noise
        if climb:
            limit = np.maximum(limit, c.settings.slow_fraction * pace)
            seen |= rise / (1.0 + room) >= c.settings.seen_z * noise
            if math.isfinite(c.ceiling):
                seen &= recent >= c.settings.share * c.ceiling
        return (recent - before <= limit) & seen & (n >= 2 * m)


def _end_of_stage(c: PhaseClassifier) -> bool:
    """Whether a stage that ends now ends crystallised: it was in a transition read
    from the climb of A (no spike), and the level of the last quarter of the climb
    (climb_fraction of the values since it began, at least _MIN_CLIMB) is near its
    best level. Its training stopped: the climb is over, however far below the
    ceiling it paused."""
    if c._index != _TRANS or c.melted or math.isnan(c._best_level):
        return False
    n = c.acc_count - c._c_trans
    m = int(min(max(math.ceil(c.settings.climb_fraction * n), _MIN_CLIMB), _TAIL // 2))
    if c._prefix.size <= m:
        return False
    level = float(c._prefix[-1] - c._prefix[-1 - m]) / m
    a0 = c.acc_baseline
    return level >= a0 + c.settings.level * (c._best_level - a0)


def _room(c: PhaseClassifier, f: _Features, pos: int) -> np.ndarray:
    """For steps pos..: the room left under the ceiling of A, in units of the rise
    so far, r = (ceiling - level) / (level - a0), at most _HEADROOM_CAP; 0 for a
    metric without a ceiling."""
    if not math.isfinite(c.ceiling):
        return np.zeros(f.end - pos)
    recent = f.levels(pos)[0]
    a0 = f.a0[pos:f.end]
    with np.errstate(invalid="ignore", divide="ignore"):
        head = (c.ceiling - recent) / np.maximum(recent - a0, _TINY)
    return np.clip(np.nan_to_num(head), 0.0, _HEADROOM_CAP)


def _quarter_rise(f: _Features, pos: int, sigma: np.ndarray, st: PhaseSettings) -> np.ndarray:
    """The level of the last W known values of A is clearly above the level of the
    first W (by level_z noise units of that difference, and by the noise of one
    value: a slow drift is not a climb), W a quarter of them (climb_fraction): a
    slow, noisy climb (GRPO rewards)."""
    m = np.ceil(st.climb_fraction * f.acc_count[pos:f.end])
    m = np.clip(m, np.maximum(f.w[pos:f.end], 3), _HEAD).astype(np.int64)
    recent, first = f.window_mean(f.g[pos:f.end], m), f.head_mean(m)
    with np.errstate(invalid="ignore"):
        gain = recent - first
        return (gain > st.level_z * sigma * np.sqrt(2.0 / m)) & (gain > sigma)


def _resumed(c: PhaseClassifier, f: _Features, pos: int) -> np.ndarray:
    """After crystallisation without a spike: the climb resumed, the level of A
    clearly above its level when crystallisation began (by resume_z noise units and
    by resume_fraction of the rise then)."""
    if c.melted or c._index < _CRYST:
        return np.zeros(f.end - pos, dtype=bool)
    st = c.settings
    recent, w, floor = f.levels(pos)
    noise = np.maximum(c._sigma_t, floor) * np.sqrt(2.0 / w)
    rise = c._cryst_level - f.a0[pos:f.end]
    with np.errstate(invalid="ignore"):
        margin = np.maximum(st.resume_z * noise, st.resume_fraction * rise)
        return f.acc_cal[pos:f.end] & (recent - c._cryst_level > margin)


def _last_time(start: float, times: np.ndarray) -> np.ndarray:
    """Running max of `times` (-inf where nothing happened) after `start` (NaN: none),
    NaN while there is none."""
    first = -np.inf if math.isnan(start) else start
    last = np.maximum.accumulate(np.concatenate([[first], times]))[1:]
    return np.where(np.isneginf(last), np.nan, last)


def _frozen(at: int | None, open_: bool, k: np.ndarray, known: np.ndarray) -> int | None:
    """How many of the batch's known values count towards a noise estimate."""
    if at is not None:
        return int(k[at] - known[at])
    return int(k[-1]) if open_ else None


def _noise(hist: np.ndarray, before: np.ndarray, total: float, count: int, use=None):
    """Sums of |successive differences| over the known values `hist` (the carried
    last value first; `use` says which differences count), and the noise from the
    differences before each step."""
    d = np.abs(np.diff(hist))
    with np.errstate(invalid="ignore"):
        counted = d > 0  # a value logged again unchanged says nothing about the noise
    if use is not None:
        counted &= use
    dsum = np.cumsum(np.concatenate([[total], np.where(counted, d, 0.0)]))
    dcnt = count + np.concatenate([[0], np.cumsum(counted)])
    return dsum, dcnt, _sigma(dsum[before], dcnt[before])


def _noise2(hist: np.ndarray, before: np.ndarray, total: float, count: int):
    """As `_noise`, from second differences x[i] - 2 x[i-1] + x[i-2] of the known values
    `hist` (the two carried values first): a steady climb adds nothing to them, so a
    rising metric does not pass its slope off as noise."""
    d1 = np.diff(hist)
    d2 = np.abs(np.diff(d1))
    with np.errstate(invalid="ignore"):
        counted = (d1[1:] != 0) & np.isfinite(d2)  # a value logged again unchanged: no
    dsum = np.cumsum(np.concatenate([[total], np.where(counted, d2, 0.0)]))
    dcnt = count + np.concatenate([[0], np.cumsum(counted)])
    return dsum, dcnt, _sigma(dsum[before], dcnt[before], SQRT_PI_12)


def _running_mean(values: np.ndarray, known: np.ndarray, total: float, count: int):
    """Mean and count of the known values before each step, continuing (total, count)."""
    csum = np.cumsum(np.concatenate([[total], np.where(known, values, 0.0)]))[:-1]
    ccnt = count + np.concatenate([[0], np.cumsum(known)])[:-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ccnt > 0, csum / np.maximum(ccnt, 1), np.nan), ccnt


def _sum_after(total: float, values: np.ndarray) -> float:
    """total + values, added one by one (as `_running_mean` does)."""
    return float(np.cumsum(np.concatenate([[total], values]))[-1])


def _baseline(new_known: np.ndarray, k: np.ndarray, base: list[float], base_value: float,
              points: int):
    """Median of the first `points` known values, after each step; calibrated flag."""
    before = len(base)
    table = np.full(points + 1, np.nan)
    table[min(before, points)] = base_value
    after = list(base)
    for v in new_known[: max(0, points - before)].tolist():
        after.append(v)
        table[len(after)] = float(np.median(after))
    counts = np.minimum(before + k, points)
    return table[counts], counts >= points, after

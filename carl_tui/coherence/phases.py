"""Online phase classifier: baseline -> melting -> transition -> crystallisation -> converged.

Features at each step use only the past (carried forward over missing values):

- a, e: the last known accuracy (or task reward, in [0, 1]) and entropy;
- a0, e0: baseline = median of the first `baseline_points` known values of each;
- q = (a - a0) / (ceiling - a0): accuracy progress from baseline to the ceiling;
- r = e / e0: entropy relative to baseline (scale-free across models);
- peak: highest entropy seen so far.

Phase conditions (thresholds are constructor arguments):

- MELTING:          r >= melt_ratio (entropy spike).
- TRANSITION:       q >= transition_progress, or after a spike
                    (peak >= melt_ratio * e0) entropy fell to <= transition_fall * peak.
- CRYSTALLISATION:  q >= crystal_progress and r <= crystal_ratio.
- CONVERGED:        q >= converged_progress and r <= converged_ratio.

For crystallisation and converged a part whose metric was never seen counts as
satisfied, except that converged needs entropy. Phases only move forward: at
each step the phase becomes the latest phase whose condition holds, if that is
later than the current one. So `update_many` can find each change as the first
index where a condition holds, and equals a loop of `update` calls exactly.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np


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


def _known(x) -> bool:
    return x is not None and math.isfinite(x)


class PhaseClassifier:
    """Labels each logged step with a Phase, online. See the module docstring."""

    def __init__(
        self,
        baseline_points: int = 5,
        melt_ratio: float = 2.0,
        transition_progress: float = 0.25,
        transition_fall: float = 0.6,
        crystal_progress: float = 0.9,
        crystal_ratio: float = 0.5,
        converged_progress: float = 0.95,
        converged_ratio: float = 0.25,
        ceiling: float = 1.0,
    ) -> None:
        if baseline_points < 1:
            raise ValueError("baseline_points must be positive")
        self.baseline_points = int(baseline_points)
        self.melt_ratio = float(melt_ratio)
        self.transition_progress = float(transition_progress)
        self.transition_fall = float(transition_fall)
        self.crystal_progress = float(crystal_progress)
        self.crystal_ratio = float(crystal_ratio)
        self.converged_progress = float(converged_progress)
        self.converged_ratio = float(converged_ratio)
        self.ceiling = float(ceiling)
        self.accuracy = math.nan  # last known
        self.entropy = math.nan
        self._acc_base: list[float] = []
        self._ent_base: list[float] = []
        self.acc_baseline = math.nan
        self.entropy_baseline = math.nan
        self.peak_entropy = math.nan
        self._index = 0
        self.timeline: list[tuple[Phase, int]] = []

    # ---------------------------------------------------------------- state

    @property
    def phase(self) -> Phase:
        return PHASES[self._index]

    @property
    def since_step(self) -> int | None:
        return self.timeline[-1][1] if self.timeline else None

    def _enter(self, index: int, step: int) -> None:
        self._index = index
        self.timeline.append((PHASES[index], int(step)))

    # ------------------------------------------------------------- features

    def _conditions(self, a, a0, e, e0, peak):
        """Conditions for phases 1..4 from scalars or arrays (NaN = never seen)."""
        acc_seen = ~np.isnan(a)
        ent_seen = ~np.isnan(e)
        with np.errstate(invalid="ignore", divide="ignore"):
            q = (a - a0) / np.maximum(self.ceiling - a0, _TINY)
            r = e / np.maximum(e0, _TINY)
            spike = peak >= self.melt_ratio * e0
            fallen = e <= self.transition_fall * peak
        melt = ent_seen & (r >= self.melt_ratio)
        trans = (acc_seen & (q >= self.transition_progress)) | (ent_seen & spike & fallen)
        cryst = (
            (acc_seen | ent_seen)
            & (~acc_seen | (q >= self.crystal_progress))
            & (~ent_seen | (r <= self.crystal_ratio))
        )
        conv = ent_seen & (~acc_seen | (q >= self.converged_progress)) & (r <= self.converged_ratio)
        return melt, trans, cryst, conv

    # --------------------------------------------------------------- update

    def update(self, step: int, accuracy: float | None, entropy: float | None) -> Phase:
        """Feed one step (either metric may be missing); returns its phase."""
        if not self.timeline:
            self._enter(0, step)
        if _known(accuracy):
            self.accuracy = float(accuracy)
            if len(self._acc_base) < self.baseline_points:
                self._acc_base.append(self.accuracy)
                self.acc_baseline = float(np.median(self._acc_base))
        if _known(entropy):
            self.entropy = float(entropy)
            if len(self._ent_base) < self.baseline_points:
                self._ent_base.append(self.entropy)
                self.entropy_baseline = float(np.median(self._ent_base))
            if math.isnan(self.peak_entropy) or self.entropy > self.peak_entropy:
                self.peak_entropy = self.entropy
        conds = self._conditions(
            np.float64(self.accuracy),
            np.float64(self.acc_baseline),
            np.float64(self.entropy),
            np.float64(self.entropy_baseline),
            np.float64(self.peak_entropy),
        )
        later = [i + 1 for i, c in enumerate(conds) if bool(c) and i + 1 > self._index]
        if later:
            self._enter(max(later), step)
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
            self._enter(0, s[0])
        a, a0, self.accuracy, self.acc_baseline = self._carry(
            acc, self.accuracy, self._acc_base, self.acc_baseline
        )
        e, e0, self.entropy, self.entropy_baseline = self._carry(
            ent, self.entropy, self._ent_base, self.entropy_baseline
        )
        ent_known = np.where(np.isfinite(ent), ent, -np.inf)
        start_peak = -np.inf if math.isnan(self.peak_entropy) else self.peak_entropy
        peak = np.maximum.accumulate(np.concatenate([[start_peak], ent_known]))[1:]
        peak = np.where(np.isneginf(peak), np.nan, peak)
        if not np.isnan(peak[-1]):
            self.peak_entropy = float(peak[-1])
        conds = self._conditions(a, a0, e, e0, peak)
        labels = np.empty(n, dtype=np.int8)
        pos = 0
        while True:
            later = range(self._index + 1, len(PHASES))
            if pos >= n or not later:
                labels[pos:] = self._index
                break
            hit = np.zeros(n - pos, dtype=bool)
            for j in later:
                hit |= conds[j - 1][pos:]
            if not hit.any():
                labels[pos:] = self._index
                break
            t = pos + int(np.argmax(hit))
            labels[pos:t] = self._index
            self._enter(max(j for j in later if conds[j - 1][t]), s[t])
            pos = t
        return labels

    def _carry(self, x: np.ndarray, last: float, base: list[float], base_value: float):
        """Carry the last known value forward; baseline median after each step."""
        seen = np.isfinite(x)
        idx = np.maximum.accumulate(np.where(seen, np.arange(x.size), -1))
        carried = np.where(idx >= 0, x[np.maximum(idx, 0)], last)
        # Baseline after each step: median of the first k known values seen so far.
        known_before = len(base)
        counts = known_before + np.cumsum(seen)
        table = np.full(self.baseline_points + 1, np.nan)
        table[min(known_before, self.baseline_points)] = base_value
        new_known = x[seen][: max(0, self.baseline_points - known_before)]
        for v in new_known.tolist():
            base.append(v)
            table[len(base)] = float(np.median(base))
        baseline = table[np.minimum(counts, self.baseline_points)]
        new_last = float(carried[-1])
        return carried, baseline, new_last, float(baseline[-1])

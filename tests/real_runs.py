"""The corpus of real training histories (tests/data/real_runs) and what hindsight
says about each one, computed from the curve alone (never from the classifier).

`load_runs()` gives every run of the corpus as a `RealRun`: its `(step, {metric:
value})` rows and its stages, each with the progress metric the phases read
(token accuracy while the run logs it, else the task reward).

`Hindsight(steps, values)` judges one stage's progress curve over the whole run,
from smoothed levels and their standard errors:

- the noise of one value, from second differences (a straight climb adds
  nothing to them): sigma = median |x[i+1] - 2 x[i] + x[i-1]| / (0.6745 sqrt 6);
- the level at each value: the centred mean of k = max(3, n / 10) values, whose
  standard error is se = sigma / sqrt(k);
- start: the mean of the first k values; top: the highest level; rise = top - start;
- `learned`: the rise stands more than 5 standard errors of a difference of two
  levels (5 sqrt(2) se) above the start;
- `still`: the rise is under 2 sqrt(2) se: the run never moved beyond its noise;
- `settled`: a finished climb sitting flat near its best: the last quarter of the
  values (at least 2k) is flat (its two halves' means differ by under 3 standard
  errors of that difference, or under 5% of the rise) and its mean is within
  max(3 se, 10% of the rise) of the top;
- `step_at(f)`: the first step whose level reaches start + f * rise.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from carl_tui.store import roles

CORPUS = Path(__file__).parent / "data" / "real_runs"
#: Runs gathered for the phase method being built (public SFT and GRPO histories, tiny runs
#: in new shapes, GRPO made to fail at a known step): read by `python -m tests.phase_checks`;
#: not yet under the corpus tests of the classifier in use, whose thresholds they break.
MORE = CORPUS.parent / "real_runs_more"
ACCURACY = "mean_token_accuracy"


@dataclass
class Stage:
    kind: str  # "accuracy" or "reward"
    steps: np.ndarray  # the steps that logged the progress metric
    values: np.ndarray


@dataclass
class RealRun:
    name: str
    kind: str  # sft, grpo, sft+grpo, dpo, loss
    rows: list[tuple[int, dict[str, float]]]
    stages: list[Stage] = field(default_factory=list)
    #: Where it comes from: "Owner/Repo" for a public history, else the run's own name
    #: (tiny-*: make_tiny.py's runs; demo-*: the demo's streams).
    repository: str = ""
    #: What the run was made to do, for runs made to fail (make_tiny.py's "induced").
    induced: dict | None = None

    @property
    def half(self) -> str:
        """The half of the corpus the run belongs to: "tune" or "check" (see `half_of`)."""
        return half_of(self.repository)

    @property
    def length(self) -> int:
        return len(self.rows)


def load_runs(*, more: bool = False) -> list[RealRun]:
    paths = sorted(CORPUS.glob("*.json")) + (sorted(MORE.glob("*.json")) if more else [])
    return [load_run(p) for p in paths]


def load_run(path: Path) -> RealRun:
    doc = json.loads(path.read_text())
    rows = []
    for r in doc["log_history"]:
        vals = {k: float(v) for k, v in r.items() if k != "step" and isinstance(v, (int, float))
                and not isinstance(v, bool) and math.isfinite(v)}
        rows.append((int(r["step"]), vals))
    source = doc.get("source", {})
    repository = source.get("repo") or doc["name"]
    return RealRun(doc["name"], doc["kind"], rows, _stages(rows), repository, doc.get("induced"))


def half_of(repository: str) -> str:
    """The corpus's split, fixed before any rule was tuned on it: by repository (a public
    history's "Owner/Repo", lowercased; a run made here by its name), through the first
    byte of its SHA-256: even is the tuning half, odd the check half. Rules fitted to the
    corpus (phases, health flags, alerts) are tuned on "tune" only and reported on both;
    the README's figures are the check half's. `SPLIT` beside the runs lists the result."""
    digest = hashlib.sha256(repository.lower().encode()).digest()
    return "tune" if digest[0] % 2 == 0 else "check"


def _stages(rows) -> list[Stage]:
    """Accuracy rows are the accuracy stage, rows with a task reward and no accuracy
    the reward stage; a new stage each time the kind changes."""
    names = {k for _, v in rows for k in v}
    cols = {k: np.array([v.get(k, np.nan) for _, v in rows]) for k in names}
    n = len(rows)
    steps = np.array([s for s, _ in rows])
    task = roles.task_reward(cols, n, carl_known=bool(roles.carl_reward_names(cols)))
    acc = cols.get(ACCURACY, np.full(n, np.nan))
    out: list[Stage] = []
    for i in range(n):
        kind, x = (("accuracy", acc[i]) if np.isfinite(acc[i]) else
                   ("reward", task[i]) if np.isfinite(task[i]) else (None, None))
        if kind is None:
            continue
        if not out or out[-1].kind != kind:
            out.append(Stage(kind, np.zeros(0, np.int64), np.zeros(0)))
        out[-1].steps = np.append(out[-1].steps, steps[i])
        out[-1].values = np.append(out[-1].values, x)
    return out


class Hindsight:
    """What the whole curve says (see the module docstring)."""

    def __init__(self, steps: np.ndarray, values: np.ndarray) -> None:
        self.steps = np.asarray(steps)
        x = self.values = np.asarray(values, dtype=np.float64)
        n = self.n = x.size
        self.k = k = max(3, round(n / 10))
        d2 = x[2:] - 2 * x[1:-1] + x[:-2] if n >= 3 else np.zeros(1)
        self.sigma = float(np.median(np.abs(d2)) / (0.6745 * math.sqrt(6)))
        if self.sigma == 0.0:  # quantised values: the mean absolute difference instead
            self.sigma = float(np.mean(np.abs(d2)) / math.sqrt(6))
        self.se = self.sigma / math.sqrt(k)
        c = np.concatenate([[0.0], np.cumsum(x)])
        lo = np.clip(np.arange(n) - k // 2, 0, max(n - k, 0))
        hi = np.minimum(lo + k, n)
        self.level = (c[hi] - c[lo]) / (hi - lo)
        self.start = float(x[:k].mean())
        self.top = float(self.level.max())
        self.rise = self.top - self.start
        self.learned = n >= 8 and self.rise > 5 * math.sqrt(2) * self.se
        self.still = self.rise < 2 * math.sqrt(2) * self.se
        tail = x[-max(2 * k, n // 4):]
        h = tail.size // 2
        a, b = tail[:h].mean(), tail[h:].mean()
        flat = abs(b - a) < max(3 * self.sigma * math.sqrt(1 / h + 1 / (tail.size - h)),
                                0.05 * self.rise)
        end = float(x[-k:].mean())
        self.settled = bool(self.learned and flat
                            and end >= self.top - max(3 * self.se, 0.1 * self.rise))

    def step_at(self, fraction: float) -> int:
        idx = np.flatnonzero(self.level >= self.start + fraction * self.rise)
        return int(self.steps[idx[0]]) if idx.size else int(self.steps[-1]) + 1

"""The health flags on the corpus of real histories (tests/data/real_runs and real_runs_more,
where the GRPO histories that log the health metrics and the runs made to fail are): each run read
into a store as a live dashboard would read it (rows in small batches, NaN and infinite
values as the sources report them), and what was said scored against the truth.

Truth:
- a run made to fail (make_tiny.py's "induced": flag, onset_step) must be flagged with its
  flag (`FAMILY`: a loss made NaN may be said as `nan_loss`) at a row no earlier than its
  onset and at most `WITHIN` logged rows after it;
- any other flag said on a run (severity warning or error: an audit or a solved task is
  said as "information" and is no alarm) is false, unless hindsight over the whole curve
  finds that failure in the run (`hindsight`, written apart from the online rules: it
  reads the whole run, the rules only its past), as on the public runs the issue names.

`python -m tests.health_corpus` prints the table per half.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.store.health import HealthFlag
from tests.real_runs import CORPUS, MORE, Hindsight, half_of

WITHIN = 10  # logged rows after the onset
STRETCH = 20  # rows: how long a failure lasts to count in hindsight
BATCH = 7  # rows per batch, as a live source delivers them
FAMILY = {"loss_spike": {"loss_spike", "nan_loss", "diverging"}}
ALARM = ("warning", "error")


@dataclass
class Run:
    name: str
    half: str
    steps: list[int]
    rows: list[dict[str, float]]  # canonical names; NaN/inf kept
    induced: dict | None
    flags: list[HealthFlag] = field(default_factory=list)

    def col(self, name: str) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in self.rows], dtype=np.float64)

    def index_of(self, step: int) -> int:
        """The row of the first step at or after `step`."""
        return int(np.searchsorted(np.asarray(self.steps), step))


def load(path: Path) -> Run:
    doc = json.loads(path.read_text())
    steps, rows = [], []
    for r in doc["log_history"]:
        vals = {}
        for k, v in r.items():
            name = mn.metric_name(k)
            if name and isinstance(v, (int, float)) and not isinstance(v, bool):
                vals[name] = float(v)
        steps.append(int(r["step"]))
        rows.append(vals)
    repository = doc.get("source", {}).get("repo") or doc["name"]
    induced = doc.get("induced")
    if induced and induced.get("flag") not in (*mn.HEALTH_FLAGS, *mn.ALERT_FLAGS):
        induced = None  # made healthy, or made for the phases (a pause): no failure
    return Run(doc["name"], half_of(repository), steps, rows, induced)


def read(run: Run) -> Run:
    """Feed a store as a live dashboard would; the flags it says."""
    store = RunStore()
    ref = RunRef("corpus", "real_runs", run.name, run.name)
    for i in range(0, len(run.rows), BATCH):
        chunk = list(zip(run.steps[i : i + BATCH], run.rows[i : i + BATCH], strict=True))
        finite = [(s, {k: v for k, v in r.items() if math.isfinite(v)}) for s, r in chunk]
        bad = [(k, s) for s, r in chunk for k, v in r.items() if not math.isfinite(v)]
        store.apply([ScalarBatch.from_rows(ref, finite, nonfinite=bad)])
    run.flags = list(store.snapshot(ref.key, 2, ()).health)
    return run


def runs() -> list[Run]:
    return [read(load(p)) for p in sorted([*CORPUS.glob("*.json"), *MORE.glob("*.json")])]


def path_of(name: str) -> Path:
    """A run's file, in either folder."""
    return next(p for p in (CORPUS / f"{name}.json", MORE / f"{name}.json") if p.exists())


# -- hindsight: the whole curve, read after the fact --------------------------------


def hindsight(run: Run) -> set[str]:
    """The failures the whole run shows (see the module docstring): a stretch of STRETCH
    rows (a quarter of a shorter run) in which most groups had no reward variance (mean
    frac_reward_zero_std >= 0.8; without it, reward_std ~0), or half the completions were
    clipped; token accuracy that was learned (`Hindsight`) and ends below half its rise."""
    out = set()
    n = len(run.rows)
    w = min(STRETCH, max(n // 4, 5))
    zero, std = run.col("frac_reward_zero_std"), run.col("reward_std")
    if _most(zero, w) >= 0.8 or (np.isnan(zero).all() and -_most(-std, w) <= 1e-6):
        out.add("no_learning_signal")
    if _most(run.col("completions/clipped_ratio"), w) >= 0.5:
        out.add("truncation")
    acc = run.col(mn.ACCURACY)
    ok = np.isfinite(acc)
    if ok.sum() >= 20:
        h = Hindsight(np.asarray(run.steps)[ok], acc[ok])
        end = float(acc[ok][-h.k:].mean())
        if h.learned and end <= h.top - 0.5 * h.rise:
            out.add("task_collapse")
    return out


def _most(x: np.ndarray, w: int) -> float:
    """The highest mean of `w` logged values in a row (NaN when fewer are logged)."""
    x = x[np.isfinite(x)]
    if x.size < w:
        return math.nan
    c = np.concatenate([[0.0], np.cumsum(x)])
    return float(((c[w:] - c[:-w]) / w).max())


def _mean(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else math.nan


# The metric in which each failure made shows
SHOWS_IN = {"no_learning_signal": "frac_reward_zero_std", "truncation": "completions/clipped_ratio",
            "entropy_collapse": mn.ENTROPY, "kl_drift": "kl", "loss_spike": "loss",
            "task_collapse": mn.ACCURACY}


def seen_onset(run: Run) -> int:
    """The row at which a failure made shows in hindsight: the first row from its cause
    (`onset_step`) on at which its metric (`SHOWS_IN`) leaves the range of the 30 rows
    before the cause (beyond 4 of their standard deviations, at least 2% of their level,
    two rows in a row), or turns NaN; the cause's row when it never does."""
    cause = run.index_of(run.induced["onset_step"])
    x = run.col(SHOWS_IN.get(run.induced["flag"], ""))
    before = x[max(cause - 30, 0) : cause]
    before = before[np.isfinite(before)]
    if not before.size:
        return cause
    mu, sd = float(before.mean()), float(before.std())
    bar = max(4 * sd, 0.02 * abs(mu), 1e-9)
    off = ~np.isfinite(x) | (np.abs(x - mu) > bar)
    for i in range(cause, len(x)):
        if off[i] and (i + 1 == len(x) or off[i + 1] or not np.isfinite(x[i])):
            return i
    return cause


# -- scoring --------------------------------------------------------------------------


@dataclass
class Score:
    flagged: list[str] = field(default_factory=list)  # induced or hindsight, said in time
    missed: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)  # said where the run does not fail so
    also: list[str] = field(default_factory=list)  # said on a run made to fail otherwise


def score(all_runs: list[Run], half: str) -> tuple[dict[str, Score], int, int]:
    """Per flag: runs flagged, missed and false in `half`; and (false flags on healthy
    runs, healthy runs) where healthy is neither made to fail nor failing in hindsight."""
    out: dict[str, Score] = defaultdict(Score)
    false_on_healthy = healthy = 0
    for run in (r for r in all_runs if r.half == half):
        truth = hindsight(run)
        said = [f for f in run.flags if f.severity in ALARM]
        ok_names: set[str] = set()
        if run.induced:
            want = run.induced["flag"]
            family = FAMILY.get(want, {want})
            cause = run.index_of(run.induced["onset_step"])
            onset = seen_onset(run)
            hit = any(f.flag in family and cause <= run.index_of(f.seen_at) <= onset + WITHIN
                      for f in said)
            (out[want].flagged if hit else out[want].missed).append(run.name)
            ok_names |= {f.flag for f in said if f.flag in family
                         and run.index_of(f.seen_at) >= cause}
        for t in truth - ({run.induced["flag"]} if run.induced else set()):
            got = any(f.flag == t for f in said)
            (out[t].flagged if got else out[t].missed).append(run.name)
            ok_names.add(t)
        wrong = [f for f in said if f.flag not in ok_names]
        if run.induced:  # what follows from the failure made (a collapse truncates, ...)
            for f in wrong:
                out[f.flag].also.append(run.name)
            continue
        for f in wrong:
            out[f.flag].false.append(run.name)
        if not truth:
            healthy += 1
            false_on_healthy += len(wrong)
    return dict(out), false_on_healthy, healthy


def table(all_runs: list[Run]) -> str:
    lines = []
    for half in ("tune", "check"):
        scores, false_n, healthy = score(all_runs, half)
        lines.append(f"== {half}: {false_n} false flags on {healthy} healthy runs")
        for flag in sorted(scores):
            s = scores[flag]
            lines.append(f"  {flag:18s} flagged {len(s.flagged)} {s.flagged}")
            lines.append(f"  {'':18s} missed  {len(s.missed)} {s.missed}")
            lines.append(f"  {'':18s} false   {len(s.false)} {s.false}")
            if s.also:
                lines.append(f"  {'':18s} (also said on runs made to fail otherwise: "
                             f"{s.also})")
    return "\n".join(lines)


if __name__ == "__main__":
    rs = runs()
    print(table(rs))
    for r in rs:
        for f in r.flags:
            print(f"{r.half:5s} {r.name:55s} {f.flag:18s} {f.from_step:5d} {f.seen_at:5d} "
                  f"{f.severity[:4]} {f.evidence.text[:90]}")

"""Phase classifier and cascade gate on a million-step history (the dashboard
reads a whole run in one update_many call): ours vs the previous classifier
(token accuracy against a fixed ceiling of 1, no noise model), same data; and a poll's
update: 1,000 new values after a million, against 1,000 values into a new classifier
(O(new values): the ratio stays near 1).

Correctness is checked on the same data: the stretched spec-table story's phases in
order, each dated within 5% of the run of its true edge (the segments' buckets hold
16,384 values each at a million; converged, dated by the hold, is the furthest).
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np

from benchmarks.common import Row, best_time
from carl_tui.coherence import CascadeGate, PhaseClassifier

N = 1_000_000


class PreviousClassifier:
    """The previous classifier's batch path (ceiling-based progress, entropy ratios),
    kept here as the timing reference."""

    def __init__(self, points=5, melt=2.0, trans_q=0.25, fall=0.6, cryst_q=0.9, cryst_r=0.5,
                 conv_q=0.95, conv_r=0.25, ceiling=1.0):
        self.p = (points, melt, trans_q, fall, cryst_q, cryst_r, conv_q, conv_r, ceiling)
        self.timeline: list[tuple[int, int]] = []

    def update_many(self, steps, acc, ent):
        points, melt, trans_q, fall, cryst_q, cryst_r, conv_q, conv_r, ceiling = self.p
        a, a0 = _carry(acc, points)
        e, e0 = _carry(ent, points)
        peak = np.maximum.accumulate(np.where(np.isfinite(ent), ent, -np.inf))
        peak = np.where(np.isneginf(peak), np.nan, peak)
        with np.errstate(invalid="ignore", divide="ignore"):
            q = (a - a0) / np.maximum(ceiling - a0, 1e-12)
            r = e / np.maximum(e0, 1e-12)
            a_seen, e_seen = ~np.isnan(a), ~np.isnan(e)
            conds = [
                e_seen & (r >= melt),
                (a_seen & (q >= trans_q)) | (e_seen & (peak >= melt * e0) & (e <= fall * peak)),
                (a_seen | e_seen) & (~a_seen | (q >= cryst_q)) & (~e_seen | (r <= cryst_r)),
                e_seen & (~a_seen | (q >= conv_q)) & (r <= conv_r),
            ]
        labels = np.zeros(steps.size, dtype=np.int8)
        index, pos = 0, 0
        while pos < steps.size and index < 4:
            hit = np.zeros(steps.size - pos, dtype=bool)
            for j in range(index + 1, 5):
                hit |= conds[j - 1][pos:]
            if not hit.any():
                break
            t = pos + int(np.argmax(hit))
            labels[pos:t] = index
            index = max(j for j in range(index + 1, 5) if conds[j - 1][t])
            self.timeline.append((index, int(steps[t])))
            pos = t
        labels[pos:] = index
        return labels


def _carry(x, points):
    seen = np.isfinite(x)
    idx = np.maximum.accumulate(np.where(seen, np.arange(x.size), -1))
    carried = np.where(idx >= 0, x[np.maximum(idx, 0)], np.nan)
    first = x[seen][:points]
    table = np.array([np.nan] + [float(np.median(first[: k + 1])) for k in range(first.size)])
    return carried, table[np.minimum(np.cumsum(seen), first.size)]


def _story():
    from tests.trajectories import grpo_story, sft_story

    sft = sft_story(N, 3, 0.01, 0.05, seed=3)
    acc, ent = sft.progress.copy(), sft.entropy.copy()
    acc[1::3] = math.nan
    ent[2::5] = math.nan
    return sft, acc, ent, grpo_story(N, (-1.0, 3.0), "flat", seed=0)


def _real_curve():
    """A real run of the corpus (TinyLlama SFT, 186 logged values over 2,800 steps)
    stretched to N steps: its level interpolated, its own step-to-step noise added."""
    from tests.real_runs import CORPUS, load_run

    st = load_run(CORPUS / "sft-dheena731-tinyllama-finetune.json").stages[0]
    x = np.linspace(st.steps[0], st.steps[-1], N)
    noise = float(np.median(np.abs(np.diff(st.values, 2)))) / (0.6745 * math.sqrt(6))
    level = np.interp(x, st.steps, np.convolve(st.values, np.ones(5) / 5, mode="same"))
    return np.arange(N), level + np.random.default_rng(1).normal(0, noise, N)


def run() -> list[Row]:
    sft, acc, ent, grpo = _story()
    ours = PhaseClassifier(ceiling=1.0)  # token accuracy, as the store reads it
    ours.update_many(sft.steps, acc, ent)
    story = [(phase.value, step) for phase, step in ours.timeline]
    assert [p for p, _ in story] == list(sft.edges), story
    worst = max(abs(step - sft.edges[phase]) for phase, step in story)
    assert worst <= 0.05 * N, story
    rows = [
        Row("phases update_many 1M steps (SFT story, gaps)",
            best_time(lambda: PhaseClassifier(ceiling=1.0).update_many(sft.steps, acc, ent),
                      repeat=3),
            best_time(lambda: PreviousClassifier().update_many(sft.steps, acc, ent), repeat=3),
            target="O(n), < 1 s", note=f"every phase dated within {worst} steps"),
        Row("phases update_many 1M steps (GRPO reward -1..3)",
            best_time(lambda: PhaseClassifier().update_many(grpo.steps, grpo.progress,
                                                            grpo.entropy), repeat=3),
            best_time(lambda: PreviousClassifier().update_many(grpo.steps, grpo.progress,
                                                               grpo.entropy), repeat=3),
            target="O(n), < 1 s", note="previous: transition from step 25"),
    ]
    tail = slice(N - 1000, N)

    def poll_after_a_million():
        c = PhaseClassifier(ceiling=1.0)
        c.update_many(sft.steps[:N - 1000], acc[:N - 1000], ent[:N - 1000])
        return c

    full = poll_after_a_million()

    def last_poll():
        c = copy.deepcopy(full)
        t0 = time.perf_counter()
        c.update_many(sft.steps[tail], acc[tail], ent[tail])
        return time.perf_counter() - t0

    def fresh_poll():
        c = PhaseClassifier(ceiling=1.0)
        t0 = time.perf_counter()
        c.update_many(sft.steps[:1000], acc[:1000], ent[:1000])
        return time.perf_counter() - t0

    def one_reading():
        c = copy.deepcopy(full)
        t0 = time.perf_counter()
        c._read(int(sft.steps[N - 1001]))
        return time.perf_counter() - t0

    rows.append(Row("phases: a poll of 1,000 values after 1M (vs into a new one)",
                    min(last_poll() for _ in range(5)), min(fresh_poll() for _ in range(5)),
                    target="O(new values)",
                    note=f"reference: the same 1,000 values first (32+ readings); one reading "
                         f"of the segments {1000 * min(one_reading() for _ in range(5)):.2f} ms"))
    real_steps, real_acc = _real_curve()
    rows.append(Row("phases update_many 1M steps (a real SFT curve, stretched)",
                    best_time(lambda: PhaseClassifier(ceiling=1.0).update_many(
                        real_steps, real_acc, np.full(N, math.nan)), repeat=3),
                    best_time(lambda: PreviousClassifier().update_many(
                        real_steps, real_acc, np.full(N, math.nan)), repeat=3),
                    target="O(n), < 1 s", note="corpus run sft-dheena731, noise as logged"))
    # a metric climbing half a noise unit a value: the gate reads all of it
    climbing = 0.01 * np.arange(N) + np.random.default_rng(0).normal(0, 0.02, N)

    def cascade():
        g = CascadeGate()
        g.update_many(np.arange(N), climbing)
        assert not g.fired  # still climbing: every value is read

    rows.append(Row("cascade update_many 1M values (climbing)", best_time(cascade, repeat=3),
                    target="O(n)"))
    return rows

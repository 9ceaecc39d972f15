"""The phase method (coherence/phases.py): segments found by a penalised change-point
search, each phase dated where the curve changed and said when it was seen; the
reference table (docs/maths.md) within one step of each band's edge; words that keep their
meaning (plateau far below the ceiling, crystallisation near it or at the gate, converged
only after it); pure noise stays in baseline; any reward scale gives the same phases; the
labels do not depend on how the steps are cut into batches; a million steps in batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.coherence import PHASES, Phase, PhaseClassifier
from carl_tui.coherence.phases import PhaseSettings, _Buckets, segment
from tests.trajectories import REWARD_SCALES, TABLE_EDGES, grpo_story, noise_run, sft_story

NAN = math.nan

# (steps, phase, token accuracy, entropy) from the reference run.
TABLE = [
    (10, Phase.BASELINE, 0.03, 1.0),
    (10, Phase.MELTING, 0.08, 9.3),
    (5, Phase.TRANSITION, 0.65, 4.1),
    (10, Phase.CRYSTALLISATION, 0.99, 0.4),
    (11, Phase.CONVERGED, 0.993, 0.12),
]


def table_run(seed: int, acc_noise: float = 0.01, ent_noise: float = 0.08):
    """A noisy trajectory with the table's instant steps: (accuracy, entropy)."""
    rng = np.random.default_rng(seed)
    acc, ent = [], []
    for n, _phase, a, e in TABLE:
        acc += list(np.clip(a + rng.normal(0, acc_noise, n), 0, 1))
        ent += list(e * np.exp(rng.normal(0, ent_noise, n)))
    return np.array(acc), np.array(ent)


def classified(acc, ent, steps=None, batch: int | None = None, **kw) -> PhaseClassifier:
    c = PhaseClassifier(**kw)
    steps = np.arange(len(acc)) if steps is None else np.asarray(steps)
    acc, ent = np.asarray(acc, dtype=float), np.asarray(ent, dtype=float)
    batch = batch or len(acc)
    for i in range(0, len(acc), batch):
        c.update_many(steps[i:i + batch], acc[i:i + batch], ent[i:i + batch])
    return c


def dated(c: PhaseClassifier) -> dict[str, int]:
    """The story as it reads now: each phase's first step."""
    return {p.value: s for p, s in c.timeline}


# ----------------------------------------------------- the reference table (docs/maths.md)


@pytest.mark.parametrize("seed", range(6))
def test_the_spec_table_reads_within_one_step_of_each_band_edge(seed):
    acc, ent = table_run(seed)
    c = classified(acc, ent)
    story = dated(c)
    edges = dict(zip(("melting", "transition", "crystallisation", "converged"), TABLE_EDGES))
    for phase, edge in edges.items():
        assert phase in story and abs(story[phase] - edge) <= 1, (phase, story)
    assert list(story) == ["baseline", "melting", "transition", "crystallisation",
                           "converged"]
    assert c.phase is Phase.CONVERGED
    # Each phase is said after it began, never before: online.
    for s in c.said:
        assert s.seen_at >= s.from_step


@pytest.mark.parametrize("length", [46, 200, 1000])
def test_gradual_noisy_runs_read_the_phases_in_order_near_their_edges(length):
    """The table stretched to any length, each change a ramp: the phases in the table's
    order, each dated within a tenth of the run of its true edge (converged, which the
    hold dates, within an eighth)."""
    traj = sft_story(length)
    c = classified(traj.progress, traj.entropy, traj.steps)
    story = dated(c)
    order = [p for p in ("baseline", "melting", "transition", "crystallisation",
                         "converged") if p in story]
    assert [p for p in story if p in order] == order
    assert order == ["baseline", "melting", "transition", "crystallisation", "converged"]
    for phase in ("melting", "transition", "crystallisation"):
        assert abs(story[phase] - traj.edges[phase]) <= max(3, length // 10), (phase, story)
    assert abs(story["converged"] - traj.edges["converged"]) <= max(5, length // 8), story


# ------------------------------------------------------------------ words


def climb(n_flat: int, n_up: int, n_top: int, lo: float, hi: float, noise: float, seed=0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.full(n_flat, lo), np.linspace(lo, hi, n_up), np.full(n_top, hi)])
    return x + rng.normal(0, noise, x.size)


def test_a_climb_from_the_first_values_is_a_transition_from_them():
    """A fine-tune of a pretrained model climbs in its first logged values: in transition
    from the first step, said within a few values."""
    acc = climb(0, 40, 30, 0.15, 0.97, 0.01)
    c = classified(acc, np.full(acc.size, NAN), np.arange(1, acc.size + 1),
                   ceiling=1.0)
    trans = next(s for s in c.said if s.phase is Phase.TRANSITION)
    assert trans.from_step == 1
    assert trans.seen_at <= 8
    assert c.phase in (Phase.CRYSTALLISATION, Phase.CONVERGED)


def test_too_few_values_say_so():
    c = classified([0.1, 0.2, 0.3], [NAN] * 3, ceiling=1.0)
    assert c.values == 3 and c.phase is Phase.BASELINE
    assert c.evidence() == "3 values, too few to tell"


def test_a_stop_far_below_the_ceiling_is_a_plateau_not_crystallisation():
    """Token accuracy that climbs 0.10 -> 0.42 and stops: the model still gets most tokens
    wrong; a plateau, dated where the flat part began."""
    acc = climb(5, 30, 60, 0.10, 0.42, 0.01)
    c = classified(acc, np.full(acc.size, NAN), ceiling=1.0)
    assert c.phase is Phase.PLATEAU
    assert 30 <= c.since_step <= 40
    assert all(s.phase not in (Phase.CRYSTALLISATION, Phase.CONVERGED) for s in c.said)


def test_a_stop_near_the_ceiling_crystallises_then_converges_after_a_hold():
    acc = climb(5, 30, 90, 0.10, 0.97, 0.01)
    c = classified(acc, np.full(acc.size, NAN), ceiling=1.0)
    story = dated(c)
    assert 32 <= story["crystallisation"] <= 45
    assert story["converged"] > story["crystallisation"]
    assert c.phase is Phase.CONVERGED


def test_a_paused_climb_is_a_plateau_then_transition_again_when_it_resumes():
    x = np.concatenate([climb(5, 20, 40, 0.1, 0.4, 0.01, 1), climb(0, 40, 30, 0.4, 0.95,
                                                                    0.01, 2)])
    c = classified(x, np.full(x.size, NAN), ceiling=1.0)
    assert Phase.PLATEAU in [s.phase for s in c.said]  # said live, while it paused
    story = [(p.value, s) for p, s in c.timeline]
    resumed = [s for p, s in story if p == "transition" and s > 40]
    assert resumed and 60 <= resumed[0] <= 72, story  # dated where the climb resumed
    assert c.phase in (Phase.CRYSTALLISATION, Phase.CONVERGED)


def test_with_a_gate_on_the_metric_crystallisation_is_the_gates_step():
    """The gate reads this metric: crystallisation waits for it and is dated at its step,
    and converged comes after."""
    acc = climb(5, 30, 90, 0.10, 0.995, 0.002)
    c = PhaseClassifier(ceiling=1.0)
    c.gate_watched = True
    c.update_many(np.arange(60), acc[:60], np.full(60, NAN))
    assert c.phase is Phase.PLATEAU  # near the ceiling, the gate not fired yet
    c.gate_fired(60)
    c.update_many(np.arange(60, acc.size), acc[60:], np.full(acc.size - 60, NAN))
    story = dated(c)
    assert story["crystallisation"] == 60
    assert story.get("converged", math.inf) > 60


def test_a_reward_without_ceiling_crystallises_only_with_low_entropy():
    r = climb(5, 40, 60, 0.2, 1.6, 0.03)
    flat = classified(r, np.full(r.size, 1.0) + np.random.default_rng(0).normal(0, .01, r.size))
    assert flat.phase is Phase.PLATEAU
    falling = np.concatenate([np.full(45, 1.0), np.linspace(1.0, 0.3, 60)])
    low = classified(r, falling)
    assert low.phase in (Phase.CRYSTALLISATION, Phase.CONVERGED)


@pytest.mark.parametrize("length", [200, 1000])
@pytest.mark.parametrize("seed", range(4))
def test_pure_noise_stays_in_baseline(length, seed):
    traj = noise_run(length, seed)
    c = classified(traj.progress, traj.entropy, traj.steps)
    assert [s.phase for s in c.said] == [Phase.BASELINE]


@pytest.mark.parametrize("scale", REWARD_SCALES)
def test_any_reward_scale_gives_the_same_phases(scale):
    base = grpo_story(300, (0.0, 1.0), "absent")
    traj = grpo_story(300, scale, "absent")
    a = classified(base.progress, base.entropy, base.steps)
    b = classified(traj.progress, traj.entropy, traj.steps)
    assert a.said == b.said and a.said[-1].phase is not Phase.BASELINE


# ------------------------------------------------------------------ the machinery


@given(st.lists(st.integers(1, 40), min_size=1, max_size=12))
@settings(max_examples=40, deadline=None)
def test_labels_do_not_depend_on_how_the_steps_are_cut(cuts):
    traj = sft_story(200, seed=3)
    whole = classified(traj.progress, traj.entropy, traj.steps)
    c = PhaseClassifier()
    i = 0
    pieces = []
    for k in cuts * 20:
        if i >= len(traj):
            break
        sl = slice(i, i + k)
        pieces.append(c.update_many(traj.steps[sl], traj.progress[sl], traj.entropy[sl]))
        i += k
    if i < len(traj):
        pieces.append(c.update_many(traj.steps[i:], traj.progress[i:], traj.entropy[i:]))
    assert c.said == whole.said
    labels = np.concatenate(pieces)
    assert labels.tolist() == PhaseClassifier().update_many(
        traj.steps, traj.progress, traj.entropy).tolist()


def test_each_step_is_labelled_with_what_was_said_then():
    acc, ent = table_run(0)
    c = PhaseClassifier()
    labels = c.update_many(np.arange(acc.size), acc, ent)
    for s in c.said:
        assert labels[s.seen_at] == s.phase.index or s.corrected_at == s.seen_at
    assert PHASES[labels[-1]] is c.phase


def test_buckets_hold_the_exact_sums_of_every_value():
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000)
    b = _Buckets(64)
    for i in range(0, 1000, 37):
        b.add(x[i:i + 37], np.arange(i, min(i + 37, 1000)))
    assert b.n == 1000 and b.stats.shape[0] <= 64 and b.size == 16
    i = np.arange(1000.0)
    np.testing.assert_allclose(b.stats.sum(axis=0),
                               [1000, i.sum(), x.sum(), (i * i).sum(), (i * x).sum(),
                                (x * x).sum()])
    assert b.first_step[0] == 0 and b.last_step[-1] == 999


def test_segment_finds_the_change_points_of_a_broken_line():
    x = np.concatenate([np.full(50, 0.1), np.linspace(0.1, 0.9, 50), np.full(50, 0.9)])
    x = x + np.random.default_rng(1).normal(0, 0.01, x.size)
    b = _Buckets(64)
    b.add(x, np.arange(x.size))
    segs = segment(b.stats, b.first_step, b.last_step, 0.01, PhaseSettings())
    edges = [s.first_step for s in segs]
    # the two changes are edges (flat parts may be cut again by the light penalty)
    assert any(abs(e - 50) <= 4 for e in edges) and any(abs(e - 100) <= 4 for e in edges)
    climbing = [s for s in segs if s.slope_z > 10]
    assert climbing and all(40 <= s.first_step and s.last_step <= 110 for s in climbing)
    assert all(abs(s.slope_z) < 4 for s in segs if s.last_step < 46 or s.first_step > 104)


def test_a_million_steps_in_batches():
    n = 1_000_000
    rng = np.random.default_rng(0)
    t = np.arange(n, dtype=np.float64)
    acc = 0.05 + 0.9 / (1 + np.exp(-(t - 300_000) / 30_000)) + rng.normal(0, 0.01, n)
    c = PhaseClassifier(ceiling=1.0)
    for i in range(0, n, 100_000):
        c.update_many(t[i:i + 100_000].astype(np.int64), acc[i:i + 100_000],
                      np.full(min(100_000, n - i), NAN))
    story = dated(c)
    # a logistic climb has no sharp start: dated in its slow beginning, before 35% of it
    assert 50_000 <= story["transition"] <= 282_000  # 35% of the climb is done at 282,000
    assert c.phase in (Phase.CRYSTALLISATION, Phase.CONVERGED)
    assert c._buckets.stats.shape[0] <= 64


def test_update_many_validation():
    c = PhaseClassifier()
    with pytest.raises(ValueError):
        c.update_many([1, 2], [0.1], [0.1, 0.2])
    assert c.update_many([], [], []).size == 0


def test_phase_enum():
    assert [p.value for p in PHASES] == ["baseline", "melting", "transition",
                                         "crystallisation", "converged", "plateau"]
    assert Phase.PLATEAU.index == 5

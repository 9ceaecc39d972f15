"""Online phase classifier: reproduces the reference table, uses only the past,
is scale-free in entropy, and update_many equals a loop of update calls."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.coherence import PHASES, Phase, PhaseClassifier

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
    """A noisy trajectory shaped like the table: (accuracy, entropy, expected labels)."""
    rng = np.random.default_rng(seed)
    acc, ent, labels = [], [], []
    for n, phase, a, e in TABLE:
        acc += list(np.clip(a + rng.normal(0, acc_noise, n), 0, 1))
        ent += list(e * np.exp(rng.normal(0, ent_noise, n)))
        labels += [phase] * n
    return np.array(acc), np.array(ent), labels


def run_loop(acc, ent, steps=None, **kw):
    c = PhaseClassifier(**kw)
    steps = range(len(acc)) if steps is None else steps
    return [c.update(s, a, e) for s, a, e in zip(steps, acc, ent)], c


@pytest.mark.parametrize("seed", range(6))
def test_reproduces_reference_table_online(seed):
    acc, ent, expected = table_run(seed)
    labels, c = run_loop(acc, ent)
    assert labels == expected
    assert c.timeline == [
        (Phase.BASELINE, 0),
        (Phase.MELTING, 10),
        (Phase.TRANSITION, 20),
        (Phase.CRYSTALLISATION, 25),
        (Phase.CONVERGED, 35),
    ]
    assert c.phase is Phase.CONVERGED and c.since_step == 35


def test_labels_depend_only_on_the_prefix():
    acc, ent, _ = table_run(0)
    full, _ = run_loop(acc, ent)
    for n in range(1, len(acc) + 1):
        prefix, c = run_loop(acc[:n], ent[:n])
        assert prefix == full[:n]
        # The batch path on the prefix agrees as well.
        batch = PhaseClassifier().update_many(np.arange(n), acc[:n], ent[:n])
        assert [PHASES[i] for i in batch] == full[:n]
        assert c.phase == full[n - 1]


@pytest.mark.parametrize("scale", [0.01, 0.37, 25.0])
def test_entropy_scale_free(scale):
    acc, ent, expected = table_run(1)
    labels, _ = run_loop(acc, ent * scale)
    assert labels == expected


def test_sparse_logging_carries_values_forward():
    """Accuracy logged every 5th step (the table's boundaries are multiples of 5)."""
    acc, ent, expected = table_run(2)
    sparse = acc.copy()
    sparse[np.arange(len(acc)) % 5 != 0] = NAN
    labels, _ = run_loop(sparse, ent)
    assert labels == expected
    # Entropy missing at the first melting step: melting starts one step later.
    gaps = ent.copy()
    gaps[10] = NAN
    labels, _ = run_loop(acc, gaps)
    assert labels[10] is Phase.BASELINE and labels[11:] == expected[11:]


def test_entropy_only_run():
    acc, ent, expected = table_run(3, ent_noise=0.05)
    labels, c = run_loop(np.full_like(acc, NAN), ent)
    assert labels == expected
    assert math.isnan(c.accuracy) and c.entropy_baseline == pytest.approx(1.0, abs=0.1)


def test_accuracy_only_run_stops_at_crystallisation():
    acc, _, _ = table_run(4)
    labels, _ = run_loop(acc, np.full_like(acc, NAN))
    # No entropy: no melting (baseline until the climb) and no convergence call.
    assert labels[:20] == [Phase.BASELINE] * 20
    assert labels[20:25] == [Phase.TRANSITION] * 5
    assert labels[25:] == [Phase.CRYSTALLISATION] * 21


def test_task_reward_without_entropy_spike():
    """A GRPO-like run: entropy drifts down, reward climbs; no melting phase."""
    steps = np.arange(300)
    reward = 0.05 + 0.93 / (1 + np.exp(-(steps - 120) / 12))
    entropy = 2.0 * (0.08 + 0.92 * np.exp(-steps / 60))
    labels, c = run_loop(reward, entropy)
    kinds = [p for p, _ in c.timeline]
    assert kinds == [Phase.BASELINE, Phase.TRANSITION, Phase.CRYSTALLISATION, Phase.CONVERGED]
    assert Phase.MELTING not in labels
    starts = dict(c.timeline)
    # Transition once reward progress >= 0.25; crystallisation once >= 0.9.
    q = (reward - np.median(reward[:5])) / (1 - np.median(reward[:5]))
    assert starts[Phase.TRANSITION] == int(np.argmax(q >= 0.25))
    assert starts[Phase.CRYSTALLISATION] == int(np.argmax(q >= 0.9))


def test_phase_enum_and_indices():
    assert [p.value for p in PHASES] == [
        "baseline",
        "melting",
        "transition",
        "crystallisation",
        "converged",
    ]
    assert Phase("melting") is Phase.MELTING and Phase.MELTING == "melting"
    assert [p.index for p in PHASES] == list(range(5))
    c = PhaseClassifier()
    assert c.phase is Phase.BASELINE and c.since_step is None and c.timeline == []
    assert c.update(7, NAN, NAN) is Phase.BASELINE and c.timeline == [(Phase.BASELINE, 7)]


def test_update_many_table_and_million_steps():
    acc, ent, expected = table_run(5)
    c = PhaseClassifier()
    idx = c.update_many(np.arange(46), acc, ent)
    assert idx.dtype == np.int8 and [PHASES[i] for i in idx] == expected
    # A long run, stretched: one reference step -> 20,000 logged steps.
    rep = 20_000
    big_acc, big_ent = np.repeat(acc, rep), np.repeat(ent, rep)
    big_acc[1::3] = NAN
    big_ent[2::5] = NAN
    d = PhaseClassifier()
    out = d.update_many(np.arange(big_acc.size), big_acc, big_ent)
    assert [p for p, _ in d.timeline] == list(PHASES)
    assert [s for _, s in d.timeline] == [0, 10 * rep, 20 * rep, 25 * rep, 35 * rep]
    assert (np.diff(out) >= 0).all()


def _state(c):
    return repr(
        (
            c.phase,
            c.timeline,
            c.accuracy,
            c.entropy,
            c.acc_baseline,
            c.entropy_baseline,
            c.peak_entropy,
            c._acc_base,
            c._ent_base,
        )
    )


acc_values = st.one_of(
    st.sampled_from([NAN, 0.0, 0.03, 0.3, 0.65, 0.95, 0.99, 1.0]), st.floats(0, 1)
)
ent_values = st.one_of(st.sampled_from([NAN, 0.1, 1.0, 2.0, 9.3, 0.4]), st.floats(0, 12))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(acc_values, ent_values), max_size=60), st.data())
def test_update_many_equals_loop(rows, data):
    n = len(rows)
    acc = [a for a, _ in rows]
    ent = [e for _, e in rows]
    steps = list(range(5, 5 + 2 * n, 2))
    labels, loop = run_loop(acc, ent, steps, baseline_points=3)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=5)))
    many = PhaseClassifier(baseline_points=3)
    got: list[int] = []
    for a, b in itertools.pairwise([0, *cuts, n]):
        if b - a == 1 and a % 2:
            got.append(many.update(steps[a], acc[a], ent[a]).index)
        else:
            got.extend(many.update_many(steps[a:b], acc[a:b], ent[a:b]).tolist())
    assert got == [p.index for p in labels]
    assert _state(many) == _state(loop)
    assert all(x <= y for x, y in itertools.pairwise(got))  # phases only move forward


def test_update_many_validation():
    with pytest.raises(ValueError):
        PhaseClassifier().update_many([0, 1], [0.1], [1.0, 2.0])
    assert PhaseClassifier().update_many([], [], []).size == 0

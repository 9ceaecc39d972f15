"""Coherence, phase-transition and cascade gates: edge cases, references, update_many."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.coherence import SIGMA, CascadeGate, CoherenceGate, PhaseTransitionGate

NAN = math.nan

# ------------------------------------------------------------------ coherence gate


@pytest.mark.parametrize(
    ("phi", "act", "level"),
    [
        (1.0, True, "high"),
        (0.8, True, "high"),
        (0.7999999, True, "medium"),
        (0.5, True, "medium"),
        (0.4999999, True, "low"),
        (SIGMA, True, "low"),
        (0.1874999, False, "abstain"),
        (0.0, False, "abstain"),
        (NAN, False, "abstain"),
    ],
)
def test_coherence_gate_levels(phi, act, level):
    d = CoherenceGate().decide(phi)
    assert (d.act, d.level) == (act, level)


def test_coherence_gate_custom_threshold():
    g = CoherenceGate(threshold=0.6)
    assert g.decide(0.55).level == "abstain"
    assert g.decide(0.6).level == "medium"
    assert CoherenceGate(threshold=0.05).decide(0.06).level == "low"


# ------------------------------------------------------------------ phase-transition gate


def ref_transition(steps, values, entropies, window=5, min_above=3, threshold=0.99):
    """Plain-list reference: (trigger_step, window, peak, peak_step)."""
    win: list[float] = []
    trigger = None
    peak = peak_step = None
    for s, v, e in zip(steps, values, entropies):
        if e is not None and not math.isnan(e) and (peak is None or e > peak):
            peak, peak_step = e, s
        if v is None or math.isnan(v):
            continue
        win = (win + [v])[-window:]
        if trigger is None and len([x for x in win if x >= threshold]) >= min_above:
            trigger = s
    return trigger, win, peak, peak_step


def test_transition_fires_once_at_first_qualifying_step():
    g = PhaseTransitionGate()
    vals = [0.5, 0.99, 0.995, 0.2, 0.99, 1.0, 1.0]
    fired = [g.update(10 * i, v) for i, v in enumerate(vals)]
    assert fired == [False, False, False, False, True, False, False]
    assert g.fired and g.trigger_step == 40
    assert g.above == 4 and g.progress_text == "4/5 >= 0.99"
    assert g.window_values == [0.995, 0.2, 0.99, 1.0, 1.0]


def test_transition_exact_threshold_counts_and_window_slides():
    g = PhaseTransitionGate(window=5, min_above=3, threshold=0.99)
    for i, v in enumerate([0.99, 0.5, 0.5, 0.5, 0.5, 0.99, 0.99]):
        assert g.update(i, v) is False  # the first 0.99 left the window before the third
    assert g.above == 2 and g.window_values == [0.5, 0.5, 0.5, 0.99, 0.99]
    assert g.update(7, 0.99) is True and g.trigger_step == 7
    h = PhaseTransitionGate(window=3, min_above=3, threshold=0.5)
    assert [h.update(i, 0.5) for i in range(3)] == [False, False, True]
    assert PhaseTransitionGate(window=1, min_above=1).update(3, 0.99) is True
    assert PhaseTransitionGate().update(0, 0.98999999) is False


def test_transition_nan_values_are_skipped():
    g = PhaseTransitionGate()
    out = [g.update(i, v) for i, v in enumerate([0.99, NAN, 0.99, None, NAN, 0.99])]
    assert out == [False, False, False, False, False, True]
    assert g.trigger_step == 5 and g.window_values == [0.99, 0.99, 0.99]


def test_transition_tracks_peak_entropy():
    g = PhaseTransitionGate()
    for i, (v, e) in enumerate([(0.1, 1.0), (NAN, 9.3), (0.2, NAN), (0.3, 9.3), (0.5, 4.0)]):
        g.update(i, v, e)
    assert g.peak_entropy == 9.3 and g.peak_entropy_step == 1
    assert PhaseTransitionGate().peak_entropy is None


def test_transition_validation():
    with pytest.raises(ValueError):
        PhaseTransitionGate(window=3, min_above=4)
    with pytest.raises(ValueError):
        PhaseTransitionGate(window=0, min_above=0)


value_lists = st.lists(
    st.one_of(st.sampled_from([0.99, 0.98, 1.0, 0.5, NAN]), st.floats(0.9, 1.0)), max_size=60
)


def _transition_state(g):
    return (g.fired, g.trigger_step, g.window_values, g.above, g.peak_entropy, g.peak_entropy_step)


@settings(max_examples=150, deadline=None)
@given(
    value_lists,
    st.data(),
    st.integers(1, 6),
    st.integers(1, 6),
)
def test_transition_update_many_equals_loop_and_reference(values, data, window, min_above):
    min_above = min(min_above, window)
    n = len(values)
    ents = data.draw(
        st.lists(st.sampled_from([NAN, 1.0, 2.0, 9.3, 9.3, 0.1]), min_size=n, max_size=n)
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    steps = list(range(100, 100 + 3 * n, 3))
    kw = {"window": window, "min_above": min_above, "threshold": 0.99}
    loop = PhaseTransitionGate(**kw)
    fired_loop = [loop.update(s, v, e) for s, v, e in zip(steps, values, ents)]
    many = PhaseTransitionGate(**kw)
    fired_many = []
    bounds = [0, *cuts, n]
    for a, b in itertools.pairwise(bounds):
        if b - a == 1 and a % 2:  # mix single updates with batches
            fired_many.append(many.update(steps[a], values[a], ents[a]))
        else:
            fired_many.append(many.update_many(steps[a:b], values[a:b], ents[a:b]))
    assert _transition_state(many) == _transition_state(loop)
    assert any(fired_many) == any(fired_loop) == loop.fired
    trigger, win, peak, peak_step = ref_transition(steps, values, ents, **kw)
    assert loop.trigger_step == trigger and loop.window_values == win
    assert (loop.peak_entropy, loop.peak_entropy_step) == (peak, peak_step)


def test_transition_update_many_million_steps_fast():
    n = 1_000_000
    rng = np.random.default_rng(0)
    acc = np.clip(np.linspace(0.0, 1.02, n) + rng.normal(0, 0.01, n), 0, 1)
    acc[::7] = np.nan
    ent = rng.random(n)
    g = PhaseTransitionGate()
    assert g.update_many(np.arange(n), acc, ent) is True
    valid = np.flatnonzero(~np.isnan(acc))
    ge = acc[valid] >= 0.99
    counts = np.convolve(ge, np.ones(5, dtype=int))[: valid.size]
    assert g.trigger_step == int(valid[np.argmax(counts >= 3)])
    assert g.peak_entropy_step == int(np.argmax(ent))


# ------------------------------------------------------------------ cascade gate


def ref_cascade(values, window=10, warmup=20, level=0.8, rise_z=6.0, flat=0.1, patience=5):
    """The documented rule, over the full history; returns the index of the firing value."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    idx = [i for i, v in enumerate(values) if v is not None and not math.isnan(v)]
    ms: list[float] = []
    streak = 0
    for n in range(1, len(xs) + 1):
        if n < window:
            continue
        total = 0.0
        for v in xs[n - window : n]:
            total += v
        ms.append(total / window)
        if n < max(warmup, 2 * window):
            streak = 0
            continue
        base = np.array(xs[:warmup])
        b, s = float(np.mean(base)), float(np.std(base))
        m, lo, hi = ms[-1], min(ms), max(ms)
        m_prev = ms[-1 - window]
        ok = (
            m > b + rise_z * s / math.sqrt(window)
            and m > b
            and hi > lo
            and m >= lo + level * (hi - lo)
            and m - m_prev <= flat * (hi - lo)
        )
        streak = streak + 1 if ok else 0
        if streak >= patience:
            return idx[n - 1]
    return None


def _sigmoid_run(seed, n=400, noise=0.03):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return t, 0.1 + 0.7 / (1 + np.exp(-(t - 150) / 10)) + rng.normal(0, noise, n)


@pytest.mark.parametrize("seed", range(4))
def test_cascade_fires_after_learning_curve_settles(seed):
    t, x = _sigmoid_run(seed)
    g = CascadeGate()
    assert g.stage == "A"
    fired_at = [s for s, v in zip(t, x) if g.update(int(s), float(v))]
    assert len(fired_at) == 1 and g.fired and g.stage == "B"
    assert 175 <= g.trigger_step <= 230  # after the climb (centre 150), once it is high
    assert g.trigger_step == ref_cascade(list(x))
    # Self-calibrating: an affine rescale of the metric gives the same switch step.
    h = CascadeGate()
    h.update_many(t, x * 250.0 - 7.0)
    assert h.trigger_step == g.trigger_step


def test_cascade_never_fires_on_noise_without_learning():
    rng = np.random.default_rng(1)
    g = CascadeGate()
    assert g.update_many(np.arange(200_000), rng.normal(0.3, 0.1, 200_000)) is False
    assert not g.fired and g.trigger_step is None and g.stage == "A"


def test_cascade_step_change_from_zero_rewards():
    x = np.r_[np.zeros(50), np.ones(100)]
    g = CascadeGate()
    g.update_many(np.arange(150), x)
    # window full of ones at 59; m - m_{n-10} small from 68; five in a row: 72.
    assert g.trigger_step == 72 == ref_cascade(list(x))
    assert "stage B" in g.progress_text


def test_cascade_skips_nan():
    _t, x = _sigmoid_run(0)
    with_gaps = []
    for v in x:
        with_gaps.extend([NAN, v] if v > 0.5 else [v])
    g = CascadeGate()
    for i, v in enumerate(with_gaps):
        g.update(i, v)
    ref = ref_cascade(with_gaps)
    assert g.trigger_step == ref is not None
    assert math.isnan(with_gaps[ref - 1])


def _cascade_state(g):
    return repr(
        (
            g.fired,
            g.trigger_step,
            g.streak,
            g.count,
            g.lo,
            g.hi,
            g.smoothed,
            g.baseline_mean,
            g.baseline_std,
            list(g._raw),
            list(g._smooth),
        )
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5, NAN]), st.floats(0, 1)), max_size=80),
    st.data(),
)
def test_cascade_update_many_equals_loop_and_reference(values, data):
    kw = {"window": 3, "warmup": 4, "level": 0.5, "rise_z": 0.5, "flat": 0.5, "patience": 2}
    n = len(values)
    steps = list(range(0, 2 * n, 2))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=5)))
    loop = CascadeGate(**kw)
    fired_loop = [loop.update(s, v) for s, v in zip(steps, values)]
    many = CascadeGate(**kw)
    fired_many = []
    bounds = [0, *cuts, n]
    for a, b in itertools.pairwise(bounds):
        if b - a == 1 and a % 2:
            fired_many.append(many.update(steps[a], values[a]))
        else:
            fired_many.append(many.update_many(steps[a:b], values[a:b]))
    assert _cascade_state(many) == _cascade_state(loop)
    assert any(fired_many) == any(fired_loop)
    ref = ref_cascade(values, **kw)
    assert loop.trigger_step == (None if ref is None else steps[ref])


def test_cascade_random_batches_fire_often_enough_to_matter():
    """The equality test above is only meaningful if those settings do fire."""
    rng = np.random.default_rng(3)
    kw = {"window": 3, "warmup": 4, "level": 0.5, "rise_z": 0.5, "flat": 0.5, "patience": 2}
    fired = 0
    for _ in range(50):
        x = rng.choice([0.0, 1.0, 0.5, NAN, rng.random()], size=60)
        loop, many = CascadeGate(**kw), CascadeGate(**kw)
        for i, v in enumerate(x):
            loop.update(i, v)
        many.update_many(np.arange(60), x)
        assert _cascade_state(loop) == _cascade_state(many)
        fired += loop.fired
    assert 5 <= fired <= 49

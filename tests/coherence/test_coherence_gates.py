"""Coherence, phase-transition and cascade gates: the rules of docs/maths.md, edge cases,
plain-Python references, update_many against a loop, and the cascade deciding
within its documented bounds on runs shaped like real ones."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.coherence import SIGMA, CascadeGate, CoherenceGate, PhaseTransitionGate
from tests.trajectories import CASCADE_KINDS, REWARD_SCALES, cascade_case

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


@pytest.mark.parametrize(
    ("threshold", "phi", "act", "level"),
    [
        # The threshold only replaces SIGMA as the floor of "low".
        (0.9, 0.85, True, "high"),
        (0.9, 0.8, True, "high"),
        (0.9, 0.6, True, "medium"),
        (0.9, 0.45, False, "abstain"),
        (0.6, 0.55, True, "medium"),
        (0.6, 0.5, True, "medium"),
        (0.6, 0.4999999, False, "abstain"),
        (0.3, 0.3, True, "low"),
        (0.3, 0.2999999, False, "abstain"),
        (0.05, 0.06, True, "low"),
        (0.05, SIGMA, True, "low"),
        (0.05, 0.0499999, False, "abstain"),
        (0.05, NAN, False, "abstain"),
    ],
)
def test_coherence_gate_threshold_is_the_floor_of_low(threshold, phi, act, level):
    d = CoherenceGate(threshold=threshold).decide(phi)
    assert (d.act, d.level) == (act, level)


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

EPS = float(np.finfo(np.float64).eps)
CASCADE_DEFAULTS = {"window": 10, "warmup": 20, "level": 0.8, "rise_z": 6.0, "climb_z": 1.0,
                    "patience": 5, "plateau": 200, "tolerance": 3.0}


def ref_cascade(values, window=10, warmup=20, level=0.8, rise_z=6.0, climb_z=1.0, patience=5,
                plateau=200, tolerance=3.0):
    """The documented rule over the full history, value by value in plain Python;
    returns (index of the value it switches on, reason) or (None, "")."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    idx = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    sqpi2 = math.sqrt(math.pi) / 2
    span, horizon, half = max(2 * window, 10), 2 * window, plateau // 2
    run_sum, run_diff = [0.0], [0.0]  # running sums by count
    levels: dict[int, float] = {}
    lo, hi, first, streak = math.inf, -math.inf, NAN, 0
    for n in range(1, len(xs) + 1):
        x = xs[n - 1]
        run_sum.append(run_sum[-1] + x)
        run_diff.append(run_diff[-1] + (abs(x - xs[n - 2]) if n >= 2 else 0.0))
        m = NAN
        if n >= window:
            m = (run_sum[n] - run_sum[n - window]) / window
            levels[n] = m
            first = m if math.isnan(first) else first
            lo, hi = min(lo, m), max(hi, m)
        ndiff = min(span, n - 1)
        sigma = sqpi2 * (run_diff[n] - run_diff[max(n - span, 1)]) / max(ndiff, 1)
        sigma = max(sigma, 64 * EPS * abs(run_sum[n]))  # running sums round
        noise = sigma / math.sqrt(window)
        ready = n >= max(warmup, 2 * window) and n >= window
        back = levels[n - horizon] if n - horizon >= window else first
        back2 = levels[n - 2 * horizon] if n - 2 * horizon >= window else NAN
        gain, before = m - back, back - back2
        bar = climb_z * math.sqrt(2.0) * noise
        climbing = gain > bar or (before > bar and before < 0.75 * (hi - lo) and gain > 0)
        near = m >= lo + level * (hi - lo)
        settled = ready and m - first > rise_z * noise and near and not climbing
        streak = streak + 1 if settled else 0
        if streak >= patience:
            return idx[n - 1], "rise"
        if ready and n >= 2 * half:
            mid, start = run_sum[n - half], run_sum[n - 2 * half]
            drift = ((run_sum[n] - mid) - (mid - start)) / max(half, 1)
            recent = (run_sum[n] - mid) / max(half, 1)
            slack = (tolerance + math.sqrt(2 * math.log(max(n / window, 2)))) * noise
            if (drift <= tolerance * sigma * math.sqrt(2.0 / max(half, 1))
                    and (recent >= hi - slack or near)):
                return idx[n - 1], "flat"
    return None, ""


#: How soon each kind must decide, in steps after it is sustained (see CascadeGate).
RISE_BOUND = 8 * CASCADE_DEFAULTS["window"]
FLAT_SLACK = 15


@pytest.mark.parametrize("kind", CASCADE_KINDS)
def test_cascade_cases_decide_within_their_bound(kind):
    """Each case over 25 seeds, on three reward scales: it decides (or, still
    climbing, does not), by the route and within the bound the docstring states,
    at the step the plain-Python reference gives."""
    for seed in range(25):
        case = cascade_case(kind, seed)
        g = CascadeGate()
        g.update_many(case.steps, case.values)
        ref_index, ref_reason = ref_cascade(case.values)
        assert g.trigger_step == (None if ref_index is None else int(case.steps[ref_index]))
        assert g.reason == ref_reason
        for scale in REWARD_SCALES[1:]:  # self-calibrating: any affine scale, same switch
            h = CascadeGate()
            h.update_many(case.steps, cascade_case(kind, seed, scale=scale).values)
            assert h.trigger_step == g.trigger_step
        if kind == "climbing":
            assert not g.fired and g.stage == "A"
            continue
        assert g.fired and g.stage == "B", (kind, seed)
        if kind in ("already_high", "pure_noise"):
            # flat from the start: by the flat route, after `plateau` values, not before
            assert g.reason == "flat"
            assert g.plateau <= g.trigger_step <= case.sustained_from + g.plateau + FLAT_SLACK
        else:
            # a rise that levels off: after the climb, within 8 windows of settling
            assert g.reason == "rise"
            assert case.climbing_until < g.trigger_step <= case.sustained_from + RISE_BOUND


def test_cascade_old_stall_a_high_run_switches():
    """The reported stall: 500 steps at 0.95 +- 0.02 never switched; now it does."""
    rng = np.random.default_rng(5)
    g = CascadeGate()
    assert g.update_many(np.arange(1, 501), 0.95 + rng.normal(0, 0.02, 500)) is True
    assert g.trigger_step == 200 and g.reason == "flat"


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
    assert len(fired_at) == 1 and g.fired and g.stage == "B" and g.reason == "rise"
    # after the climb (centre 150, 95% done by 180), within 8 windows of it
    assert 180 < g.trigger_step <= 190 + RISE_BOUND
    assert g.trigger_step == ref_cascade(list(x))[0]
    # Self-calibrating: an affine rescale of the metric gives the same switch step.
    h = CascadeGate()
    h.update_many(t, x * 250.0 - 7.0)
    assert h.trigger_step == g.trigger_step


def test_cascade_pure_noise_never_takes_the_rise_route():
    """Noise around a low level is flat: it switches by the flat route, after
    `plateau` values and not one sooner, whatever the plateau."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.3, 0.1, 200_000)
    for plateau in (200, 1000, 20_000):
        g = CascadeGate(plateau=plateau)
        g.update_many(np.arange(x.size), x)
        assert g.reason == "flat" and g.trigger_step >= plateau - 1
        assert g.trigger_step == ref_cascade(x[: g.trigger_step + 1], plateau=plateau)[0]


def test_cascade_step_change_from_zero_rewards():
    x = np.r_[np.zeros(50), np.ones(100)]
    g = CascadeGate()
    g.update_many(np.arange(150), x)
    # levels full of ones from value 60 (index 59); the gain over the last 20 values
    # is zero from index 79; rose, near its best, not climbing: five in a row -> 83.
    assert g.trigger_step == 83 == ref_cascade(list(x))[0]
    assert g.reason == "rise" and "stage B" in g.progress_text


def test_cascade_skips_nan():
    _t, x = _sigmoid_run(0)
    with_gaps = []
    for v in x:
        with_gaps.extend([NAN, v] if v > 0.5 else [v])
    g = CascadeGate()
    for i, v in enumerate(with_gaps):
        g.update(i, v)
    ref, _ = ref_cascade(with_gaps)
    assert g.trigger_step == ref is not None
    assert math.isnan(with_gaps[ref - 1])


def test_cascade_waiting_for_says_what_it_waits_for():
    g = CascadeGate()
    assert g.waiting_for == "calibrating: 0/20 values"
    g.update_many(np.arange(7), np.full(7, 0.1))
    assert g.waiting_for == "calibrating: 7/20 values"
    rng = np.random.default_rng(0)
    low = 0.1 + rng.normal(0, 0.01, 30)
    g.update_many(np.arange(7, 37), low)
    assert g.waiting_for.startswith("no clear rise yet: task reward 0.1")
    assert "switches if it stays flat for 200 values (37 so far)" in g.waiting_for
    climb = np.linspace(0.1, 0.6, 12) + rng.normal(0, 0.01, 12)
    g.update_many(np.arange(37, 49), climb)
    assert "is still climbing (+" in g.waiting_for and "over the last 20 values" in g.waiting_for
    high = 0.6 + rng.normal(0, 0.01, 200)
    for i, v in enumerate(high):
        before = g.waiting_for
        if g.update(49 + i, v):
            # the sentence just before switching counted the last step down
            assert "must hold near its best" in before and "for 1 more steps" in before
            break
    assert g.fired and g.waiting_for.startswith("nothing: switched at step")
    assert "held near its best" in g.waiting_for
    named = CascadeGate(name="rewards/reverse/mean")
    named.update_many(np.arange(30), np.full(30, 0.4))
    assert named.waiting_for.startswith("no clear rise yet: rewards/reverse/mean 0.4")


def test_cascade_keeps_its_state_once_switched():
    x = np.r_[np.zeros(50), np.ones(100)]
    g = CascadeGate()
    assert g.update_many(np.arange(150), x) is True
    state = _cascade_state(g)
    assert g.count == 84  # the values up to the switch
    assert g.update(150, 5.0) is False and g.update_many([151, 152], [0.0, 9.0]) is False
    assert _cascade_state(g) == state and g.trigger_step == 83


def test_cascade_validation():
    for bad in ({"window": 0}, {"warmup": 0}, {"patience": 0}, {"plateau": 0}):
        with pytest.raises(ValueError):
            CascadeGate(**bad)
    with pytest.raises(ValueError):
        CascadeGate().update_many([0, 1], [0.5])


def _cascade_state(g):
    return repr(sorted(vars(g).items()))


SMALL = {"window": 3, "warmup": 4, "level": 0.5, "rise_z": 0.5, "climb_z": 1.0, "patience": 2,
         "plateau": 12, "tolerance": 3.0}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5, NAN]), st.floats(0, 1)), max_size=80),
    st.data(),
)
def test_cascade_update_many_equals_loop_and_reference(values, data):
    n = len(values)
    steps = list(range(0, 2 * n, 2))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=5)))
    loop = CascadeGate(**SMALL)
    fired_loop = [loop.update(s, v) for s, v in zip(steps, values)]
    many = CascadeGate(**SMALL)
    fired_many = []
    bounds = [0, *cuts, n]
    for a, b in itertools.pairwise(bounds):
        if b - a == 1 and a % 2:
            fired_many.append(many.update(steps[a], values[a]))
        else:
            fired_many.append(many.update_many(steps[a:b], values[a:b]))
    assert _cascade_state(many) == _cascade_state(loop)
    assert any(fired_many) == any(fired_loop) == loop.fired
    ref, reason = ref_cascade(values, **SMALL)
    assert loop.trigger_step == (None if ref is None else steps[ref])
    assert loop.reason == reason


def test_cascade_random_batches_fire_often_enough_to_matter():
    """The equality test above is only meaningful if those settings fire, by both routes."""
    rng = np.random.default_rng(3)
    reasons = []
    for _ in range(60):
        x = rng.choice([0.0, 1.0, 0.5, NAN, rng.random()], size=60)
        loop, many = CascadeGate(**SMALL), CascadeGate(**SMALL)
        for i, v in enumerate(x):
            loop.update(i, v)
        many.update_many(np.arange(60), x)
        assert _cascade_state(loop) == _cascade_state(many)
        reasons.append(loop.reason)
    assert reasons.count("rise") >= 5 and reasons.count("flat") >= 5

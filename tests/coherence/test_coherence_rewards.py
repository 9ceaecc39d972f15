"""CARL reward components against loop-by-loop float64 references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.coherence import (
    CarlScore,
    carl_composite,
    carl_score_from_logits,
    cloud_quality,
    discontinuity_score,
    multiscale_coherence,
    score_sequence,
)

# ------------------------------------------------------------------ slow references


def ref_multiscale(phi):
    t = len(phi)
    if t < 2:
        return 0.5
    num = den = 0.0
    j = 0
    while 2**j <= t and j < 16:
        size = 2**j
        stds = []
        for b in range(t // size):
            block = [float(v) for v in phi[b * size : (b + 1) * size]]
            mean = sum(block) / size
            stds.append(math.sqrt(sum((v - mean) ** 2 for v in block) / size))
        c = 1.0 - sum(stds) / len(stds)
        c = min(max(c, 0.0), 1.0)
        w = math.sqrt(2.0) ** j
        num += w * c
        den += w
        j += 1
    return num / den


def ref_cloud(p_next, phi):
    if len(phi) == 0:
        return 0.0
    return sum(float(p) * float(f) for p, f in zip(p_next, phi)) / len(phi)


def ref_discontinuity(phi):
    if len(phi) < 2:
        return 0.5
    scores = []
    for k in range(len(phi) - 1):
        d = float(phi[k + 1]) - float(phi[k])
        if abs(d) > 0.03:
            if d > 0:
                scores.append(0.8 if phi[k] < 0.5 else 0.3)
            else:
                scores.append(0.2 if phi[k] > 0.7 else 0.5)
    return sum(scores) / len(scores) if scores else 0.5


def ref_softmax(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    z = sum(e)
    return [x / z for x in e]


phis = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=0, max_size=300)

# ------------------------------------------------------------------ multiscale


def test_multiscale_hand_values():
    assert multiscale_coherence([]) == 0.5
    assert multiscale_coherence([0.3]) == 0.5
    assert multiscale_coherence(np.full(37, 0.42)) == 1.0
    # [0, 1, 0, 1]: c0 = 1 (w 1), c1 = 0.5 (w sqrt 2), c2 = 0.5 (w 2).
    expected = (1 + 0.5 * math.sqrt(2) + 0.5 * 2) / (1 + math.sqrt(2) + 2)
    assert multiscale_coherence([0, 1, 0, 1]) == pytest.approx(expected, abs=1e-15)
    # Tail dropped: T = 5 uses blocks [0:4] at scales 2 and 4, T = 3 one block of 2.
    assert multiscale_coherence([0, 1, 0, 1, 0.5]) == pytest.approx(
        ref_multiscale([0, 1, 0, 1, 0.5]), abs=1e-15
    )
    assert multiscale_coherence([0.2, 0.2, 1.0]) == pytest.approx(1.0)


def test_multiscale_caps_at_16_scales():
    rng = np.random.default_rng(0)
    phi = rng.random(70000)  # 2^16 <= T: 17 scales possible, 16 used
    assert multiscale_coherence(phi) == pytest.approx(ref_multiscale_fast(phi), abs=1e-12)


def ref_multiscale_fast(phi):
    # Same definition as ref_multiscale but with numpy blocks, for the long input.
    t = len(phi)
    num = den = 0.0
    for j in range(16):
        size = 2**j
        if size > t:
            break
        blocks = np.asarray(phi[: (t // size) * size], dtype=np.float64).reshape(-1, size)
        mean = blocks.mean(axis=1, keepdims=True)
        std = np.sqrt(((blocks - mean) ** 2).mean(axis=1))
        num += 2 ** (j / 2) * min(max(1 - std.mean(), 0.0), 1.0)
        den += 2 ** (j / 2)
    return num / den


@settings(max_examples=60, deadline=None)
@given(phis)
def test_multiscale_matches_reference(phi):
    got = multiscale_coherence(phi)
    assert got == pytest.approx(ref_multiscale(phi), abs=1e-12)
    assert 0.0 <= got <= 1.0


# ------------------------------------------------------------------ cloud


def test_cloud_quality_values_and_validation():
    assert cloud_quality([], []) == 0.0
    assert cloud_quality([0.5, 1.0], [0.2, 0.4]) == pytest.approx((0.1 + 0.4) / 2)
    with pytest.raises(ValueError):
        cloud_quality([0.5], [0.2, 0.4])


@settings(max_examples=60, deadline=None)
@given(st.data(), phis)
def test_cloud_matches_reference(data, phi):
    p = data.draw(st.lists(st.floats(0, 1), min_size=len(phi), max_size=len(phi)))
    got = cloud_quality(p, phi)
    assert got == pytest.approx(ref_cloud(p, phi), abs=1e-12)
    assert 0.0 <= got <= 1.0


# ------------------------------------------------------------------ discontinuity


def test_discontinuity_hand_values():
    assert discontinuity_score([]) == 0.5
    assert discontinuity_score([0.9]) == 0.5
    assert discontinuity_score([0.5, 0.52, 0.54]) == 0.5  # no jump above 0.03
    assert discontinuity_score([0.2, 0.6]) == 0.8  # rise from < 0.5
    assert discontinuity_score([0.5, 0.6]) == 0.3  # rise from >= 0.5
    assert discontinuity_score([0.8, 0.6]) == 0.2  # fall from > 0.7
    assert discontinuity_score([0.7, 0.6]) == 0.5  # fall from <= 0.7
    assert discontinuity_score([0.2, 0.6, 0.9, 0.6]) == pytest.approx((0.8 + 0.3 + 0.2) / 3)
    # A step of exactly the threshold is not an event.
    assert discontinuity_score([0.0, 0.03]) == 0.5
    assert discontinuity_score([0.0, 0.0301]) == 0.8


@settings(max_examples=60, deadline=None)
@given(phis)
def test_discontinuity_matches_reference(phi):
    got = discontinuity_score(phi)
    assert got == pytest.approx(ref_discontinuity(phi), abs=1e-12)
    # A mean of scores in [0.2, 0.8], to rounding: three 0.8s average 0.8000000000000002.
    assert 0.2 - 1e-15 <= got <= 0.8 + 1e-15


def test_discontinuity_of_equal_scores_is_that_score_to_rounding():
    phi = [0.0, 0.125, 0.25, 1.0]  # three rises from below 0.5: each scores 0.8
    got = discontinuity_score(phi)
    assert got == pytest.approx(0.8, abs=1e-15) and got == ref_discontinuity(phi)


# ------------------------------------------------------------------ composite / score


def test_composite_weights():
    assert carl_composite(1.0, 0.0, 0.0) == 0.5
    assert carl_composite(0.0, 1.0, 0.0) == pytest.approx(0.3)
    assert carl_composite(0.0, 0.0, 1.0) == pytest.approx(0.2)
    assert carl_composite(1.0, 1.0, 1.0) == 1.0


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_composite_in_unit_interval(a, b, c):
    r = carl_composite(a, b, c)
    assert 0.0 <= r <= 1.0
    assert r == pytest.approx(min(max(0.5 * a + 0.3 * b + 0.2 * c, 0), 1))


@settings(max_examples=40, deadline=None)
@given(st.data(), phis)
def test_score_sequence_matches_components(data, phi):
    p = data.draw(st.lists(st.floats(0, 1), min_size=len(phi), max_size=len(phi)))
    s = score_sequence(phi, p)
    assert isinstance(s, CarlScore)
    assert s.multiscale == pytest.approx(ref_multiscale(phi), abs=1e-12)
    assert s.cloud == pytest.approx(ref_cloud(p, phi), abs=1e-12)
    assert s.discontinuity == pytest.approx(ref_discontinuity(phi), abs=1e-12)
    assert s.composite == pytest.approx(
        0.5 * s.multiscale + 0.3 * s.cloud + 0.2 * s.discontinuity, abs=1e-12
    )
    assert 0.0 <= s.composite <= 1.0
    assert math.isnan(s.entropy_mean)
    if phi:
        assert s.phi_mean == pytest.approx(sum(phi) / len(phi), abs=1e-12)
        mean = sum(phi) / len(phi)
        std = math.sqrt(sum((v - mean) ** 2 for v in phi) / len(phi))
        assert s.phi_std == pytest.approx(std, abs=1e-12)


def test_score_empty_sequence():
    s = score_sequence([], [], [])
    assert s.multiscale == 0.5 and s.cloud == 0.0 and s.discontinuity == 0.5
    assert s.composite == pytest.approx(0.35)
    assert math.isnan(s.phi_mean) and math.isnan(s.entropy_mean)
    d = s.to_dict("carl/")
    assert set(d) == {
        "carl/composite",
        "carl/multiscale",
        "carl/cloud",
        "carl/discontinuity",
        "carl/phi_mean",
        "carl/phi_std",
        "carl/entropy_mean",
    }


def test_carl_score_from_logits_against_reference():
    rng = np.random.default_rng(11)
    t, v = 24, 30
    logits = rng.standard_normal((t, v)) * np.linspace(0.1, 6, t)[:, None]
    nxt = rng.integers(0, v, size=t)
    phi_ref, p_ref, h_ref = [], [], []
    for k in range(t):
        p = ref_softmax(list(logits[k]))
        h = -sum(x * math.log(x) for x in p if x > 0)
        h_ref.append(h)
        phi_ref.append(1 - h / math.log(v))
        p_ref.append(p[nxt[k]])
    s = carl_score_from_logits(logits, nxt)
    assert s.multiscale == pytest.approx(ref_multiscale(phi_ref), abs=1e-12)
    assert s.cloud == pytest.approx(ref_cloud(p_ref, phi_ref), abs=1e-12)
    assert s.discontinuity == pytest.approx(ref_discontinuity(phi_ref), abs=1e-12)
    assert s.entropy_mean == pytest.approx(sum(h_ref) / t, abs=1e-12)
    assert s.phi_mean == pytest.approx(sum(phi_ref) / t, abs=1e-12)
    expected = 0.5 * s.multiscale + 0.3 * s.cloud + 0.2 * s.discontinuity
    assert s.composite == pytest.approx(expected, abs=1e-15)


def test_cloud_uses_probability_of_the_following_token():
    """Position k is paired with token k + 1 (next_tokens[k]), not token k."""
    v = 8
    seq = [1, 4, 2, 7, 3]
    logits = np.full((len(seq) - 1, v), -30.0)
    for k in range(len(seq) - 1):
        logits[k, seq[k + 1]] = 30.0  # position k confidently predicts token k + 1
    aligned = carl_score_from_logits(logits, np.array(seq[1:]))
    shifted = carl_score_from_logits(logits, np.array(seq[:-1]))
    assert aligned.cloud == pytest.approx(1.0, abs=1e-9)
    assert shifted.cloud < 1e-9

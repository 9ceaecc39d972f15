"""phi / entropy / token statistics against a slow float64 reference, numpy and torch."""

from __future__ import annotations

import math
import subprocess
import sys
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from carl_tui.coherence import (
    DEFECT_THRESHOLD,
    KAPPA,
    SIGMA,
    entropy_from_logits,
    phi_from_entropy,
    phi_from_logits,
    t_star,
    token_stats,
    token_stats_full,
)
from carl_tui.coherence import phi as phi_module

# ------------------------------------------------------------------ slow reference


def ref_row(row, token=None):
    """Entropy (nats) and P(token) of softmax(row), with math.exp/math.log per entry."""
    vals = [float(v) for v in row]
    m = max(vals)
    exps = [math.exp(v - m) if v != -math.inf else 0.0 for v in vals]
    z = math.fsum(exps)
    h = 0.0
    terms = []
    for e in exps:
        p = e / z
        if p > 0:
            terms.append(-p * math.log(p))
    h = math.fsum(terms)
    p_tok = exps[token] / z if token is not None else None
    return h, p_tok


def ref_entropy(x):
    x = np.asarray(x)
    flat = x.reshape(-1, x.shape[-1])
    return np.array([ref_row(r)[0] for r in flat]).reshape(x.shape[:-1])


# ------------------------------------------------------------------ constants


def test_constants_exact():
    assert KAPPA == 64 / 3 and SIGMA == 0.1875 and DEFECT_THRESHOLD == 0.03
    assert Fraction(64, 3) * Fraction(3, 16) == 4
    assert KAPPA * SIGMA == 4.0
    assert (t_star(768), t_star(3072), t_star(384)) == (16384, 65536, 8192)
    assert t_star(0) == 0 and t_star(1) == 21 and t_star(2) == 42
    with pytest.raises(TypeError):
        t_star(1.5)


@given(st.integers(min_value=0, max_value=10**30))
def test_t_star_is_exact_floor(d):
    assert t_star(d) == math.floor(Fraction(64, 3) * d)


# ------------------------------------------------------------------ numpy path


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 2), (7, 33), (2, 3, 50), (3, 1000)])
def test_entropy_matches_reference(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    got = entropy_from_logits(x)
    assert got.shape == shape[:-1] and got.dtype == np.float64
    np.testing.assert_allclose(got, ref_entropy(x), rtol=0, atol=2e-6)


def test_entropy_large_vocab_row_chunks(monkeypatch):
    """Rows wider than a chunk, and many chunks, give the reference values."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 20000)) * 4).astype(np.float32)
    expected = ref_entropy(x)
    np.testing.assert_allclose(entropy_from_logits(x), expected, atol=5e-6, rtol=0)
    monkeypatch.setattr(phi_module, "_CHUNK_BYTES", 3 * 20000 * 4)  # 3 rows per chunk
    np.testing.assert_allclose(entropy_from_logits(x), expected, atol=5e-6, rtol=0)


def test_entropy_float32_big_logits_accuracy():
    """float64 accumulation keeps float32 input within 1e-5 of exact float64."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 151936)) * 3).astype(np.float32)
    exact = []
    for row in x.astype(np.float64):
        m = row.max()
        e = np.exp(row - m)
        s = math.fsum(e)
        p = e / s
        exact.append(-math.fsum(p[p > 0] * np.log(p[p > 0])))
    np.testing.assert_allclose(entropy_from_logits(x), exact, atol=1e-5, rtol=0)


def test_phi_known_values():
    v = 1000
    phi, h = phi_from_logits(np.zeros((2, v)))
    np.testing.assert_allclose(h, math.log(v), rtol=1e-12)
    np.testing.assert_allclose(phi, 0.0, atol=1e-12)
    peaked = np.zeros((1, v))
    peaked[0, 17] = 1000.0
    phi, h = phi_from_logits(peaked)
    assert h[0] == 0.0 and phi[0] == 1.0
    # Two equally likely tokens: H = ln 2, phi = 1 - ln 2 / ln V.
    two = np.full((1, v), -np.inf)
    two[0, [3, 9]] = 5.0
    phi, h = phi_from_logits(two)
    assert h[0] == pytest.approx(math.log(2), abs=1e-12)
    assert phi[0] == pytest.approx(1 - math.log(2) / math.log(v), abs=1e-12)


def test_masked_minus_inf_entries_contribute_nothing():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    x[1, ::2] = -np.inf
    x[3, 5:] = -np.inf
    got = entropy_from_logits(x)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref_entropy(x), atol=2e-6, rtol=0)
    np.testing.assert_allclose(got[1], ref_entropy(x[1, 1::2]), atol=2e-6)


def test_phi_from_entropy_linear_and_clipped():
    v = 151936
    h = np.array([0.0, 1.0, math.log(v), math.log(v) + 1e-9, -1e-12])
    phi = phi_from_entropy(h, v)
    np.testing.assert_allclose(phi, [1.0, 1 - 1 / math.log(v), 0.0, 0.0, 1.0], atol=1e-15)
    # Mean phi of a batch is 1 - mean(H) / ln V.
    assert phi_from_entropy(h[:3], v).mean() == pytest.approx(
        float(phi_from_entropy(h[:3].mean(), v))
    )
    with pytest.raises(ValueError):
        phi_from_entropy(1.0, 1)


def test_token_stats_against_reference_and_alignment():
    rng = np.random.default_rng(4)
    t, v = 9, 40
    x = rng.standard_normal((t, v)) * 2
    tokens = rng.integers(0, v, size=t)
    phi, p_next, h = token_stats_full(x, tokens)
    for k in range(t):
        h_ref, p_ref = ref_row(x[k], int(tokens[k]))
        assert h[k] == pytest.approx(h_ref, abs=1e-12)
        assert phi[k] == pytest.approx(1 - h_ref / math.log(v), abs=1e-12)
        assert p_next[k] == pytest.approx(p_ref, rel=1e-12)
    phi2, p2 = token_stats(x, tokens)
    np.testing.assert_array_equal(phi2, phi)
    np.testing.assert_array_equal(p2, p_next)
    # p_next[k] reads row k at next_tokens[k], not row k + 1 or row k - 1.
    sharp = np.full((3, 5), -20.0)
    sharp[0, 1] = sharp[1, 2] = sharp[2, 3] = 20.0
    _, p = token_stats(sharp, np.array([1, 2, 3]))
    assert (p > 0.999).all()
    _, p = token_stats(sharp, np.array([2, 3, 4]))
    assert (p < 1e-6).all()


def test_token_stats_validation():
    x = np.zeros((3, 5))
    with pytest.raises(ValueError):
        token_stats(x, np.zeros(2, dtype=int))
    with pytest.raises(IndexError):
        token_stats(x, np.array([0, 1, 5]))
    with pytest.raises(TypeError):
        token_stats(x, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError):
        token_stats(np.zeros((2, 3, 5)), np.zeros(2, dtype=int))
    phi, p = token_stats(np.zeros((0, 5)), np.zeros(0, dtype=int))
    assert phi.shape == p.shape == (0,)


def test_no_full_size_temporary():
    """The numpy path allocates far less than one extra copy of the logits."""
    x = np.random.default_rng(5).standard_normal((256, 8192)).astype(np.float32)
    tokens = np.zeros(256, dtype=int)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        token_stats(x, tokens)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - base < 0.2 * x.nbytes


def test_import_does_not_load_torch():
    code = (
        "import sys, carl_tui.coherence as c; "
        "assert 'torch' not in sys.modules and 'textual' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


# ------------------------------------------------------------------ properties

logit_rows = arrays(
    np.float64,
    st.tuples(st.integers(1, 4), st.integers(2, 60)),
    elements=st.floats(-50, 50, allow_nan=False),
)


@settings(max_examples=80, deadline=None)
@given(logit_rows, st.floats(-1e3, 1e3, allow_nan=False))
def test_phi_bounds_and_shift_invariance(x, c):
    phi, h = phi_from_logits(x)
    assert ((phi >= 0) & (phi <= 1)).all()
    assert (h >= 0).all() and (h <= math.log(x.shape[-1]) + 1e-9).all()
    np.testing.assert_allclose(phi_from_logits(x + c)[0], phi, atol=1e-9)
    np.testing.assert_allclose(h, ref_entropy(x), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5000), st.floats(-100, 100, allow_nan=False))
def test_uniform_gives_zero_and_peaked_gives_one(v, level):
    phi, _ = phi_from_logits(np.full((1, v), level, dtype=np.float32))
    assert phi[0] == pytest.approx(0.0, abs=1e-6)
    x = np.full((1, v), level)
    x[0, v // 2] = level + 200.0
    phi, _ = phi_from_logits(x)
    assert phi[0] == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------ torch path


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("chunk_size", [1, 3, 32])
def test_torch_token_stats_equals_numpy(torch, chunk_size):
    from carl_tui.coherence import token_stats_torch

    rng = np.random.default_rng(6)
    b, t, v = 3, 11, 3001
    x = (rng.standard_normal((b, t, v)) * 3).astype(np.float32)
    x[1, 2, :100] = -np.inf
    tokens = rng.integers(0, v, size=(b, t))
    phi_t, p_t = token_stats_torch(torch.from_numpy(x), torch.from_numpy(tokens), chunk_size)
    assert phi_t.dtype == torch.float32 and p_t.dtype == torch.float32
    assert tuple(phi_t.shape) == (b, t)
    for i in range(b):
        phi, p = token_stats(x[i], tokens[i])
        np.testing.assert_allclose(phi_t[i].numpy(), phi, atol=1e-5, rtol=0)
        np.testing.assert_allclose(p_t[i].numpy(), p, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_torch_half_precision_inputs(torch, dtype_name):
    from carl_tui.coherence import token_stats_torch

    rng = np.random.default_rng(7)
    x = torch.from_numpy((rng.standard_normal((2, 5, 777)) * 3).astype(np.float32))
    x = x.to(getattr(torch, dtype_name))
    tokens = torch.from_numpy(rng.integers(0, 777, size=(2, 5)))
    phi_t, p_t = token_stats_torch(x, tokens, chunk_size=2)
    up = x.float().numpy()
    for i in range(2):
        phi, p = token_stats(up[i], tokens[i].numpy())
        np.testing.assert_allclose(phi_t[i].numpy(), phi, atol=1e-5, rtol=0)
        np.testing.assert_allclose(p_t[i].numpy(), p, atol=1e-6, rtol=1e-5)
    assert x.dtype == getattr(torch, dtype_name)  # input untouched


def test_torch_does_not_modify_float32_input(torch):
    from carl_tui.coherence import token_stats_torch

    x = torch.randn(1, 4, 50)
    before = x.clone()
    token_stats_torch(x, torch.zeros(1, 4, dtype=torch.long))
    assert torch.equal(x, before)
    with pytest.raises(ValueError):
        token_stats_torch(x[0], torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError):
        token_stats_torch(x, torch.zeros(1, 3, dtype=torch.long))


def test_phi_from_logits_torch_equals_numpy(torch):
    from carl_tui.coherence import phi_from_logits_torch

    x = (np.random.default_rng(8).standard_normal((6, 4096)) * 3).astype(np.float32)
    phi_t, h_t = phi_from_logits_torch(x)
    phi, h = phi_from_logits(x)
    assert isinstance(phi_t, np.ndarray) and isinstance(h_t, np.ndarray)
    np.testing.assert_allclose(h_t, h, atol=1e-5, rtol=0)
    np.testing.assert_allclose(phi_t, phi, atol=1e-5, rtol=0)
    np.testing.assert_allclose(phi_from_logits_torch(torch.from_numpy(x))[0], phi, atol=1e-5)

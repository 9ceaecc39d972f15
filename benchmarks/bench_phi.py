"""phi from logits [512, 151936] float32: ours (numpy, torch CPU) vs the reference
approach (materialised softmax, then -(p * log(p + 1e-10)).sum(-1)).

Values are checked against an exact float64 log-sum-exp computation (within 1e-5).
Peak extra memory is measured with tracemalloc, relative to the input size.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from benchmarks.common import Row, best_time
from carl_tui.coherence import entropy_from_logits, phi_from_logits_torch

T, V = 512, 151936
TOLERANCE = 1e-5


def reference_entropy(logits: np.ndarray) -> np.ndarray:
    """The reference reward's approach: full softmax, then log(p + 1e-10)."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return -(p * np.log(p + 1e-10)).sum(axis=-1)


def exact_entropy(logits: np.ndarray, rows: int = 16) -> np.ndarray:
    """float64 throughout, a few rows at a time (ground truth for the checks)."""
    out = np.empty(logits.shape[0])
    for i in range(0, logits.shape[0], rows):
        x = logits[i : i + rows].astype(np.float64)
        b = x - x.max(axis=-1, keepdims=True)
        e = np.exp(b)
        s = e.sum(axis=-1)
        out[i : i + rows] = np.log(s) - (e * b).sum(axis=-1) / s
    return out


def _single_thread(fn):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def peak_extra_bytes(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def run() -> list[Row]:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((T, V), dtype=np.float32)
    logits *= 3
    exact = exact_entropy(logits)

    ours = entropy_from_logits(logits)
    ref = reference_entropy(logits)
    _, ours_torch = phi_from_logits_torch(logits)
    err_ours = float(np.abs(ours - exact).max())
    err_torch = float(np.abs(ours_torch - exact).max())
    err_ref = float(np.abs(ref - exact).max())
    assert err_ours <= TOLERANCE, f"numpy path off by {err_ours:.2e}"
    assert err_torch <= TOLERANCE, f"torch path off by {err_torch:.2e}"
    assert float(np.abs(ours - ref).max()) <= 10 * TOLERANCE, "reference disagrees"

    t_ref = best_time(lambda: reference_entropy(logits), repeat=2, warmup=0)
    t_ours = best_time(lambda: entropy_from_logits(logits), repeat=5)
    t_torch = best_time(lambda: phi_from_logits_torch(logits), repeat=5)
    t_torch_1 = _single_thread(lambda: best_time(lambda: phi_from_logits_torch(logits), repeat=5))
    mem_ours = peak_extra_bytes(lambda: entropy_from_logits(logits)) / logits.nbytes
    mem_ref = peak_extra_bytes(lambda: reference_entropy(logits)) / logits.nbytes

    shape = f"[{T}x{V}] f32"
    return [
        Row(
            f"phi numpy {shape}",
            t_ours,
            t_ref,
            target=">= 2x faster",
            note=f"max err vs exact f64 {err_ours:.1e} (reference's own {err_ref:.1e})",
        ),
        Row(
            f"phi numpy peak extra memory {shape}",
            mem_ours,
            mem_ref,
            unit="x in",
            target="<= 1.2x input",
            note=f"input {logits.nbytes / 2**20:.0f} MiB (tracemalloc)",
        ),
        Row(
            f"phi torch CPU {shape}",
            t_torch,
            t_ref,
            target=">= 5x faster",
            note=f"max err vs exact f64 {err_torch:.1e}; {_threads()} threads",
        ),
        Row(
            f"phi torch CPU {shape}, 1 thread",
            t_torch_1,
            t_ref,
            target=">= 5x faster",
        ),
    ]


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format())

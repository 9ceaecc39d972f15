"""The three CARL reward components, their composite, and a per-sequence score."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .constants import DEFECT_THRESHOLD
from .phi import token_stats_full

MAX_SCALES = 16
W_MULTISCALE = 0.50
W_CLOUD = 0.30
W_DISCONTINUITY = 0.20


def _vector(a, name: str) -> np.ndarray:
    x = np.asarray(a, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    return x


def multiscale_coherence(phi) -> float:
    """Weighted mean over scales 2^j of clip(1 - mean block std, 0, 1), weights 2^(j/2).

    Scale j cuts phi into floor(T / 2^j) whole blocks (tail dropped); population std.
    At most 16 scales; T < 2 gives 0.5.
    """
    x = _vector(phi, "phi")
    t = x.size
    if t < 2:
        return 0.5
    total = 0.0
    weights = 0.0
    j = 0
    while (1 << j) <= t and j < MAX_SCALES:
        size = 1 << j
        blocks = x[: (t // size) * size].reshape(-1, size)
        c = min(max(1.0 - float(blocks.std(axis=1).mean()), 0.0), 1.0)
        w = 2.0 ** (j / 2)
        total += w * c
        weights += w
        j += 1
    return total / weights


def cloud_quality(p_next, phi) -> float:
    """mean_k P_k(token_{k+1}) * phi_k; arrays already aligned. T = 0 gives 0."""
    p = _vector(p_next, "p_next")
    x = _vector(phi, "phi")
    if p.shape != x.shape:
        raise ValueError(f"p_next and phi differ in length: {p.size} vs {x.size}")
    if p.size == 0:
        return 0.0
    return float(np.mean(p * x))


def discontinuity_score(phi) -> float:
    """Mean score of the jumps |phi_{k+1} - phi_k| > DEFECT_THRESHOLD.

    A rise scores 0.8 from phi_k < 0.5, else 0.3; a fall scores 0.2 from
    phi_k > 0.7, else 0.5. No events, or T < 2, gives 0.5.
    """
    x = _vector(phi, "phi")
    if x.size < 2:
        return 0.5
    d = np.diff(x)
    before = x[:-1]
    event = np.abs(d) > DEFECT_THRESHOLD
    if not event.any():
        return 0.5
    rise = np.where(before < 0.5, 0.8, 0.3)
    fall = np.where(before > 0.7, 0.2, 0.5)
    scores = np.where(d > 0, rise, fall)[event]
    return float(scores.mean())


def carl_composite(multiscale: float, cloud: float, discontinuity: float) -> float:
    """0.50 * multiscale + 0.30 * cloud + 0.20 * discontinuity, clipped to [0, 1]."""
    r = W_MULTISCALE * multiscale + W_CLOUD * cloud + W_DISCONTINUITY * discontinuity
    return min(max(r, 0.0), 1.0)


@dataclass(frozen=True)
class CarlScore:
    """The CARL reward of one completion with its components.

    `entropy_mean` is NaN when no entropy was given; phi statistics are NaN for T = 0.
    """

    composite: float
    multiscale: float
    cloud: float
    discontinuity: float
    phi_mean: float
    phi_std: float
    entropy_mean: float

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


def score_sequence(phi, p_next, entropy=None) -> CarlScore:
    """Score one completion from its per-token phi and P(actual next token)."""
    x = _vector(phi, "phi")
    ms = multiscale_coherence(x)
    cq = cloud_quality(p_next, x)
    ds = discontinuity_score(x)
    if entropy is None:
        h_mean = math.nan
    else:
        h = _vector(entropy, "entropy")
        h_mean = float(h.mean()) if h.size else math.nan
    return CarlScore(
        composite=carl_composite(ms, cq, ds),
        multiscale=ms,
        cloud=cq,
        discontinuity=ds,
        phi_mean=float(x.mean()) if x.size else math.nan,
        phi_std=float(x.std()) if x.size else math.nan,
        entropy_mean=h_mean,
    )


def carl_score_from_logits(logits, next_tokens) -> CarlScore:
    """Score from logits [T, V] where next_tokens[k] is the token following position k."""
    phi, p_next, entropy = token_stats_full(logits, next_tokens)
    return score_sequence(phi, p_next, entropy)

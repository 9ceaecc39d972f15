"""The CARL maths: phi, reward components, gates and the phase classifier.

numpy only at import; the torch path in `phi_torch` imports torch lazily.
"""

from .constants import DEFECT_THRESHOLD, KAPPA, SIGMA, t_star
from .gates import CascadeGate, CoherenceGate, GateDecision, PhaseTransitionGate
from .phases import PHASES, Phase, PhaseClassifier
from .phi import (
    entropy_from_logits,
    phi_from_entropy,
    phi_from_logits,
    token_stats,
    token_stats_full,
)
from .phi_torch import phi_from_logits_torch, token_stats_torch
from .rewards import (
    CarlScore,
    carl_composite,
    carl_score_from_logits,
    cloud_quality,
    discontinuity_score,
    multiscale_coherence,
    score_sequence,
)

__all__ = [
    "DEFECT_THRESHOLD",
    "KAPPA",
    "PHASES",
    "SIGMA",
    "CarlScore",
    "CascadeGate",
    "CoherenceGate",
    "GateDecision",
    "Phase",
    "PhaseClassifier",
    "PhaseTransitionGate",
    "carl_composite",
    "carl_score_from_logits",
    "cloud_quality",
    "discontinuity_score",
    "entropy_from_logits",
    "multiscale_coherence",
    "phi_from_entropy",
    "phi_from_logits",
    "phi_from_logits_torch",
    "score_sequence",
    "t_star",
    "token_stats",
    "token_stats_full",
    "token_stats_torch",
]

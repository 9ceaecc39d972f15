"""CARL constants (see the CARL definitions page for their meaning)."""

from __future__ import annotations

import operator

#: "Conservation constant", 64/3.
KAPPA: float = 64 / 3
#: Smallest meaningful phi (3/16); below it an agent abstains.
SIGMA: float = 3 / 16
#: Smallest phi step that counts as a discontinuity event.
DEFECT_THRESHOLD: float = 0.03


def t_star(d: int) -> int:
    """T*(d) = floor(KAPPA * d), in exact integer arithmetic: T*(768) == 16384."""
    d = operator.index(d)
    return (64 * d) // 3

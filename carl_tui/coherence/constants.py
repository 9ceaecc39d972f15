"""CARL constants (docs/maths.md, "Constants", says what they mean)."""

from __future__ import annotations

import math
import operator

#: "Conservation constant", 64/3.
KAPPA: float = 64 / 3
#: Smallest meaningful phi (3/16); below it an agent abstains.
SIGMA: float = 3 / 16
#: Smallest phi step that counts as a discontinuity event.
DEFECT_THRESHOLD: float = 0.03

# Numerics shared by the gates and the phase classifier (not CARL constants).
#: The noise of a series from the mean absolute difference of successive values:
#: sigma = SQRT_PI_2 * mean |x[i+1] - x[i]| for Gaussian noise.
SQRT_PI_2: float = math.sqrt(math.pi) / 2
#: From second differences (blind to a steady trend):
#: sigma = SQRT_PI_12 * mean |x[i+1] - 2 x[i] + x[i-1]| for Gaussian noise.
SQRT_PI_12: float = math.sqrt(math.pi / 12)
#: Relative rounding of running sums (64 float64 epsilons): a noise floor.
SUM_ROUNDING: float = 64 * 2.0**-52


def t_star(d: int) -> int:
    """T*(d) = floor(KAPPA * d), in exact integer arithmetic: T*(768) == 16384."""
    d = operator.index(d)
    return (64 * d) // 3

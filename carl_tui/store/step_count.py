"""How many steps a run logged: distinct steps, not rows.

A step can arrive in several rows (a training dict and an evaluation dict at one
step, a tracker's rows per metric, the end-of-training row, a restart that logs a
step again). A step is looked up among the highest `RECENT` steps seen (a restart
goes back a little, not far), so memory stays bounded; numpy only, no per-step
Python.
"""

from __future__ import annotations

import numpy as np

RECENT = 65_536


class StepCount:
    def __init__(self) -> None:
        self.count = 0
        self._window = np.empty(0, dtype=np.int64)  # the highest steps seen, sorted

    def add(self, steps: np.ndarray) -> int:
        """Count the distinct steps of `steps` not seen before; returns how many."""
        fresh = np.unique(np.asarray(steps, dtype=np.int64))
        w = self._window
        if fresh.size and w.size and fresh[0] <= w[-1]:  # some may have been seen
            at = np.minimum(np.searchsorted(w, fresh), w.size - 1)
            fresh = fresh[w[at] != fresh]
            w = np.union1d(w, fresh)
        else:
            w = np.concatenate([w, fresh])
        self._window = w[-RECENT:]
        self.count += int(fresh.size)
        return int(fresh.size)

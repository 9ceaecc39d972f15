"""Small helpers shared by the benchmark modules."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Row:
    """One line of the report: `ours` vs `reference` in the same unit."""

    name: str
    ours: float
    reference: float | None = None
    unit: str = "s"
    target: str = ""  # e.g. ">= 2x faster"
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.reference is None or self.ours == 0:
            return None
        return self.reference / self.ours

    def format(self) -> str:
        ours = f"{self.ours:.4g} {self.unit}"
        ref = f"{self.reference:.4g} {self.unit}" if self.reference is not None else "-"
        ratio = f"{self.ratio:.2f}x" if self.ratio is not None else "-"
        return f"{self.name:<52} {ours:>14} {ref:>14} {ratio:>9}  {self.target:<22} {self.note}"


HEADER = f"{'benchmark':<52} {'ours':>14} {'reference':>14} {'ref/ours':>9}  {'target':<22} note"


def best_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Best wall time of `repeat` calls, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median_time(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


_TIMED = (
    "import resource, subprocess, sys, time; t0 = time.perf_counter(); "
    "out = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True); "
    "took = time.perf_counter() - t0; sys.stderr.write(out.stdout); "
    "print(took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)"
)


def timed_command(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds from process start to exit, peak resident MB, stdout) of `argv`, run
    by a small process of its own whose only child it is (so the peak is its own)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _TIMED, *argv], check=True,
                         capture_output=True, text=True)
    took, peak = (float(x) for x in out.stdout.split())
    return took, peak, out.stderr

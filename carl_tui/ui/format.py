"""How numbers, durations and ages read on screen: one place for every widget."""

from __future__ import annotations

import math
import time

DASH = "–"
PROVISIONAL = "≈"  # before a value read from a coarse preview, while the history is read


def value_text(v: float | None) -> str:
    """A metric value in a table cell: 4 decimals, 2 from 10 up, scientific when tiny or huge."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return DASH
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e5):
        return f"{v:.3e}"
    return f"{v:.4f}" if a < 10 else f"{v:.2f}"


def short_value(v: float | None, digits: int = 3) -> str:
    """A value inside a sentence: `digits` significant digits."""
    return DASH if v is None else f"{v:.{digits}g}"


def duration_text(seconds: float | None, *, coarse: bool = False) -> str:
    """A span of time: 42s, 3m05s, 2h07m, 3d04h; `coarse`: the largest unit only
    (42s, 3m, 2h, 3d), for ages in a list."""
    if seconds is None:
        return DASH
    s = int(max(0.0, seconds))
    if coarse:
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if s >= size:
                return f"{round(s / size)}{unit}"
        return f"{s}s"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def age_text(t: float | None, now: float | None = None) -> str:
    """How long ago the wall time `t` was: 12s ago, 5m ago, 3.2h ago, never."""
    if t is None:
        return "never"
    dt = max(0.0, (time.time() if now is None else now) - t)
    if dt < 60:
        return f"{dt:.0f}s ago"
    if dt < 3600:
        return f"{dt / 60:.0f}m ago"
    if dt < 86400:
        return f"{dt / 3600:.1f}h ago"
    return f"{dt / 86400:.1f}d ago"


def count_text(n: float) -> str:
    """A large count or axis value: 950, 12.5k, 3M, 1.2G."""
    a = abs(n)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale:
            x = n / scale
            return f"{x:.0f}{unit}" if x == int(x) or abs(x) >= 100 else f"{x:.3g}{unit}"
    return f"{n:.0f}" if n == int(n) else f"{n:.3g}"

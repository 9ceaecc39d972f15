"""How numbers, durations and ages read on screen: one place for every widget."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

DASH = "–"
PROVISIONAL = "≈"  # before a value read from a coarse preview, while the history is read
# Each run state's colour: the status bar's theme variables (readable in every theme).
STATE_COLORS = {"live": "status-good", "finished": "status-done", "stalled": "status-wait",
                "failed": "status-bad", "queued": "status-wait", "stopped": "status-bad"}


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
    """How long ago the wall time `t` was: 12s ago, 5m ago, 3.2h ago, 2.5d ago, 385d ago,
    never."""
    if t is None:
        return "never"
    dt = max(0.0, (time.time() if now is None else now) - t)
    if dt < 60:
        return f"{dt:.0f}s ago"
    if dt < 3600:
        return f"{dt / 60:.0f}m ago"
    if dt < 86400:
        return f"{dt / 3600:.1f}h ago"
    days = dt / 86400
    return f"{days:.1f}d ago" if days < 10 else f"{days:.0f}d ago"  # fits 9 cells


def count_text(n: float) -> str:
    """A large count or axis value: 950, 12.5k, 3M, 1.2G."""
    a = abs(n)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale:
            x = n / scale
            return f"{x:.0f}{unit}" if x == int(x) or abs(x) >= 100 else f"{x:.3g}{unit}"
    return f"{n:.0f}" if n == int(n) else f"{n:.3g}"


ELLIPSIS = "…"


def cut_middle(text: str, width: int, head: int | None = None) -> str:
    """`text` in at most `width` characters. A longer one loses its middle, not its end:
    names that share a start differ at the end ("profiling/Time taken: GRPOTrainer.
    compute_loss" at 22 reads "profili…r.compute_loss"). `head`: how many leading
    characters to keep (by default a third of the room)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = width - 1
    keep = room // 3 if head is None else max(0, min(head, room))
    return text[:keep] + ELLIPSIS + text[len(text) - (room - keep):]


def cut_names(names: Iterable[str], width: int) -> dict[str, str]:
    """Each name cut to `width` (`cut_middle`), distinct names kept distinct: where two
    cuts would read the same, the cut moves until they differ."""
    names = list(dict.fromkeys(names))
    room = max(width - 1, 0)
    default = room // 3
    out = {n: cut_middle(n, width) for n in names}
    for head in [*range(default - 1, -1, -1), *range(default + 1, room + 1)]:
        seen: dict[str, list[str]] = {}
        for n, label in out.items():
            seen.setdefault(label, []).append(n)
        clashing = [n for group in seen.values() if len(group) > 1 for n in group]
        if not clashing:
            break
        for n in clashing:
            out[n] = cut_middle(n, width, head)
    return out

"""The system panel: per GPU a utilization bar, memory used/total, power and temperature
(with the recent utilization as a sparkline), then CPU and RAM when known.

Fed by the run's `SystemView` (`store/system.py`): Trackio's system metrics or a
job's metrics stream. Hidden with the `-hidden` class (the app's toggle key).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from carl_tui.ui.format import age_text

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from carl_tui.store.snapshot import RunSnapshot
    from carl_tui.store.system import GpuView, SystemView

NO_DATA = "no system metrics logged"
BAR_WIDTH = 12
SPARK_WIDTH = 12
_SPARKS = "▁▂▃▄▅▆▇█"


def _frac(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or not whole > 0:
        return None
    return min(1.0, max(0.0, part / whole))


def bar(frac: float | None, width: int = BAR_WIDTH, style: str = "cyan") -> Text:
    """`████░░░░` filled to `frac` (0..1); all faint when unknown."""
    t = Text(no_wrap=True)
    if frac is None or not math.isfinite(frac):
        t.append("·" * width, style="dim")
        return t
    eighths = round(min(1.0, max(0.0, frac)) * width * 8)
    full, part = divmod(eighths, 8)
    t.append("█" * full, style=style)
    if part and full < width:
        t.append(" ▏▎▍▌▋▊▉"[part], style=style)
        full += 1
    t.append("░" * (width - full), style="dim")
    return t


def sparkline(values: np.ndarray, width: int = SPARK_WIDTH, top: float = 100.0) -> str:
    """The last `width` finite values as block characters on a 0..`top` scale."""
    # lazy: numpy off the first frame
    import numpy as np  # the panel is drawn empty in the first frame, before numpy loads

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)][-width:]
    if not v.size:
        return ""
    idx = np.clip(np.round(v / top * (len(_SPARKS) - 1)), 0, len(_SPARKS) - 1).astype(int)
    return "".join(_SPARKS[i] for i in idx)


def memory_text(used_mb: float | None, total_mb: float | None) -> str:
    """`3.6/79.6 GiB`, `512/2048 MiB`, `3.6 GiB`, or `?` (inputs in MiB)."""
    if used_mb is None and total_mb is None:
        return "?"
    big = max(x for x in (used_mb, total_mb) if x is not None) >= 1024
    unit, div = ("GiB", 1024.0) if big else ("MiB", 1.0)
    fmt = "{:.1f}" if big else "{:.0f}"
    used = fmt.format(used_mb / div) if used_mb is not None else "?"
    if total_mb is None:
        return f"{used} {unit}"
    return f"{used}/{fmt.format(total_mb / div)} {unit}"


def _gpu_line(g: GpuView) -> Text:
    s = g.latest
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"GPU{g.index:<2d}", style="bold")
    t.append(" ")
    util = s.utilization
    t.append_text(bar(util / 100.0 if util is not None else None))
    t.append(f" {util:3.0f}%" if util is not None else "    ?", style="bold" if util else "")
    mem_frac = _frac(s.memory_used_mb, s.memory_total_mb)
    mem_style = "red" if mem_frac is not None and mem_frac > 0.95 else ""
    t.append(" · mem ", style="dim")
    t.append(memory_text(s.memory_used_mb, s.memory_total_mb), style=mem_style)
    if s.power_w is not None:
        t.append(" · ", style="dim")
        t.append(f"{s.power_w:.0f} W")
    if s.temperature_c is not None:
        t.append(" · ", style="dim")
        t.append(f"{s.temperature_c:.0f}°C", style="red" if s.temperature_c >= 85 else "")
    spark = sparkline(g.utilization)
    if len(spark) > 1:
        t.append(f"  {spark}", style="cyan")
    return t


def system_text(view: SystemView | None, *, now: float | None = None) -> Text:
    """What the panel shows for one run's system view."""
    if view is None:
        return Text(NO_DATA, style="dim")
    out = Text()
    head = f"{view.samples} sample{'s' if view.samples != 1 else ''}"
    if view.updated_at is not None:
        head += f" · newest {age_text(view.updated_at, time.time() if now is None else now)}"
    out.append(head, style="dim")
    for g in view.gpus:
        out.append("\n")
        out.append_text(_gpu_line(g))
    if view.cpu_percent is not None or view.memory_mb is not None:
        out.append("\n")
        line = Text(no_wrap=True, overflow="ellipsis")
        if view.cpu_percent is not None:
            line.append("CPU  ", style="bold")
            line.append(" ")
            line.append_text(bar(view.cpu_percent / 100.0, style="green"))
            line.append(f" {view.cpu_percent:3.0f}%")
        if view.memory_mb is not None or view.memory_total_mb is not None:
            if view.cpu_percent is not None:
                line.append(" · ", style="dim")
            line.append("RAM ", style="bold")
            line.append(memory_text(view.memory_mb, view.memory_total_mb))
        out.append_text(line)
    if not view.gpus and view.cpu_percent is None and view.memory_mb is None:
        out.append("\n" + NO_DATA, style="dim")
    return out


class SystemPanel(Static):
    """GPUs, CPU and RAM of the current run (hidden with the `-hidden` class)."""

    DEFAULT_CSS = """
    SystemPanel { height: auto; max-height: 12; padding: 0 1; }
    SystemPanel.-hidden { display: none; }
    """

    def show(self, snap: RunSnapshot | None, now: float | None = None) -> None:
        self.update(system_text(snap.system if snap is not None else None, now=now))

"""What a plot shows, computed from a snapshot: no Textual, no drawing.

`build_view` turns a run's series (and the runs overlaid on it) plus the
chart controls into a `PlotView`: the traces to draw (raw, faint, when
smoothed), the reference marks that fall inside the view, the legend (which
names everything, including references outside the view, so nothing is ever
drawn over the data), the axis limits and the ticks.

Chart controls (`ChartSettings`), shared by every plot:

- x axis: the step, the wall time since the run's first logged row, or the
  tokens seen (`num_tokens`) when the run logs them;
- smoothing: TensorBoard's debiased exponential moving average over the
  points drawn, with weight `smoothing` (0 = off); the raw points stay,
  faint;
- range: the whole run, or the last N steps; the y axis fits what is shown;
- log scale per metric (values <= 0 are not drawn on a log axis).

Ticks fall on round numbers (1, 2, 5 x 10^k): steps are integers and read
12k / 3M when large; times read as durations (90s, 5m, 1h30m).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.coherence.constants import SIGMA
from carl_tui.store import RunSnapshot, SeriesView
from carl_tui.store.fleet import task_metric
from carl_tui.ui.format import count_text, duration_text
from carl_tui.ui.plot_view import (
    DEFAULT_SETTINGS,
    TOKENS,
    WAITING,
    ChartSettings,
    LegendItem,
    Mark,
    PlotView,
    Trace,
)


@dataclass(frozen=True)
class Overlay:
    """Another run's series on the same plot."""

    label: str
    series: SeriesView
    x_map: SeriesView | None  # wall time or tokens by step, for its x axis
    color_var: str


@dataclass
class _Frame:
    traces: list[Trace] = field(default_factory=list)
    xs: list[np.ndarray] = field(default_factory=list)
    ys: list[np.ndarray] = field(default_factory=list)


# -- numbers -------------------------------------------------------------------------------


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: debiased exponential moving average, NaNs passed over."""
    if weight <= 0 or values.size == 0:
        return values
    out = np.empty_like(values, dtype=np.float64)
    last, n = 0.0, 0
    for i, v in enumerate(values.tolist()):
        if math.isnan(v):
            out[i] = math.nan
            continue
        n += 1
        last = last * weight + (1 - weight) * v
        out[i] = last / (1 - weight**n)
    return out


def trend_value(s: SeriesView, smoothing: float = 0.0, k: int = 10) -> float:
    """The table's trend: without smoothing, the mean of the last k values minus the
    mean of the k before; with smoothing, how much the smoothed curve moved over the
    last k values (the plot's own smoothing)."""
    if smoothing <= 0 or s.tail.size < 2:
        return s.trend
    sm = ema(s.tail.astype(np.float64), smoothing)
    return float(sm[-1] - sm[max(0, sm.size - 1 - k)])


def nice_ticks(lo: float, hi: float, target: int = 5, integer: bool = False) -> list[float]:
    """Round numbers (1, 2, 5 x 10^k) inside [lo, hi], about `target` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + 1e-9 * step:
        ticks.append(round(t, 12))
        t += step
    return ticks


#: Rows of a plot that are not its canvas: the axes' top and bottom lines, the x ticks'
#: labels and the x axis's name (plotext's layout, as `MetricPlot` sets it).
PLOT_FRAME_ROWS = 4


def row_aligned(lo: float, hi: float, rows: int, integer: bool = False
                ) -> tuple[tuple[float, float], list[float]]:
    """A y range covering [lo, hi] on a canvas of `rows` character rows, and round ticks
    in it, such that every tick falls exactly on a row (plotext puts a value v on row
    round((rows - 1) * (v - y0) / (y1 - y0))) and the ticks are evenly spaced in rows:
    a tick's label sits on the row of its value, and a point is above a label only when
    it is greater. Ticks 2 to 5 rows apart (1 to 3 on a small canvas), the range the
    tightest such one."""
    if rows < 3 or not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return (lo, hi), nice_ticks(lo, hi, max(2, rows // 2), integer)
    span, gaps = hi - lo, rows - 1
    mag = 10 ** math.floor(math.log10(span / gaps))
    best: tuple[float, float, float, float, int] | None = None  # span, y0, y1, d, count
    for d in (m * mag * 10 ** e for e in range(4) for m in (1, 2, 2.5, 5)):
        if integer and (d < 1 or d != round(d)):
            continue
        for k in (2, 3, 4, 5) if gaps >= 12 else (2, 3) if gaps >= 6 else (1, 2, 3):
            unit = d / k  # the value of one row
            y0 = math.floor(lo / unit + 1e-9) * unit
            y1 = y0 + gaps * unit
            first = math.ceil(y0 / d - 1e-9) * d
            count = int((y1 - first) / d + 1e-9) + 1
            if y1 < hi - 1e-9 * span or count < 2:
                continue
            if best is None or y1 - y0 < best[0] - 1e-12 * span:
                best = (y1 - y0, y0, y1, d, count)
    if best is not None:
        _, y0, y1, d, count = best
        first = math.ceil(y0 / d - 1e-9) * d
        return (y0, y1), [round(first + i * d, 12) for i in range(count)]
    return (lo, hi), nice_ticks(lo, hi, max(2, rows // 2), integer)


def _decimals(step: float) -> int:
    """Decimals that show every multiple of `step` exactly (0.25 -> 2, 0.1 -> 1, 5 -> 0)."""
    for d in range(7):
        if abs(round(step, d) - step) <= 1e-9 * max(1.0, abs(step)):
            return d
    return 6


def _value_label(v: float, step: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4:
        return count_text(v)
    if a < 1e-3:
        return f"{v:.2g}"
    return f"{v:.{_decimals(step)}f}"


def tick_labels(ticks: Sequence[float], kind: str) -> tuple[str, ...]:
    """Labels for ticks of `kind`: step / tokens (integers, k/M), time (durations), value,
    log (decades of the value)."""
    if kind in ("step", "tokens"):
        return tuple(count_text(round(t)) for t in ticks)
    if kind == "time":
        return tuple(_duration_tick(t) for t in ticks)
    if kind == "log":
        return tuple(_value_label(10**t, 10**t) if t == int(t) else "" for t in ticks)
    step = (ticks[1] - ticks[0]) if len(ticks) > 1 else (abs(ticks[0]) if ticks else 1.0)
    return tuple(_value_label(t, step) for t in ticks)


def _duration_tick(seconds: float) -> str:
    if seconds == 0:
        return "0"
    text = duration_text(seconds)
    return text[:-3] if text.endswith(("00s", "00m", "00h")) else text


def _time_ticks(lo: float, hi: float, target: int) -> list[float]:
    """Round durations: seconds, minutes, hours."""
    span = max(hi - lo, 1e-9)
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                 21600, 43200, 86400):
        if span / step <= target:
            break
    first = math.ceil(lo / step) * step
    return [float(t) for t in np.arange(first, hi + 1e-9, step)]


# -- x axes ----------------------------------------------------------------------------------


def x_map_for(snap: RunSnapshot, x_axis: str) -> SeriesView | None:
    """The series that maps steps to the x axis: wall time or tokens; None for steps."""
    if x_axis == "time":
        return snap.wall
    if x_axis == "tokens":
        return snap.series.get(TOKENS)
    return None


def tokens_across_stages(tokens: np.ndarray) -> np.ndarray:
    """Tokens seen by step, counted across a run's stages: TRL's `num_tokens` restarts at
    each trainer (an SFT stage then a GRPO one), so where it falls, the next stage's count
    goes on from the last one's total (the stages' curves overlapped, and the GRPO stage's
    CARL step was drawn left of the SFT gate)."""
    values = np.asarray(tokens, dtype=np.float64)
    if values.size < 2:
        return values
    prev = values[:-1]
    drops = np.flatnonzero(values[1:] < prev)  # the last step of each stage but the last
    if drops.size == 0:
        return values
    offset = np.zeros(values.size)
    for i in drops:
        offset[i + 1:] += values[i]
    return values + offset


def to_x(steps: np.ndarray, x_map: SeriesView | None, x_axis: str) -> np.ndarray | None:
    """Steps on the x axis; None when the run does not log what the axis needs."""
    if x_axis == "step":
        return steps.astype(np.float64)
    if x_map is None or x_map.steps.size < 1:
        return None
    order = np.argsort(x_map.steps, kind="stable")
    ms, idx = np.unique(x_map.steps[order], return_index=True)
    mv = x_map.values[order][idx]
    if x_axis == "time":
        mv = mv - np.nanmin(mv)
    else:
        mv = tokens_across_stages(mv)
    if ms.size == 1:
        return np.full(steps.shape, mv[0], dtype=np.float64)
    return np.interp(steps.astype(np.float64), ms, mv)


# -- the view --------------------------------------------------------------------------------


def _traces(snap: RunSnapshot, main: SeriesView | None, x_map: SeriesView | None,
            overlays: Sequence[Overlay], settings: ChartSettings, color_var: str,
            log_y: bool) -> _Frame:
    """The traces of a plot: the overlaid runs first, the run's own last (drawn on top)."""
    lo_step = None
    if settings.last_n and snap.last_step is not None:
        lo_step = snap.last_step - settings.last_n
    frame = _Frame()
    for o in overlays:
        _add_trace(frame, o.label, o.series, o.x_map, o.color_var, settings, lo_step, log_y)
    if main is not None:
        _add_trace(frame, snap.run.label, main, x_map, color_var, settings, lo_step, log_y)
    return frame


def _empty_text(metric: str, snap: RunSnapshot, main: SeriesView | None) -> str:
    """What a plot with no point to draw says instead."""
    if main is not None:
        return "no points in this range"
    if metric == mn.PHI and snap.vocab_size is None and mn.ENTROPY in snap.series:
        return "phi needs the vocabulary size: set --vocab-size"
    if snap.last_step is not None:  # the run logs, not this yet (the demo's warm start)
        return f"no {metric} logged yet (the run is at step {snap.last_step})"
    return "waiting for data…"


def build_view(
    metric: str,
    snap: RunSnapshot | None,
    overlays: Sequence[Overlay] = (),
    settings: ChartSettings = DEFAULT_SETTINGS,
    *,
    color_var: str = "plot-extra",
    width: int = 80,
    height: int = 20,
    xlim: tuple[float, float] | None = None,
) -> PlotView:
    """`xlim`: an x range to cover at least (stacked plots share it: `shared_xlim`). The
    phi plot of a run where phi cannot be shown is its task metric's (`phi_stand_in`)."""
    title = _title(metric, snap)
    if snap is None:
        return PlotView(title=title, empty=WAITING)
    stand_in = phi_stand_in(snap) if metric == mn.PHI else None
    if stand_in is not None:
        task, hint = stand_in
        view = build_view(task, snap, (), settings, color_var=color_var, width=width,
                          height=height, xlim=xlim)
        return replace(view, title=f"{task} · {hint}")
    x_axis = settings.x_axis
    main = snap.series.get(metric)
    log_y = metric in settings.log_y
    x_map = x_map_for(snap, x_axis)
    if main is not None and x_axis != "step" and (x_map is None or x_map.steps.size < 1):
        need = "wall times" if x_axis == "time" else TOKENS  # (to_x would give None)
        return PlotView(title=title, empty=f"this run logs no {need}: press x for another axis")
    frame = _traces(snap, main, x_map, overlays, settings, color_var, log_y)
    frame = _clipped(frame, xlim if settings.x_window is not None else None)
    if not frame.xs or not any(x.size for x in frame.xs):
        return PlotView(title=title, empty=_empty_text(metric, snap, main), log_y=log_y)
    xs = np.concatenate(frame.xs)
    ys = np.concatenate(frame.ys)
    lo, hi = float(xs.min()), float(xs.max())
    if settings.x_window is None or xlim is None:  # (zoomed: the window, as shared)
        xlim = (lo, hi) if xlim is None else (min(lo, xlim[0]), max(hi, xlim[1]))
    ylim, yt = row_aligned(*_fit(float(np.nanmin(ys)), float(np.nanmax(ys))),
                           height - PLOT_FRAME_ROWS, integer=log_y)
    marks, legend = _decorations(metric, snap, x_map, settings, xlim, ylim, log_y)
    drawn = [t for t in frame.traces if not t.faint]
    if len(drawn) > 1:  # one run alone is named in the header; several need names
        # The run's own line first (it is drawn last, on top): a cut legend keeps it.
        runs = [drawn[-1], *drawn[:-1]] if main is not None else drawn
        legend = [LegendItem("━", t.label, t.color_var, run=True) for t in runs] + legend
    xt = (_time_ticks(*xlim, max(2, width // 12)) if x_axis == "time"
          else nice_ticks(*xlim, max(2, width // 12), integer=True))
    return PlotView(
        title=title,
        traces=tuple(frame.traces),
        marks=tuple(marks),
        legend=tuple(legend),
        xlim=xlim,
        ylim=ylim,
        xticks=(tuple(xt), tick_labels(xt, x_axis)),
        yticks=(tuple(yt), tick_labels(yt, "log" if log_y else "value")),
        x_label=_x_label(settings),
        log_y=log_y,
    )


def shared_xlim(snap: RunSnapshot, plots: Iterable[tuple[str, Sequence[Overlay]]],
                settings: ChartSettings) -> tuple[float, float] | None:
    """The x range that covers every plot of (metric, overlays) in `plots`: stacked
    plots share it, so the gate and the cascade fall at the same column in each (phi
    logged from the first step and entropy from the 150th would not line up)."""
    lo_step = None
    if settings.last_n and snap.last_step is not None:
        lo_step = snap.last_step - settings.last_n
    x_map = x_map_for(snap, settings.x_axis)
    ends: list[float] = []
    for metric, overlays in plots:
        found = [(o.series, o.x_map) for o in overlays]
        if (main := snap.series.get(metric)) is not None:
            found.append((main, x_map))
        for s, m in found:
            steps = s.steps if lo_step is None else s.steps[s.steps >= lo_step]
            if steps.size:
                xs = to_x(np.array([steps.min(), steps.max()]), m, settings.x_axis)
                if xs is not None:
                    ends += xs.tolist()
    if not ends:
        return None
    full = (min(ends), max(ends))
    return full if settings.x_window is None else clamp_window(settings.x_window, full)


def clamp_window(window: tuple[float, float], full: tuple[float, float]
                 ) -> tuple[float, float]:
    """A zoomed x range moved (and narrowed) to lie within the data's `full` range."""
    width = min(window[1] - window[0], full[1] - full[0])
    x0 = max(full[0], min(window[0], full[1] - width))
    return x0, x0 + width


def _clipped(frame: _Frame, xlim: tuple[float, float] | None) -> _Frame:
    """The points of `frame` within `xlim` (zoomed: the y axis fits what is shown)."""
    if xlim is None:
        return frame
    out = _Frame()
    for t in frame.traces:
        keep = (t.xs >= xlim[0]) & (t.xs <= xlim[1])
        if keep.any():
            out.traces.append(replace(t, xs=t.xs[keep], ys=t.ys[keep]))
    for xs, ys in zip(frame.xs, frame.ys):
        keep = (xs >= xlim[0]) & (xs <= xlim[1])
        out.xs.append(xs[keep])
        out.ys.append(ys[keep])
    return out


def phi_stand_in(snap: RunSnapshot) -> tuple[str, str] | None:
    """Where phi cannot be shown (the run logs none, and it cannot be derived), the
    metric the first plot shows instead, the run's task metric (`task_metric`: token
    accuracy, the reward), and one line on how to get phi; None where phi is shown, or
    there is no task metric either."""
    if mn.PHI in snap.series:
        return None
    task = task_metric(snap)
    if task is None:
        return None
    if task != mn.REWARD and mn.REWARD in snap.series and mn.ACCURACY not in snap.series:
        task = mn.REWARD  # a GRPO run's reward, not one of its components
    if mn.ENTROPY in snap.series and snap.vocab_size is None:
        return task, "phi: set --vocab-size"
    return task, "phi: log entropy"


def _x_label(settings: ChartSettings) -> str:
    """The x axis's name, and the view's settings where they are not the plain ones
    (smoothing, the range): written on the plot, not only said in a passing notice."""
    parts = [{"step": "step", "time": "time since start", "tokens": "tokens seen"}[
        settings.x_axis]]
    if settings.smoothing:
        parts.append(f"smoothed (EMA {settings.smoothing:g})")
    if settings.last_n:
        parts.append(f"last {count_text(settings.last_n)} steps")
    return " · ".join(parts)


def _title(metric: str, snap: RunSnapshot | None) -> str:
    if metric == mn.PHI:
        derived = snap is not None and snap.phi_derived
        return "phi (derived from entropy)" if derived else "phi (order parameter)"
    if metric == mn.ENTROPY:
        return "entropy (nats)"
    return metric


def _add_trace(frame: _Frame, label: str, s: SeriesView, x_map: SeriesView | None,
               color_var: str, settings: ChartSettings, lo_step: float | None,
               log_y: bool) -> None:
    steps, values = s.steps, s.values
    if lo_step is not None:
        keep = steps >= lo_step
        steps, values = steps[keep], values[keep]
    xs = to_x(steps, x_map, settings.x_axis)
    if xs is None or xs.size == 0:
        return
    ys = values.astype(np.float64)
    if log_y:
        with np.errstate(divide="ignore", invalid="ignore"):
            ys = np.where(ys > 0, np.log10(np.where(ys > 0, ys, 1.0)), np.nan)
        ok = ~np.isnan(ys)
        xs, ys = xs[ok], ys[ok]
        if ys.size == 0:
            return
    if settings.smoothing > 0:
        frame.traces.append(Trace(label, xs, ys, color_var, faint=True))
        ys_s = ema(ys, settings.smoothing)
        frame.traces.append(Trace(label, xs, ys_s, color_var))
    else:
        frame.traces.append(Trace(label, xs, ys, color_var))
    frame.xs.append(xs)
    frame.ys.append(ys)


def _fit(lo: float, hi: float) -> tuple[float, float]:
    """The data's y range, widened only where it is one value (`row_aligned` rounds the
    range out to its ticks: room enough; a 5% pad on top of that cost a 4-row plot of
    0..0.98 the range -1..2 instead of 0..1)."""
    if hi == lo:
        pad = abs(hi) * 0.05 or 0.5
        return lo - pad, hi + pad
    return lo, hi


def _decorations(metric, snap, x_map, settings, xlim, ylim, log_y):
    """Reference lines, the gate and cascade steps and the entropy peak: marks inside
    the view, and a legend entry for each (an arrow when it is outside the view)."""
    marks: list[Mark] = []
    legend: list[LegendItem] = []
    if metric == mn.PHI:
        sigma_y = math.log10(SIGMA) if log_y else SIGMA  # a log plot's y is log10 of it
        if ylim[0] <= sigma_y <= ylim[1]:
            marks.append(Mark("hline", 0.0, sigma_y, "plot-sigma"))
            legend.append(LegendItem("┄", f"σ = {SIGMA:g}", "plot-sigma"))
        else:
            arrow = "↓" if sigma_y < ylim[0] else "↑"  # off the view: an edge arrow, no stretch
            legend.append(LegendItem("┄", f"σ = {SIGMA:g} {arrow}", "plot-sigma"))
    steps_marks = []
    if snap.gate.fired and snap.gate.trigger_step is not None:
        steps_marks.append((snap.gate.trigger_step, f"crystallised @ {snap.gate.trigger_step}",
                            "plot-gate"))
    if snap.cascade.trigger_step is not None:
        steps_marks.append((snap.cascade.trigger_step, f"CARL on @ {snap.cascade.trigger_step}",
                            "plot-peak"))
    for step, text, var in steps_marks:
        x = to_x(np.array([step]), x_map, settings.x_axis)
        if x is not None and xlim[0] <= x[0] <= xlim[1]:
            marks.append(Mark("vline", float(x[0]), 0.0, var))
            legend.append(LegendItem("│", text, var))
        else:
            side = "←" if x is not None and x[0] < xlim[0] else "→"
            legend.append(LegendItem("│", f"{text} {side}", var))
    g = snap.gate
    if metric == mn.ENTROPY and g.peak_entropy is not None and g.peak_entropy_step is not None:
        x = to_x(np.array([g.peak_entropy_step]), x_map, settings.x_axis)
        y = math.log10(g.peak_entropy) if log_y and g.peak_entropy > 0 else g.peak_entropy
        text = f"peak {g.peak_entropy:.3g} at step {g.peak_entropy_step}"
        if x is not None and xlim[0] <= x[0] <= xlim[1] and ylim[0] <= y <= ylim[1]:
            marks.append(Mark("point", float(x[0]), float(y), "plot-peak"))
            legend.append(LegendItem("●", text, "plot-peak"))
        else:
            legend.append(LegendItem("●", f"{text} (off view)", "plot-peak"))
    return marks, legend

"""The state of one run: its series, gates, phase and events, fed by events."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.events import JobStatus, JobUsage, Marker, Progress, RunRef, ScalarBatch, SystemSample
from carl_tui.store import roles
from carl_tui.store.alerts import AlertWatch
from carl_tui.store.cascade import CascadeTracker
from carl_tui.store.phases import PhaseTrack
from carl_tui.store.preview import Preview
from carl_tui.store.series import Series, minmax_decimate
from carl_tui.store.snapshot import (
    CascadeView,
    GateView,
    PhaseView,
    RunEvent,
    RunSnapshot,
    SeriesView,
)
from carl_tui.store.system import SystemTrack

LOG_TAIL = 2000
MAX_MARKERS = 1000
MAX_EVENTS = 1000
TAIL_POINTS = 64  # raw values a view carries for the table's (smoothed) trend


class RunState:
    def __init__(
        self,
        run: RunRef,
        *,
        vocab_size: int | None = None,
        gate_metric: str = mn.ACCURACY,
        recent: int = 4096,
        max_buckets: int = 1024,
        notify: Callable[[RunRef, str, int | None, str, str], None] | None = None,
    ):
        self.run = run
        self.meta: dict = {}
        self.series: dict[str, Series] = {}
        self._recent, self._max_buckets = recent, max_buckets
        self.wall = Series(recent, max_buckets)  # wall time by step (not a metric)
        self.cli_vocab_size = vocab_size
        self.gate = PhaseTransitionGate(metric=gate_metric)
        self.cascade = CascadeTracker()
        self.phases = PhaseTrack()
        self.events: deque[RunEvent] = deque(maxlen=MAX_EVENTS)
        self.alerts = AlertWatch(self._event)
        self._phases_announced = 0
        self._cascade_announced = False
        self.markers: deque[Marker] = deque(maxlen=MAX_MARKERS)
        self.log_tail: deque[str] = deque(maxlen=LOG_TAIL)
        self.log_total = 0
        self.job: JobStatus | None = None
        self.usage: JobUsage | None = None
        self.progress: Progress | None = None
        self.system = SystemTrack()  # machine samples (GPUs, CPU, RAM)
        self.version = 0
        self.updated_at: float | None = None
        self.steps_logged = 0
        self.last_step: int | None = None
        self.first_step: int | None = None
        self.preview: Preview | None = None  # the coarse view while the history is read
        self._warned_vocab = False
        self._notify = notify or (lambda *a: None)

    # -- identity ------------------------------------------------------------

    @property
    def vocab_size(self) -> int | None:
        v = self.meta.get("vocab_size") or (self.meta.get("config") or {}).get("vocab_size")
        if isinstance(v, (int, float)) and v > 1:
            return int(v)
        return self.cli_vocab_size

    def _series(self, name: str) -> Series:
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series(self._recent, self._max_buckets)
        return s

    def _touch(self, wall_time: float | None = None, *, fresh: bool = True) -> None:
        """Something changed; `fresh`: the run itself produced it (its data or log lines),
        so "updated N ago" moves (metadata and the run's markers do not)."""
        self.version += 1
        if fresh:
            self.updated_at = wall_time or time.time()

    # -- events --------------------------------------------------------------

    def add_meta(self, meta: dict) -> None:
        self.meta.update(meta)
        self.cascade.add_meta(meta)
        self._check_vocab()
        self._touch(fresh=False)

    def add_marker(self, marker: Marker) -> None:
        self.markers.append(marker)
        self._touch(fresh=False)
        if marker.kind == "cascade":
            self.cascade.add_marker(marker.step)
            self._announce_cascade()
            return
        if marker.kind in ("phase", "stage"):  # the run's own labels: shown, not announced
            return
        if marker.kind == "alert":  # trackio.alert(...): the run's own alert
            d = marker.detail
            level = str(d.get("level", "")).lower()
            sev = {"info": "information", "warn": "warning", "warning": "warning",
                   "error": "error"}.get(level, "warning")
            title, text = str(d.get("title", "") or ""), str(d.get("text", "") or "")
            words = ": ".join(x for x in (title, text) if x) or "alert"
            self._event("alert", marker.step, f"{words} (step {marker.step})", sev)
            return
        if marker.kind == "phase_transition":  # the dashboard's own gate says it (the panel
            return                            # shows the run's step when the two differ)
        label = marker.kind.replace("_", " ")
        self._notify(self.run, f"marker:{marker.kind}", marker.step,
                     f"run reports {label} at step {marker.step}", "information")

    def add_lines(self, lines: tuple[str, ...]) -> None:
        self.log_tail.extend(lines)
        self.log_total += len(lines)
        self._touch()

    def set_job(self, job: JobStatus) -> None:
        changed = self.job is None or self.job.stage != job.stage
        self.job = job
        self._touch(fresh=False)
        if changed:
            sev = "error" if job.stage in ("ERROR",) else "information"
            self._event("job", self.last_step, f"job {job.job_id}: {job.stage}", sev)

    def set_usage(self, usage: JobUsage) -> None:
        self.usage = usage
        self._touch(fresh=False)

    def add_system(self, sample: SystemSample) -> None:
        """A machine sample: shown, not data of the run (`updated_at` stays: a stalled
        training whose GPU monitor still logs must not look fresh)."""
        self.system.add(sample)
        self.version += 1

    def set_progress(self, progress: Progress) -> None:
        self.progress = progress
        self._touch()

    def add_batch(self, batch: ScalarBatch) -> None:
        if batch.preview:
            self._add_preview(batch)
            return
        n = len(batch)
        if n == 0:
            return
        steps = batch.steps.astype(np.float64)
        cols = dict(batch.columns)
        for name, values in cols.items():
            self._series(name).extend(steps, values)
        self._add_wall_times(batch, steps)
        self.steps_logged += n
        newest, oldest = int(batch.steps.max()), int(batch.steps.min())
        self.last_step = newest if self.last_step is None else max(self.last_step, newest)
        self.first_step = oldest if self.first_step is None else min(self.first_step, oldest)
        self._feed_gates(batch.steps, cols, batch.nonfinite)
        self._check_vocab()
        if self.preview is not None and self.updated_at is not None:
            # Old rows of the history: the run's newest data is the preview's.
            self.version += 1
            if batch.wall_time is not None and batch.wall_time > self.updated_at:
                self.updated_at = batch.wall_time
            return
        self._touch(batch.wall_time)

    def _add_preview(self, batch: ScalarBatch) -> None:
        """A coarse view of the history (see store/preview.py); an empty one ends it."""
        if len(batch) == 0:
            if self.preview is not None:
                self.preview = None
                self.version += 1
            return
        if self.preview is None:
            self.preview = Preview(self.gate.metric)
        self.preview.add(batch)
        self._touch(batch.wall_time)

    def _add_wall_times(self, batch: ScalarBatch, steps: np.ndarray) -> None:
        """Wall time by step, for the time axis: each row's when the source knows it,
        else the batch's newest time at its newest step."""
        if batch.times is not None:
            self.wall.extend(steps, np.asarray(batch.times, dtype=np.float64))
        elif batch.wall_time is not None:
            i = int(np.argmax(batch.steps))
            self.wall.extend(steps[i : i + 1], np.array([batch.wall_time], dtype=np.float64))

    @property
    def phi_derived(self) -> bool:
        """phi is shown as `1 - entropy / ln V`: the run logs entropy, no phi, and V is known."""
        names = set(self.series)
        if self.preview is not None:
            names.update(self.preview.names())
        return mn.PHI not in names and mn.ENTROPY in names and bool(self.vocab_size)

    def _check_vocab(self) -> None:
        """Entropy above ln V is impossible: then the vocabulary size is wrong. Said once."""
        v, ent = self.vocab_size, self.series.get(mn.ENTROPY)
        if self._warned_vocab or not v or ent is None or not ent.count:
            return
        if ent.vmax > math.log(v) + 1e-9:
            self._warned_vocab = True
            self._notify(
                self.run, "vocab", None,
                f"entropy exceeds ln {v}: the vocabulary size {v} looks too small "
                "(set --vocab-size)", "warning",
            )

    def _feed_gates(
        self, steps: np.ndarray, cols: dict[str, np.ndarray], nonfinite: tuple = ()
    ) -> None:
        nan = np.full(steps.shape[0], np.nan)
        entropy = cols.get(mn.ENTROPY, nan)
        gate_values = cols.get(self.gate.metric, nan)
        was_fired = self.gate.fired
        window_before = self.gate.window_values
        self.gate.update_many(steps, gate_values, entropy)
        if self.gate.fired and not was_fired:
            g = self.gate
            self._event(
                "phase_transition",
                g.trigger_step,
                f"Crystallised: {g.metric} held >= {g.threshold:g} "
                f"({_above_at_trigger(g, window_before, gate_values)}/{g.window} >= "
                f"{g.threshold:g}) at step {g.trigger_step}",
                "warning",
            )
        self.alerts.feed(steps, cols, nonfinite)
        self.cascade.add_batch(steps, cols)
        self._announce_cascade()
        task = roles.task_reward(cols, steps.shape[0], carl_known=self.cascade.has_carl)
        self.phases.add_batch(steps, cols, task)
        timeline = self.phases.timeline()
        for phase, step, kind in timeline[self._phases_announced :]:
            if self._phases_announced:
                stage = f" ({kind} stage)" if len(self.phases.stages) > 1 else ""
                self._event("phase", step, f"Phase{stage}: {phase} since step {step}",
                            "information")
            self._phases_announced += 1

    def _announce_cascade(self) -> None:
        state = self.cascade.state()
        if state.switched_at is None or self._cascade_announced:
            return
        self._cascade_announced = True
        how = " (derived from the task reward)" if state.source == "derived" else ""
        self._event(
            "cascade", state.switched_at,
            f"Cascade: CARL reward on from step {state.switched_at}{how}", "information",
        )

    def _event(self, kind: str, step: int | None, text: str, severity: str) -> None:
        """Something the run's story records (summary --json) and the user is told."""
        self.events.append(RunEvent(kind, step, text, severity))
        self._notify(self.run, kind, step, text, severity)

    # -- reading -------------------------------------------------------------

    def snapshot(self, max_points: int = 2000) -> RunSnapshot:
        views = {
            name: _view(name, s, max_points) for name, s in self.series.items() if s.count
        }
        pv = self.preview
        wall = _view("wall time", self.wall, max_points) if self.wall.count else None
        if pv is not None:
            for name in pv.names():
                views[name] = _merged(name, views.get(name), pv.series(name), max_points)
            for name in set(views) - set(pv.names()):
                views[name] = replace(views[name], provisional=True)
            wall_pts = pv.wall.arrays()
            if wall_pts[1].size:
                wall = _merged("wall time", wall, wall_pts, max_points)
        if self.phi_derived and mn.ENTROPY in views:
            # phi is linear in entropy, so the entropy series (extremes included)
            # maps exactly onto phi, whenever the vocabulary size became known.
            views[mn.PHI] = _phi_from_entropy(views[mn.ENTROPY], math.log(self.vocab_size))
        g = self.gate if pv is None else pv.gate
        phases = self.phases if pv is None else pv.phases
        stage = phases.current
        phase = stage.classifier.phase.value if stage is not None else ""
        cascade = self.cascade.state()
        if cascade.switched_at is not None:
            stage_letter = "B"
        else:
            stage_letter = "A" if cascade.has_carl else ""
        inputs = " + ".join(x for x in ((stage.metric if stage else ""), mn.ENTROPY) if x)
        return RunSnapshot(
            run=self.run,
            version=self.version,
            meta=dict(self.meta),
            series=views,
            gate=GateView(
                metric=g.metric,
                window=g.window,
                min_above=g.min_above,
                threshold=g.threshold,
                above=g.above,
                fired=g.fired,
                trigger_step=g.trigger_step,
                peak_entropy=g.peak_entropy,
                peak_entropy_step=g.peak_entropy_step,
                progress_text=g.progress_text,
                window_values=tuple(g.window_values),
                provisional=pv is not None,
            ),
            cascade=CascadeView(
                metric=cascade.task_metric,
                stage=stage_letter,
                fired=cascade.switched_at is not None,
                trigger_step=cascade.switched_at,
                source=cascade.source,
                basis=cascade.basis,
                has_carl=cascade.has_carl,
                waiting_for=cascade.waiting_for,
            ),
            phase=PhaseView(
                phase=phase,
                since_step=stage.classifier.since_step if stage is not None else None,
                timeline=tuple((p.value, int(s)) for p, s in stage.classifier.timeline)
                if stage is not None else (),
                inputs=inputs,
                stage=stage.kind if stage is not None else "",
                stage_start=stage.start_step if stage is not None else None,
                history=tuple(phases.timeline()),
                provisional=pv is not None,
            ),
            events=tuple(self.events),
            wall=wall,
            markers=tuple(self.markers),
            log_tail=tuple(self.log_tail),
            log_total=self.log_total,
            job=self.job,
            usage=self.usage,
            progress=self.progress,
            last_step=_newest(self.last_step, pv),
            updated_at=self.updated_at,
            vocab_size=self.vocab_size,
            phi_derived=self.phi_derived,
            steps_logged=self.steps_logged,
            first_step=_oldest(self.first_step, pv),
            system=self.system.view(),
            history_read=None if pv is None else self._history_read(pv),
        )

    def _history_read(self, pv: Preview) -> float:
        """Share of the history read, by step (0..0.99 while the preview stands)."""
        if self.last_step is None or pv.newest_step is None:
            return 0.0
        first = _oldest(self.first_step, pv) or 0
        span = pv.newest_step - first
        if span <= 0:
            return 0.0
        return float(min(0.99, max(0.0, (self.last_step - first) / span)))


def _view(name: str, s: Series, max_points: int) -> SeriesView:
    steps, values = s.display(max_points)
    tail = s.tail(TAIL_POINTS)
    return SeriesView(
        name=name,
        steps=steps,
        values=values,
        count=s.count,
        first_step=s.first_step,
        last_step=s.last_step,
        last=s.last,
        min=s.vmin,
        max=s.vmax,
        trend=s.trend(),
        recent_mean=float(tail[-50:].mean()) if tail.size else None,
        whole_mean=s.mean(),
        tail=tail,
    )


def _above_at_trigger(gate: PhaseTransitionGate, before: list[float],
                      values: np.ndarray) -> int:
    """How many of the gate's window were above its threshold at the value that fired it
    (not at the end of the batch: the story reads the same however rows were batched)."""
    v = np.asarray(values, dtype=np.float64)
    allv = np.concatenate([np.asarray(before, dtype=np.float64), v[np.isfinite(v)]])
    cs = np.concatenate([[0], np.cumsum(allv >= gate.threshold)])
    end = np.arange(len(before) + 1, allv.size + 1)
    count = cs[end] - cs[np.maximum(end - gate.window, 0)]
    hits = np.flatnonzero(count >= gate.min_above)
    return int(count[hits[0]]) if hits.size else gate.above


def _newest(last: int | None, pv: Preview | None) -> int | None:
    if pv is None or pv.newest_step is None:
        return last
    return pv.newest_step if last is None else max(last, pv.newest_step)


def _oldest(first: int | None, pv: Preview | None) -> int | None:
    if pv is None or pv.oldest_step is None:
        return first
    return pv.oldest_step if first is None else min(first, pv.oldest_step)


def _trend(values: np.ndarray, k: int = 10) -> float:
    """`Series.trend` of raw values: the mean of the last k minus the k before."""
    n = min(values.shape[0], 2 * k)
    if n < 2:
        return 0.0
    half = n // 2
    tail = values[values.shape[0] - n :]
    return float(tail[half:].mean() - tail[:half].mean())


def _merged(
    name: str, real: SeriesView | None, coarse: tuple[np.ndarray, np.ndarray] | None,
    max_points: int,
) -> SeriesView:
    """The real points read so far, then the preview's beyond them: provisional."""
    if coarse is None:
        assert real is not None
        return replace(real, provisional=True)
    ps, pv = coarse
    tail = pv[-TAIL_POINTS:]
    if real is None:
        steps, values = minmax_decimate(ps, pv, max_points)
        return SeriesView(
            name=name, steps=steps, values=values, count=0,
            first_step=float(ps.min()), last_step=float(ps[-1]), last=float(pv[-1]),
            min=float(pv.min()), max=float(pv.max()), trend=_trend(tail),
            recent_mean=float(tail[-50:].mean()), whole_mean=float(pv.mean()), tail=tail.copy(),
            provisional=True,
        )
    cut = real.last_step if real.last_step is not None else -np.inf
    beyond = ps > cut
    steps = np.concatenate([real.steps, ps[beyond]])
    values = np.concatenate([real.values, pv[beyond]])
    steps, values = minmax_decimate(steps, values, max_points)
    last_step, last = real.last_step, real.last
    if ps[-1] >= (real.last_step or -np.inf):
        last_step, last = float(ps[-1]), float(pv[-1])
    lo = min(float(pv.min()), real.min if real.min is not None else np.inf)
    hi = max(float(pv.max()), real.max if real.max is not None else -np.inf)
    first = float(ps.min()) if real.first_step is None else min(real.first_step, float(ps.min()))
    return SeriesView(
        name=name, steps=steps, values=values, count=real.count, first_step=first,
        last_step=last_step, last=last, min=lo, max=hi, trend=_trend(tail),
        recent_mean=float(tail[-50:].mean()), whole_mean=float(pv.mean()), tail=tail.copy(),
        derived=real.derived, provisional=True,
    )


def _phi_from_entropy(ent: SeriesView, ln_v: float) -> SeriesView:
    def f(x: float | None) -> float | None:
        return None if x is None else 1.0 - x / ln_v

    return SeriesView(
        name=mn.PHI,
        steps=ent.steps,
        values=1.0 - ent.values / ln_v,
        count=ent.count,
        first_step=ent.first_step,
        last_step=ent.last_step,
        last=f(ent.last),
        min=f(ent.max),
        max=f(ent.min),
        trend=-ent.trend / ln_v,
        recent_mean=f(ent.recent_mean),
        whole_mean=f(ent.whole_mean),
        tail=1.0 - ent.tail / ln_v,
        derived=True,
        provisional=ent.provisional,
    )

"""A run's snapshot, built from its state: every series as a view (merged with the
preview while the history is read, phi derived from the entropy when the run logs
no phi), and the views of its gate, cascade and phases.

It reads the state through `RunParts`, what it needs of a run's state (`store/run.py`'s
`RunState` has them), so that the state imports this module and not the reverse."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.coherence.phases import seen_enough
from carl_tui.store.cascade import CascadeState
from carl_tui.store.phases import PhaseTrack
from carl_tui.store.preview import Preview
from carl_tui.store.series import Series, mean_of, minmax_decimate, trend
from carl_tui.store.snapshot import (
    CascadeView,
    GateView,
    PhaseView,
    RunSnapshot,
    SeriesView,
    StageView,
)

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.events import Job, Marker, Progress, RunLife, RunRef
    from carl_tui.store.cascade import CascadeTracker
    from carl_tui.store.health import HealthWatch
    from carl_tui.store.snapshot import RunEvent
    from carl_tui.store.system import SystemTrack


class RunParts(Protocol):
    """What a snapshot reads of a run's state (`RunState`)."""

    run: RunRef
    version: int
    meta: Mapping[str, Any]
    series: Mapping[str, Series]
    wall: Series
    preview: Preview | None
    markers: Iterable[Marker]
    log_tail: Iterable[str]
    log_total: int
    job: Job | None
    progress: Progress | None
    last_step: int | None
    first_step: int | None
    updated_at: float | None
    newest_timeless: bool
    life: RunLife | None
    system: SystemTrack

    @property
    def gate(self) -> PhaseTransitionGate: ...
    @property
    def cascade(self) -> CascadeTracker: ...
    @property
    def phases(self) -> PhaseTrack: ...
    @property
    def events(self) -> Iterable[RunEvent]: ...
    @property
    def health(self) -> HealthWatch: ...
    @property
    def vocab_size(self) -> int | None: ...
    @property
    def phi_derived(self) -> bool: ...
    @property
    def steps_logged(self) -> int: ...


def data_time(record_time: float | None, newest_timeless: bool,
              life: RunLife | None) -> float | None:
    """When a run was last updated, by its data's own time: its newest record's time, or,
    where a newer record carried none (a log line, a Trainer dict) or none carried one,
    its file's time as its source said it (`RunLife.updated_at`). Never a read's time."""
    said = life.updated_at if life is not None else None
    if record_time is None:
        return said
    if newest_timeless and said is not None:
        return max(record_time, said)
    return record_time


TAIL_POINTS = 64  # raw values a view carries for the table's (smoothed) trend


def build_snapshot(state: RunParts, max_points: int = 2000,
                   series: Collection[str] | None = None) -> RunSnapshot:
    """What the UI and the reports read of a run, at most `max_points` per series;
    `series`: only those (and the current stage's progress metric), where not all."""
    pv = state.preview
    phases = state.phases if pv is None else pv.phases
    if series is not None and phases.current is not None:
        series = {*series, phases.current.metric}
    views, wall = _series_views(state, pv, max_points, series)
    return RunSnapshot(
        run=state.run,
        version=state.version,
        meta=dict(state.meta),
        series=views,
        gate=_gate_view(state.gate if pv is None else pv.gate, provisional=pv is not None),
        cascade=_cascade_view(state.cascade.state()),
        phase=_phase_view(phases, provisional=pv is not None),
        events=tuple(state.events),
        wall=wall,
        markers=tuple(state.markers),
        log_tail=tuple(state.log_tail),
        log_total=state.log_total,
        job=state.job,
        progress=state.progress,
        last_step=_newest(state.last_step, pv),
        updated_at=data_time(state.updated_at, state.newest_timeless, state.life),
        vocab_size=state.vocab_size,
        phi_derived=state.phi_derived,
        steps_logged=state.steps_logged,
        first_step=_oldest(state.first_step, pv),
        system=state.system.view(),
        history_read=None if pv is None else _history_read(state, pv),
        life=state.life,
        newest_read=pv is None or pv.newest_read,
        health=tuple(state.health.flags),
        reward_ceiling=state.health.ceiling(),
    )


def _series_views(state: RunParts, pv: Preview | None, max_points: int,
                  wanted: Collection[str] | None = None,
                  ) -> tuple[dict[str, SeriesView], SeriesView | None]:
    """(a view per series (of those `wanted`), the wall-time view or None): the real
    points, the preview's beyond them (provisional), and phi from the entropy when it
    is derived."""
    views = {name: _view(name, s, max_points) for name, s in state.series.items()
             if s.count and (wanted is None or name in wanted)}
    wall = _view("wall time", state.wall, max_points) if state.wall.count else None
    if pv is not None:
        for name in pv.names():
            if wanted is not None and name not in wanted:
                continue
            views[name] = _merged(name, views.get(name), pv.series(name), max_points)
        for name in set(views) - set(pv.names()):
            views[name] = replace(views[name], provisional=True)
        wall_pts = pv.wall.arrays()
        if wall_pts[1].size:
            wall = _merged("wall time", wall, wall_pts, max_points)
    if state.phi_derived and mn.ENTROPY in views:
        # phi is linear in entropy, so the entropy series (extremes included)
        # maps exactly onto phi, whenever the vocabulary size became known.
        views[mn.PHI] = _phi_from_entropy(views[mn.ENTROPY], math.log(state.vocab_size))
    return views, wall


def _gate_view(g: PhaseTransitionGate, *, provisional: bool) -> GateView:
    return GateView(
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
        provisional=provisional,
    )


def _cascade_view(cascade: CascadeState) -> CascadeView:
    if cascade.switched_at is not None:
        stage_letter = "B"
    else:
        stage_letter = "A" if cascade.has_carl else ""
    return CascadeView(
        metric=cascade.task_metric,
        stage=stage_letter,
        fired=cascade.switched_at is not None,
        trigger_step=cascade.switched_at,
        source=cascade.source,
        basis=cascade.basis,
        has_carl=cascade.has_carl,
        waiting_for=cascade.waiting_for,
    )


def _phase_view(phases: PhaseTrack, *, provisional: bool) -> PhaseView:
    stage = phases.current
    inputs = " + ".join(x for x in ((stage.metric if stage else ""), mn.ENTROPY) if x)
    # A preview's classifier tells a phase once it saw enough of the sample to leave
    # baseline: the sample of one run of a big project can hold a value or two of it,
    # and those say "baseline" of any run.
    told = stage is not None and (not provisional or seen_enough(stage.classifier))
    c = stage.classifier if stage is not None else None
    return PhaseView(
        phase=c.phase.value if told else "",
        since_step=c.since_step if told else None,
        timeline=tuple((p.value, int(s)) for p, s in stage.classifier.timeline)
        if told else (),
        inputs=inputs,
        stage=stage.kind if stage is not None else "",
        stage_start=stage.start_step if stage is not None else None,
        history=tuple(phases.timeline()) if told else (),
        provisional=provisional,
        metric=stage.metric if stage is not None else "",
        seen_at=c.seen_at if told else None,
        values=c.values if c is not None else 0,
        too_few=c is not None and c.values < c.settings.min_values,
        evidence=c.evidence() if told else "",
        stages=tuple(StageView(
            kind=st.kind, metric=st.metric, start_step=st.start_step,
            phase=st.classifier.phase.value,
            said=tuple((s.phase.value, s.from_step, s.seen_at, s.corrected_at)
                       for s in st.classifier.said)) for st in phases.stages) if told else (),
        dated=tuple(phases.dated()) if told else (),
    )


def _history_read(state: RunParts, pv: Preview) -> float:
    """Share of the history read, by step (0..0.99 while the preview stands)."""
    if state.last_step is None or pv.newest_step is None:
        return 0.0
    first = _oldest(state.first_step, pv) or 0
    span = pv.newest_step - first
    if span <= 0:
        return 0.0
    return float(min(0.99, max(0.0, (state.last_step - first) / span)))


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
        recent_mean=mean_of(tail[-50:]) if tail.size else None,
        whole_mean=s.mean(),
        tail=tail,
    )


def _newest(last: int | None, pv: Preview | None) -> int | None:
    if pv is None or pv.newest_step is None:
        return last
    return pv.newest_step if last is None else max(last, pv.newest_step)


def _oldest(first: int | None, pv: Preview | None) -> int | None:
    if pv is None or pv.oldest_step is None:
        return first
    return pv.oldest_step if first is None else min(first, pv.oldest_step)



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
            first_step=float(ps[0]), last_step=float(ps[-1]), last=float(pv[-1]),
            min=float(np.minimum.reduce(pv)), max=float(np.maximum.reduce(pv)),
            trend=trend(tail),
            recent_mean=mean_of(tail[-50:]), whole_mean=mean_of(pv), tail=tail.copy(),
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
        last_step=last_step, last=last, min=lo, max=hi, trend=trend(tail),
        recent_mean=mean_of(tail[-50:]), whole_mean=mean_of(pv), tail=tail.copy(),
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
